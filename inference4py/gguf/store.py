"""Initializers written one at a time to the external-data file beside ``model.onnx``.

A converted graph holds no weight bytes in memory: each initializer is appended to
``model.onnx.data`` as it is made (a large one in row chunks) and the graph gets a
``TensorProto`` that points at it.  Offsets are page-aligned, so onnxruntime can map the file.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["DATA_FILE", "ExternalData"]

DATA_FILE = "model.onnx.data"
_ALIGN = 4096
_INLINE = 1024  # arrays smaller than this stay inside the graph, as onnx.save's size_threshold


class ExternalData:
    """Appends arrays to ``folder/model.onnx.data`` and returns the initializers that reference them.

    Args:
        folder: The model folder being written (it must exist).
        data_file: The file's name in ``folder`` (a folder with several graphs gives each its own).
    """

    def __init__(self, folder: Path, data_file: str = DATA_FILE, *, inline: bool = False) -> None:
        from onnx import TensorProto, helper, numpy_helper

        self.inline = inline  # every array inside the graph (a graph whose external data is another file's)
        self._tensor_proto = TensorProto
        self._helper = helper
        self._numpy_helper = numpy_helper
        self.data_file = data_file
        self.path = folder / data_file
        self._file = open(self.path, "wb")  # noqa: SIM115 - closed by close(), after the last initializer
        self.written = 0

    def close(self) -> None:
        self._file.close()

    def array(self, array: np.ndarray, name: str) -> Any:
        """An initializer holding ``array`` (written now; small arrays stay inline)."""
        array = np.ascontiguousarray(array)
        if array.nbytes < _INLINE or self.inline:
            return self._numpy_helper.from_array(array, name)
        return self.chunks(name, array.dtype, array.shape, [array])

    def chunks(self, name: str, dtype: Any, shape: tuple[int, ...], parts: Iterable[np.ndarray]) -> Any:
        """An initializer of ``shape`` whose bytes are the concatenation of ``parts`` (C order).

        Raises:
            ValueError: the parts do not add up to ``shape`` (a converter bug, never user input).
        """
        dtype = np.dtype(dtype)
        if self.inline:
            joined = np.concatenate([np.ascontiguousarray(p, dtype=dtype).reshape(-1) for p in parts])
            return self._numpy_helper.from_array(joined.reshape(shape), name)
        pad = -self.written % _ALIGN
        if pad:
            self._file.write(b"\0" * pad)
            self.written += pad
        offset = self.written
        for part in parts:
            data = np.ascontiguousarray(part, dtype=dtype)
            data.reshape(-1).tofile(self._file)  # straight from the array, no bytes copy
            self.written += data.nbytes
        length = self.written - offset
        expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if length != expected:
            raise ValueError(f"{name}: wrote {length} bytes for a {dtype} tensor of shape {shape} ({expected}).")
        tensor = self._tensor_proto()
        tensor.name = name
        tensor.data_type = self._helper.np_dtype_to_tensor_dtype(dtype)
        tensor.dims.extend(int(d) for d in shape)
        tensor.data_location = self._tensor_proto.EXTERNAL
        for key, value in (("location", self.data_file), ("offset", str(offset)), ("length", str(length))):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
        return tensor

    def in_file(self, name: str, file_name: str, offset: int, shape: tuple[int, ...]) -> Any:
        """A uint8 initializer of ``shape`` that is the bytes at ``offset`` of ``file_name``, another file
        than this store's (a GGUF file's tensor, used in place: the session maps it, nothing is copied)."""
        tensor = self._tensor_proto()
        tensor.name = name
        tensor.data_type = self._tensor_proto.UINT8
        tensor.dims.extend(int(d) for d in shape)
        tensor.data_location = self._tensor_proto.EXTERNAL
        length = int(np.prod(shape, dtype=np.int64))
        for key, value in (("location", file_name), ("offset", str(offset)), ("length", str(length))):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
        return tensor
