"""A GGUF file's matrices used in place, on inference4py's compiled operators.

Every matrix is an initializer whose external data is the GGUF file itself at the tensor's offset
(the session maps the file's pages: nothing is copied, nothing written to the folder), multiplied
by ``GgmlMatMul`` (a mixture-of-experts layer's experts by ``GgmlExpertMatMul``) and read by ``GgmlGather`` (:mod:`inference4py.engine.kernels`).  The graph
builder (:mod:`inference4py.gguf.graph`) asks this for a product or an embedding; which operator
holds a matrix is decided there.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from inference4py.engine.kernels import DOMAIN
from inference4py.gguf.reader import GGUFFile, require_gguf
from inference4py.gguf.store import ExternalData

__all__ = ["InPlace"]

Rows = slice | None  # the rows of a tensor a product reads (None: all)
_GATES = {"silu": 1, "gelu_tanh": 2}  # GgmlMatMul's gate attribute


class InPlace:
    """Products and embeddings over the file's own bytes.

    Args:
        gguf: The file being converted.
        store: The graph's initializer store (only its in-file references are used).
        node: The builder's ``one(op, inputs, name, domain=..., **attributes) -> output``.
        initializers: The builder's list of initializers, appended to.
    """

    def __init__(self, gguf: GGUFFile, store: ExternalData, node: Callable[..., str], initializers: list[Any]) -> None:
        self.gguf = gguf
        self.store = store
        self.node = node
        self.initializers = initializers
        self._tensors: dict[tuple[str, int, int], str] = {}

    def type_id(self, tensor: str) -> int:
        return int(require_gguf().GGMLQuantizationType[self.gguf.info(tensor).type])

    def tensor(self, tensor: str, rows: Rows = None) -> str:
        """Rows of ``tensor`` as an initializer that is the file's bytes in place: ``[rows, row bytes]`` uint8
        whose external data is the file at the rows' offset (a 3-D expert tensor's rows are every expert's,
        one after another). A tied head and the embedding share one."""
        total = math.prod(self.gguf.info(tensor).shape[:-1])
        window = range(total)[rows] if rows is not None else range(total)
        key = (tensor, window.start, window.stop)
        if key not in self._tensors:
            offset, length = self.gguf.span(tensor)
            row_bytes = length // total
            name = tensor if len(window) == total else f"{tensor}[{window.start}:{window.stop}]"
            start = offset + window.start * row_bytes
            self.initializers.append(self.store.in_file(name, self.gguf.path.name, start, (len(window), row_bytes)))
            self._tensors[key] = name
        return self._tensors[key]

    def matmul(self, x: str, parts: list[tuple[str, Rows]], name: str, *, gate: str | None = None) -> str:
        """``x @ W.T`` for up to three tensors' rows side by side, on their blocks as stored (activations
        rounded per block as llama.cpp rounds them for each type).  With ``gate`` (``silu`` or
        ``gelu_tanh``) and two parts (an MLP's gate and up): ``gate(x @ W0.T) * (x @ W1.T)``."""
        attrs = self._types([tensor for tensor, _ in parts], gate)
        cols = self.gguf.info(parts[0][0]).shape[-1]
        weights = [self.tensor(tensor, rows) for tensor, rows in parts]
        return self.node("GgmlMatMul", [x, *weights], f"{name}/GgmlMatMul", domain=DOMAIN, K=cols, **attrs)

    def experts(self, x: str, tensors: list[str], ids: str, name: str, *, gate: str | None = None) -> str:
        """Each token's products with its chosen experts' matrices (``GgmlExpertMatMul``): ``tensors`` are one
        3-D expert tensor ``[experts, out, in]`` (or gate and up), used in place as ``[experts x out, row bytes]``;
        ``x`` is ``[..., in]`` (shared by the k chosen experts) or ``[..., k, in]``; ``ids`` ``[..., k]``.  Only the
        chosen experts' blocks are read."""
        experts, _, cols = self.gguf.info(tensors[0]).shape
        attrs = self._types(tensors, gate)
        weights = [self.tensor(tensor) for tensor in tensors]
        return self.node(
            "GgmlExpertMatMul",
            [x, ids, *weights],
            f"{name}/GgmlExpertMatMul",
            domain=DOMAIN,
            K=cols,
            experts=experts,
            **attrs,
        )

    def _types(self, tensors: list[str], gate: str | None) -> dict[str, int]:
        """The product operators' type attributes (``type``, ``type1``, ...) and ``gate``."""
        attrs = {("type" if i == 0 else f"type{i}"): self.type_id(tensor) for i, tensor in enumerate(tensors)}
        if gate is not None:
            attrs["gate"] = _GATES[gate]
        return attrs

    def embedding(self, tensor: str, ids: str, name: str) -> str:
        """Rows ``ids`` of the table, dequantized from the file's blocks exactly as gguf dequantizes them."""
        cols = self.gguf.info(tensor).shape[-1]
        return self.node(
            "GgmlGather",
            [self.tensor(tensor), ids],
            f"{name}/GgmlGather",
            domain=DOMAIN,
            type=self.type_id(tensor),
            K=cols,
        )
