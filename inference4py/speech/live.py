"""Transcription of audio as it arrives (a microphone, a socket): each stretch of speech as it ends.

:func:`live_segments` takes the audio in chunks of any size and runs Silero VAD on it window by
window (32 ms, each window run alone with the state the previous one left, so the probabilities
never depend on how the audio was split). A stretch of speech is final once the detector has seen
``min_silence_duration_ms`` of silence after it (or it reached ``max_speech_duration_s``): it is
then transcribed alone, padded by ``speech_pad_ms``, and its segments are yielded with times in
the whole recording. What was transcribed is dropped, and so is silence, so memory stays bounded
however long the stream runs.

The same audio gives the same segments whatever its chunks (tested), because each stretch is cut
and transcribed the same way: its padded end is final when it closes, which needs
``min_silence_duration_ms >= 2 * speech_pad_ms`` (a later stretch then cannot move it). Latency is
the silence that closes a stretch plus its transcription: whisper.cpp's ``stream -vth`` and
whisper_streaming's VAD mode work the same way.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from inference4py import audio as _audio
from inference4py.errors import AudioError, ConfigurationError
from inference4py.speech.results import Segment, Transcription
from inference4py.speech.vad import (
    CONTEXT_SAMPLES,
    WINDOW_SAMPLES,
    SileroVad,
    VadOptions,
    regions_from_probabilities,
)

__all__ = ["LIVE_VAD_OPTIONS", "ProbabilityStream", "check_stream_options", "live_segments"]

#: The stream's default rules: a stretch ends after 300 ms of silence (faster-whisper's 2 s suits whole
#: files, not a listener waiting for text), padded by 150 ms, and is cut at a pause after 15 s at most.
#: On whisper-base with espeak-ng's sentences fed in real time, text came 1.3-1.5 s after each sentence.
LIVE_VAD_OPTIONS = VadOptions(min_silence_duration_ms=300, speech_pad_ms=150, max_speech_duration_s=15.0)


class ProbabilityStream:
    """Speech probabilities of audio fed piece by piece, one per 512-sample window once it has arrived."""

    def __init__(self, vad: SileroVad) -> None:
        self._vad = vad
        self._state: Any = None
        self._waiting = np.zeros(0, dtype=np.float32)  # samples of the window not complete yet
        self._context = np.zeros(CONTEXT_SAMPLES, dtype=np.float32)

    def feed(self, samples: np.ndarray) -> np.ndarray:
        """The probabilities of the windows ``samples`` completes (float32, maybe empty)."""
        self._waiting = np.concatenate([self._waiting, samples])
        count = self._waiting.size // WINDOW_SAMPLES
        out = [np.zeros(0, dtype=np.float32)]
        for i in range(count):  # one run per window: the same runs whatever the chunks
            window = self._waiting[i * WINDOW_SAMPLES : (i + 1) * WINDOW_SAMPLES]
            frame = np.concatenate([self._context, window])[None, :]
            probability, self._state = self._vad.run_windows(frame, self._state)
            out.append(probability)
            self._context = window[-CONTEXT_SAMPLES:]
        self._waiting = self._waiting[count * WINDOW_SAMPLES :]
        return np.concatenate(out)

    def flush(self) -> np.ndarray:
        """The last, partial window's probability (zero-padded, as a whole file's last window is)."""
        if not self._waiting.size:
            return np.zeros(0, dtype=np.float32)
        rest = WINDOW_SAMPLES - self._waiting.size
        return self.feed(np.zeros(rest, dtype=np.float32))


def check_stream_options(options: Mapping[str, Any]) -> None:
    """Refuse the ``transcribe()`` options a stream sets itself."""
    for name in ("timestamps", "vad", "vad_options", "sample_rate", "on_token"):
        if name in options:
            raise ConfigurationError(f"transcribe_stream sets {name} itself; leave it out of the options.")


def live_segments(
    chunks: Iterable[Any],
    transcribe: Callable[[np.ndarray], Transcription],
    vad: SileroVad | None,
    *,
    sample_rate: int = _audio.SAMPLE_RATE,
    options: VadOptions | None = None,
) -> Iterator[Segment]:
    """The segments of the speech in ``chunks``, each stretch's as soon as it ends.

    Args:
        chunks: numpy arrays of samples at ``sample_rate`` (mono, or ``[samples, channels]`` /
            ``[channels, samples]``), or ``(samples, rate)`` pairs, as they arrive.
        transcribe: one stretch of 16 kHz samples -> its transcription (with timestamps).
        vad: the detector (None is refused: the stream is cut where speech pauses).
        options: the detector's rules (default :data:`LIVE_VAD_OPTIONS`).

    Raises:
        AudioError: a chunk that is not audio, or a stream that held no audio at all.
        ConfigurationError: no detector, or ``min_silence_duration_ms`` under twice ``speech_pad_ms``.
    """
    if vad is None:
        raise ConfigurationError(
            "transcribe_stream needs a voice activity detector (vad=True, a Silero .onnx path or a SileroVad): "
            "it transcribes each stretch of speech when a pause ends it. For a whole recording use transcribe()."
        )
    rules = options if options is not None else LIVE_VAD_OPTIONS
    if rules.min_silence_duration_ms < 2 * rules.speech_pad_ms:
        raise ConfigurationError(
            f"Live transcription needs min_silence_duration_ms >= 2 * speech_pad_ms (got "
            f"{rules.min_silence_duration_ms} and {rules.speech_pad_ms}): a stretch's end must be final when it closes."
        )
    probabilities = ProbabilityStream(vad)
    source = _Input(sample_rate)
    pending = np.zeros(0, dtype=np.float32)  # the samples since the last cut, from a window boundary
    probs = np.zeros(0, dtype=np.float32)  # one per complete window of pending
    consumed = 0  # samples before pending
    final = False
    chunks = iter(chunks)
    while not final:
        chunk = next(chunks, None)
        final = chunk is None
        samples = source.flush() if final else source.convert(chunk)
        pending = np.concatenate([pending, samples])
        probs = np.concatenate([probs, probabilities.feed(samples)])
        if final:
            if source.heard == 0:
                raise AudioError(
                    "The audio stream held no samples: feed it chunks of audio (numpy arrays) before it ends."
                )
            probs = np.concatenate([probs, probabilities.flush()])
        # one stretch at a time, the scan restarting after it: the same cuts whatever the chunks
        while True:
            available = pending.size if final else probs.size * WINDOW_SAMPLES
            cut, stretch = _next_stretch(probs, available, rules, final=final)
            if stretch is not None:
                yield from _shifted(transcribe(pending[stretch[0] : stretch[1]]), consumed + stretch[0])
            if cut == 0:
                break
            pending, probs, consumed = pending[cut:], probs[cut // WINDOW_SAMPLES :], consumed + cut
            if stretch is None:
                break


def _next_stretch(
    probs: np.ndarray, available: int, rules: VadOptions, *, final: bool
) -> tuple[int, tuple[int, int] | None]:
    """The first stretch of speech that is over, and where to cut the pending audio after it (a window
    boundary: after its end when silence closed it, before when the length limit did, so no speech is
    skipped); ``(0, None)``: none yet. The rule never looks past the stretch, so the cuts do not depend
    on how much audio has arrived.

    Silence alone is dropped but for the last ``max(min_silence, min_speech) + pad`` of it, where speech
    may be starting (a burst shorter than ``min_speech`` is no region yet).
    """
    regions = regions_from_probabilities(probs, available, rules) if available else []
    if regions and (final or regions[0][1] < available):  # one reaching the end may go on
        start, end = regions[0]
        if final and len(regions) == 1:
            cut = available
        elif len(regions) > 1 and regions[1][0] <= end:  # cut by max_speech_duration_s: the speech goes on,
            cut = _down(end)  # and the next stretch starts at most one window before this one ends
        else:  # closed by silence: the next stretch starts min_silence - pad >= pad after it at the earliest
            cut = _up(end)
        return min(max(cut, WINDOW_SAMPLES), available), (start, end)
    if final or regions:
        return 0, None
    held = max(rules.min_silence_duration_ms, rules.min_speech_duration_ms) + rules.speech_pad_ms
    keep = _up(int(held * _audio.SAMPLE_RATE / 1000))
    return max(0, probs.size * WINDOW_SAMPLES - keep) // WINDOW_SAMPLES * WINDOW_SAMPLES, None


def _down(sample: int) -> int:
    return sample // WINDOW_SAMPLES * WINDOW_SAMPLES


def _up(sample: int) -> int:
    return int(math.ceil(sample / WINDOW_SAMPLES)) * WINDOW_SAMPLES


class _Input:
    """Chunks -> mono float32 samples at 16 kHz; other rates through one streaming resampler, so the
    samples are those of the whole signal resampled at once (soxr, as ``audio.resample``)."""

    def __init__(self, sample_rate: int) -> None:
        self.rate = sample_rate
        self.heard = 0
        self._resampler: Any = None

    def convert(self, chunk: Any) -> np.ndarray:
        rate = self.rate
        if isinstance(chunk, tuple):
            if len(chunk) != 2:
                raise AudioError(f"A chunk pair must be (samples, sample_rate); got a tuple of {len(chunk)} items.")
            chunk, rate = chunk
            if self.heard and rate != self.rate:
                raise AudioError(
                    f"A stream keeps one sample rate: this chunk is at {rate} Hz, the stream at {self.rate} Hz."
                )
            self.rate = rate
        if not isinstance(chunk, np.ndarray):
            raise AudioError(
                f"Each chunk must be a numpy array of samples (or a (samples, rate) pair), not {type(chunk).__name__}."
            )
        if chunk.size == 0:
            return np.zeros(0, dtype=np.float32)
        samples = _audio.load_audio(chunk, sample_rate=rate, target_rate=rate)  # mono float32, not resampled
        self.heard += samples.size
        return self._resample(samples, last=False)

    def flush(self) -> np.ndarray:
        return self._resample(np.zeros(0, dtype=np.float32), last=True)

    def _resample(self, samples: np.ndarray, *, last: bool) -> np.ndarray:
        if self.rate == _audio.SAMPLE_RATE:
            return samples
        if self._resampler is None:
            soxr = _audio.audio_module("soxr", f"Resampling audio from {self.rate} Hz to {_audio.SAMPLE_RATE} Hz")
            self._resampler = soxr.ResampleStream(self.rate, _audio.SAMPLE_RATE, 1, dtype="float32", quality="HQ")
        return np.asarray(self._resampler.resample_chunk(samples, last=last), dtype=np.float32)


def _shifted(result: Transcription, start: int) -> Iterator[Segment]:
    """The stretch's segments (and words) with times in the whole recording."""
    offset = start / _audio.SAMPLE_RATE
    for segment in result.segments:
        words = tuple(dataclasses.replace(w, start=w.start + offset, end=w.end + offset) for w in segment.words)
        yield dataclasses.replace(segment, start=segment.start + offset, end=segment.end + offset, words=words)
