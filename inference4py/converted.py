"""Model folders converted from a user's file (GGUF, CTranslate2, whisper.cpp), kept in the cache.

One set of rules for every converter:

* a folder is keyed by the sha256 of the file it came from (:func:`file_digest`, remembered by path,
  inode, size and times, so a cached conversion is found without reading the file again);
* it is written into a temporary folder beside its place and renamed into place, its provenance
  marker last (:func:`write_folder`): a cache entry either is complete or does not exist;
* an entry without its marker, or from an older converter, is rebuilt, never trusted
  (:func:`read_marker`); temporary folders a killed conversion left are removed after hours.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from inference4py import env

__all__ = ["check_disk", "dump_json", "file_digest", "read_marker", "remove_abandoned", "write_folder"]

_log = logging.getLogger("inference4py.convert")
_ABANDONED = 6 * 3600  # seconds after which a temporary folder nobody writes to is a killed conversion's


def file_digest(path: str | os.PathLike[str]) -> str:
    """The sha256 of a file, remembered in the cache by path, inode, size and change times.

    A file seen before (same resolved path, device and inode, size, modification and status-change
    times: the last cannot be set back by copying tools) is not read again: finding the conversion
    of a 5 GB file takes milliseconds.
    """
    source = Path(path).resolve()
    stat = source.stat()
    memo = env.inference4py_cache() / "file-digests" / (hashlib.sha256(str(source).encode()).hexdigest() + ".json")
    key = {
        "path": str(source),
        "device": stat.st_dev,
        "inode": stat.st_ino,
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "ctime_ns": stat.st_ctime_ns,
    }
    try:
        known = json.loads(memo.read_text())
        if isinstance(known, dict) and {k: known.get(k) for k in key} == key and isinstance(known.get("sha256"), str):
            return str(known["sha256"])
    except (OSError, ValueError):
        pass
    digest = hashlib.sha256()
    with open(source, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        scratch = memo.with_suffix(f".{os.getpid()}.tmp")
        scratch.write_text(json.dumps({**key, "sha256": digest.hexdigest()}))
        os.replace(scratch, memo)
    except OSError:  # a read-only cache only costs the next lookup a re-read
        pass
    return digest.hexdigest()


def check_disk(what: str, needed: int, folder: Path) -> None:
    """A clear error before anything is written when the disk under ``folder`` has less than ``needed`` bytes free.

    Raises:
        ConfigurationError: too little free disk (the message says how much is needed and free).
    """
    from inference4py.errors import ConfigurationError

    probe = folder
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < needed:
        raise ConfigurationError(
            f"Not enough free disk to convert {what}: the folder needs about {needed / 1e9:.2f} GB and {probe} has "
            f"{free / 1e9:.2f} GB free. Free some space, or point INFERENCE4PY_CACHE (or the output folder) at a "
            "larger disk."
        )


def read_marker(folder: Path, marker: str, version: int) -> dict[str, Any]:
    """The provenance a converter of ``version`` wrote in ``folder``, or {} (missing, damaged, older)."""
    try:
        recorded = json.loads((folder / marker).read_text())
    except (OSError, ValueError):
        return {}
    return recorded if isinstance(recorded, dict) and recorded.get("converter") == version else {}


def remove_abandoned(folder: Path) -> None:
    """Delete what a killed conversion of ``folder`` left (its temporary folders, untouched for hours)."""
    now = time.time()
    for work in folder.parent.glob(f".{folder.name}.*"):
        try:
            touched = max([work.stat().st_mtime] + [p.stat().st_mtime for p in work.iterdir()])
        except OSError:
            continue
        if now - touched > _ABANDONED:
            _log.warning("removing %s, left by an interrupted conversion", work)
            shutil.rmtree(work, ignore_errors=True)


def write_folder(target: Path, fill: Callable[[Path], None], marker: str, provenance: Mapping[str, Any]) -> Path:
    """Create ``target`` atomically: ``fill(work)`` writes the files, then the ``marker`` with ``provenance``.

    An existing ``target`` is replaced; on any error (Ctrl-C included) nothing is left behind.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        fill(work)
        dump_json(work / marker, dict(provenance))  # last: its presence means the folder is complete
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


def dump_json(path: Path, content: Any) -> None:
    """A JSON file of a converted folder (indented, UTF-8)."""
    path.write_text(json.dumps(content, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
