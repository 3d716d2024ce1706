"""What kind of model a source is: the one dispatcher the server and the batch runner share.

``inference4py serve`` and ``inference4py batch`` reach it through them; the other commands name
their task (``generate``, ``transcribe``, ...) and load that task's class directly.

:func:`model_kind` looks at a ``--model`` argument (a folder, a Hub id, a GGUF file or
``pip:NAME``) without loading a session: a GGUF source is a text generator and a Whisper file
(faster-whisper's CTranslate2 folder, whisper.cpp's ggml file) a speech model, both converted on load; a
folder is a sentence encoder, a cross-encoder (reranker) or a vision-language model when its files
say so (before its pipeline: an encoder-only graph is no decoder), a speech model or another encoder-decoder when its pipeline's preset says so, and a
decoder-only text generator otherwise.  ``model_type`` is config.json's, for the callers that pick a
task class by family (T5, BART, Marian).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from inference4py.errors import Inference4pyError

if TYPE_CHECKING:
    from inference4py.engine.pipeline import PipelineSpec

__all__ = ["CHAT_KINDS", "TEXT_KINDS", "Kind", "ModelKind", "capabilities", "is_whisper_source", "model_kind"]

Kind = Literal["gguf", "embedding", "reranker", "speech", "encoder-decoder", "decoder", "vision"]
CHAT_KINDS: tuple[Kind, ...] = ("decoder", "gguf", "vision")  # the kinds of model that answer chats
# the kinds that complete a raw prompt (a vision-language model answers chats only: its images are message parts)
TEXT_KINDS: tuple[Kind, ...] = ("decoder", "gguf", "encoder-decoder")


def capabilities(kind: Kind) -> list[str]:
    """What a model of ``kind`` answers: ``"chat"``, ``"vision"`` (images in its chats), ``"completion"``,
    ``"embedding"``, ``"rerank"``, ``"transcription"``."""
    found = ["chat"] if kind in CHAT_KINDS else []
    found += ["vision"] if kind == "vision" else []
    found += ["completion"] if kind in TEXT_KINDS else []
    found += ["embedding"] if kind == "embedding" else []
    found += ["rerank"] if kind == "reranker" else []
    return found + (["transcription"] if kind == "speech" else [])


@dataclass(frozen=True)
class ModelKind:
    """A model source and what it holds.

    Attributes:
        kind: ``"gguf"``, ``"embedding"``, ``"reranker"``, ``"speech"``, ``"encoder-decoder"``, ``"decoder"``
            or ``"vision"`` (a vision-language model: images and text in, text out).
        source: The argument as given.
        folder: The local folder (None for a GGUF source: it becomes one when converted).
        spec: The folder's pipeline, when it could be read (None: the task's load says what is wrong).
        model_type: config.json's ``model_type`` ("" when absent).
    """

    kind: Kind
    source: str
    folder: Path | None = None
    spec: PipelineSpec | None = None
    model_type: str = ""


def is_whisper_source(source: str) -> bool:
    """A faster-whisper folder, its model.bin, a whisper.cpp file, or a ``pip:`` package holding one."""
    from inference4py.errors import ModelNotFoundError
    from inference4py.pip_packages import PIP_PREFIX
    from inference4py.speech.files import find_whisper_file, is_whisper_file

    if not source.startswith(PIP_PREFIX):
        return is_whisper_file(source)
    try:
        find_whisper_file(source)
    except ModelNotFoundError:
        return False  # a GGUF package, or none: the GGUF source says which
    return True


def model_kind(source: str) -> ModelKind:
    """The kind of model ``source`` holds (a local folder or a Hub id is resolved; nothing is loaded).

    Raises:
        ModelNotFoundError, HubError: the source cannot be found or downloaded.
    """
    from inference4py.engine.pipeline import load_pipeline, read_model_config
    from inference4py.gguf.sources import is_gguf_source
    from inference4py.hub import resolve_checkpoint
    from inference4py.tasks.embedding import is_embedding_model
    from inference4py.tasks.rerank import is_reranker_model
    from inference4py.vision.runtime import is_vision_folder

    if is_whisper_source(source):
        return ModelKind("speech", source)  # converted on load (inference4py.speech.files)
    if is_gguf_source(source):
        return ModelKind("gguf", source)
    local = Path(source).expanduser()
    folder = local if local.is_dir() else resolve_checkpoint(source)
    model_type = str(read_model_config(folder).get("model_type", ""))
    if is_embedding_model(folder):
        return ModelKind("embedding", source, folder, None, model_type)
    if is_reranker_model(folder):  # a one-label sequence classifier: no decoder either
        return ModelKind("reranker", source, folder, None, model_type)
    if is_vision_folder(folder):  # its decoder takes inputs_embeds: a text generator's load cannot run it
        return ModelKind("vision", source, folder, None, model_type)
    try:
        spec = load_pipeline(folder)
    except Inference4pyError:
        spec = None
    kind: Kind = "decoder"
    if spec is not None and spec.preset == "speech-seq2seq":
        kind = "speech"
    elif spec is not None and spec.preset == "encoder-decoder":
        kind = "encoder-decoder"
    return ModelKind(kind, source, folder, spec, model_type)
