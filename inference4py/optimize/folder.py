"""Model folders: ``inference4py optimize FOLDER OUT`` and the cached fused copy the builders use.

The folder's decoder graph is fused and every other file is copied beside it; the cache
keys a fused copy by the SHA-256 of every file of the folder, the level and
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
from .onnx_io import import_onnx, save_model

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
    onnx = import_onnx()
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
    save_model(fused, dst / rel)
    return report


#: Bumped whenever the rewrite changes, so cached fused folders of older rewrites are not reused.
FUSION_VERSION = 3

_MARKER = ".inference4py-fused"
_HASHED_BYTES = 64 << 20  # cached files up to this size are checked by hash on every load, larger ones by size


def fused_model_folder(
    folder: str | os.PathLike[str], *, level: str = "rotary", cache_dir: str | os.PathLike[str] | None = None
) -> Path:
    """The fused copy of ``folder``, made once and kept in the inference4py cache.

    What the builders' ``fuse_attention()`` uses.  The copy is keyed by the SHA-256 of every
    file of the source folder (graph, weights, config, tokenizer, chat template, ...), the level and
    :data:`FUSION_VERSION`; a file's hash is computed once per (path, size, modification time).
    It lives in ``cache_dir`` (default: ``INFERENCE4PY_CACHE``, else ``~/.cache/inference4py``,
    beside the Hugging Face cache) under ``fused/``, written to a temporary folder and renamed
    into place.  An entry is checked before use (its marker names the same source hash and
    version; every file has its recorded size, the small ones their recorded hash): a corrupt,
    partial or foreign entry is rebuilt, never trusted.

    Raises:
        Everything :func:`optimize_folder` raises (an unfusable model is refused with the reason).
    """
    src = Path(folder).expanduser()
    if not src.is_dir():
        raise ModelNotFoundError(f"Model folder {src} does not exist.")
    root, key, source_hash = _entry_key(src, level, cache_dir)
    out = root / key[:24]
    if _valid_entry(out, source_hash):
        return out
    return _build_entry(src, root, out, source_hash, level)


def auto_fused_folder(
    folder: str | os.PathLike[str], *, level: str = "rotary", cache_dir: str | os.PathLike[str] | None = None
) -> Path:
    """What loading a decoder runs by default: its fused copy, or ``folder`` itself when it cannot be fused.

    A graph the optimizer does not recognise is logged (once: the refusal is remembered in the
    cache under the same key) and run as it is; nothing here fails a load that would work unfused.
    Graphs that already use GroupQueryAttention run as they are; onnxruntime-genai folders get
    their language-model head sliced (:func:`sliced_genai_folder`).
    On a cache hit the source graph is not read (only its hash is looked up).
    """
    src = Path(folder).expanduser()
    if (src / "genai_config.json").is_file():
        return sliced_genai_folder(src, cache_dir=cache_dir)
    try:
        _decoder_graph(src)
        root, key, source_hash = _entry_key(src, level, cache_dir)
    except (ModelNotFoundError, UnsupportedModelError, OSError):
        return src  # no single decoder graph here: the loader says what it makes of the folder
    out, refused, found = _lookup(src, root, key, source_hash)
    if found is not None:
        return found
    from inference4py.engine.graph_io import has_op

    if has_op(_decoder_graph(src), b"GroupQueryAttention"):
        root.mkdir(parents=True, exist_ok=True)
        _write_atomic(refused, f"{src}\nalready fused (GroupQueryAttention)\n")
        return src
    try:
        return _build_entry(src, root, out, source_hash, level)
    except (UnsupportedModelError, ModelLoadError) as exc:
        _log.info("running %s unfused: %s", src, exc)
        root.mkdir(parents=True, exist_ok=True)
        _write_atomic(refused, f"{src}\n{exc}\n")
        return src


_SLICE_LEVEL = "logits"  # the cache level of a genai folder's sliced copy (no fusion)


def sliced_genai_folder(folder: str | os.PathLike[str], *, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """An onnxruntime-genai folder whose graph computes the logits of the positions asked for only.

    onnxruntime-genai's builder computes the language-model head for every prompt position
    (for SmolLM2's int4 folder, 13 % of a chat prompt's prefill).  The copy adds
    ``num_logits_to_keep`` (:func:`~inference4py.optimize.logits.slice_logits`) and is kept in
    the cache like the fused copies, keyed and checked the same way.  Only the graph's proto is
    rewritten: the weights file and the other files are hard links to the source's (copies on
    another file system).  A graph without a ``MatMul`` head, or one that takes the input already,
    runs as it is; so does the folder when the cache cannot be written.
    """
    src = Path(folder).expanduser()
    try:
        root, key, source_hash = _entry_key(src, _SLICE_LEVEL, cache_dir)
    except (ModelNotFoundError, OSError, ValueError, KeyError, TypeError, AttributeError):
        return src  # the loader says what it makes of the folder
    out, refused, found = _lookup(src, root, key, source_hash)
    if found is not None:
        return found

    def make(source: Path, tmp: Path) -> str:
        from .logits import slice_logits

        onnx = import_onnx()
        graph = _genai_graph(source)
        model = onnx.load(str(graph), load_external_data=False)
        if not slice_logits(model):
            raise UnsupportedModelError("its logits are not made by a MatMul head, or it slices them already")
        _link_folder(source, tmp, skip=graph)
        onnx.save(model, str(tmp / graph.relative_to(source)))
        return "the head computes only the positions asked for (num_logits_to_keep)"

    try:
        return _build_entry(src, root, out, source_hash, _SLICE_LEVEL, make=make, what="preparing")
    except (UnsupportedModelError, ModelLoadError, OSError) as exc:
        _log.info("running %s as it is: %s", src, exc)
        try:
            root.mkdir(parents=True, exist_ok=True)
            _write_atomic(refused, f"{src}\n{exc}\n")
        except OSError:
            pass
        return src


def _link_folder(source: Path, tmp: Path, *, skip: Path) -> None:
    """``tmp``, a new folder holding ``source``'s files as hard links (copies across file systems), but for
    ``skip`` (the graph the entry writes itself) and cache markers (written anew, never through a link)."""
    tmp.mkdir(parents=True)
    for path in source.rglob("*"):
        if path.is_dir() or path == skip or path.name.startswith(".inference4py"):
            continue
        _link(path, tmp / path.relative_to(source))


def _link(path: Path, target: Path) -> None:
    """``target``, a hard link to ``path`` (a copy across file systems)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(path, target)
    except OSError:
        shutil.copy2(path, target)


def _lookup(src: Path, root: Path, key: str, source_hash: str) -> tuple[Path, Path, Path | None]:
    """The entry's folder and refusal memo, and what to load without building: the entry when it is
    valid, the source when the rewrite was refused before, else None."""
    out, refused = root / key[:24], root / f"{key[:24]}.refused"
    if _valid_entry(out, source_hash):
        return out, refused, out
    return out, refused, src if refused.is_file() else None


def _genai_graph(folder: Path) -> Path:
    """The decoder graph a ``genai_config.json`` names."""
    import json

    config = json.loads((folder / "genai_config.json").read_text(encoding="utf-8"))
    name = config["model"]["decoder"].get("filename") or "model.onnx"
    graph = folder / name
    if not graph.is_file():
        raise ModelNotFoundError(f"{folder}/genai_config.json names {name}, which is not in the folder.")
    return graph


def _entry_key(src: Path, level: str, cache_dir: str | os.PathLike[str] | None) -> tuple[Path, str, str]:
    import hashlib

    from inference4py import env

    root = Path(cache_dir).expanduser() if cache_dir is not None else env.inference4py_cache() / "fused"
    # raises for a folder without one (a genai folder names its graph; other levels than the slice may read either)
    if level == _SLICE_LEVEL or (level.startswith("kv-") and (src / "genai_config.json").is_file()):
        _genai_graph(src)
    else:
        _decoder_graph(src)
    # Every file of the folder: the copy carries them all (tokenizer, chat template, a description,
    # other sessions), so an edit to any of them must give another copy.
    inputs = sorted(p for p in src.rglob("*") if p.is_file() and not _hidden(p.relative_to(src)))
    digest = hashlib.sha256()
    for path in inputs:
        digest.update(f"{path.relative_to(src)}={_file_hash(path, root)};".encode())
    source_hash = digest.hexdigest()
    key = hashlib.sha256(f"{source_hash}|{level}|{FUSION_VERSION}".encode()).hexdigest()
    return root, key, source_hash


def _hidden(rel: Path) -> bool:
    return any(part.startswith(".") for part in rel.parts)


def _file_hash(path: Path, root: Path) -> str:
    """SHA-256 of a file, remembered per (path, size, mtime) in ``root/hashes/`` (hashing GBs once)."""
    import hashlib

    st = path.stat()
    stamp = hashlib.sha256(f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:32]
    memo = root / "hashes" / stamp
    try:
        text = memo.read_text(encoding="ascii").strip()
        if len(text) == 64:
            return text
    except OSError:
        pass
    value = _sha256(path)
    memo.parent.mkdir(parents=True, exist_ok=True)
    _write_atomic(memo, value)
    return value


def _sha256(path: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def _valid_entry(out: Path, source_hash: str) -> bool:
    """Whether ``out`` is a complete fused copy of the source with hash ``source_hash``."""
    import json

    marker = out / _MARKER
    if not marker.is_file():
        return False
    try:
        info = json.loads(marker.read_text(encoding="utf-8"))
        files: dict[str, list[Any]] = info["files"]
        ok = info["source_sha256"] == source_hash and info["fusion_version"] == FUSION_VERSION and bool(files)
        for rel, (size, digest) in files.items():
            path = out / rel
            if not ok or not path.is_file() or path.stat().st_size != size:
                ok = False
                break
            if digest is not None and _sha256(path) != digest:
                ok = False
                break
    except (OSError, ValueError, KeyError, TypeError):
        ok = False
    if not ok:
        _log.warning("the cached fused copy %s is incomplete, corrupt or not this model's: rebuilding it", out)
    return ok


def _build_entry(
    src: Path, root: Path, out: Path, source_hash: str, level: str, make: Any = None, what: str = "fusing"
) -> Path:
    """Write ``out`` through a temporary folder: ``make(src, tmp)`` (default: :func:`optimize_folder`)."""
    import json

    make = make or (lambda a, b: optimize_folder(a, b, level=level).summary())
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f"{out.name}.partial-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        with _progress(f"{what} {src.name} (first load only)") as bar:
            summary = make(src, tmp)
            bar.update(1)
        files = {}
        for path in sorted(tmp.rglob("*")):
            if path.is_file():
                size = path.stat().st_size
                files[str(path.relative_to(tmp))] = [size, _sha256(path) if size <= _HASHED_BYTES else None]
        marker = {
            "source": str(src),
            "source_sha256": source_hash,
            "fusion_version": FUSION_VERSION,
            "level": level,
            "files": files,
            "report": summary,
        }
        (tmp / _MARKER).write_text(json.dumps(marker, indent=1), encoding="utf-8")
        if out.exists():  # a stale or corrupt entry, or an unfinished copy of another process
            shutil.rmtree(out, ignore_errors=True)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    _log.info("rewrote %s into %s: %s", src, out, summary)
    return out


def _progress(description: str) -> Any:
    """A one-step progress bar on a terminal (tqdm; silent when stderr is not a TTY)."""
    from tqdm.auto import tqdm

    return tqdm(total=1, desc=description, unit="model", disable=None, leave=False)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


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
