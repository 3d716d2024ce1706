"""Voice activity detection: Silero VAD on onnxruntime, speech chunks for Whisper, times mapped back.

Whisper hallucinates on silence and music; faster-whisper and whisperX therefore run a
voice activity detector first and transcribe only the speech.  This module does the same
with the Silero VAD ONNX model (MIT, https://github.com/snakers4/silero-vad):

1. :class:`SileroVad` gives one speech probability per 32 ms window of 16 kHz audio
   (:meth:`SileroVad.speech_probabilities`) and turns them into speech regions
   (:meth:`SileroVad.speech_regions`, start/end sample pairs) under :class:`VadOptions`.
2. :func:`chunk_speech` packs the regions into chunks of at most 30 s (one Whisper
   window each), the regions of a chunk concatenated as faster-whisper's
   ``collect_chunks`` does, or kept with the pauses between them as whisperX's
   ``merge_chunks`` does (``keep_gaps=True``).
3. Each :class:`SpeechChunk` carries a :class:`SpeechTimeMap`: a time in the chunk's
   audio (a Whisper timestamp) -> the time in the original recording.  A map made by
   :meth:`SileroVad.speech_map` also knows where the speech of each region starts before
   the padding (its *onset*): transcription with word timestamps starts the first word of
   each region there (``VadOptions.word_onsets``).

Two layouts of the ONNX graph are recognised from their inputs and outputs:

* *sequence* (inputs ``input [windows, 576]``, ``h``, ``c``; output ``speech_probs``):
  many windows per run.  faster-whisper's wheel bundles this one as
  ``faster_whisper/assets/silero_vad_v6.onnx``; the ``silero-vad`` package has it as
  ``silero_vad_16k_sequence.onnx``.  The fast one: an hour of audio is a few runs.
* *streaming* (inputs ``input [1, 576]``, ``state [2, 1, 128]``, optionally ``sr``;
  outputs ``output``, ``stateN``): Silero's own v5/v6 export, one window per run, e.g.
  ``onnx/model.onnx`` of the Hub repo ``onnx-community/silero-vad``
  (:meth:`SileroVad.from_pretrained`'s default).

Either way each window of 512 samples is fed with the 64 samples before it (zeros before
the first), as Silero's own wrappers do.

This module holds the detector and its rules (steps 1 and 3's onsets); the time maps and the
chunks of steps 2 and 3 are :mod:`inference4py.speech.speech_map`'s, importable from here
too, as this module is the public face of voice activity detection.

Example:
    >>> vad = SileroVad("silero_vad_v6.onnx")  # doctest: +SKIP
    >>> audio = load_audio("meeting.mp3")  # doctest: +SKIP
    >>> for chunk in chunk_speech(audio, vad.speech_regions(audio)):  # doctest: +SKIP
    ...     text, start, end = transcribe(chunk.audio)  # times in the chunk's audio
    ...     print(chunk.to_original(start), chunk.to_original(end, is_end=True), text)
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from inference4py.engine.sessions import SessionOptions, create_session, graph_inputs, graph_outputs, run_session
from inference4py.errors import AudioError, ConfigurationError, ModelFilesMissingError, UnsupportedModelError
from inference4py.speech.speech_map import SAMPLE_RATE as SAMPLE_RATE
from inference4py.speech.speech_map import Region, is_number
from inference4py.speech.speech_map import SpeechChunk as SpeechChunk
from inference4py.speech.speech_map import SpeechTimeMap as SpeechTimeMap
from inference4py.speech.speech_map import chunk_speech as chunk_speech

__all__ = [
    "SAMPLE_RATE",
    "WINDOW_SAMPLES",
    "DEFAULT_REPO",
    "DEFAULT_FILENAME",
    "VadOptions",
    "SileroVad",
    "SpeechTimeMap",
    "SpeechChunk",
    "regions_from_probabilities",
    "time_map_from_probabilities",
    "chunk_speech",
]

WINDOW_SAMPLES = 512  # 32 ms: one speech probability per window
CONTEXT_SAMPLES = 64  # the model also sees the last 64 samples of the previous window
STATE_SIZE = 128  # LSTM width of Silero v5/v6
DEFAULT_REPO = "onnx-community/silero-vad"
DEFAULT_FILENAME = "onnx/model.onnx"

# When a region reaches max_speech_duration_s it is cut at the start of the last pause
# longer than this (faster-whisper's and Silero's 98 ms), else at the current window.
_MIN_PAUSE_TO_CUT_MS = 98
_SEQUENCE_BLOCK = 1024  # windows per run of the sequence layout (~33 s of audio, ~2.4 MB of input)

# --------------------------------------------------------------------------- options


@dataclass(frozen=True)
class VadOptions:
    """How speech probabilities become speech regions; faster-whisper's ``VadOptions`` semantics.

    The defaults are faster-whisper's (its ``transcribe(vad_filter=True)``), tuned for
    Whisper: long pauses (2 s) end a region, so sentences stay whole, and 400 ms of padding
    gives the decoder some context.  Silero's own defaults, tuned for cutting speech from
    silence tightly, are ``min_speech_duration_ms=250, min_silence_duration_ms=100,
    speech_pad_ms=30``.  One difference from faster-whisper: ``max_speech_duration_s`` is
    30 s (faster-whisper: unlimited; its batched pipeline passes 30), so that every region
    fits in one Whisper window and :func:`chunk_speech` never has to cut in the middle of
    speech.

    Args:
        threshold: a window whose speech probability is >= this starts (or continues) speech.
        neg_threshold: a window below this is silence; between the two, a window keeps the
            current state.  None: ``max(threshold - 0.15, 0.01)``.
        min_speech_duration_ms: regions (before padding) not longer than this are dropped.
        min_silence_duration_ms: a region ends only after this much silence.
        speech_pad_ms: each region is widened by this much on both sides (halfway into the
            pause when two regions are closer than twice this).
        max_speech_duration_s: a region longer than this is cut at its last pause of more
            than 98 ms, or where it reaches the limit when it has none; the padded region
            stays within this length.  ``math.inf``: no limit.
        word_onsets: with word timestamps, the first word of each speech region starts at
            the region's onset as Silero found it (its start before padding; Silero's
            32 ms windows place it within a few tens of ms), when that onset is before the
            word's end.  DTW's time of that word is off by tenths of a second: after a
            join of two regions its timestamp tokens take the frames of the padded pause
            (0.30 s late on the test recording), at the start of a chunk it lands in the
            padding (0.40 s early).  Every other word keeps DTW's times.  False: every
            word keeps DTW's times (transformers').  Not used by the regions themselves.

    Raises:
        ConfigurationError: a value is out of range (the message gives the range).
    """

    threshold: float = 0.5
    neg_threshold: float | None = None
    min_speech_duration_ms: float = 0
    min_silence_duration_ms: float = 2000
    speech_pad_ms: float = 400
    max_speech_duration_s: float = 30.0
    word_onsets: bool = True

    def __post_init__(self) -> None:
        if not is_number(self.threshold) or not 0.0 < self.threshold < 1.0:
            raise ConfigurationError(
                f"threshold={self.threshold!r} is invalid: use a probability strictly between 0 and 1 (default 0.5)."
            )
        if self.neg_threshold is not None and (
            not is_number(self.neg_threshold) or not 0.0 <= self.neg_threshold <= self.threshold
        ):
            raise ConfigurationError(
                f"neg_threshold={self.neg_threshold!r} is invalid: use a probability between 0 and threshold "
                f"({self.threshold}), or None for threshold - 0.15."
            )
        for name in ("min_speech_duration_ms", "min_silence_duration_ms", "speech_pad_ms"):
            value = getattr(self, name)
            if not is_number(value) or not 0 <= value < math.inf:
                raise ConfigurationError(f"{name}={value!r} is invalid: use a finite number of milliseconds >= 0.")
        if not isinstance(self.word_onsets, (bool, np.bool_)):
            raise ConfigurationError(f"word_onsets={self.word_onsets!r} is invalid: use True or False.")
        longest = (WINDOW_SAMPLES + 2 * self.speech_pad_ms * SAMPLE_RATE / 1000) / SAMPLE_RATE
        if not is_number(self.max_speech_duration_s) or not self.max_speech_duration_s > longest:
            raise ConfigurationError(
                f"max_speech_duration_s={self.max_speech_duration_s!r} is invalid: it must exceed one window "
                f"plus the padding on both sides ({longest:.3f} s with speech_pad_ms={self.speech_pad_ms}); "
                "use math.inf for no limit."
            )

    @property
    def effective_neg_threshold(self) -> float:
        """``neg_threshold``, or ``max(threshold - 0.15, 0.01)`` when it is None."""
        return self.neg_threshold if self.neg_threshold is not None else max(self.threshold - 0.15, 0.01)


# --------------------------------------------------------------------------- probabilities -> regions


def regions_from_probabilities(
    probabilities: Sequence[float] | np.ndarray,
    num_samples: int,
    options: VadOptions | None = None,
) -> list[Region]:
    """Speech regions of audio from its per-window speech probabilities.

    The rules of faster-whisper's ``get_speech_timestamps`` (Silero's with
    ``use_max_poss_sil_at_max_speech=False``): speech starts at the first window at or
    above ``threshold``; it ends at the first window below ``neg_threshold`` that is
    followed by ``min_silence_duration_ms`` of windows not rising to ``threshold``;
    regions then are filtered by length and padded.

    Args:
        probabilities: one probability per window of :data:`WINDOW_SAMPLES` samples.
        num_samples: the length of the audio (the last region ends there at the latest).
        options: the rules (default :class:`VadOptions`).

    Returns:
        ``(start, end)`` sample pairs, sorted and disjoint, ``0 <= start < end <= num_samples``.
    """
    return _find_regions(probabilities, num_samples, options)[0]


def time_map_from_probabilities(
    probabilities: Sequence[float] | np.ndarray,
    num_samples: int,
    options: VadOptions | None = None,
) -> SpeechTimeMap:
    """The speech regions of :func:`regions_from_probabilities` as a map that knows their onsets.

    The onset of a region is where its speech starts before the padding, kept as found
    (not recomputed from the padded start: a region at the start of the audio, or close to
    the one before, is padded by less than ``speech_pad_ms``).

    Returns:
        a :class:`SpeechTimeMap` of the padded regions, with ``onsets`` set.
    """
    regions, onsets = _find_regions(probabilities, num_samples, options)
    return SpeechTimeMap(regions, onsets=onsets)


def _find_regions(
    probabilities: Sequence[float] | np.ndarray,
    num_samples: int,
    options: VadOptions | None,
) -> tuple[list[Region], list[int]]:
    """The padded regions and, for each, where its speech starts before the padding."""
    options = options or VadOptions()
    rate = SAMPLE_RATE
    threshold, neg_threshold = options.threshold, options.effective_neg_threshold
    min_speech = rate * options.min_speech_duration_ms / 1000
    min_silence = rate * options.min_silence_duration_ms / 1000
    pad = rate * options.speech_pad_ms / 1000
    max_speech = rate * options.max_speech_duration_s - WINDOW_SAMPLES - 2 * pad
    min_pause_to_cut = rate * _MIN_PAUSE_TO_CUT_MS / 1000

    raw: list[Region] = []
    start: int | None = None  # start of the current region; None while in silence
    silence_start: int | None = None  # first silent window of the pause under way in a region
    cut_at: int | None = None  # start of the last pause > 98 ms: where an over-long region is cut
    resumed_at: int | None = None  # where speech came back after that pause
    for i, probability in enumerate(np.asarray(probabilities, dtype=np.float64).tolist()):
        position = i * WINDOW_SAMPLES
        if probability >= threshold and silence_start is not None:  # the pause is over
            silence_start = None
            if cut_at is not None and (resumed_at is None or resumed_at < cut_at):
                resumed_at = position
        if start is None:
            if probability >= threshold:
                start = position
            continue
        if position - start > max_speech:
            if cut_at is not None:
                raw.append((start, cut_at))
                # still in that pause -> silence; speech since -> a new region from where it resumed
                start = None if resumed_at is None or resumed_at < cut_at else resumed_at
            else:
                raw.append((start, position))
                start = None
            silence_start = cut_at = resumed_at = None
            if start is None:
                continue
        if probability < neg_threshold:
            if silence_start is None:
                silence_start = position
            if position - silence_start > min_pause_to_cut:
                cut_at = silence_start
            if position - silence_start >= min_silence:
                if silence_start - start > min_speech:
                    raw.append((start, silence_start))
                start = silence_start = cut_at = resumed_at = None
    if start is not None and num_samples - start > min_speech:
        raw.append((start, num_samples))
    return _pad(raw, pad, num_samples), [s for s, _ in raw]


def _pad(raw: list[Region], pad: float, num_samples: int) -> list[Region]:
    """Widen regions by ``pad`` samples each side; two regions closer than ``2 * pad`` meet halfway."""
    starts = [s for s, _ in raw]
    ends = [e for _, e in raw]
    for i in range(len(raw)):
        if i == 0:
            starts[0] = int(max(0, starts[0] - pad))
        if i == len(raw) - 1:
            ends[i] = int(min(num_samples, ends[i] + pad))
            break
        gap = starts[i + 1] - ends[i]
        if gap < 2 * pad:
            ends[i] += gap // 2
            starts[i + 1] = max(0, starts[i + 1] - gap // 2)
        else:
            ends[i] = int(min(num_samples, ends[i] + pad))
            starts[i + 1] = int(max(0, starts[i + 1] - pad))
    return list(zip(starts, ends))


# --------------------------------------------------------------------------- the model


class SileroVad:
    """The Silero VAD ONNX model on onnxruntime.

    Args:
        path: the ``.onnx`` file (either layout, see the module docstring).
        session_options: providers and threads; default one CPU thread (the model is a
            small LSTM: more threads cost more than they save, faster-whisper and Silero
            run it the same way).

    Raises:
        ModelFilesMissingError: ``path`` does not exist.
        ModelLoadError: the file is not a loadable ONNX graph.
        UnsupportedModelError: the graph is not a Silero VAD of a known layout.

    Example:
        >>> vad = SileroVad("tests/fixtures/vad/silero_vad_v6.onnx")
        >>> vad.speech_regions(np.zeros(16000, np.float32))
        []
    """

    def __init__(self, path: str | os.PathLike[str], *, session_options: SessionOptions | None = None) -> None:
        self.path = Path(path).expanduser()
        if not self.path.is_file():
            what = "is a folder, not an ONNX file" if self.path.is_dir() else "does not exist"
            raise ModelFilesMissingError(
                f"The Silero VAD model {self.path} {what}. Pass the path of a silero_vad .onnx file "
                f"(faster-whisper's wheel has faster_whisper/assets/silero_vad_v6.onnx), or use "
                f"SileroVad.from_pretrained() to fetch {DEFAULT_FILENAME} of {DEFAULT_REPO} from the Hugging Face Hub.",
                [self.path.name],
            )
        self._session = create_session(self.path, session_options or SessionOptions(intra_op_threads=1))
        inputs, outputs = graph_inputs(self._session), graph_outputs(self._session)
        self._input_dtype = inputs["input"].dtype if "input" in inputs else np.float32
        if {"input", "h", "c"} <= inputs.keys() and {"speech_probs", "hn", "cn"} <= outputs.keys():
            self.layout = "sequence"
            self._state_dtype = inputs["h"].dtype
        elif {"input", "state"} <= inputs.keys() and {"output", "stateN"} <= outputs.keys():
            self.layout = "streaming"
            self._state_dtype = inputs["state"].dtype
            self._has_rate = "sr" in inputs
        else:
            raise UnsupportedModelError(
                f"{self.path} is not a Silero VAD model this library can run: its inputs are {sorted(inputs)} and "
                f"its outputs {sorted(outputs)}. Supported: the sequence export (inputs input/h/c, output "
                "speech_probs: faster-whisper's silero_vad_v6.onnx, silero-vad's silero_vad_16k_sequence.onnx) and "
                f"Silero v5/v6 (inputs input/state[/sr], outputs output/stateN: {DEFAULT_FILENAME} of {DEFAULT_REPO})."
            )

    @classmethod
    def from_pretrained(
        cls,
        repo_id: str = DEFAULT_REPO,
        *,
        filename: str = DEFAULT_FILENAME,
        revision: str | None = None,
        token: str | bool | None = None,
        local_files_only: bool = False,
        session_options: SessionOptions | None = None,
    ) -> SileroVad:
        """The model file ``filename`` of a Hugging Face Hub repo, through the shared HF cache.

        Offline mode (``HF_HUB_OFFLINE=1`` / ``INFERENCE4PY_OFFLINE=1``) and
        ``local_files_only=True`` use the cache only; when the Hub cannot be reached
        huggingface_hub falls back to the cache too.

        Raises:
            HubError: the file cannot be downloaded and is not in the cache.
            ModelNotFoundError: the repo or revision does not exist.
        """
        from inference4py.hub.download import download_file

        local = download_file(repo_id, filename, revision=revision, token=token, local_files_only=local_files_only)
        return cls(local, session_options=session_options)

    def __repr__(self) -> str:
        return f"SileroVad(path={str(self.path)!r}, layout={self.layout!r})"

    def speech_probabilities(self, audio: np.ndarray, *, sampling_rate: int = SAMPLE_RATE) -> np.ndarray:
        """One speech probability per window of :data:`WINDOW_SAMPLES` samples.

        Args:
            audio: mono float samples at 16 kHz, ``[samples]``; the last window is
                zero-padded.
            sampling_rate: the rate of ``audio``; anything but 16000 is refused.

        Returns:
            float32 ``[ceil(samples / 512)]``.

        Raises:
            AudioError: the audio is not 1-D float samples at 16 kHz, or holds NaN / inf.
            InferenceError: onnxruntime failed.
        """
        samples = _check_audio(audio, sampling_rate)
        count = -(-samples.size // WINDOW_SAMPLES)
        if count == 0:
            return np.zeros(0, dtype=np.float32)
        windows = np.zeros((count, WINDOW_SAMPLES), dtype=np.float32)
        windows.reshape(-1)[: samples.size] = samples
        context = np.zeros((count, CONTEXT_SAMPLES), dtype=np.float32)
        context[1:] = windows[:-1, -CONTEXT_SAMPLES:]
        frames = np.concatenate([context, windows], axis=1)  # [windows, 576]
        return self.run_windows(frames, None)[0]

    def run_windows(self, frames: np.ndarray, state: Any) -> tuple[np.ndarray, Any]:
        """The speech probabilities of ``frames`` (``[windows, 576]``: each window after the 64 samples
        before it) and the model's state after them; ``state`` None starts from silence."""
        frames = np.asarray(frames).astype(self._input_dtype, copy=False)
        if self.layout == "sequence":
            return self._run_sequence(frames, state)
        return self._run_streaming(frames, state)

    def _run_sequence(self, frames: np.ndarray, state: Any) -> tuple[np.ndarray, Any]:
        h, c = state if state is not None else (np.zeros((1, 1, STATE_SIZE), dtype=self._state_dtype),) * 2
        parts = [np.zeros(0, dtype=np.float32)]
        for first in range(0, frames.shape[0], _SEQUENCE_BLOCK):
            block = frames[first : first + _SEQUENCE_BLOCK]
            probs, h, c = run_session(
                self._session, {"input": block, "h": h, "c": c}, ["speech_probs", "hn", "cn"], what="Silero VAD"
            )
            parts.append(np.asarray(probs, dtype=np.float32).reshape(-1))
        return np.concatenate(parts), (h, c)

    def _run_streaming(self, frames: np.ndarray, state: Any) -> tuple[np.ndarray, Any]:
        state = state if state is not None else np.zeros((2, 1, STATE_SIZE), dtype=self._state_dtype)
        feeds: dict[str, Any] = {"sr": np.array(SAMPLE_RATE, dtype=np.int64)} if self._has_rate else {}
        out = np.empty(frames.shape[0], dtype=np.float32)
        for i in range(frames.shape[0]):
            feeds["input"], feeds["state"] = frames[i : i + 1], state
            prob, state = run_session(self._session, feeds, ["output", "stateN"], what="Silero VAD")
            out[i] = float(np.asarray(prob).reshape(-1)[0])
        return out, state

    def speech_regions(
        self, audio: np.ndarray, options: VadOptions | None = None, *, sampling_rate: int = SAMPLE_RATE
    ) -> list[Region]:
        """Where ``audio`` holds speech, as ``(start_sample, end_sample)`` pairs.

        Args:
            audio: mono float samples at 16 kHz (``inference4py.audio.load_audio`` makes them).
            options: the rules (default :class:`VadOptions`: faster-whisper's).
            sampling_rate: the rate of ``audio``; anything but 16000 is refused.

        Returns:
            sorted, disjoint ``[start, end)`` sample ranges; empty when there is no speech.

        Raises:
            AudioError: the audio is not 1-D float samples at 16 kHz, or holds NaN / inf.
            InferenceError: onnxruntime failed.
        """
        probabilities = self.speech_probabilities(audio, sampling_rate=sampling_rate)
        return regions_from_probabilities(probabilities, int(np.asarray(audio).shape[0]), options)

    def speech_map(
        self, audio: np.ndarray, options: VadOptions | None = None, *, sampling_rate: int = SAMPLE_RATE
    ) -> SpeechTimeMap:
        """The regions of :meth:`speech_regions` as a :class:`SpeechTimeMap` that knows their onsets.

        Args:
            audio: mono float samples at 16 kHz.
            options: the rules (default :class:`VadOptions`).
            sampling_rate: the rate of ``audio``; anything but 16000 is refused.

        Returns:
            the map of the padded regions; ``onsets`` holds where the speech of each starts
            before the padding.

        Raises:
            AudioError: the audio is not 1-D float samples at 16 kHz, or holds NaN / inf.
            InferenceError: onnxruntime failed.
        """
        probabilities = self.speech_probabilities(audio, sampling_rate=sampling_rate)
        return time_map_from_probabilities(probabilities, int(np.asarray(audio).shape[0]), options)


def transcription_map(vad: SileroVad, audio: np.ndarray, options: VadOptions | None) -> SpeechTimeMap:
    """The map of the speech a transcription decodes: with onsets unless ``options.word_onsets`` is False."""
    speech = vad.speech_map(audio, options)
    if (options or VadOptions()).word_onsets:
        return speech
    return SpeechTimeMap(speech.regions, sampling_rate=speech.sampling_rate)


def _check_audio(audio: Any, sampling_rate: int) -> np.ndarray:
    if sampling_rate != SAMPLE_RATE:
        raise AudioError(
            f"Silero VAD runs on {SAMPLE_RATE} Hz audio, got sampling_rate={sampling_rate!r}: resample first "
            f"(inference4py.audio.load_audio(..., target_rate={SAMPLE_RATE}) or inference4py.audio.resample)."
        )
    if not isinstance(audio, np.ndarray):
        raise AudioError(f"Pass the audio as a numpy array of float samples, not {type(audio).__name__}.")
    if audio.ndim != 1:
        raise AudioError(
            f"The audio has shape {audio.shape}: voice activity detection takes mono samples [samples]. "
            "Average the channels (audio.mean(axis=0)) or read the file with inference4py.audio.load_audio."
        )
    if not np.issubdtype(audio.dtype, np.floating):
        raise AudioError(
            f"The audio has dtype {audio.dtype}: pass float samples in [-1, 1] "
            "(inference4py.audio.load_audio converts integer PCM)."
        )
    if not np.isfinite(audio).all():
        raise AudioError("The audio contains NaN or infinite values; clean the signal (e.g. np.nan_to_num) first.")
    return np.asarray(audio, dtype=np.float32)
