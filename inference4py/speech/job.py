"""One audio file's transcription, window by window, apart from how its windows are decoded.

:class:`FileJob` holds what the window loop keeps between windows (where the next window starts,
the detected language, the ``<|startofprev|>`` context, the segments and ids kept so far) and
turns a window's decoded tokens into segments and words.  The sequential loop (:mod:`loop`,
``transcribe``) decodes each window alone and streams its text; ``transcribe_batch``
(:mod:`batch`) decodes the current windows of several files as one batch.  Both go through the
same job, so a row of a batch is judged, cut and timed exactly as it would be alone.
:func:`load_job` and :func:`open_job` make a job from audio.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from inference4py import audio as _audio
from inference4py.errors import UnsupportedModelError
from inference4py.generation.config import GenerationConfig
from inference4py.generation.streaming import IncrementalDetokenizer
from inference4py.speech.decoding import (
    WindowResult,
    WindowScorer,
    compression_ratio,
    previous_context,
    silence_cut,
)
from inference4py.speech.features import log_mel
from inference4py.speech.longform import FRAME_SECONDS, cut_window, split_segments
from inference4py.speech.options import CallPolicy, attempt_config
from inference4py.speech.parts import WhisperParts
from inference4py.speech.probe import AlignmentCapture, WordSetup
from inference4py.speech.prompt import decoder_prompt
from inference4py.speech.results import Segment, Transcription, Word
from inference4py.speech.runtime import WhisperRuntime
from inference4py.speech.speech_map import SpeechTimeMap, map_segments
from inference4py.speech.vad import transcription_map
from inference4py.speech.words import segment_words, token_times


def pad_to(values: Sequence[Any], n: int) -> list[Any]:
    """``values`` cut or padded (repeating the last, or 0) to ``n`` items."""
    out = list(values[:n])
    while len(out) < n:
        out.append(out[-1] if out else 0.0)
    return out


class FileJob:
    """The window loop's state for one audio file (see the module docstring).

    Args:
        parts: the model (its tokenizer, vocabulary and settings).
        samples: the audio at the model's rate.
        feats: its log-mel features ``[n_mels, frames]``.
        prompt: the decoder prompt, with None where a detected language goes.
        detect_at: index of that slot, or None.
        timestamps: whether timestamp tokens are predicted.
        policy: the call's long-form options.
        words_for: what word timestamps need, when they are wanted.
        time_map: where the samples are in the recording, when they are speech cut out of it (VAD).
        duration: the recording's length (default: the samples').
    """

    def __init__(
        self,
        parts: WhisperParts,
        samples: np.ndarray,
        feats: np.ndarray,
        prompt: list[int | None],
        detect_at: int | None,
        *,
        timestamps: bool,
        policy: CallPolicy,
        words_for: WordSetup | None,
        time_map: SpeechTimeMap | None = None,
        duration: float | None = None,
    ) -> None:
        self.tokenizer = parts.tokenizer
        self.time_map = time_map
        self.feats = feats
        self.prompt = prompt
        self.detect_at = detect_at
        self.policy = policy
        self.options = policy.options
        self.words_for = words_for
        v = parts.vocab
        self.vocab = v
        settings = parts.features
        self.window_frames = settings["window_frames"]
        self.duration = samples.size / settings["sample_rate"]  # of the audio decoded (the speech, with VAD)
        self.recording = self.duration if duration is None else duration
        hop = settings["hop_length"]
        # frames of audio (the features of short audio are padded to one window)
        self.audio_frames = (
            min(feats.shape[1], samples.size // hop) if samples.size <= settings["n_samples"] else feats.shape[1]
        )
        self.timestamps = timestamps
        self.stamps = v.timestamp_range if timestamps else None
        self.detok = IncrementalDetokenizer(parts.tokenizer, skip_special_tokens=True)
        self.limit = int(parts.planner.context or 448) // 2 - 1  # transformers' cut_off_length
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
        window, self.frames = cut_window(self.feats, self.seek, self.window_frames)
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
        """The text of a live window's ``out`` that is final and not streamed yet: up to its last closed pair
        of timestamps, or, without timestamps (one segment per window), every token as it comes."""
        n = len(out)
        if self.stamps is None:
            piece = self.detok.add_many(out[self.final : n])  # EOS is special: the detokenizer skips it
            self.final = n
            return piece
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
        text = self.tokenizer.decode([t for t in out if not self.is_stamp(t)], skip_special_tokens=True)
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
                weights,
                frames=max(self.audio_frames - self.seek, 0),
                filter_width=7 if self.words_for is None else self.words_for.median_width,
            ).tolist()
            probs = capture.probabilities
        tokenizer = self.tokenizer
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
                    language=self.vocab.language_in(self.prompt),
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
                n_frames=self.window_frames,
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
            self.vocab.language_in(self.prompt),
            tuple(self.kept),
            duration=self.recording,
            elapsed=elapsed,
        )


def load_job(
    parts: WhisperParts,
    audio: _audio.AudioInput,
    sample_rate: int | None,
    language: str | None,
    task: str | None,
    timestamps: bool,
    policy: CallPolicy,
) -> FileJob:
    """A file's window loop: its audio read (only the speech with VAD), its prompt made, the options checked."""
    rate = parts.features["sample_rate"]
    samples = _audio.load_audio(audio, sample_rate=sample_rate, target_rate=rate)
    duration = samples.size / rate
    time_map = None
    if policy.vad is not None:  # only the speech, laid end to end (faster-whisper's vad_filter)
        time_map = transcription_map(policy.vad, samples, policy.vad_options)
        samples = time_map.extract(samples)
    return open_job(parts, samples, language, task, timestamps, policy, time_map=time_map, duration=duration)


def open_job(
    parts: WhisperParts,
    samples: np.ndarray,
    language: str | None,
    task: str | None,
    timestamps: bool,
    policy: CallPolicy,
    *,
    time_map: SpeechTimeMap | None = None,
    duration: float | None = None,
) -> FileJob:
    """The window loop of samples at the model's rate.

    Raises:
        ConfigurationError: invalid generation options (refused before the first window).
        UnsupportedModelError: word timestamps on a backend without cross-attention weights.
    """
    if samples.size:
        feats = log_mel(samples, parts.features)  # [n_mels, frames]
    else:  # no speech at all: no window to decode
        feats = np.zeros((parts.features["n_mels"], 0), dtype=np.float32)
    prompt, detect_at = decoder_prompt(parts.vocab, language, task, timestamps)
    attempt_config(parts.planner, len(prompt), policy.options.temperatures[0], policy, False)
    words_for = None
    if policy.word_timestamps:
        if not isinstance(parts.backend, WhisperRuntime):
            raise UnsupportedModelError(
                "word_timestamps needs the cross-attention weights of the native onnxruntime backend; use "
                "inference4py.WhisperSpeechModel for it."
            )
        words_for = parts.backend.word_setup()
    return FileJob(
        parts,
        samples,
        feats,
        prompt,
        detect_at,
        timestamps=timestamps,
        policy=policy,
        words_for=words_for,
        time_map=time_map,
        duration=duration,
    )
