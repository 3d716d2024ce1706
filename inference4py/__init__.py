"""inference4py: run generative ONNX models from Python.

Task classes with one-line presets and builders over a native generation loop on
ONNX Runtime::

    from inference4py import OnnxTextGenerator

    with OnnxTextGenerator.smolLM2().max_new_tokens(64).build() as gen:
        print(gen.generate("What is Java?").text)

Public names are imported lazily so that ``import inference4py`` (and the CLI's
``--help``) stays fast and does not load onnxruntime until a model is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "OnnxTextGenerator": "inference4py.tasks.text_generation",
    "TextGeneratorBuilder": "inference4py.tasks.text_generation",
    "FlanT5TextGenerator": "inference4py.tasks.flan_t5",
    "BartSummarizer": "inference4py.tasks.bart",
    "MarianTranslator": "inference4py.tasks.marian",
    "CoeditGrammarCorrector": "inference4py.tasks.coedit",
    "T5SqlGenerator": "inference4py.tasks.t5_sql",
    "Language": "inference4py.tasks.languages",
    "TextOutput": "inference4py.tasks.seq2seq_base",
    "WhisperSpeechModel": "inference4py.speech",
    "Transcription": "inference4py.speech",
    "Segment": "inference4py.speech",
    "TranscribeOptions": "inference4py.speech",
    "summarize": "inference4py._quick",
    "translate": "inference4py._quick",
    "correct": "inference4py._quick",
    "GenerationConfig": "inference4py.generation.config",
    "RequestOptions": "inference4py.tasks.options",
    "GenerationResult": "inference4py.generation.result",
    "GenerationChunk": "inference4py.generation.result",
    "Candidate": "inference4py.generation.result",
    "Tokenizer": "inference4py.tokenization",
    "load_tokenizer": "inference4py.tokenization",
    "Inference4pyError": "inference4py.errors",
    "ConfigurationError": "inference4py.errors",
    "InvalidInputError": "inference4py.errors",
    "PromptTooLongError": "inference4py.errors",
    "ModelNotFoundError": "inference4py.errors",
    "ModelFilesMissingError": "inference4py.errors",
    "ModelLoadError": "inference4py.errors",
    "UnsupportedModelError": "inference4py.errors",
    "PipelineSpecError": "inference4py.errors",
    "HubError": "inference4py.errors",
    "InferenceError": "inference4py.errors",
    "AudioError": "inference4py.errors",
    "QueueFullError": "inference4py.errors",
    "RequestTimeoutError": "inference4py.errors",
    "GeneratorClosedError": "inference4py.errors",
    "BatchedTextGenerator": "inference4py.tasks.batched",
    "OnnxEmbedder": "inference4py.tasks.embedding",
    "EmbedderBuilder": "inference4py.tasks.embedding",
    "OnnxReranker": "inference4py.tasks.rerank",
    "RerankerBuilder": "inference4py.tasks.rerank",
    "RankedDocument": "inference4py.tasks.rerank",
    "VisionLanguageModel": "inference4py.tasks.vision_language",
    "VisionLanguageBuilder": "inference4py.tasks.vision_language",
    "PromptLookup": "inference4py.generation.speculative",
    "push": "inference4py.publish",
    "PushResult": "inference4py.hub",
    "resolve_checkpoint": "inference4py.hub",
    "DraftModel": "inference4py.generation.speculative",
}

__all__ = sorted(_EXPORTS) + ["__version__"]

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from inference4py._quick import correct as correct
    from inference4py._quick import summarize as summarize
    from inference4py._quick import translate as translate
    from inference4py.errors import *  # noqa: F403
    from inference4py.generation.config import GenerationConfig as GenerationConfig
    from inference4py.generation.result import (
        Candidate as Candidate,
    )
    from inference4py.generation.result import (
        GenerationChunk as GenerationChunk,
    )
    from inference4py.generation.result import (
        GenerationResult as GenerationResult,
    )
    from inference4py.generation.speculative import DraftModel as DraftModel
    from inference4py.generation.speculative import PromptLookup as PromptLookup
    from inference4py.hub import PushResult as PushResult
    from inference4py.hub import resolve_checkpoint as resolve_checkpoint
    from inference4py.publish import push as push
    from inference4py.speech import (
        Segment as Segment,
    )
    from inference4py.speech import (
        TranscribeOptions as TranscribeOptions,
    )
    from inference4py.speech import (
        Transcription as Transcription,
    )
    from inference4py.speech import (
        WhisperSpeechModel as WhisperSpeechModel,
    )
    from inference4py.tasks.bart import BartSummarizer as BartSummarizer
    from inference4py.tasks.batched import BatchedTextGenerator as BatchedTextGenerator
    from inference4py.tasks.coedit import CoeditGrammarCorrector as CoeditGrammarCorrector
    from inference4py.tasks.embedding import EmbedderBuilder as EmbedderBuilder
    from inference4py.tasks.embedding import OnnxEmbedder as OnnxEmbedder
    from inference4py.tasks.flan_t5 import FlanT5TextGenerator as FlanT5TextGenerator
    from inference4py.tasks.languages import Language as Language
    from inference4py.tasks.marian import MarianTranslator as MarianTranslator
    from inference4py.tasks.options import RequestOptions as RequestOptions
    from inference4py.tasks.rerank import OnnxReranker as OnnxReranker
    from inference4py.tasks.rerank import RankedDocument as RankedDocument
    from inference4py.tasks.rerank import RerankerBuilder as RerankerBuilder
    from inference4py.tasks.seq2seq_base import TextOutput as TextOutput
    from inference4py.tasks.t5_sql import T5SqlGenerator as T5SqlGenerator
    from inference4py.tasks.text_generation import (
        OnnxTextGenerator as OnnxTextGenerator,
    )
    from inference4py.tasks.text_generation import (
        TextGeneratorBuilder as TextGeneratorBuilder,
    )
    from inference4py.tasks.vision_language import VisionLanguageBuilder as VisionLanguageBuilder
    from inference4py.tasks.vision_language import VisionLanguageModel as VisionLanguageModel
    from inference4py.tokenization import Tokenizer as Tokenizer
    from inference4py.tokenization import load_tokenizer as load_tokenizer


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'inference4py' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
