"""Long-form decoding policy: temperature fallback, silent windows, and the previous text as context.

openai-whisper's ``transcribe()`` (and transformers' ``generate_with_fallback``) decode each 30 s
window, then judge the result:

* **fallback**: a window whose text compresses too well (zlib ratio above
  ``compression_ratio_threshold``, a loop of repeated text) or whose average log-probability is
  below ``logprob_threshold`` is decoded again at the next temperature of ``temperatures``;
* **silence**: a window whose ``<|nospeech|>`` probability (read at ``<|startoftranscript|>``)
  is above ``no_speech_threshold`` while its average log-probability is below
  ``logprob_threshold`` is skipped: no text, the next window starts 30 s later;
* **best of n**: an attempt at a temperature above 0 samples ``best_of`` candidates and keeps
  the one whose chosen tokens have the highest average log-probability (openai-whisper's
  ``best_of`` with its default ranking, :func:`best_candidate`); that one is judged;
* **context**: with ``condition_on_previous_text``, the text of the windows so far (after the
  ``initial_prompt``) is fed before ``<|startoftranscript|>`` behind ``<|startofprev|>``, cut
  to the decoder's last ``max_target_positions // 2 - 1`` tokens; a window decoded at a
  temperature above 0.5 starts the context afresh.

The numbers here are pure functions and small objects so the policy can be tested apart from
any model: :class:`WindowScorer` wraps the sampler to add up the chosen tokens'
log-probabilities (of the processed scores, as transformers' ``_retrieve_avg_logprobs``) and
receives the ``<|nospeech|>`` probability from the decoding backend.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from inference4py.errors import ConfigurationError
from inference4py.generation.sampling import Sampler
from inference4py.speech.probe import AlignmentCapture

#: openai-whisper's default temperatures: 0 (greedy) first, then sampling ever hotter
FALLBACK_TEMPERATURES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)


@dataclass(frozen=True)
class LongformOptions:
    """How a transcription judges and retries its windows (openai-whisper's ``transcribe()`` settings).

    Attributes:
        temperatures: decoding temperatures in order; the next one is tried when a window fails a
            threshold.  One temperature: no fallback.
        compression_ratio_threshold: a window whose text's zlib compression ratio is above it is
            decoded again (None: never).
        logprob_threshold: a window whose average token log-probability is below it is decoded
            again (None: never).
        no_speech_threshold: a window whose ``<|nospeech|>`` probability is above it, and whose
            average log-probability is below ``logprob_threshold``, is silence: skipped (None: never).
        condition_on_previous_text: feed the text so far as ``<|startofprev|>`` context.
        prompt_ids: text tokens of the initial prompt (without ``<|startofprev|>``), the context
            of the first window.
        hallucination_silence_threshold: with word timestamps, skip silence longer than this
            (seconds) around a segment that looks hallucinated (openai-whisper's rules,
            :func:`silence_cut`); None: off.
        best_of: candidates sampled by an attempt at a temperature above 0 (openai-whisper's
            ``best_of``, default 5); the most likely one is kept (:func:`best_candidate`).  Greedy
            attempts decode once.
    """

    temperatures: tuple[float, ...] = (0.0,)
    compression_ratio_threshold: float | None = 2.4
    logprob_threshold: float | None = -1.0
    no_speech_threshold: float | None = 0.6
    condition_on_previous_text: bool = False
    prompt_ids: tuple[int, ...] = ()
    hallucination_silence_threshold: float | None = None
    best_of: int = 5

    def __post_init__(self) -> None:
        if isinstance(self.best_of, bool) or not isinstance(self.best_of, (int, np.integer)) or self.best_of < 1:
            raise ConfigurationError(
                f"best_of is the number of sampled candidates, an integer >= 1; got {self.best_of!r}."
            )
        if not self.temperatures:
            raise ConfigurationError("temperature must be a number or a non-empty list of numbers, e.g. (0.0, 0.2).")
        for t in self.temperatures:
            if not isinstance(t, (int, float)) or isinstance(t, bool) or not 0.0 <= float(t) <= 100.0:
                raise ConfigurationError(f"Each temperature must be a number from 0 to 100, got {t!r}.")
        if self.no_speech_threshold is not None and not 0.0 <= self.no_speech_threshold <= 1.0:
            raise ConfigurationError(
                f"no_speech_threshold is a probability from 0 to 1 (or None), got {self.no_speech_threshold!r}."
            )
        h = self.hallucination_silence_threshold
        if h is not None and (isinstance(h, bool) or not isinstance(h, (int, float)) or not h > 0):
            raise ConfigurationError(f"hallucination_silence_threshold is seconds > 0 (or None), got {h!r}.")
        if self.compression_ratio_threshold is not None and self.compression_ratio_threshold <= 0:
            raise ConfigurationError(
                f"compression_ratio_threshold must be positive (or None), got {self.compression_ratio_threshold!r}."
            )


def temperatures_of(value: float | Sequence[float] | None, default: float) -> tuple[float, ...]:
    """A call's ``temperature`` argument as a tuple (a sequence means fallback)."""
    if value is None:
        return (float(default),)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (float(value),)
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ConfigurationError(f"temperature must be a number or a list of numbers, got {value!r}.")
    return tuple(value)  # LongformOptions checks each item


def compression_ratio(text: str) -> float:
    """openai-whisper's ``get_compression_ratio``: UTF-8 bytes over zlib-compressed bytes (0 for no text)."""
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else 0.0


@dataclass(frozen=True)
class WindowResult:
    """One decoding attempt of a window and the numbers it is judged by."""

    tokens: tuple[int, ...]  # generated ids, <|endoftext|> removed
    temperature: float
    avg_logprob: float | None
    no_speech_prob: float | None
    compression_ratio: float
    sum_logprob: float | None = None  # of the chosen tokens, <|endoftext|>'s left out (openai's sum_logprobs)


def candidate_generators(rng: np.random.Generator, n: int) -> list[np.random.Generator]:
    """The random generators of an attempt's ``n`` candidates: ``rng`` itself for one, else ``n`` seeded from it.

    ``transcribe`` draws the candidates one after the other and ``transcribe_batch`` as rows of one
    batch; with a generator each they are the same candidates either way.
    """
    if n == 1:
        return [rng]
    return [np.random.default_rng(int(seed)) for seed in rng.integers(0, 1 << 63, size=n, dtype=np.int64)]


def best_candidate(candidates: Sequence[WindowResult]) -> int:
    """Index of the candidate openai-whisper's ``best_of`` keeps (its ``MaximumLikelihoodRanker``, no length penalty).

    A candidate scores its ``sum_logprob`` over its number of tokens (``<|endoftext|>`` counted in
    neither); the highest score wins, the first of equal ones.  A candidate without scores never wins
    over one with them.
    """
    if not candidates:
        raise ValueError("best_candidate needs at least one candidate")

    def score(result: WindowResult) -> float:
        if result.sum_logprob is None:
            return float("-inf")
        return result.sum_logprob / max(len(result.tokens), 1)

    scores = [score(r) for r in candidates]
    return scores.index(max(scores))


def needs_fallback(result: WindowResult, options: LongformOptions) -> bool:
    """openai-whisper's rule: too compressible or too unlikely, unless the window is silence."""
    retry = False
    if (
        options.compression_ratio_threshold is not None
        and result.compression_ratio > options.compression_ratio_threshold
    ):
        retry = True
    if _below_logprob(result, options):
        retry = True
    if is_silence(result, options):
        retry = False  # silence: decoding again would not help
    return retry


def is_silence(result: WindowResult, options: LongformOptions) -> bool:
    """``<|nospeech|>`` probability above its threshold and average log-probability below its own."""
    if options.no_speech_threshold is None or result.no_speech_prob is None:
        return False
    if result.no_speech_prob <= options.no_speech_threshold:
        return False
    return options.logprob_threshold is None or _below_logprob(result, options)


def _below_logprob(result: WindowResult, options: LongformOptions) -> bool:
    return (
        options.logprob_threshold is not None
        and result.avg_logprob is not None
        and result.avg_logprob < options.logprob_threshold
    )


def previous_context(
    pieces: Sequence[Sequence[int]], *, startofprev: int, limit: int, is_stamp: Callable[[int], bool]
) -> list[int]:
    """The ``<|startofprev|>`` context from the pieces kept so far (transformers' ``_pad_to_max_length``).

    A piece ending in two timestamps loses the last one (transformers PR 35750; openai's segment
    slices end there too); the whole is cut to its last ``limit`` tokens.  Nothing kept: no context.

    Args:
        pieces: the initial prompt's ids and each kept segment's ids, in order.
        startofprev: id of ``<|startofprev|>``.
        limit: most context tokens after ``<|startofprev|>`` (``max_target_positions // 2 - 1``).
        is_stamp: whether an id is a timestamp token.
    """
    tokens: list[int] = []
    for piece in pieces:
        ends_with_pair = len(piece) > 2 and is_stamp(piece[-2])
        tokens.extend(piece[:-1] if ends_with_pair else piece)
    if not tokens:
        return []
    return [startofprev, *tokens[-limit:]] if limit > 0 else [startofprev]


class WindowScorer:
    """A sampler wrapper that adds up the log-probabilities of the chosen tokens of one decoding attempt.

    The log-probability of a token is read from the scores the sampler sees (after every logits
    processor, before temperature), like transformers' ``_retrieve_avg_logprobs``; the average
    counts ``<|endoftext|>``.  The backend reports the ``<|nospeech|>`` probability with
    :meth:`set_no_speech`, and a beam search its length-normalised score with :meth:`set_sequence_score`.
    """

    __slots__ = ("_inner", "_sum", "_count", "_last", "no_speech_prob", "sequence_score", "alignment")

    def __init__(self, inner: Sampler, alignment: AlignmentCapture | None = None) -> None:
        #: what collects the cross-attention rows for word timestamps (None: not wanted)
        self.alignment = alignment
        self._inner = inner
        self._sum = 0.0
        self._count = 0
        self._last = 0.0  # the last chosen token's log-probability
        self.no_speech_prob: float | None = None
        self.sequence_score: float | None = None

    def __call__(self, scores: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        tokens = self._inner(scores, rng)
        row = scores[0]
        top = row.max()
        if np.isfinite(top):
            lse = float(top) + float(np.log(np.exp(row - top, dtype=np.float32).sum(dtype=np.float32)))
            self._last = float(row[int(tokens[0])]) - lse
        else:
            self._last = float("-inf")
        self._sum += self._last
        self._count += 1
        return tokens

    def set_no_speech(self, prob: float) -> None:
        self.no_speech_prob = float(prob)

    def set_sequence_score(self, score: float | None) -> None:
        self.sequence_score = None if score is None else float(score)

    def sum_logprob(self, *, ends_with_eos: bool) -> float | None:
        """The sum of the chosen tokens' log-probabilities; without the last one's when it is ``<|endoftext|>``."""
        if not self._count:
            return None
        return self._sum - self._last if ends_with_eos else self._sum

    @property
    def avg_logprob(self) -> float | None:
        """The average log-probability of the chosen tokens (a beam search: its sequence score)."""
        if self.sequence_score is not None:
            return self.sequence_score
        return self._sum / self._count if self._count else None


# --------------------------------------------------------------------------- hallucinations in silence

_PUNCTUATION_WORDS = "\"'“¿([{-\"'.。,，!！?？:：”)]}、"


def word_anomaly_score(word: Any) -> float:
    """openai-whisper's ``word_anomaly_score``: unlikely, very short or very long words score."""
    duration = word.end - word.start
    score = 0.0
    if word.probability < 0.15:
        score += 1.0
    if duration < 0.133:
        score += (0.133 - duration) * 15
    if duration > 2.0:
        score += duration - 2.0
    return score


def is_segment_anomaly(segment: Any) -> bool:
    """openai-whisper's ``is_segment_anomaly``: the first 8 words (punctuation left out) look hallucinated."""
    if segment is None or not segment.words:
        return False
    words = [w for w in segment.words if w.word not in _PUNCTUATION_WORDS][:8]
    score = sum(word_anomaly_score(w) for w in words)
    return score >= 3 or score + 0.01 >= len(words)


@dataclass(frozen=True)
class SilenceCut:
    """What ``hallucination_silence_threshold`` decides for one window.

    Attributes:
        keep: how many of the window's segments are kept (a tail judged hallucinated is dropped).
        seek: where the next window starts (mel frames), or None to keep the usual rule.
        skip: the whole window is dropped (its first segment is a hallucination after silence).
        last_speech: the end of the last kept word (the next window's ``last_speech``).
    """

    keep: int
    seek: int | None
    skip: bool
    last_speech: float


def silence_cut(
    segments: Sequence[Any],
    *,
    threshold: float,
    seek: int,
    window_frames: int,
    single_timestamp_ending: bool,
    content_frames: int,
    last_speech: float,
    frames_per_second: int = 100,
    n_frames: int = 3000,
) -> SilenceCut:
    """openai-whisper's ``hallucination_silence_threshold`` rules over one window's segments (with words).

    After a window, when the text ends before the window does by more than ``threshold``
    seconds, the next window starts at the last word; a first segment that looks hallucinated
    (:func:`is_segment_anomaly`) after more than ``threshold`` seconds of silence drops the
    window and the next starts at that segment; a hallucinated-looking segment with silence
    (or more hallucination) on both sides is dropped with everything after it.

    Args:
        segments: the window's segments (``start``, ``end``, ``words`` in seconds of the audio).
        seek: the window's first mel frame; ``window_frames`` its frames of audio.
        single_timestamp_ending: the window's output ended with a lone timestamp.
        content_frames: the audio's frames.
        last_speech: the end of the last word kept so far (0 at the start).
    """
    time_offset = seek / frames_per_second
    window_end = (seek + n_frames) / frames_per_second
    segment_duration = window_frames / frames_per_second
    content_duration = content_frames / frames_per_second
    new_seek: int | None = None

    def end_of(items: Sequence[Any]) -> float | None:
        ends = [w.end for s in items for w in s.words]
        return ends[-1] if ends else None

    def next_with_words(items: Sequence[Any]) -> Any:
        return next((s for s in items if s.words), None)

    if not single_timestamp_ending:
        last_word_end = end_of(segments)
        if last_word_end is not None and last_word_end > time_offset:
            remaining = window_end - last_word_end
            new_seek = round(last_word_end * frames_per_second) if remaining > threshold else seek + window_frames
    first = next_with_words(segments)
    if first is not None and is_segment_anomaly(first):
        gap = first.start - time_offset
        if gap > threshold:
            return SilenceCut(0, seek + round(gap * frames_per_second), True, last_speech)
    keep = len(segments)
    hal_last_end = last_speech
    for si, segment in enumerate(segments):
        if not segment.words:
            continue
        if is_segment_anomaly(segment):
            following = next_with_words(segments[si + 1 :])
            hal_next_start = following.words[0].start if following is not None else time_offset + segment_duration
            silence_before = (
                segment.start - hal_last_end > threshold
                or segment.start < threshold
                or segment.start - time_offset < 2.0
            )
            silence_after = (
                hal_next_start - segment.end > threshold
                or is_segment_anomaly(following)
                or window_end - segment.end < 2.0
            )
            if silence_before and silence_after:
                new_seek = round(max(time_offset + 1, segment.start) * frames_per_second)
                if content_duration - segment.end < threshold:
                    new_seek = content_frames
                keep = si
                break
        hal_last_end = segment.end
    last = end_of(segments[:keep])
    return SilenceCut(keep, new_seek, False, last if last is not None else last_speech)
