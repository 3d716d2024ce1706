"""Reading a GGUF file: its metadata and its tensors, dequantized to numpy on demand.

The ``gguf`` package (the ``gguf`` extra) parses the file and dequantizes every ggml block type;
this module gives the rest of the converter plain Python values and float32 arrays in numpy's
order, and turns a damaged or foreign file into one clear error.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from inference4py.errors import ConfigurationError, ModelLoadError, UnsupportedModelError
from inference4py.gguf.blocks import LAYOUTS

__all__ = ["FLOAT_TYPES", "GGUFFile", "SUPPORTED_TYPES", "TensorInfo", "check_header", "require_gguf"]

_INSTALL = 'pip install "inference4py[gguf]"'
# ggml types the converter reads: the float types, and the block types onnxruntime's quantized operators hold
# exactly as stored (inference4py.gguf.blocks.LAYOUTS); any other type the gguf package dequantizes converts
# only to an explicit float or re-rounded width
FLOAT_TYPES = ("F32", "F16", "BF16")
SUPPORTED_TYPES = (*FLOAT_TYPES, *LAYOUTS)
_MAGIC = b"GGUF"


def require_gguf() -> Any:
    """The ``gguf`` package, or a ConfigurationError naming the extra."""
    try:
        import gguf
    except ImportError as exc:
        raise ConfigurationError(f"Reading GGUF files needs the gguf package: {_INSTALL}.") from exc
    return gguf


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of the file: its name, numpy-order shape and ggml type name (``"Q4_K"``...)."""

    name: str
    shape: tuple[int, ...]
    type: str


def check_header(path: Path) -> None:
    """Raise ModelLoadError unless ``path`` is a file that starts like a GGUF file (reads 4 bytes)."""
    if not path.is_file():
        raise ModelLoadError(f"{path} does not exist or is not a file. Give the path of a .gguf file.")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != _MAGIC:
        raise ModelLoadError(
            f"{path} is not a GGUF file (it starts with {magic!r}, not b'GGUF'). Give a llama.cpp .gguf file; "
            "a split model (*-00001-of-0000N.gguf) must be merged first with llama.cpp's gguf-split --merge."
        )


class GGUFFile:
    """A GGUF file opened for conversion (memory-mapped: nothing is read until asked for).

    Args:
        path: The ``.gguf`` file.

    Raises:
        ModelNotFoundError-like ModelLoadError: the file is missing, not GGUF, or truncated.
        ConfigurationError: the gguf package is not installed.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        check_header(self.path)
        gguf = require_gguf()
        try:
            self._reader = gguf.GGUFReader(str(self.path))
        except Exception as exc:  # the gguf package raises ValueError, struct.error, IndexError...
            raise ModelLoadError(
                f"{self.path} cannot be read as GGUF ({type(exc).__name__}: {exc}). The file is probably truncated "
                "or damaged: download it again."
            ) from exc
        self.metadata: dict[str, Any] = {}
        for key, field in self._reader.fields.items():
            if key.startswith("GGUF."):
                continue
            try:
                self.metadata[key] = field.contents()
            except Exception as exc:
                raise ModelLoadError(f"{self.path}: the metadata field {key!r} cannot be read ({exc}).") from exc
        self._tensors = {t.name: t for t in self._reader.tensors}
        size = self.path.stat().st_size
        for t in self._reader.tensors:
            end = int(t.data_offset) + int(t.n_bytes)
            if end > size:
                raise ModelLoadError(
                    f"{self.path} is truncated: tensor {t.name!r} ends at byte {end} but the file has {size}. "
                    "Download it again."
                )

    # ------------------------------------------------------------------ metadata
    @property
    def architecture(self) -> str:
        arch = self.metadata.get("general.architecture")
        if not isinstance(arch, str):
            raise ModelLoadError(f"{self.path} has no general.architecture field: it is not a model GGUF.")
        return arch

    def get(self, key: str, default: Any = None) -> Any:
        """A metadata value; ``key`` may start with ``"."`` to mean the architecture's prefix (``".block_count"``)."""
        if key.startswith("."):
            key = self.architecture + key
        return self.metadata.get(key, default)

    def require(self, key: str) -> Any:
        value = self.get(key)
        if value is None:
            name = self.architecture + key if key.startswith(".") else key
            raise ModelLoadError(f"{self.path} lacks the metadata field {name!r} that its architecture needs.")
        return value

    # ------------------------------------------------------------------ tensors
    def check_tensor(self, name: str, shape: tuple[int, ...], *, needed_by: str, why: str) -> None:
        """ModelLoadError naming tensor ``name`` when it is missing or not of ``shape`` (numpy order).

        ``needed_by`` says what needs it (``"its latent attention layers"``), ``why`` where the shape comes from
        (the metadata keys)."""
        if name not in self:
            raise ModelLoadError(f"{self.path} has no tensor {name!r}, which {needed_by} need ({why}).")
        got = self.info(name).shape
        if got != shape:
            raise ModelLoadError(
                f"{self.path}: tensor {name!r} has shape {list(got)}, but the metadata says {list(shape)} ({why}). "
                "The file is inconsistent: convert the model again with llama.cpp's convert_hf_to_gguf.py."
            )

    def tensors(self) -> Iterator[TensorInfo]:
        for t in self._reader.tensors:
            yield self.info(t.name)

    def __contains__(self, name: object) -> bool:
        return name in self._tensors

    def info(self, name: str) -> TensorInfo:
        t = self._tensor(name)
        return TensorInfo(name, tuple(int(d) for d in reversed(t.shape)), t.tensor_type.name)

    def _tensor(self, name: str) -> Any:
        t = self._tensors.get(name)
        if t is None:
            raise ModelLoadError(f"{self.path} has no tensor {name!r} (its {self.architecture} layout needs it).")
        return t

    def tensor(self, name: str) -> np.ndarray:
        """The tensor dequantized to float32, in numpy order (``[rows, cols]`` for a matrix: GGUF's ne reversed)."""
        info = self.info(name)
        rows = int(np.prod(info.shape[:-1], dtype=np.int64)) if len(info.shape) > 1 else 1
        return self.float_rows(name, 0, rows).reshape(info.shape)

    def float_rows(self, name: str, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` of a tensor dequantized to float32 ``[stop - start, cols]`` (a vector is one row).

        Raises:
            UnsupportedModelError: a type the gguf package cannot dequantize.
        """
        t = self._tensor(name)
        kind = t.tensor_type.name
        part = self.raw_rows(name)[start:stop]
        if kind == "F32":
            return np.asarray(part, dtype=np.float32)
        if kind == "F16":
            return np.asarray(part, dtype=np.float16).astype(np.float32)
        gguf = require_gguf()
        try:
            values = gguf.quants.dequantize(np.asarray(part), t.tensor_type)
        except NotImplementedError as exc:
            raise UnsupportedModelError(
                f"{self.path}: tensor {name!r} is stored as {kind}, which cannot be read. Supported types: "
                f"{', '.join(SUPPORTED_TYPES)}. Re-quantize the model with llama.cpp to one of them."
            ) from exc
        return np.asarray(values, dtype=np.float32).reshape(part.shape[0], -1)

    def raw_rows(self, name: str) -> np.ndarray:
        """A tensor's rows as the file holds them, memory-mapped: ``[rows, bytes per row]`` uint8 for a block
        type (``[rows, cols]`` in its own dtype for F32/F16); a vector is one row."""
        t = self._tensor(name)
        data = np.asarray(t.data)
        return data.reshape(-1, data.shape[-1]) if data.ndim > 1 else data.reshape(1, -1)

    def span(self, name: str) -> tuple[int, int]:
        """Where a tensor's bytes lie in the file: (absolute offset, length)."""
        t = self._tensor(name)
        return int(t.data_offset), int(t.n_bytes)

    def types(self) -> Mapping[str, int]:
        """How many tensors of each ggml type the file holds."""
        counts: dict[str, int] = {}
        for t in self._reader.tensors:
            counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
        return counts
