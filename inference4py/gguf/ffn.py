"""A decoder layer's feed-forward part: the gated MLP, and what the mixture-of-experts modules ask of the builder.

:func:`gated_mlp` is ``down(act(x @ gate.T) * (x @ up.T))`` at the build's width (on the compiled
operators, gate and up are one ``GgmlMatMul`` with the activation inside it).  The dense decoders'
MLP and Qwen2-MoE's shared expert are both this.  :class:`GraphBuilder` is the part of the graph
builder (:mod:`inference4py.gguf.graph`) that the feed-forward modules use.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

import numpy as np

from inference4py.gguf.in_place import InPlace
from inference4py.gguf.parts import Part
from inference4py.gguf.reader import GGUFFile

__all__ = ["GraphBuilder", "activation", "gated_mlp"]


class GraphBuilder(Protocol):
    """What the feed-forward and latent-attention modules use of :class:`inference4py.gguf.graph._Builder`."""

    gguf: GGUFFile
    bits: int | None
    ggml: bool
    in_place: InPlace
    nodes: list[Any]  # onnx NodeProtos, in order (a graph output is named by renaming its node's output)

    def node(
        self, op: str, inputs: list[str], name: str, *, outputs: int = 1, domain: str = "", **attrs: Any
    ) -> list[str]: ...

    def one(self, op: str, inputs: list[str], name: str, *, domain: str = "", **attrs: Any) -> str: ...

    def initializer(self, array: np.ndarray, name: str) -> str: ...

    def ints(self, values: list[int]) -> str: ...

    def chunked(self, name: str, dtype: Any, shape: tuple[int, ...], parts: Iterator[np.ndarray]) -> str: ...

    def kind(self, tensor: str) -> str: ...

    def shape(self, parts: list[Part]) -> tuple[int, int]: ...

    def linear(self, x: str, parts: list[Part], name: str, bias: np.ndarray | None = None) -> str: ...

    def rms_norm(self, x: str, weight: np.ndarray, name: str, eps: float) -> str: ...


def activation(b: GraphBuilder, gate: str, kind: str, name: str) -> str:
    """``silu(gate)`` or ``gelu_tanh(gate)``, as transformers computes them."""
    if kind == "gelu_tanh":
        return b.one("Gelu", [gate], f"{name}/act_fn/Gelu", approximate="tanh")
    return b.one("Mul", [gate, b.one("Sigmoid", [gate], f"{name}/act_fn/Sigmoid")], f"{name}/act_fn/Mul")


def gated_mlp(b: GraphBuilder, x: str, gate_part: Part, up_part: Part, down_part: Part, act: str, name: str) -> str:
    """``down(act(x @ gate.T) * (x @ up.T))``: one product for gate and up where their storage allows it.

    ``name`` names the products (``model.layers.0.mlp`` -> ``model.layers.0.mlp.down_proj``); the other
    nodes are named under ``/model.layers.0/mlp``."""
    owner, _, part = name.rpartition(".")
    path = f"/{owner}/{part}"
    if b.ggml:  # one product of both with the activation applied in it: act(gate) * up
        gated = b.in_place.matmul(
            x, [(gate_part.tensor, gate_part.rows), (up_part.tensor, up_part.rows)], f"{name}.gate_up_proj", gate=act
        )
        return b.linear(gated, [down_part], f"{name}.down_proj")
    if b.kind(gate_part.tensor) == b.kind(up_part.tensor):  # one product for both, then split
        intermediate = b.shape([gate_part])[0]
        gate, up = b.node(
            "Split",
            [b.linear(x, [gate_part, up_part], f"{name}.gate_up_proj"), b.ints([intermediate, intermediate])],
            f"{path}/gate_up_split",
            outputs=2,
            axis=-1,
        )
    else:
        gate = b.linear(x, [gate_part], f"{name}.gate_proj")
        up = b.linear(x, [up_part], f"{name}.up_proj")
    gated = b.one("Mul", [activation(b, gate, act, path), up], f"{path}/Mul")
    return b.linear(gated, [down_part], f"{name}.down_proj")
