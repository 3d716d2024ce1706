"""A GGUF file becomes a model folder: written once, atomically, and cached by the file's hash.

The folder is an ordinary one (``model.onnx`` with its weights beside it, ``config.json``,
``generation_config.json``, the tokenizer files), so everything after the conversion is the
library's normal load path.  ``inference4py-gguf.json`` records where it came from; it is written
last, inside the temporary folder that is then renamed into place, so a cache entry either is
complete or does not exist.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from inference4py import _env
from inference4py.errors import ConfigurationError
from inference4py.gguf.reader import GGUFFile, check_header

__all__ = ["BITS", "convert_gguf", "default_bits", "file_digest", "gguf_folder"]

_log = logging.getLogger("inference4py.gguf")

BITS = (4, 8, 16, 32)
CONVERTER_VERSION = 2  # bump when the folders it writes change: old cache entries are then rebuilt
_MARKER = "inference4py-gguf.json"
_FLOAT_TYPES = frozenset({"F32", "F16", "BF16"})


def default_bits(gguf: GGUFFile) -> int:
    """32 for a float file (exact), else 4: a quantized file stays small and fast (MatMulNBits)."""
    return 32 if set(gguf.types()) <= _FLOAT_TYPES else 4


def _check_bits(bits: int | None) -> None:
    if bits is not None and bits not in BITS:
        raise ConfigurationError(f"bits={bits!r} is not a conversion width; use one of {', '.join(map(str, BITS))}.")


def file_digest(path: str | os.PathLike[str]) -> str:
    """The sha256 of a file (read in 1 MB blocks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def convert_gguf(
    path: str | os.PathLike[str], out: str | os.PathLike[str], *, bits: int | None = None, overwrite: bool = False
) -> Path:
    """Convert ``path`` into the model folder ``out`` (created atomically).

    Args:
        path: The ``.gguf`` file.
        out: The folder to create; it must not exist unless ``overwrite``.
        bits: 32 (float32, exact), 16, 8 or 4 (MatMulNBits); None picks :func:`default_bits`.
        overwrite: Replace an existing ``out``.

    Raises:
        ModelLoadError: not a GGUF file, or a damaged one.
        UnsupportedModelError: an architecture, tokenizer or tensor type the converter does not know.
        ConfigurationError: a bad ``bits``, or ``out`` exists.
    """
    _check_bits(bits)
    target = Path(out).expanduser()
    if target.exists() and not overwrite:
        raise ConfigurationError(f"{target} already exists: choose another folder, or pass overwrite=True.")
    gguf = GGUFFile(path)
    return _write(gguf, target, bits if bits is not None else default_bits(gguf), digest=None)


def gguf_folder(path: str | os.PathLike[str], *, bits: int | None = None) -> Path:
    """The converted folder of ``path``, from the cache (built on first use).

    The cache lives in ``$INFERENCE4PY_CACHE/gguf/<sha256 of the file>-<bits>bit``; an entry
    without its marker (an interrupted conversion from an older version) is rebuilt, never trusted.
    A cached entry is found from the file's hash alone: the file is parsed only to convert it.
    """
    _check_bits(bits)
    source = Path(path).expanduser()
    check_header(source)
    started = time.perf_counter()
    digest = file_digest(source)
    root = _env.inference4py_cache() / "gguf"
    widths = BITS if bits is None else (bits,)
    for width in widths:
        recorded = _marker(root / f"{digest[:32]}-{width}bit")
        # with no width asked for, only an entry that was converted at the default width answers
        if recorded.get("sha256") == digest and (bits is not None or recorded.get("default_width")):
            return root / f"{digest[:32]}-{width}bit"
    gguf = GGUFFile(source)
    width = bits if bits is not None else default_bits(gguf)
    folder = root / f"{digest[:32]}-{width}bit"
    recorded = _marker(folder)
    if recorded.get("sha256") == digest:  # converted before at this width, asked for explicitly then
        return folder
    if folder.exists():
        _log.warning("rebuilding the conversion of %s: the cached folder %s is incomplete or outdated", source, folder)
        shutil.rmtree(folder, ignore_errors=True)
    _log.warning("converting %s to an ONNX folder (%d-bit), once: %s", source.name, width, folder)
    _write(gguf, folder, width, digest=digest, default_width=bits is None)
    _log.info("converted %s in %.1f s", source.name, time.perf_counter() - started)
    return folder


def _marker(folder: Path) -> dict[str, Any]:
    """The provenance of a cached folder written by this converter version, or {} (missing, damaged, older)."""
    try:
        recorded = json.loads((folder / _MARKER).read_text())
    except (OSError, ValueError):
        return {}
    return recorded if isinstance(recorded, dict) and recorded.get("converter") == CONVERTER_VERSION else {}


def _write(gguf: GGUFFile, target: Path, bits: int, *, digest: str | None, default_width: bool = False) -> Path:
    import onnx

    from inference4py.gguf.graph import build_decoder
    from inference4py.gguf.tokenizer import generation_defaults, tokenizer_files

    files = tokenizer_files(gguf.metadata)  # before the graph: a bad vocabulary fails fast
    model, config = build_decoder(gguf, bits)
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        onnx.save_model(
            model,
            str(work / "model.onnx"),
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location="model.onnx.data",
            size_threshold=1024,
        )
        _dump(work / "config.json", config)
        _dump(work / "generation_config.json", generation_defaults(gguf.metadata))
        for name, content in files.items():
            _dump(work / name, content)
        provenance: dict[str, Any] = {
            "source": str(gguf.path),
            "sha256": digest,
            "bits": bits,
            "default_width": default_width,  # chosen by default_bits(): what a load without bits reuses
            "architecture": gguf.architecture,
            "name": gguf.get("general.name"),
            "tensor_types": dict(gguf.types()),
            "converter": CONVERTER_VERSION,
        }
        _dump(work / _MARKER, provenance)  # last: its presence means the folder is complete
        _readable(work)
        if target.exists():
            shutil.rmtree(target)
        os.replace(work, target)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return target


def _readable(folder: Path) -> None:
    """The usual permissions (mkdtemp makes a private folder): a converted folder is meant to be shared."""
    umask = os.umask(0)
    os.umask(umask)
    folder.chmod(0o777 & ~umask)
    for path in folder.iterdir():
        path.chmod(0o666 & ~umask)


def _dump(path: Path, content: Any) -> None:
    path.write_text(json.dumps(content, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
