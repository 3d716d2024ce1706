"""Whisper's presets as data: a row per preset method, what it starts a builder from.

``WhisperSpeechModel.whisperTiny()`` and its siblings keep inference4j's names; each reads its row of
the class's ``PRESETS`` (:data:`WHISPER_PRESETS` here, inference4py_genai's class has a table of its own),
so adding or changing a preset is a line of data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any


@dataclass(frozen=True)
class WhisperPreset:
    """What a preset starts its builder from.

    Attributes:
        model_id: the Hugging Face repo.
        variant: which of the repo's files (the builder's ``variant``: ``"fp16"``, ``"quantized"``, ...);
            None: the repo's full-precision files.
        defaults: generation settings the builder starts from (transformers' names), under the
            user's own setters; empty: the folder's generation_config.json alone.
    """

    model_id: str
    variant: str | None = None
    defaults: Mapping[str, Any] = field(default_factory=dict)


#: The native presets, by method name: onnx-community's optimum exports.
WHISPER_PRESETS: Mapping[str, WhisperPreset] = MappingProxyType(
    {
        "whisperTiny": WhisperPreset("onnx-community/whisper-tiny"),
        "whisperBase": WhisperPreset("onnx-community/whisper-base"),
        "whisperSmall": WhisperPreset("onnx-community/whisper-small"),
        "whisperLargeV3Turbo": WhisperPreset("onnx-community/whisper-large-v3-turbo"),
        "whisperTinyEn": WhisperPreset("onnx-community/whisper-tiny.en"),
        "whisperBaseEn": WhisperPreset("onnx-community/whisper-base.en"),
        "whisperSmallEn": WhisperPreset("onnx-community/whisper-small.en"),
    }
)
