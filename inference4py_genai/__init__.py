"""inference4py_genai: inference4py's facade over onnxruntime-genai's native generation loop.

The same builders, ``generate`` / ``stream`` calls and result types as
:mod:`inference4py`, running on onnxruntime-genai (C++ loop, pre-allocated KV
cache, native multimodal processors)::

    from inference4py_genai import TextGenerator

    with TextGenerator.phi3Mini().max_new_tokens(200).build() as gen:
        print(gen.generate("What is ONNX?").text)

Switching backends is a change of import: ``GenerationResult`` and
``Transcription`` are inference4py's own types.

Needs the optional dependency: ``pip install "inference4py[genai]"``.
Importing this package without onnxruntime-genai installed raises
:class:`ModuleNotFoundError` saying so.  Public names are imported lazily.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

INSTALL_HINT = 'pip install "inference4py[genai]"'

if importlib.util.find_spec("onnxruntime_genai") is None:
    raise ModuleNotFoundError(
        "inference4py_genai needs onnxruntime-genai, which is not installed. "
        f"Install it with: {INSTALL_HINT}  (or use inference4py's own loop: "
        "inference4py.OnnxTextGenerator).",
        name="onnxruntime_genai",
    )

_EXPORTS: dict[str, str] = {
    "TextGenerator": "inference4py_genai.text",
    "GenaiTextGeneratorBuilder": "inference4py_genai.text",
    "WhisperSpeechModel": "inference4py_genai.whisper",
    "WhisperBuilder": "inference4py_genai.whisper",
    "VisionLanguageModel": "inference4py_genai.vision",
    "VisionLanguageBuilder": "inference4py_genai.vision",
    "GenerationResult": "inference4py.generation.result",
    "GenerationChunk": "inference4py.generation.result",
    "Candidate": "inference4py.generation.result",
    "Transcription": "inference4py.speech",
    "Segment": "inference4py.speech",
}

__all__ = sorted(_EXPORTS) + ["INSTALL_HINT"]

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from inference4py.generation.result import (
        Candidate as Candidate,
    )
    from inference4py.generation.result import (
        GenerationChunk as GenerationChunk,
    )
    from inference4py.generation.result import (
        GenerationResult as GenerationResult,
    )
    from inference4py.speech import Segment as Segment
    from inference4py.speech import Transcription as Transcription
    from inference4py_genai.text import (
        GenaiTextGeneratorBuilder as GenaiTextGeneratorBuilder,
    )
    from inference4py_genai.text import (
        TextGenerator as TextGenerator,
    )
    from inference4py_genai.vision import (
        VisionLanguageBuilder as VisionLanguageBuilder,
    )
    from inference4py_genai.vision import (
        VisionLanguageModel as VisionLanguageModel,
    )
    from inference4py_genai.whisper import WhisperBuilder as WhisperBuilder
    from inference4py_genai.whisper import WhisperSpeechModel as WhisperSpeechModel


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'inference4py_genai' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
