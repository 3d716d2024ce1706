"""Model folders: ``inference4py optimize FOLDER OUT`` and the cached fused copy the builders use.

The folder's decoder graph is fused and every other file is copied beside it; the cache
keys a fused copy by the graph's path, size and modification time, the level and
:data:`FUSION_VERSION`.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

from inference4py.errors import ConfigurationError, ModelLoadError, ModelNotFoundError, UnsupportedModelError

from .fuse import _LEVELS, FusionReport, fuse_attention
from .onnx_io import _import_onnx, _save

_log = logging.getLogger("inference4py.optimize")  # the package's logger, as before the split


def optimize_folder(
    folder: str | os.PathLike[str], out: str | os.PathLike[str], *, level: str = "rotary"
) -> FusionReport:
    """Fuse the attention of a decoder-only model folder into ``out``.

    The folder's decoder graph (``model.onnx`` or ``decoder_model_merged.onnx``,
    also under ``onnx/``) is rewritten; every other file (config, tokenizer,
    generation config, chat template) is copied.

    Args:
        level: ``"rotary"`` (fold the rotary embedding and q/k/v projections into the
            operator when possible, else fall back) or ``"attention"`` (attention only).

    Raises:
        ModelNotFoundError: no folder, or no decoder graph in it.
        ConfigurationError: ``out`` is ``folder``, or an unknown level.
        UnsupportedModelError: nothing in the graph can be fused (the reason is named).
        ModelLoadError: the ``onnx`` package is missing or the graph cannot be read.
    """
    if level not in _LEVELS:
        raise ConfigurationError(f"level={level!r} is not a fusion level: use one of {list(_LEVELS)}.")
    src, dst = Path(folder).expanduser(), Path(out).expanduser()
    if not src.is_dir():
        raise ModelNotFoundError(f"Model folder {src} does not exist.")
    if dst.exists() and dst.resolve() == src.resolve():
        raise ConfigurationError(
            "The output folder must differ from the model folder: the fused graph replaces a file."
        )
    graph_path = _decoder_graph(src)
    onnx = _import_onnx()
    config = _read_json(src / "config.json")
    try:
        model = onnx.load(str(graph_path))
    except Exception as exc:  # onnx raises DecodeError / OSError / ValueError
        raise ModelLoadError(f"Could not read {graph_path} as an ONNX graph: {exc}") from exc
    fused, report = fuse_attention(model, config, level=level, reload=lambda: onnx.load(str(graph_path)))
    dst.mkdir(parents=True, exist_ok=True)
    rel = graph_path.relative_to(src)
    for path in src.rglob("*"):
        if path.is_dir() or path == graph_path or _is_weight_file_of(path, graph_path):
            continue
        target = dst / path.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    _save(fused, dst / rel)
    return report


#: Bumped whenever the rewrite changes, so cached fused folders of older rewrites are not reused.
FUSION_VERSION = 1


def fused_model_folder(
    folder: str | os.PathLike[str], *, level: str = "rotary", cache_dir: str | os.PathLike[str] | None = None
) -> Path:
    """The fused copy of ``folder``, made once and kept in the inference4py cache.

    What the builders' ``fuse_attention()`` uses.  The cache key is the decoder graph's
    path, size and modification time, the level and :data:`FUSION_VERSION`, so a
    re-downloaded or edited model is fused again.  The copy lives in
    ``cache_dir`` (default: ``INFERENCE4PY_CACHE``, else ``~/.cache/inference4py``) under
    ``fused/``; it holds the rewritten graph and copies of the folder's other files.

    Raises:
        Everything :func:`optimize_folder` raises (an unfusable model is refused with the reason).
    """
    import hashlib

    from inference4py import _env

    src = Path(folder).expanduser()
    if not src.is_dir():
        raise ModelNotFoundError(f"Model folder {src} does not exist.")
    graph = _decoder_graph(src)
    st = graph.stat()
    key = hashlib.sha256(
        f"{graph.resolve()}|{st.st_size}|{st.st_mtime_ns}|{level}|{FUSION_VERSION}".encode()
    ).hexdigest()
    root = Path(cache_dir).expanduser() if cache_dir is not None else _env.inference4py_cache() / "fused"
    out = root / key[:24]
    done = out / ".inference4py-fused"
    if done.is_file():
        return out
    tmp = root / f"{key[:24]}.partial-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        report = optimize_folder(src, tmp, level=level)
        (tmp / ".inference4py-fused").write_text(f"{src}\n{report.summary()}\n", encoding="utf-8")
        if out.exists():  # an unfinished copy of another process
            shutil.rmtree(out, ignore_errors=True)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    _log.info("fused %s into %s: %s", src, out, report.summary())
    return out


def _decoder_graph(folder: Path) -> Path:
    if any(folder.glob("encoder_model*.onnx")) or any(folder.glob("onnx/encoder_model*.onnx")):
        raise UnsupportedModelError(
            f"{folder} holds an encoder-decoder model; attention fusion handles decoder-only graphs "
            "(model.onnx or decoder_model_merged.onnx)."
        )
    for rel in ("model.onnx", "decoder_model_merged.onnx", "onnx/model.onnx", "onnx/decoder_model_merged.onnx"):
        if (folder / rel).is_file():
            return folder / rel
    raise ModelNotFoundError(f"{folder} holds no decoder graph (model.onnx or decoder_model_merged.onnx) to optimize.")


def _is_weight_file_of(path: Path, graph: Path) -> bool:
    """The graph's external-data file (rewritten together with the graph)."""
    return path.parent == graph.parent and path.name in (
        graph.name + "_data",
        graph.name + ".data",
        graph.stem + ".onnx_data",
    )


def _read_json(path: Path) -> dict[str, Any]:
    import json

    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ModelLoadError(f"{path} is not valid JSON: {exc}") from exc
