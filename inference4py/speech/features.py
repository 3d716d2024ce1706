"""Whisper's input features: the log-mel settings of a model folder and the features of audio samples.

The settings come from preprocessor_config.json, else config.json and the encoder's input shape,
else Whisper's own numbers (:mod:`inference4py.audio`); the features are transformers' log-mel
spectrogram, one 30 s window padded, or all frames of longer audio.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from inference4py import audio as _audio
from inference4py.engine.sessions import TensorInfo
from inference4py.errors import ModelLoadError, UnsupportedModelError


def feature_settings(folder: Path, config: Mapping[str, Any], encoder_features: TensorInfo) -> dict[str, int]:
    """The STFT / mel / window settings of the Whisper model in ``folder``.

    Args:
        folder: the model folder (its preprocessor_config.json is read when present).
        config: the model's config.json.
        encoder_features: the encoder's ``input_features`` input (``[batch, n_mels, frames]``).

    Raises:
        UnsupportedModelError: the encoder takes another number of mel bins than the configuration says.
    """
    pre = read_json_object(folder / "preprocessor_config.json")
    enc = encoder_features
    n_mels = pre.get("feature_size") or config.get("num_mel_bins") or enc.dim(1) or 80
    frames = enc.dim(2) or 2 * int(config.get("max_source_positions") or 1500)
    settings = {
        "n_mels": int(n_mels),
        "n_fft": int(pre.get("n_fft") or _audio.N_FFT),
        "hop_length": int(pre.get("hop_length") or _audio.HOP_LENGTH),
        "sample_rate": int(pre.get("sampling_rate") or _audio.SAMPLE_RATE),
        "window_frames": int(frames),
    }
    settings["n_samples"] = int(pre.get("n_samples") or settings["window_frames"] * settings["hop_length"])
    if enc.dim(1) and enc.dim(1) != settings["n_mels"]:
        raise UnsupportedModelError(
            f"{folder}: the encoder takes {enc.dim(1)} mel bins but the configuration says {settings['n_mels']}."
        )
    return settings


def log_mel(samples: np.ndarray, settings: Mapping[str, int]) -> np.ndarray:
    """The log-mel features of ``samples`` (at ``settings["sample_rate"]``): ``[n_mels, frames]``.

    Audio up to one window is padded (or trimmed) to ``n_samples``; longer audio keeps all its frames.
    """
    f = settings
    return _audio.log_mel_spectrogram(
        samples,
        f["n_mels"],
        pad_or_trim=samples.size <= f["n_samples"],
        n_samples=f["n_samples"],
        n_fft=f["n_fft"],
        hop_length=f["hop_length"],
        sample_rate=f["sample_rate"],
    )


def read_json_object(path: Path) -> dict[str, Any]:
    """A JSON object file of the model folder (preprocessor_config.json), or {} when absent."""
    if not path.is_file():
        return {}
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelLoadError(f"{path} is not valid JSON ({exc}). Re-download the model or fix the file.") from exc
    return data if isinstance(data, dict) else {}
