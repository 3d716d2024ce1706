"""One exception hierarchy for inference4py.

Every error the library raises on purpose derives from :class:`Inference4pyError`
and also from the standard-library type callers already expect, so
``except ValueError`` or ``except FileNotFoundError`` keep working.  Messages say
what is wrong *and* how to fix it.  Errors from onnxruntime are wrapped at the
boundary (see :mod:`inference4py.engine.sessions`) and re-raised ``from`` the
original so the cause stays visible in the traceback.
"""

from __future__ import annotations

__all__ = [
    "Inference4pyError",
    "ConfigurationError",
    "InvalidInputError",
    "PromptTooLongError",
    "ModelNotFoundError",
    "ModelFilesMissingError",
    "ModelLoadError",
    "UnsupportedModelError",
    "PipelineSpecError",
    "HubError",
    "InferenceError",
    "AudioError",
    "QueueFullError",
    "MemoryBudgetError",
    "RequestTimeoutError",
    "GeneratorClosedError",
]


class Inference4pyError(Exception):
    """Base class of every error raised by inference4py."""


class ConfigurationError(Inference4pyError, ValueError):
    """An option has an invalid value (e.g. ``temperature=-1``)."""


class InvalidInputError(Inference4pyError, ValueError):
    """The input of a call is unusable (empty prompt, bad message list, ...)."""


class PromptTooLongError(InvalidInputError):
    """The prompt (plus the tokens to generate) does not fit in the model's context."""


class ModelNotFoundError(Inference4pyError, FileNotFoundError):
    """A model folder or hub repository does not exist."""


class ModelFilesMissingError(ModelNotFoundError):
    """The model folder exists but lacks files the model needs."""

    def __init__(self, message: str, missing: list[str] | None = None) -> None:
        super().__init__(message)
        self.missing = list(missing or [])


class ModelLoadError(Inference4pyError, RuntimeError):
    """A model file exists but cannot be loaded (corrupt ONNX, bad JSON, ...)."""


class UnsupportedModelError(Inference4pyError, ValueError):
    """The model folder is valid but not a model this class can run."""


class PipelineSpecError(Inference4pyError, ValueError):
    """A pipeline description is invalid."""


class HubError(Inference4pyError, OSError):
    """Downloading from the Hugging Face Hub failed (offline, gated, unknown repo)."""


class InferenceError(Inference4pyError, RuntimeError):
    """onnxruntime failed while running a model."""


class AudioError(Inference4pyError, ValueError):
    """Audio input cannot be read or is empty."""


class QueueFullError(Inference4pyError, RuntimeError):
    """More requests wait for a model than its queue holds; retry shortly (a server answers 503 with Retry-After)."""


class MemoryBudgetError(Inference4pyError, MemoryError):
    """What was asked needs more memory than the server's budget can ever give it (a server answers 503)."""


class RequestTimeoutError(Inference4pyError, TimeoutError):
    """A request ran past its time limit and was stopped."""


class GeneratorClosedError(Inference4pyError, RuntimeError):
    """A generator was used after ``close()``."""
