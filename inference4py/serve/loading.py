"""From a model source to a served task object: what a models folder holds, what kind each model is, and its load.

- :func:`scan_models_dir` lists the models of ``--models-dir``: each ``*.gguf`` file (served under its
  name without ``.gguf``), each whisper.cpp ggml ``*.bin`` file (under its name without ``.bin``) and each
  subfolder that is an ONNX, genai or faster-whisper model folder (under its name).
  A GGUF split into parts, or a subfolder that holds no model, is skipped with a warning.
- :func:`load_model` loads one source as the task class its kind calls for
  (:func:`~inference4py.tasks.kinds.model_kind`).
- :func:`load_speech_model` / :func:`speech_model` build a Whisper model (the audio routes).
- :func:`kind_of` tells the kind of a model given already loaded, so that every served model,
  loaded or not, has a kind the routes can check before loading it.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

from inference4py.engine.pipeline import GENAI_CONFIG, PipelineSpec, load_pipeline
from inference4py.errors import ConfigurationError, Inference4pyError
from inference4py.hub import resolve_checkpoint
from inference4py.speech import WhisperSpeechModel
from inference4py.tasks.embedding import OnnxEmbedder
from inference4py.tasks.kinds import Kind, is_whisper_source, model_kind
from inference4py.tasks.rerank import OnnxReranker
from inference4py.tasks.seq2seq_base import Seq2SeqTask
from inference4py.tasks.text_generation import OnnxTextGenerator
from inference4py.tasks.vision_language import VisionLanguageModel

__all__ = ["kind_of", "load_model", "load_speech_model", "scan_models_dir", "speech_model"]

_log = logging.getLogger("inference4py.serve")

# llama.cpp's gguf-split names its parts NAME-00001-of-00003.gguf; the reader takes whole files only
_SPLIT_PART = re.compile(r"-\d{5}-of-\d{5}\.gguf$", re.IGNORECASE)


def scan_models_dir(folder: str | os.PathLike[str]) -> dict[str, tuple[str, Kind]]:
    """The models in ``folder``: served name -> (source, kind), in name order.

    Only the folder's own entries are looked at (names starting with a dot are left out). A
    ``.gguf`` file is a text generator, converted when it is first loaded; a subfolder is a model
    when :func:`~inference4py.tasks.kinds.model_kind` finds a sentence encoder or a pipeline in it
    (its files and graph headers are read; no session is opened).

    Raises:
        ConfigurationError: ``folder`` is not a folder.
    """
    root = Path(folder).expanduser()
    if not root.is_dir():
        raise ConfigurationError(
            f"--models-dir {folder} is not a folder. Give a folder holding .gguf files or model folders."
        )
    found: dict[str, tuple[str, Kind]] = {}
    for path in sorted(root.iterdir()):
        if path.name.startswith("."):
            continue
        if path.is_dir():
            kind, reason = _folder_kind(path)
            if kind is None:
                _log.warning("models dir: skipping %s: it is not a model folder (%s)", path, reason)
                continue
            name = path.name
        elif path.suffix.lower() == ".gguf":
            if _SPLIT_PART.search(path.name):
                _log.warning(
                    "models dir: skipping %s: a part of a split GGUF; merge the parts into one file with "
                    "llama.cpp's gguf-split --merge",
                    path,
                )
                continue
            kind, name = "gguf", path.name[: -len(".gguf")]
        elif path.suffix.lower() == ".bin" and is_whisper_source(str(path)):
            kind, name = "speech", path.stem  # a whisper.cpp ggml file
        else:
            continue  # a README, a checksum file...
        if name in found:
            _log.warning("models dir: skipping %s: the name %r is already served by %s", path, name, found[name][0])
            continue
        found[name] = (str(path), kind)
    return found


def _folder_kind(folder: Path) -> tuple[Kind | None, str]:
    """The kind of model in ``folder``, or None and why it holds none."""
    try:
        found = model_kind(str(folder))
        if (
            found.kind in ("embedding", "reranker", "vision")
            or found.spec is not None
            or (found.kind == "speech" and found.folder is None)
        ):
            return found.kind, ""
        load_pipeline(folder)  # raises what model_kind kept quiet about
    except Inference4pyError as exc:
        return None, str(exc)
    return None, "no pipeline was found"


def load_model(model: str, *, kv_cache: str = "float", chat_template: str | None = None) -> Any:
    """The task object of one model source (a folder, a hub id, a GGUF file or ``pip:NAME``), by its kind.

    Whisper becomes a ``WhisperSpeechModel`` (the audio routes), another encoder-decoder model a
    ``Seq2SeqTask`` (``/v1/completions``), a sentence encoder an ``OnnxEmbedder`` (``/v1/embeddings``), a
    cross-encoder an ``OnnxReranker`` (``/v1/rerank``), a vision-language folder a ``VisionLanguageModel``
    (chats with images), anything else an ``OnnxTextGenerator`` (a GGUF source is converted once into the cache), whose KV
    cache is ``kv_cache`` (``"float"`` or ``"int8"``: ``TextGeneratorBuilder.kv_cache``) and whose chat
    template is ``chat_template`` (a Jinja template; None: the folder's).

    Raises:
        ConfigurationError: a chat template for a model that is not a text generator.
    """
    found = model_kind(model)
    if chat_template is not None and found.kind not in ("gguf", "decoder", "vision"):
        raise ConfigurationError(
            f"--chat-template was given for {model}, a {found.kind} model: only text generators (decoder-only "
            "models and GGUF files) and vision-language models render chats with a template."
        )
    if found.folder is None and found.kind == "speech":  # a Whisper file, converted by the builder
        return WhisperSpeechModel.builder().model_path(model).build()
    if found.folder is None:  # a GGUF source, converted by the text generator's load
        return _text_generator(model, kv_cache, chat_template)
    if found.kind == "embedding":
        return OnnxEmbedder.builder().model_path(found.folder).build()
    if found.kind == "reranker":
        return OnnxReranker.builder().model_path(found.folder).build()
    if found.kind == "vision":
        vision = VisionLanguageModel.builder().model_path(found.folder)
        return (vision.chat_template(chat_template) if chat_template is not None else vision).build()
    if found.kind == "speech" and found.spec is not None:
        return speech_model(model, found.folder, found.spec)
    if found.kind == "encoder-decoder":
        return Seq2SeqTask.builder().model_path(found.folder).build()
    return _text_generator(str(found.folder), kv_cache, chat_template)


def _text_generator(source: str, kv_cache: str, chat_template: str | None) -> OnnxTextGenerator:
    builder = OnnxTextGenerator.builder().model_path(source).kv_cache(kv_cache)
    if chat_template is not None:
        # the template is the one chats render with; a plain prompt (/v1/completions) still goes as it is
        builder = builder.chat_template(chat_template, render_strings=False)
    return builder.build()


def load_speech_model(model: str) -> WhisperSpeechModel | None:
    """A ``--model`` argument built as a :class:`WhisperSpeechModel` when it is a Whisper model, else None.

    The folder (or the hub repo, downloaded as the text loader would download it) is a Whisper
    model when the library's pipeline detection finds a speech encoder-decoder: an encoder that
    takes log-mel features. Only the folder's files and graph headers are read for that check;
    the model is built only when it passes.

    Raises:
        ModelNotFoundError, HubError: as :func:`inference4py.hub.resolve_checkpoint`.
        ConfigurationError: an onnxruntime-genai Whisper export, which the native engine does not run.
    """
    if is_whisper_source(model):
        return WhisperSpeechModel.builder().model_path(model).build()  # a Whisper file, converted once
    folder = resolve_checkpoint(model)
    try:
        spec = load_pipeline(folder)
    except Inference4pyError:
        return None  # not a layout the pipeline knows: the text loader says what is wrong with it
    return speech_model(model, folder, spec) if spec.preset == "speech-seq2seq" else None


def speech_model(model: str, folder: Path, spec: PipelineSpec) -> WhisperSpeechModel:
    """The :class:`WhisperSpeechModel` of a folder whose pipeline is a speech encoder-decoder.

    Raises:
        ConfigurationError: an onnxruntime-genai Whisper export, which the native engine does not run.
    """
    if spec.source == GENAI_CONFIG:
        raise ConfigurationError(
            f"{model} is an onnxruntime-genai Whisper export; the server runs Whisper on the native engine. "
            "Serve an optimum export (e.g. onnx-community/whisper-base), or run this folder with "
            "inference4py_genai.WhisperSpeechModel in your own app."
        )
    from inference4py.audio import require_audio

    require_audio(f"Serving {model}'s audio routes (uploads are audio files)")  # refused at load, not per request
    return WhisperSpeechModel.builder().model_path(folder).build()


def kind_of(model: Any) -> Kind:
    """The kind of a loaded model: what :func:`load_model` would have built it from."""
    if isinstance(model, OnnxEmbedder):
        return "embedding"
    if isinstance(model, OnnxReranker):
        return "reranker"
    if isinstance(model, WhisperSpeechModel):
        return "speech"
    if isinstance(model, VisionLanguageModel):
        return "vision"
    if isinstance(model, OnnxTextGenerator):
        return "decoder"
    return "encoder-decoder"  # a Seq2SeqTask: completions, one request at a time
