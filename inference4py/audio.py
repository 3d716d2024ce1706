"""Audio in, Whisper features out: any audio -> 16 kHz mono float32 -> log-mel spectrogram.

:func:`load_audio` reads a file (wav, flac, ogg, mp3: whatever libsndfile reads via
soundfile; other containers through librosa's audioread when librosa is installed) or takes a
numpy array with its sample rate, mixes it down to mono and resamples it (soxr, high quality:
what ``librosa.resample`` does by default).

:func:`log_mel_spectrogram` computes Whisper's input features the way
transformers' ``WhisperFeatureExtractor`` does on its numpy path: the signal is
padded with zeros (or cut) to 30 s, framed with a centred, reflect-padded STFT
(n_fft 400, hop 160, periodic Hann window), power spectrum, Slaney mel filters
(:func:`mel_filters`, numpy), ``log10`` of ``max(mel, 1e-10)``, the last frame
dropped, values clamped to 8 below the maximum, then ``(x + 4) / 4``.  Signals
longer than 30 s are processed whole (``pad_or_trim=False``), as transformers does
for long-form transcription (``truncation=False``).

Features need numpy alone. Reading files needs soundfile and resampling needs soxr: the
``audio`` extra (``pip install "inference4py[audio]"``), imported on first use, with a
:class:`~inference4py.errors.ConfigurationError` naming the extra when it is missing.
"""

from __future__ import annotations

import functools
import importlib
import os
import warnings
from pathlib import Path
from typing import Any, Union

import numpy as np

from inference4py.errors import AudioError, ConfigurationError

__all__ = [
    "AUDIO_INSTALL",
    "SAMPLE_RATE",
    "N_FFT",
    "HOP_LENGTH",
    "CHUNK_SECONDS",
    "N_SAMPLES",
    "N_FRAMES",
    "AudioInput",
    "load_audio",
    "resample",
    "mel_filters",
    "log_mel_spectrogram",
    "require_audio",
]

AUDIO_INSTALL = 'pip install "inference4py[audio]"'


SAMPLE_RATE = 16000  # Whisper's sampling rate
N_FFT = 400  # 25 ms windows
HOP_LENGTH = 160  # 10 ms between frames
CHUNK_SECONDS = 30  # one encoder window
N_SAMPLES = CHUNK_SECONDS * SAMPLE_RATE  # 480000
N_FRAMES = N_SAMPLES // HOP_LENGTH  # 3000 mel frames per window

AudioInput = Union[str, "os.PathLike[str]", tuple[np.ndarray, int], np.ndarray]
"""A file path, a ``(samples, sample_rate)`` pair, or a numpy array (then pass ``sample_rate=``)."""

_FRAMES_PER_BLOCK = 2048  # STFT frames computed at once (bounds memory on long audio)


# --------------------------------------------------------------------------- loading


def load_audio(source: AudioInput, *, sample_rate: int | None = None, target_rate: int = SAMPLE_RATE) -> np.ndarray:
    """Read or take audio and return it as mono float32 samples at ``target_rate``.

    Args:
        source: a path to an audio file (any format soundfile / librosa can read: wav, flac,
            ogg, mp3, ...), a ``(samples, sample_rate)`` pair, or a numpy array of samples
            together with ``sample_rate``.  Arrays may be 1-D (mono) or 2-D (the shorter axis
            is the channel axis); integer arrays are scaled to [-1, 1).
        sample_rate: the rate of a bare numpy array (ignored for files and pairs).
        target_rate: the rate to resample to (16 kHz for Whisper).

    Returns:
        float32 ``[n_samples]``.

    Raises:
        AudioError: the file does not exist, cannot be decoded or is not audio; the audio is
            empty or holds NaN / infinite values; the sample rate is missing or invalid.

    Example:
        >>> load_audio((np.zeros(8000, np.float32), 8000)).shape
        (16000,)
    """
    if isinstance(source, (str, os.PathLike)):
        channels, rate = _read_file(Path(source))  # [channels, frames]
        what = f"{os.fspath(source)}"
        samples = channels[0] if channels.shape[0] == 1 else channels.mean(axis=0, dtype=np.float32)
    else:
        if isinstance(source, tuple):
            if len(source) != 2:
                raise AudioError(
                    "Pass audio as a (samples, sample_rate) pair, a numpy array with sample_rate=, or a path."
                )
            array, rate = source
        elif isinstance(source, np.ndarray):
            if sample_rate is None:
                raise AudioError(
                    "A numpy array of samples needs its sample rate: pass (samples, sample_rate) or sample_rate=... "
                    f"(Whisper uses {SAMPLE_RATE} Hz; other rates are resampled)."
                )
            array, rate = source, sample_rate
        else:
            raise AudioError(
                f"Unsupported audio input of type {type(source).__name__}: pass a file path, a (samples, sample_rate) "
                "pair or a numpy array with sample_rate=."
            )
        samples = _to_float(np.asarray(array))
        what = "The audio array"
        if samples.size and samples.ndim == 2:
            samples = _to_mono(samples, what)
        elif samples.ndim != 1 and samples.size:
            raise AudioError(f"{what} has shape {samples.shape}: expected [samples] or [channels, samples].")
    rate = _check_rate(rate)
    if samples.size == 0:
        raise AudioError(f"{what} contains no samples (it is empty). Pass audio with at least one sample.")
    if not np.isfinite(samples).all():
        raise AudioError(f"{what} contains NaN or infinite values; clean the signal (e.g. np.nan_to_num) first.")
    if rate != target_rate:
        samples = resample(samples, rate, target_rate)
    return np.ascontiguousarray(samples, dtype=np.float32)


def require_audio(what: str = "Reading audio files") -> None:
    """Raise a :class:`ConfigurationError` naming the ``audio`` extra when soundfile or soxr is missing."""
    for name in ("soundfile", "soxr"):
        audio_module(name, what)


def audio_module(name: str, what: str) -> Any:
    """Module ``name`` of the ``audio`` extra, or a :class:`ConfigurationError` naming the extra (``what`` needs it)."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:  # OSError too: soundfile without its libsndfile
        raise ConfigurationError(f"{what} needs the {name} package: {AUDIO_INSTALL}.") from exc
    except OSError as exc:
        raise ConfigurationError(f"{what} needs {name}, which cannot load here ({exc}): {AUDIO_INSTALL}.") from exc


def resample(samples: np.ndarray, orig_rate: int, target_rate: int = SAMPLE_RATE) -> np.ndarray:
    """Mono float32 samples at ``target_rate``: soxr's high-quality resampler, the length ``ceil(n * ratio)``.

    The same samples as ``librosa.resample`` (its default ``soxr_hq``, ``fix=True``): the output is
    cut, or padded with zeros, to the length the ratio gives.
    """
    x = np.asarray(samples, dtype=np.float32)
    if int(orig_rate) == int(target_rate):
        return x
    soxr = audio_module("soxr", f"Resampling audio from {orig_rate} Hz to {target_rate} Hz")
    out = np.asarray(soxr.resample(x, int(orig_rate), int(target_rate), quality="soxr_hq"), dtype=np.float32)
    n = int(np.ceil(x.shape[-1] * float(target_rate) / int(orig_rate)))
    if out.shape[-1] >= n:
        return np.ascontiguousarray(out[..., :n])
    return np.concatenate([out, np.zeros(n - out.shape[-1], dtype=np.float32)])


def _check_rate(rate: Any) -> int:
    if isinstance(rate, (bool, np.bool_)) or not isinstance(rate, (int, np.integer)) or rate <= 0:
        raise AudioError(f"sample_rate must be a positive integer number of samples per second, got {rate!r}.")
    return int(rate)


def _read_file(path: Path) -> tuple[np.ndarray, int]:
    if not path.exists():
        raise AudioError(f"Audio file {path} does not exist. Check the path.")
    if path.is_dir():
        raise AudioError(f"{path} is a folder, not an audio file.")
    if path.stat().st_size == 0:
        raise AudioError(f"Audio file {path} is empty (0 bytes).")
    soundfile = audio_module("soundfile", "Reading audio files")
    try:
        data, rate = soundfile.read(str(path), dtype="float32", always_2d=True)  # [frames, channels]
        return data.T, int(rate)
    except Exception as first:  # soundfile raises LibsndfileError, RuntimeError, TypeError...
        try:
            import librosa  # optional: audioread (ffmpeg) for the containers libsndfile cannot read

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "PySoundFile failed. Trying audioread instead."
                data, rate = librosa.load(str(path), sr=None, mono=False)
            return np.asarray(data, dtype=np.float32), int(rate)
        except Exception as second:
            reason = str(first).strip().rstrip(".") or type(first).__name__
            raise AudioError(
                f"Cannot read {path} as audio: {reason}. "
                "Supported are the formats of libsndfile (wav, flac, ogg/vorbis/opus, mp3, aiff, ...); for other "
                "containers (m4a, mp4, webm) install librosa and ffmpeg so that audioread can decode them, or "
                "convert the file first."
            ) from second


def _to_float(array: np.ndarray) -> np.ndarray:
    if array.dtype.kind == "f":
        return array.astype(np.float32, copy=False)
    if array.dtype.kind == "i":
        return (array.astype(np.float64) / float(2 ** (8 * array.dtype.itemsize - 1))).astype(np.float32)
    if array.dtype.kind == "u":
        half = float(2 ** (8 * array.dtype.itemsize - 1))
        return ((array.astype(np.float64) - half) / half).astype(np.float32)
    raise AudioError(f"Audio samples must be numbers (float or integer PCM), got an array of dtype {array.dtype}.")


def _to_mono(samples: np.ndarray, what: str) -> np.ndarray:
    # [channels, samples] or [samples, channels]: the shorter axis holds the channels
    channels_first = samples.shape[0] <= samples.shape[1]
    return samples.mean(axis=0 if channels_first else 1, dtype=np.float32)


# --------------------------------------------------------------------------- features


_MEL_LINEAR_HZ = 200.0 / 3  # Hz per mel below 1 kHz (Slaney)
_MEL_BREAK_HZ = 1000.0
_MEL_BREAK = _MEL_BREAK_HZ / _MEL_LINEAR_HZ  # 15 mels
_MEL_LOG_STEP = np.log(6.4) / 27.0  # natural-log Hz per mel above 1 kHz


def _hz_to_mel(hz: float) -> float:
    if hz < _MEL_BREAK_HZ:
        return hz / _MEL_LINEAR_HZ
    return _MEL_BREAK + float(np.log(hz / _MEL_BREAK_HZ)) / _MEL_LOG_STEP


def _mel_to_hz(mels: np.ndarray) -> np.ndarray:
    mels = np.asarray(mels, dtype=np.float64)
    linear = mels * _MEL_LINEAR_HZ
    logarithmic = _MEL_BREAK_HZ * np.exp(_MEL_LOG_STEP * (mels - _MEL_BREAK))
    return np.where(mels >= _MEL_BREAK, logarithmic, linear)


@functools.lru_cache(maxsize=8)
def mel_filters(n_mels: int = 80, *, sample_rate: int = SAMPLE_RATE, n_fft: int = N_FFT) -> np.ndarray:
    """Slaney-style mel filter bank ``[n_mels, n_fft // 2 + 1]`` (float64), as Whisper uses.

    ``librosa.filters.mel(sr, n_fft, n_mels, fmin=0, fmax=sr/2, htk=False, norm="slaney")``,
    identical to transformers' ``mel_filter_bank(..., norm="slaney", mel_scale="slaney")``: triangles
    between ``n_mels + 2`` points spaced evenly on Slaney's mel scale (linear to 1 kHz, logarithmic
    above), each scaled to unit area (``2 / (upper - lower)`` Hz).
    """
    points = _mel_to_hz(np.linspace(_hz_to_mel(0.0), _hz_to_mel(sample_rate / 2), n_mels + 2))
    bins = np.linspace(0.0, sample_rate / 2, n_fft // 2 + 1)
    widths = np.diff(points)
    distance = points[:, None] - bins[None, :]  # [n_mels + 2, bins]
    rising = -distance[:-2] / widths[:-1, None]
    falling = distance[2:] / widths[1:, None]
    filters = np.maximum(0.0, np.minimum(rising, falling))
    filters *= (2.0 / (points[2:] - points[:-2]))[:, None]
    filters.setflags(write=False)
    return filters


def log_mel_spectrogram(
    samples: np.ndarray,
    n_mels: int = 80,
    *,
    pad_or_trim: bool = True,
    n_samples: int = N_SAMPLES,
    n_fft: int = N_FFT,
    hop_length: int = HOP_LENGTH,
    sample_rate: int = SAMPLE_RATE,
) -> np.ndarray:
    """Whisper's log-mel features of 16 kHz mono samples.

    Args:
        samples: float32 ``[n]`` at ``sample_rate`` (see :func:`load_audio`).
        n_mels: mel bins (80, or 128 for large-v3).
        pad_or_trim: pad with zeros / cut to ``n_samples`` (30 s -> 3000 frames). False keeps
            the whole signal: ``n // hop_length`` frames (long-form transcription).

    Returns:
        float32 ``[n_mels, frames]``, equal to ``WhisperFeatureExtractor`` (numpy path) within ~1e-6.
    """
    x = np.asarray(samples, dtype=np.float32).reshape(-1)
    if pad_or_trim:
        x = x[:n_samples] if x.size >= n_samples else np.pad(x, (0, n_samples - x.size))
    if x.size == 0:
        raise AudioError("Cannot compute features of empty audio.")
    half = n_fft // 2
    padded = np.pad(x, (half, half), mode="reflect" if x.size > 1 else "constant")  # centred frames
    frames = np.lib.stride_tricks.sliding_window_view(padded, n_fft)[::hop_length]  # [n_frames, n_fft] (a view)
    window = np.hanning(n_fft + 1)[:-1]  # periodic Hann, float64
    filters = mel_filters(n_mels, sample_rate=sample_rate, n_fft=n_fft)  # [n_mels, n_fft // 2 + 1]
    n_out = frames.shape[0] - 1  # transformers drops the last STFT frame
    log_spec = np.empty((n_mels, n_out), dtype=np.float32)
    for start in range(0, n_out, _FRAMES_PER_BLOCK):
        stop = min(start + _FRAMES_PER_BLOCK, n_out)
        # float64 FFT stored as complex64, magnitude in float64: transformers' spectrogram() numerics
        spec = np.fft.rfft(frames[start:stop] * window, axis=-1).astype(np.complex64)  # [block, bins]
        power = np.abs(spec, dtype=np.float64) ** 2
        mel = np.maximum(1e-10, filters @ power.T)  # [n_mels, block]
        log_spec[:, start:stop] = np.log10(mel)
    log_spec = np.maximum(log_spec, log_spec.max() - 8.0)
    return (log_spec + 4.0) / 4.0
