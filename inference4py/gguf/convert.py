"""A GGUF file becomes a model folder: written once, atomically, and cached by the file's hash.

By default the folder holds every weight as the file holds it (``bits=None``: no second rounding);
``bits`` 32 dequantizes exactly to float32 (16 to float16, exact for F16 files), 8 and 4 re-round the
weights and are only ever used when asked for.  The conversion streams tensor by tensor, so its memory stays near one tensor's size.

The folder is an ordinary one (``model.onnx`` with its weights beside it, ``config.json``,
``generation_config.json``, the tokenizer files), so everything after the conversion is the
library's normal load path.  ``inference4py-gguf.json`` records where it came from; it is written
last, inside the temporary folder that is then renamed into place, so a cache entry either is
complete or does not exist.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from inference4py import env
from inference4py.converted import check_disk, file_digest, read_marker, remove_abandoned, write_folder
from inference4py.converted import dump_json as _dump
from inference4py.errors import ConfigurationError
from inference4py.gguf.blocks import LAYOUTS
from inference4py.gguf.hyper import MAX_ROPE_POSITIONS
from inference4py.gguf.reader import GGUFFile, check_header

__all__ = ["BITS", "convert_gguf", "file_digest", "gguf_folder", "width_name"]

_log = logging.getLogger("inference4py.gguf")

BITS = (4, 8, 16, 32)
CONVERTER_VERSION = 7  # bump when the folders it writes change: old cache entries are then rebuilt
_MARKER = "inference4py-gguf.json"
_SPARE_DISK = 64 << 20  # bytes kept free beyond the estimated folder size


def width_name(bits: int | None, *, ggml: bool = False) -> str:
    """The cache suffix of a width: ``file`` (as the file holds it; ``file-ggml`` on the compiled operators,
    the file's own bytes in place) or ``<bits>bit``."""
    if bits is None:
        return "file-ggml" if ggml else "file"
    return f"{bits}bit"


def in_place(bits: int | None) -> bool:
    """Whether a conversion at ``bits`` keeps the file's bytes in place, on the compiled operators
    (when it cannot, the reason is logged once)."""
    from inference4py.engine.kernels import kernels_or

    return bits is None and kernels_or("GGUF files run on onnxruntime's MatMulNBits")


def _check_bits(bits: int | None) -> None:
    if bits is not None and bits not in BITS:
        raise ConfigurationError(
            f"bits={bits!r} is not a conversion width; use one of {', '.join(map(str, BITS))}, or None to keep "
            "the weights as the file holds them."
        )


def estimated_size(gguf: GGUFFile, bits: int | None, *, ggml: bool = False) -> int:
    """About how many bytes the converted folder takes, rounded up (the disk check's estimate)."""
    total = 0.0
    for info in gguf.tensors():
        if ggml:  # matrices stay in the file; vectors become float32 inside the graph
            total += 0 if len(info.shape) > 1 else 4 * float(np.prod(info.shape))
            continue
        total += 4096  # page alignment
        count = float(np.prod(info.shape))
        layout = LAYOUTS.get(info.type)
        if bits is None:
            if layout is None:
                total += 4 * count
                continue
            per_block = 4 + (4 if layout.minimum else 0) + 1  # scale, minimum, a zero point (at most a byte)
            total += count * (layout.bits / 8 + per_block / layout.block)
        elif bits in (32, 16):
            total += count * bits / 8
        else:
            total += count * (bits / 8 + 4 / 32) if len(info.shape) > 1 else 4 * count
    embedding = gguf.info("token_embd.weight") if "token_embd.weight" in gguf else None
    if embedding is not None and bits in (4, 8):  # a float32 table beside the head's quantized copy
        total += 4 * float(np.prod(embedding.shape))
    context = min(int(gguf.get(".context_length", 0) or 0) or MAX_ROPE_POSITIONS, MAX_ROPE_POSITIONS)
    total += 2 * 2 * 4 * context * 256  # rotary caches (cos, sin; a local pair), head dimensions up to 512
    return int(total * 1.05)


def _check_disk(gguf: GGUFFile, folder: Path, bits: int | None, ggml: bool) -> None:
    """A clear error before writing anything when the disk cannot hold the folder."""
    size = estimated_size(gguf, bits, ggml=ggml)
    check_disk(f"{gguf.path.name} ({width_name(bits, ggml=ggml)})", size + _SPARE_DISK, folder)


def convert_gguf(
    path: str | os.PathLike[str], out: str | os.PathLike[str], *, bits: int | None = None, overwrite: bool = False
) -> Path:
    """Convert ``path`` into the model folder ``out`` (created atomically).

    Args:
        path: The ``.gguf`` file.
        out: The folder to create; it must not exist unless ``overwrite``.
        bits: None (the default) keeps every weight as the file holds it; 32 (float32) and 16 are
            float widths (exact at 32; at 16 for F16 files); 8 and 4 re-round every matrix into MatMulNBits
            blocks (lossy).
        overwrite: Replace an existing ``out``.

    Raises:
        ModelLoadError: not a GGUF file, or a damaged one.
        UnsupportedModelError: an architecture, tokenizer or tensor type the converter does not know.
        ConfigurationError: a bad ``bits``, ``out`` exists, or too little free disk for it.
    """
    _check_bits(bits)
    target = Path(out).expanduser()
    if target.exists() and not overwrite:
        raise ConfigurationError(f"{target} already exists: choose another folder, or pass overwrite=True.")
    gguf = GGUFFile(path)
    # the file's sha256 is recorded in the folder's marker: what a model card says it came from
    return _write(gguf, target, bits, digest=file_digest(gguf.path), ggml=in_place(bits))


def gguf_folder(path: str | os.PathLike[str], *, bits: int | None = None) -> Path:
    """The converted folder of ``path``, from the cache (built on first use).

    The cache lives in ``$INFERENCE4PY_CACHE/gguf/<sha256 of the file>-<width>`` (``file-ggml`` for the
    default on the compiled operators, ``file`` without them, ``32bit``...); an entry without its marker
    (an interrupted conversion, an older converter) is rebuilt, never trusted.  A cached entry is found
    from the file's remembered hash alone: the file is neither parsed nor re-read.  An entry whose
    weights are the file in place is rebuilt (the graph only: seconds) when the file is elsewhere now.
    """
    from inference4py.engine.file_weights import WeightsFile, weights_file

    _check_bits(bits)
    source = Path(path).expanduser()
    check_header(source)
    started = time.perf_counter()
    digest = file_digest(source)
    ggml = in_place(bits)
    folder = env.inference4py_cache() / "gguf" / f"{digest[:32]}-{width_name(bits, ggml=ggml)}"
    if read_marker(folder, _MARKER, CONVERTER_VERSION).get("sha256") == digest:
        recorded = weights_file(folder / "model.onnx", check=False)
        if recorded is None or recorded == WeightsFile.of(source):
            return folder
    gguf = GGUFFile(source)
    remove_abandoned(folder)
    if folder.exists():
        _log.warning("rebuilding the conversion of %s: the cached folder %s is incomplete or outdated", source, folder)
        shutil.rmtree(folder, ignore_errors=True)
    _log.warning("converting %s to an ONNX folder (%s), once: %s", source.name, width_name(bits, ggml=ggml), folder)
    _write(gguf, folder, bits, digest=digest, ggml=ggml)
    _log.info("converted %s in %.1f s", source.name, time.perf_counter() - started)
    return folder


def _write(gguf: GGUFFile, target: Path, bits: int | None, *, digest: str | None, ggml: bool) -> Path:
    from inference4py.engine.file_weights import record_weights_file
    from inference4py.gguf.graph import write_decoder
    from inference4py.gguf.tokenizer import generation_defaults, tokenizer_files

    files = tokenizer_files(gguf.metadata)  # before the graph: a bad vocabulary fails fast
    _check_disk(gguf, target.parent, bits, ggml)

    def fill(work: Path) -> None:
        _dump(work / "config.json", write_decoder(gguf, work, bits, ggml=ggml))
        if ggml:
            record_weights_file(work, gguf.path)
        _dump(work / "generation_config.json", generation_defaults(gguf.metadata))
        for name, content in files.items():
            _dump(work / name, content)

    provenance: dict[str, Any] = {
        "source": str(gguf.path),
        "sha256": digest,
        "bits": bits,  # None: every weight as the file holds it
        "architecture": gguf.architecture,
        "name": gguf.get("general.name"),
        "tensor_types": dict(gguf.types()),
        "operators": "inference4py ggml (the file's bytes in place)" if ggml else "onnxruntime",
        "converter": CONVERTER_VERSION,
    }
    return write_folder(target, fill, _MARKER, provenance)
