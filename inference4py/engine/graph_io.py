"""Read the input/output signature of an ONNX file without loading its weights.

Pipeline detection looks at the names and shapes of a graph's inputs and
outputs before any session exists.  Creating an onnxruntime session for that
would load every weight (gigabytes for a real LLM), so this module walks the
protobuf wire format directly: ``ModelProto.graph`` (field 7) ->
``GraphProto.input`` (11) / ``output`` (12) -> ``ValueInfoProto`` name + tensor
type.  Initializers (field 5) are skipped by length through a memory map, so
the cost does not depend on the size of the weights.  The ``onnx`` package is
not a dependency of the library.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from inference4py.engine.sessions import TensorInfo

__all__ = ["ExpertNode", "GraphIO", "has_op", "read_expert_nodes", "read_graph_io", "read_node_int_attributes"]

# TensorProto.DataType -> numpy scalar type (what onnxruntime reports, see sessions.ORT_TO_NUMPY)
_ELEM_TYPES: dict[int, type] = {
    1: np.float32,
    2: np.uint8,
    3: np.int8,
    5: np.int16,
    6: np.int32,
    7: np.int64,
    9: np.bool_,
    10: np.float16,
    11: np.float64,
    12: np.uint32,
    13: np.uint64,
}

GraphIO = tuple[dict[str, TensorInfo], dict[str, TensorInfo]]
_Buffer = memoryview | mmap.mmap
_T = TypeVar("_T")


class _Malformed(ValueError):
    pass


def _varint(buf: _Buffer, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end:
            raise _Malformed("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 70:
            raise _Malformed("varint too long")


def _fields(buf: _Buffer, start: int, end: int) -> Iterator[tuple[int, int, Any]]:
    """Yield (field number, wire type, value or (start, end) span) of one message."""
    pos = start
    while pos < end:
        key, pos = _varint(buf, pos, end)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos, end)
            yield number, wire, value
        elif wire == 1:
            pos += 8
        elif wire == 2:
            length, pos = _varint(buf, pos, end)
            if pos + length > end:
                raise _Malformed("field runs past the end of its message")
            yield number, wire, (pos, pos + length)
            pos += length
        elif wire == 5:
            pos += 4
        else:
            raise _Malformed(f"unsupported wire type {wire}")
    if pos != end:
        raise _Malformed("message overruns its length")


def _text(buf: _Buffer, span: tuple[int, int]) -> str:
    return bytes(buf[span[0] : span[1]]).decode("utf-8")


def _value_info(buf: _Buffer, span: tuple[int, int]) -> TensorInfo | None:
    name = None
    dtype: type = np.float32
    dims: list[int | str | None] = []
    is_tensor = False
    for number, wire, value in _fields(buf, *span):
        if number == 1 and wire == 2:
            name = _text(buf, value)
        elif number == 2 and wire == 2:  # TypeProto
            for t_num, t_wire, t_val in _fields(buf, *value):
                if t_num != 1 or t_wire != 2:  # tensor_type only
                    continue
                is_tensor = True
                for f_num, f_wire, f_val in _fields(buf, *t_val):
                    if f_num == 1 and f_wire == 0:
                        dtype = _ELEM_TYPES.get(f_val, np.float32)
                    elif f_num == 2 and f_wire == 2:  # TensorShapeProto
                        for d_num, d_wire, d_val in _fields(buf, *f_val):
                            if d_num != 1 or d_wire != 2:
                                continue
                            dim: int | str | None = None
                            for x_num, x_wire, x_val in _fields(buf, *d_val):
                                if x_num == 1 and x_wire == 0:
                                    dim = x_val
                                elif x_num == 2 and x_wire == 2:
                                    dim = _text(buf, x_val)
                            dims.append(dim)
    if name is None or not is_tensor:
        return None
    return TensorInfo(name, dtype, tuple(dims))


def _initializer_name(buf: _Buffer, span: tuple[int, int]) -> str | None:
    for number, wire, value in _fields(buf, *span):
        if number == 8 and wire == 2:  # TensorProto.name
            return _text(buf, value)
    return None


def read_graph_io(path: str | os.PathLike[str]) -> GraphIO | None:
    """Inputs and outputs of an ONNX file as onnxruntime would report them.

    Returns None when the file cannot be parsed (the caller then leaves the
    decision to the runtime, which opens the file with onnxruntime anyway).
    Graph inputs that are also initializers (old IR versions) are left out,
    like ``InferenceSession.get_inputs()`` does.
    """
    return _read_mapped(path, _parse)


def has_op(path: str | os.PathLike[str], op_type: bytes) -> bool:
    """Whether an .onnx file names ``op_type`` anywhere (a scan of the raw bytes, weights included).

    Cruder than :func:`read_node_int_attributes` and works on files it cannot parse; False when
    the file cannot be read.
    """
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return buf.find(op_type) >= 0
    except (OSError, ValueError):
        return False


def _read_mapped(path: str | os.PathLike[str], parse: Callable[[mmap.mmap, int], _T]) -> _T | None:
    """``parse(buffer, size)`` over a memory map of the file; None when it is empty, unreadable or malformed."""
    try:
        with open(Path(path), "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size == 0:
                return None
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                return parse(buf, size)
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def _graph(buf: _Buffer, size: int) -> tuple[int, int] | None:
    """The span of ``ModelProto.graph`` (field 7), or None."""
    graph = None
    for number, wire, value in _fields(buf, 0, size):
        if number == 7 and wire == 2:
            graph = value
    return graph


def _parse(buf: _Buffer, size: int) -> GraphIO | None:
    graph = _graph(buf, size)
    if graph is None:
        return None
    inputs: dict[str, TensorInfo] = {}
    outputs: dict[str, TensorInfo] = {}
    initializers: set[str] = set()
    for number, wire, value in _fields(buf, *graph):
        if wire != 2:
            continue
        if number == 11:
            info = _value_info(buf, value)
            if info is not None:
                inputs[info.name] = info
        elif number == 12:
            info = _value_info(buf, value)
            if info is not None:
                outputs[info.name] = info
        elif number == 5:
            name = _initializer_name(buf, value)
            if name:
                initializers.add(name)
    for name in initializers & set(inputs):
        del inputs[name]
    return inputs, outputs


def read_node_int_attributes(path: str | os.PathLike[str], op_type: str) -> list[dict[str, int]] | None:
    """The integer attributes of every top-level node of ``op_type``, in graph order.

    ``GraphProto.node`` (field 1) -> ``NodeProto.op_type`` (4) / ``attribute`` (5) ->
    ``AttributeProto.name`` (1) / ``i`` (3, a signed int64).  Returns None when the file
    cannot be parsed.
    """
    name = op_type.encode()
    return _read_mapped(path, lambda buf, size: _node_attributes(buf, size, name) if buf.find(name) >= 0 else [])


def _node_attributes(buf: _Buffer, size: int, op_type: bytes) -> list[dict[str, int]] | None:
    graph = _graph(buf, size)
    if graph is None:
        return None
    found: list[dict[str, int]] = []
    for number, wire, node in _fields(buf, *graph):
        if number != 1 or wire != 2:
            continue
        op = None
        attributes: dict[str, int] = {}
        for n_num, n_wire, n_val in _fields(buf, *node):
            if n_num == 4 and n_wire == 2:
                op = bytes(buf[n_val[0] : n_val[1]])
            elif n_num == 5 and n_wire == 2:
                name, value = None, None
                for a_num, a_wire, a_val in _fields(buf, *n_val):
                    if a_num == 1 and a_wire == 2:
                        name = _text(buf, a_val)
                    elif a_num == 3 and a_wire == 0:
                        value = a_val - (1 << 64) if a_val >= 1 << 63 else a_val  # int64 two's complement
                if name is not None and value is not None:
                    attributes[name] = value
        if op == op_type:
            found.append(attributes)
    return found


#: onnxruntime's mixture-of-experts operators (com.microsoft): a layer's router scores and its experts' weights.
EXPERT_OPS = ("MoE", "QMoE")


@dataclass(frozen=True)
class ExpertNode:
    """One com.microsoft ``MoE`` / ``QMoE`` node: its inputs, integer attributes, and the shapes known of them.

    ``shapes`` maps an input name to its dims, from the initializer (weights, scales, biases) or
    from the declared type of a computed tensor (the router scores); unknown names are absent.
    """

    name: str
    op_type: str
    inputs: tuple[str, ...]
    attributes: dict[str, int] = field(default_factory=dict)
    shapes: dict[str, tuple[int | str | None, ...]] = field(default_factory=dict)


def read_expert_nodes(path: str | os.PathLike[str]) -> list[ExpertNode] | None:
    """Every top-level com.microsoft ``MoE`` / ``QMoE`` node of an .onnx file (none: an empty list).

    ``GraphProto.node`` (1) -> ``NodeProto.input`` (1) / ``name`` (3) / ``op_type`` (4) /
    ``attribute`` (5) / ``domain`` (7); ``initializer`` (5) -> ``TensorProto.dims`` (1) / ``name`` (8);
    ``input`` (11) and ``value_info`` (13) -> declared shapes.  Weight bytes are skipped by length
    (never scanned), and a graph without expert nodes is walked once.  Returns None when the file
    cannot be parsed.
    """
    return _read_mapped(path, _expert_nodes)


def _expert_nodes(buf: _Buffer, size: int) -> list[ExpertNode] | None:
    graph = _graph(buf, size)
    if graph is None:
        return None
    nodes = [
        node
        for number, wire, value in _fields(buf, *graph)
        if number == 1 and wire == 2 and (node := _expert_node(buf, value)) is not None
    ]
    if not nodes:
        return []
    wanted = {tensor for node in nodes for tensor in node[2] if tensor}
    known: dict[str, tuple[int | str | None, ...]] = {}
    for number, wire, value in _fields(buf, *graph):
        if wire != 2:
            continue
        if number == 5:
            name, dims = _initializer_dims(buf, value)
            if name in wanted:
                known[name] = dims
        elif number in (11, 13):
            info = _value_info(buf, value)
            if info is not None and info.name in wanted:
                known.setdefault(info.name, info.shape)
    return [
        ExpertNode(name, op, inputs, attributes, {t: known[t] for t in inputs if t in known})
        for name, op, inputs, attributes in nodes
    ]


def _expert_node(buf: _Buffer, span: tuple[int, int]) -> tuple[str, str, tuple[str, ...], dict[str, int]] | None:
    op = domain = name = ""
    inputs: list[str] = []
    attributes: dict[str, int] = {}
    for number, wire, value in _fields(buf, *span):
        if wire != 2:
            continue
        if number == 1:
            inputs.append(_text(buf, value))
        elif number == 3:
            name = _text(buf, value)
        elif number == 4:
            op = _text(buf, value)
        elif number == 7:
            domain = _text(buf, value)
        elif number == 5:
            attr_name, attr_value = None, None
            for a_num, a_wire, a_val in _fields(buf, *value):
                if a_num == 1 and a_wire == 2:
                    attr_name = _text(buf, a_val)
                elif a_num == 3 and a_wire == 0:
                    attr_value = a_val - (1 << 64) if a_val >= 1 << 63 else a_val
            if attr_name is not None and attr_value is not None:
                attributes[attr_name] = attr_value
    if op not in EXPERT_OPS or domain != "com.microsoft":
        return None
    return name or op, op, tuple(inputs), attributes


def _initializer_dims(buf: _Buffer, span: tuple[int, int]) -> tuple[str | None, tuple[int, ...]]:
    name = None
    dims: list[int] = []
    for number, wire, value in _fields(buf, *span):
        if number == 8 and wire == 2:
            name = _text(buf, value)
        elif number == 1 and wire == 0:
            dims.append(value)
        elif number == 1 and wire == 2:  # packed
            pos, end = value
            while pos < end:
                dim, pos = _varint(buf, pos, end)
                dims.append(dim)
    return name, tuple(dims)
