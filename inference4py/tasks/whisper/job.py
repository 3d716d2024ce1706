"""One audio file's transcription, window by window, apart from how its windows are decoded.

:class:`FileJob` holds what the window loop of :class:`WhisperSpeechModel` keeps between windows
(where the next window starts, the detected language, the ``<|startofprev|>`` context, the segments
and ids kept so far) and turns a window's decoded tokens into segments and words.  The sequential
loop (``transcribe``) decodes each window alone and streams its text; ``transcribe_batch`` decodes
the current windows of several files as one batch.  Both go through the same job, so a row of a
batch is judged, cut and timed exactly as it would be alone.

Also here: :class:`WindowProbe` (what a decoding state reports besides logits: the ``<|nospeech|>``
probability, cross-attention rows) and :class:`AlignmentCapture` (the rows and token
probabilities of one decoding attempt, for word timestamps).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from inference4py.engine.seq2seq import Seq2SeqState
from inference4py.generation.config import GenerationConfig
from inference4py.generation.streaming import IncrementalDetokenizer
from inference4py.tasks.whisper.decoding import (
    LongformOptions,
    WindowResult,
    WindowScorer,
    compression_ratio,
    no_speech_probability,
    previous_context,
    silence_cut,
)
from inference4py.tasks.whisper.longform import FRAME_SECONDS, split_segments
from inference4py.tasks.whisper.results import Segment, Transcription, Word
from inference4py.tasks.whisper.words import segment_words, token_times

if TYPE_CHECKING:
    from inference4py.tasks.whisper.model import WhisperSpeechModel

POLICY_ARGUMENTS = (
    "temperature",
    "compression_ratio_threshold",
    "logprob_threshold",
    "no_speech_threshold",
    "condition_on_previous_text",
    "initial_prompt",
    "prompt_ids",
    "word_timestamps",
    "vad",
    "vad_options",
    "hallucination_silence_threshold",
    "best_of",
)


@dataclass(frozen=True)
class CallPolicy:
    """The long-form options of one call, and whether the temperature was given (else the builder's sampling)."""

    options: LongformOptions
    explicit_temperature: bool
    word_timestamps: bool = False
    vad: Any = None  # a SileroVad: only the speech it finds is transcribed
    vad_options: Any = None  # its VadOptions (None: faster-whisper's defaults)


class WindowProbe:
    """A decoding state that reports what the window's judgement and word timestamps need.

    * ``<|nospeech|>``: the prefill stops once at ``<|startoftranscript|>`` (two runs: up to it, then
      the rest), which gives openai-whisper's ``probs_at_sot`` without a separate decoder run;
    * word timestamps: after each one-token step, the alignment heads' cross-attention row, and
      each chosen token's probability among the text tokens (from the raw logits).
    """

    def __init__(
        self,
        state: Seq2SeqState,
        scorer: WindowScorer,
        *,
        sot_at: int | None,
        no_speech: int | None,
        capture: AlignmentCapture | None,
    ) -> None:
        self._state = state
        self._scorer = scorer
        self._sot_at = sot_at
        self._no_speech = no_speech
        self._capture = capture
        if capture is not None:
            state.extra_outputs = capture.outputs

    def prefill(self, input_ids: np.ndarray, attention_mask: np.ndarray | None = None) -> np.ndarray:
        ids = np.asarray(input_ids, dtype=np.int64).reshape(1, -1)
        if self._sot_at is None or self._no_speech is None:
            logits = self._state.prefill(ids)
        else:
            cut = self._sot_at + 1
            at_sot = self._state.prefill(ids[:, :cut])  # [1, vocab]: what follows <|startoftranscript|>
            self._scorer.set_no_speech(no_speech_probability(at_sot[0], self._no_speech))
            logits = self._state.prefill(ids[:, cut:]) if ids.shape[1] > cut else at_sot
        if self._capture is not None:
            self._capture.observe(logits[0])
        return logits

    def step(self, tokens: np.ndarray) -> np.ndarray:
        capture = self._capture
        if capture is not None:
            capture.chosen(int(np.asarray(tokens).reshape(-1)[0]))
        logits = self._state.step(tokens)
        if capture is not None:
            capture.attention(self._state.extras)
            capture.observe(logits[0])
        return logits


class AlignmentCapture:
    """The alignment heads' cross-attention rows and the chosen tokens' probabilities of one decoding attempt."""

    def __init__(self, heads: Sequence[tuple[int, int]], text_mask: np.ndarray) -> None:
        layers = sorted({layer for layer, _ in heads})
        self.outputs = tuple(f"cross_attentions.{layer}" for layer in layers)
        self._picks = [(layers.index(layer), head) for layer, head in heads]
        self._text = text_mask
        self._last: np.ndarray | None = None
        self.rows: list[np.ndarray] = []  # per fed generated token: [heads, src]
        self.probabilities: list[float] = []  # per generated token

    def observe(self, logits: np.ndarray) -> None:
        # a copy: the logits processors change the scores in place before the token is chosen
        self._last = np.array(logits, dtype=np.float32)

    def chosen(self, token: int) -> None:
        """Record the probability of ``token`` among the text tokens of the last raw logits (openai's rule)."""
        row = self._last
        self._last = None
        if row is None:
            return
        n = min(row.size, self._text.size)
        if not 0 <= token < n or not self._text[token]:
            self.probabilities.append(0.0)
            return
        text = row[:n][self._text[:n]]
        top = float(text.max())
        lse = top + float(np.log(np.exp(text - top, dtype=np.float64).sum()))
        self.probabilities.append(float(np.exp(float(row[token]) - lse)))

    def attention(self, extras: Sequence[Any], row: int = 0) -> None:
        """Keep the alignment heads' last attention row of batch row ``row`` (``extras``: the step's outputs)."""
        arrays = [np.asarray(v.numpy()) for v in extras]  # each [batch, heads, tgt, src]
        self.rows.append(np.stack([arrays[i][row, h, -1] for i, h in self._picks]))

    def weights(self) -> np.ndarray:
        """``[heads, rows, src]``."""
        if not self.rows:
            return np.zeros((len(self._picks), 0, 0), np.float32)
        return np.stack(self.rows, axis=1)


def pad_to(values: Sequence[Any], n: int) -> list[Any]:
    """``values`` cut or padded (repeating the last, or 0) to ``n`` items."""
    out = list(values[:n])
    while len(out) < n:
        out.append(out[-1] if out else 0.0)
    return out


class FileJob:
    """The window loop's state for one audio file (see the module docstring).

    Args:
        model: the task (its tokenizer, vocabulary and settings).
        samples: the audio at the model's rate.
        feats: its log-mel features ``[n_mels, frames]``.
        prompt: the decoder prompt, with None where a detected language goes.
        detect_at: index of that slot, or None.
        timestamps: whether timestamp tokens are predicted.
        policy: the call's long-form options.
        words_for: (alignment heads, text-token mask) when word timestamps are wanted.
    """

    def __init__(
        self,
        model: WhisperSpeechModel,
        samples: np.ndarray,
        feats: np.ndarray,
        prompt: list[int | None],
        detect_at: int | None,
        *,
        timestamps: bool,
        policy: CallPolicy,
        words_for: tuple[list[tuple[int, int]], np.ndarray] | None,
        time_map: Any = None,
        duration: float | None = None,
    ) -> None:
        self.model = model
        self.time_map = time_map  # a SpeechTimeMap: the samples are speech cut out of a longer recording
        self.feats = feats
        self.prompt = prompt
        self.detect_at = detect_at
        self.policy = policy
        self.options = policy.options
        self.words_for = words_for
        v = model._vocab
        self.vocab = v
        settings = model._features
        self.duration = samples.size / settings["sample_rate"]  # of the audio decoded (the speech, with VAD)
        self.recording = self.duration if duration is None else duration
        hop = settings["hop_length"]
        # frames of audio (the features of short audio are padded to one window)
        self.audio_frames = (
            min(feats.shape[1], samples.size // hop) if samples.size <= settings["n_samples"] else feats.shape[1]
        )
        self.stamps = v.timestamp_range if timestamps else None
        self.detok = IncrementalDetokenizer(model.tokenizer, skip_special_tokens=True)
        self.limit = int(model._runtime_context() or 448) // 2 - 1  # transformers' cut_off_length
        self.history: list[tuple[int, ...]] = [self.options.prompt_ids] if self.options.prompt_ids else []
        self.segments: list[Segment] = []
        self.kept: list[int] = []
        self.seek = 0
        self.last_speech = 0.0  # end of the last word kept (hallucination_silence_threshold)
        self.frames = 0  # audio frames of the current window
        self.final = 0  # tokens of the current window already streamed

    def is_stamp(self, t: int) -> bool:
        return self.stamps is not None and t in self.stamps

    @property
    def active(self) -> bool:
        return self.seek < self.feats.shape[1]

    @property
    def done(self) -> float:
        """Seconds of the recording transcribed so far (with VAD: in proportion to the speech done)."""
        total = self.feats.shape[1]
        return self.recording if total == 0 else self.recording * min(self.seek, total) / total

    @property
    def needs_language(self) -> bool:
        return self.detect_at is not None and self.prompt[self.detect_at] is None

    def set_language(self, token: int) -> None:
        assert self.detect_at is not None
        self.prompt[self.detect_at] = token  # detected once, on the first window

    def window(self) -> np.ndarray:
        """The current window's features ``[1, n_mels, 3000]``."""
        window, self.frames = self.model._window(self.feats, self.seek)
        self.final = 0
        return window

    def ids(self) -> tuple[list[int], bool]:
        """The current window's decoder prompt (``<|startofprev|>`` context first) and whether it has context."""
        init = [int(t) for t in self.prompt if t is not None]
        prev: list[int] = []
        if self.history and self.vocab.prev_sot is not None:  # a prompt or condition_on_previous_text
            prev = previous_context(
                self.history, startofprev=self.vocab.prev_sot, limit=self.limit, is_stamp=self.is_stamp
            )
        return prev + init, bool(prev)

    def live(self, scorer: WindowScorer) -> bool:
        """Whether this window's text can be streamed while it is decoded (nothing can discard it)."""
        thr = self.options.no_speech_threshold
        maybe_silent = thr is not None and scorer.no_speech_prob is not None and scorer.no_speech_prob > thr
        may_cut = self.options.hallucination_silence_threshold is not None and self.words_for is not None
        single = len(self.options.temperatures) == 1 and self.candidates(self.options.temperatures[0]) == 1
        return single and not maybe_silent and not may_cut

    def candidates(self, temperature: float) -> int:
        """How many candidates an attempt at ``temperature`` samples (``best_of`` above 0, else one)."""
        return self.options.best_of if temperature > 0 else 1

    def stream(self, out: list[int]) -> str:
        """The text of ``out`` up to its last closed pair of timestamps, not streamed yet."""
        n = len(out)
        if n >= 2 and self.is_stamp(out[-1]) and self.is_stamp(out[-2]):
            piece = self.detok.add_many(t for t in out[self.final : n] if not self.is_stamp(t))
            self.final = n
            return piece
        return ""

    def judge(self, out: list[int], config: GenerationConfig, scorer: WindowScorer) -> WindowResult:
        """One attempt's tokens (EOS removed, in place) and the numbers it is judged by."""
        capture = scorer.alignment
        if capture is not None and out:
            capture.chosen(out[-1])  # the last token is never fed back: its probability now
        ends_with_eos = bool(out) and out[-1] in config.eos_token_id
        if ends_with_eos:
            out.pop()
        text = self.model.tokenizer.decode([t for t in out if not self.is_stamp(t)], skip_special_tokens=True)
        return WindowResult(
            tokens=tuple(out),
            temperature=float(config.temperature) if config.sampling else 0.0,
            avg_logprob=scorer.avg_logprob,
            no_speech_prob=scorer.no_speech_prob,
            compression_ratio=compression_ratio(text.strip()),
            sum_logprob=scorer.sum_logprob(ends_with_eos=ends_with_eos),
        )

    def skip(self) -> None:
        """The window is silence: nothing of it is kept; the next one starts after it."""
        self.seek += self.frames

    def accept(self, result: WindowResult, capture: AlignmentCapture | None) -> Iterator[str]:
        """Keep the window's complete segments (yielding their text not streamed yet) and move on."""
        out = list(result.tokens)
        stamps = self.stamps
        raw, advance = split_segments(
            out,
            timestamp_begin=None if stamps is None else stamps.start,
            timestamp_end=None if stamps is None else stamps.stop,
            seek=self.seek,
            window_frames=self.frames,
        )
        times: list[float] | None = None
        probs: list[float] | None = None
        if capture is not None:
            weights = capture.weights()
            times = token_times(
                weights, frames=max(self.audio_frames - self.seek, 0), filter_width=self.model._median_width()
            ).tolist()
            probs = capture.probabilities
        tokenizer = self.model.tokenizer
        built: list[Segment] = []
        pos = 0
        for s in raw:
            words: tuple[Word, ...] = ()
            if times is not None and probs is not None:
                n_tok = len(s.tokens)
                words = segment_words(
                    s.tokens,
                    pad_to(times[pos : pos + n_tok], n_tok),
                    pad_to(probs[pos : pos + n_tok], n_tok),
                    decode=lambda ids: tokenizer.decode(ids, skip_special_tokens=False),
                    is_stamp=self.is_stamp,
                    is_special=lambda t: t in self.vocab.special_ids,
                    language=self.model._language_in(self.prompt),
                    offset=self.seek * FRAME_SECONDS,
                    limit=self.duration,
                )
                pos += n_tok
            text = tokenizer.decode([t for t in s.tokens if not self.is_stamp(t)], skip_special_tokens=True)
            # a window ends with the audio, and a predicted time may lie past it: no segment ends after the audio
            built.append(
                Segment(
                    min(s.start, self.duration),
                    min(s.end, self.duration),
                    text,
                    s.tokens,
                    avg_logprob=result.avg_logprob,
                    no_speech_prob=result.no_speech_prob,
                    compression_ratio=result.compression_ratio,
                    temperature=result.temperature,
                    words=words,
                )
            )
        # A window that does not move on would repeat forever (only possible without the timestamp rules).
        next_seek = self.seek + (advance if advance > 0 else self.frames)
        threshold = self.options.hallucination_silence_threshold
        if threshold is not None and capture is not None:
            single_ending = len(out) >= 2 and not self.is_stamp(out[-2]) and self.is_stamp(out[-1])
            cut = silence_cut(
                built,
                threshold=threshold,
                seek=self.seek,
                window_frames=self.frames,
                single_timestamp_ending=single_ending,
                content_frames=self.audio_frames,
                last_speech=self.last_speech,
                n_frames=self.model._features["window_frames"],
            )
            if cut.skip:  # a hallucination after silence: nothing of the window, restart at it
                self.seek = max(cut.seek or next_seek, self.seek + 1)
                return
            built = built[: cut.keep]
            self.last_speech = cut.last_speech
            if cut.seek is not None:
                next_seek = max(cut.seek, self.seek + 1)
        n_kept = sum(len(s.token_ids) for s in built)
        piece = self.detok.add_many(t for t in out[self.final : n_kept] if not self.is_stamp(t))
        if piece:
            yield piece
        self.kept.extend(out[:n_kept])
        self.segments.extend(built)
        self.history.extend(s.token_ids for s in built)
        if not self.options.condition_on_previous_text or result.temperature > 0.5:
            self.history = []  # openai-whisper's prompt_reset_since: later windows start without context
        self.seek = next_seek

    def finish(self, elapsed: float) -> tuple[str, Transcription]:
        """The text not yielded yet and the transcription."""
        tail = self.detok.finish()
        segments = tuple(self.segments)
        if self.time_map is not None and segments:
            segments = map_segments(segments, self.time_map)
        return tail, Transcription(
            self.detok.text,
            segments,
            self.model._language_in(self.prompt),
            tuple(self.kept),
            duration=self.recording,
            elapsed=elapsed,
        )


MAX_ONSET_SHIFT = 1.0  # seconds: how far a region's first word may move to the region's speech onset


def map_segments(segments: Sequence[Segment], time_map: Any) -> tuple[Segment, ...]:
    """The segments of one transcription of speech cut out by VAD (or of a chunk), in the original recording.

    Each as :func:`map_segment`; and when the map knows where the speech of its regions starts
    (``time_map.onsets``, :meth:`~inference4py.tasks.whisper.vad.SileroVad.speech_map`), the first
    word of each region starts there, if that is before the word's end.  DTW times that word badly:
    after a join the timestamp tokens before it take the frames of the padded pause (0.30 s late on
    the test recording), at the start of a chunk it lands in the padding (0.40 s early), while
    Silero's onset is resolved to its 32 ms windows.  The other words keep DTW's times, and so
    does a first word more than ``MAX_ONSET_SHIFT`` (1 s) from the onset: the decoder left out
    speech before it (a window skipped as silence), and moving it would make one long word.
    """
    started: set[int] = set()  # regions whose first word has been placed
    return tuple(map_segment(s, time_map, started=started) for s in segments)


def map_segment(segment: Segment, time_map: Any, *, started: set[int] | None = None) -> Segment:
    """A segment of speech cut out by VAD (or of a chunk), its times and its words' in the original recording.

    A word is placed in the region its middle lies in, both ends inside that region: DTW may stretch
    the last word before a join over the padding of the region joined on, which is a pause of the
    recording, not the speech after it.  A segment keeps its own times, except that an end that
    falls in another region than the word next to it is that word's: a timestamp token is coarser
    than the join, and the segment after one may start in the region before its speech.

    ``started``: the regions whose first word came in an earlier segment (updated); with it, a word
    that is the first of its region starts at the region's onset when the map knows it and it is
    before the word's end (see :func:`map_segments`).  None: no word is moved to an onset.
    """

    def rounded(t: float) -> float:
        return round(float(t), 3)

    words: list[Word] = []
    moved_first = False
    for w in segment.words:
        region = time_map.region_at((w.start + w.end) / 2)
        start = rounded(time_map.to_original_in(w.start, region))
        end = rounded(time_map.to_original_in(w.end, region))
        if started is not None and region not in started:
            started.add(region)
            onset = time_map.onset_of(region)
            # further than MAX_ONSET_SHIFT from DTW's start, the word is not the region's first speech
            # (the decoder left out what came before it): it keeps DTW's times
            if onset is not None and rounded(onset) < end and abs(onset - start) <= MAX_ONSET_SHIFT:
                start = rounded(onset)
                moved_first = moved_first or not words
        words.append(replace(w, start=start, end=max(start, end)))
    start = rounded(time_map.to_original(segment.start))
    end = rounded(time_map.to_original(segment.end, is_end=True))
    if words:
        first, last = segment.words[0], segment.words[-1]
        if time_map.region_at(segment.start) != time_map.region_at((first.start + first.end) / 2):
            start = words[0].start
        if time_map.region_at(segment.end, is_end=True) != time_map.region_at((last.start + last.end) / 2):
            end = words[-1].end
        if moved_first:  # a segment does not start after its first word
            start = min(start, words[0].start)
    return replace(segment, start=start, end=max(start, end), words=tuple(words))
