"""One exception hierarchy for inference4py.

Every error the library raises on purpose derives from :class:`Inference4pyError`
and also from the standard-library type callers already expect, so
``except ValueError`` or ``except FileNotFoundError`` keep working.  Messages say
what is wrong *and* how to fix it.  Errors from onnxruntime are wrapped at the
boundary (see :mod:`inference4py.engine.sessions`) and re-raised ``from`` the
original so the cause stays visible in the traceback.

Where the fix is a setting, the message names it as the caller meets it: an error raised with
``fix="chat_template"`` ends with :data:`FIXES`' Python advice in ``str(exc)``, and with the CLI
flag or the server option in :meth:`Inference4pyError.message_for` (what the CLI and the server
print), so a user of ``inference4py serve`` is never told to call a builder method.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "FIXES",
    "Edge",
    "Fix",
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


Edge = Literal["python", "cli", "server"]


@dataclass(frozen=True)
class Fix:
    """One fix, said the way each edge sets it: a builder method, a CLI flag, a server option or API field."""

    python: str
    cli: str
    server: str


#: The fixes a message may end with (``fix=`` of an error), by name.
FIXES: dict[str, Fix] = {
    "chat_template": Fix(
        python="Pass one with .chat_template('{% for m in messages %}...') on the builder, or give a plain string "
        "prompt.",
        cli="Give one with --chat-template-file FILE (a Jinja template), or send the prompt as it is (without "
        "--chat-template and --system).",
        server="Start the server with --chat-template NAME=FILE (a Jinja template), or send the text as the prompt "
        "of /v1/completions.",
    ),
    "tool_template": Fix(
        python="Pass a template that renders tools with .chat_template('...') on the builder, or call without tools.",
        cli="Give a template that renders tools with --chat-template-file FILE, or call without tools.",
        server="Start the server with --chat-template NAME=FILE naming a template that renders tools "
        '(docs/serving.md, tools), send no tools, or send tool_choice "none" to answer without them.',
    ),
    "local_folder": Fix(
        python="Or pass a local folder with model_path(...).",
        cli="Or give a local model folder to --model.",
        server="Or give a local model folder to --model.",
    ),
    "timestamps": Fix(
        python="Transcribe with timestamps=False (builder: .timestamps(False)), or use a tokenizer.json that has "
        "Whisper's timestamp tokens.",
        cli="Transcribe without --timestamps and --word-timestamps, with --format text, or use a tokenizer.json "
        "that has Whisper's timestamp tokens.",
        server='Ask for response_format "json" or "text" without timestamp_granularities, or serve a model '
        "whose tokenizer.json has Whisper's timestamp tokens.",
    ),
    "pooling": Fix(
        python="Set a supported mode in that file, or choose one with .pooling(...) on the builder.",
        cli="Set a supported mode in that file.",
        server="Set a supported mode in that file.",
    ),
    "max_seq_length": Fix(
        python="Set one with .max_seq_length(n) on the builder.",
        cli="Add max_seq_length to the folder's sentence_bert_config.json.",
        server="Add max_seq_length to the folder's sentence_bert_config.json.",
    ),
}


class Inference4pyError(Exception):
    """Base class of every error raised by inference4py.

    Args:
        fix: A key of :data:`FIXES`: the message ends with that fix, said for the edge that shows it.
    """

    def __init__(self, *args: object, fix: str | None = None) -> None:
        super().__init__(*args)
        if fix is not None and fix not in FIXES:
            raise KeyError(f"unknown fix {fix!r}: add it to inference4py.errors.FIXES")
        self.fix = fix

    def message_for(self, edge: Edge) -> str:
        """The message with its fix as ``edge`` (``"python"``, ``"cli"`` or ``"server"``) sets it."""
        message = super().__str__()
        fix = getattr(self, "fix", None)  # an instance made without __init__ (unpickled) has none
        return f"{message} {getattr(FIXES[fix], edge)}" if fix is not None else message

    def __str__(self) -> str:
        return self.message_for("python")


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
