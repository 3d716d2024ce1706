"""A Whisper model file becomes a model folder the native loop runs: written once, atomically, cached by hash.

The folder holds ``encoder_model.onnx`` and ``decoder_model_merged.onnx`` (each with its weights in a
``.data`` file beside it, as the file stores them: see :mod:`inference4py.speech.files.graph`),
``config.json``, ``generation_config.json``, ``preprocessor_config.json``, the tokenizer and
``inference4py-whisper.json`` (where it came from, written last).  Everything after the conversion
is the library's normal load path.  No torch, no transformers, no CTranslate2: numpy and onnx.

Where inference4py's compiled operators are available, the quantized matrices run on them (they stay
quantized in memory); where not, they are widened to float32 at load and one log line says why.  The
choice is part of the cache folder's name (``-file-ggml`` / ``-file``, as for GGUF files), so a folder
made for the operators is never loaded without them, nor the other way round.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

from inference4py import env
from inference4py.converted import check_disk, dump_json, file_digest, read_marker, remove_abandoned, write_folder
from inference4py.engine.pipeline.folder import read_json_object, read_model_config
from inference4py.errors import ConfigurationError, ModelLoadError
from inference4py.speech.files.sources import WhisperFile, find_whisper_file
from inference4py.speech.files.weights import WhisperWeights

__all__ = ["convert_whisper", "whisper_folder"]

_log = logging.getLogger("inference4py.whisper")

CONVERTER_VERSION = 3  # bump when the folders it writes change: old cache entries are then rebuilt
_MARKER = "inference4py-whisper.json"


def _load(source: WhisperFile) -> tuple[WhisperWeights, dict[str, Any], dict[str, Any]]:
    """The weights, the tokenizer.json and what the file carries besides (CTranslate2's config names)."""
    if source.format == "ggml":
        from inference4py.speech.files.ggml import read_ggml

        return read_ggml(source.path)
    from inference4py.speech.files.ct2 import read_ct2, whisper_weights

    weights = whisper_weights(read_ct2(source.path))
    tokenizer = source.folder / "tokenizer.json"
    if not tokenizer.is_file():
        raise ModelLoadError(
            f"{source.folder} has no tokenizer.json. faster-whisper folders carry one (ct2-transformers-converter "
            "--copy_files tokenizer.json); copy the original model's tokenizer.json into the folder."
        )
    fix = "Copy the model folder again."
    return weights, read_json_object(tokenizer, ModelLoadError, fix), read_model_config(source.folder)


def _operators() -> bool:
    """Whether conversions put the quantized matrices on inference4py's compiled operators (when they cannot,
    the reason is logged once)."""
    from inference4py.engine.kernels import kernels_or

    return kernels_or(
        "Whisper files' quantized matrices (whisper.cpp's blocks, CTranslate2's int8) are widened to float32 at load"
    )


def _fill(
    weights: WhisperWeights, tokenizer: dict[str, Any], carried: dict[str, Any], work: Path, *, ggml: bool
) -> None:
    from inference4py.speech.files.graph import write_graphs
    from inference4py.speech.files.settings import generation_config, model_config, preprocessor_config

    tokens = {str(t["content"]): int(t["id"]) for t in tokenizer.get("added_tokens", ())}
    tokens.update({str(k): int(v) for k, v in (tokenizer.get("model", {}).get("vocab") or {}).items()})
    generation = generation_config(weights.dims, tokens, carried, where=weights.source)
    dump_json(work / "tokenizer.json", tokenizer)
    dump_json(work / "generation_config.json", generation)
    dump_json(work / "config.json", model_config(weights.dims, generation, tied=weights.tied))
    dump_json(work / "preprocessor_config.json", preprocessor_config(weights.dims))
    write_graphs(weights, work, operators=ggml)


def _provenance(source: WhisperFile, weights: WhisperWeights, digest: str | None, ggml: bool) -> dict[str, Any]:
    from inference4py.speech.files.quantized import any_quantized

    ggml = ggml and any_quantized(weights)  # what the graphs need: a float16 file's need no operator library
    return {
        "source": str(source.path),
        "format": source.format,
        "sha256": digest,
        "storage": weights.storage(),
        "dims": weights.dims.config(),
        "operators": "inference4py ggml (quantized matrices as blocks)" if ggml else "onnxruntime",
        "converter": CONVERTER_VERSION,
    }


def _digest(source: WhisperFile) -> str:
    """The model file's sha256, with the folder's small files for a CTranslate2 model (they change the result)."""
    h = hashlib.sha256(file_digest(source.path).encode())
    if source.format == "ct2":
        for name in ("config.json", "tokenizer.json"):
            path = source.folder / name
            h.update(name.encode() + (path.read_bytes() if path.is_file() else b"-"))
    return h.hexdigest()


def _write(source: WhisperFile, target: Path, digest: str | None, *, ggml: bool) -> Path:
    weights, tokenizer, carried = _load(source)  # a bad file fails before anything is written
    check_disk(str(source.path), source.path.stat().st_size + (64 << 20), target.parent)
    return write_folder(
        target,
        lambda work: _fill(weights, tokenizer, carried, work, ggml=ggml),
        _MARKER,
        _provenance(source, weights, digest, ggml),
    )


def convert_whisper(source: str | os.PathLike[str], out: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
    """Convert a Whisper model file into the model folder ``out`` (created atomically).

    Args:
        source: a faster-whisper (CTranslate2) folder or its model.bin, a whisper.cpp ggml file, or
            ``pip:<package>``.
        out: the folder to create; it must not exist unless ``overwrite``.
        overwrite: replace an existing ``out``.

    Raises:
        ModelNotFoundError: nothing Whisper-like at ``source``.
        ModelLoadError: a truncated or damaged file.
        UnsupportedModelError: a file of another model, or a layout this converter does not know.
        ConfigurationError: ``out`` exists, or too little free disk.
    """
    target = Path(out).expanduser()
    if target.exists() and not overwrite:
        raise ConfigurationError(f"{target} already exists: choose another folder, or pass overwrite=True.")
    found = find_whisper_file(source)
    # the digest is recorded: what a model card says it came from
    return _write(found, target, _digest(found), ggml=_operators())


def whisper_folder(source: str | os.PathLike[str]) -> Path:
    """The converted folder of a Whisper model file, from the cache (built on first use).

    The cache lives in ``$INFERENCE4PY_CACHE/whisper/<sha256>-file-ggml`` (the quantized matrices on the
    compiled operators) or ``-file`` (without them); an entry without its marker (an interrupted conversion,
    an older converter) is rebuilt.  See :func:`convert_whisper` for the errors.
    """
    from inference4py.gguf.convert import width_name

    found = find_whisper_file(source)
    started = time.perf_counter()
    digest = _digest(found)
    ggml = _operators()
    folder = env.inference4py_cache() / "whisper" / f"{digest[:32]}-{width_name(None, ggml=ggml)}"
    if read_marker(folder, _MARKER, CONVERTER_VERSION).get("sha256") == digest:
        return folder
    remove_abandoned(folder)
    if folder.exists():
        _log.warning(
            "rebuilding the conversion of %s: the cached folder %s is incomplete or outdated", found.path, folder
        )
        shutil.rmtree(folder, ignore_errors=True)
    _log.warning("converting %s to an ONNX folder, once: %s", found.path, folder)
    _write(found, folder, digest, ggml=ggml)
    _log.info("converted %s in %.1f s", found.path, time.perf_counter() - started)
    return folder
