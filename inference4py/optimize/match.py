"""Finding the attention layers in an exported graph, and the rotary embedding that feeds them.

For each cache entry (``past_key_values.N.key`` -> ``present.N.key``) the matcher follows
the dataflow: the ``Concat`` that appends the new keys, the ``MatMul``/``Softmax``/
``MatMul`` that read the cache, the ``Transpose``/``Reshape`` that hands the result to the
output projection.  For the rotary level it also recognises ``x * cos + rotate_half(x) * sin``
over plain ``MatMul`` (+ bias) projections.  A graph without that dataflow raises
:class:`_NoMatch` with where it differs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .onnx_io import import_onnx
from .refusals import _text_config

_PAST = re.compile(r"^past_key_values\.(\d+)\.(key|value)$")


class _NoMatch(Exception):
    """The graph does not have the dataflow a fusion needs (the message says where)."""


@dataclass
class _Layer:
    index: int
    past_k: str
    past_v: str
    present_k: str
    present_v: str
    q: str  # [B, H, S, D] rotated queries
    k: str  # [B, kvH, S, D] rotated new keys
    v: str  # [B, kvH, S, D] new values
    out: str  # [B, S, H*D] attention output
    scale: float
    concat_nodes: tuple[Any, Any]
    rotary: _Rotary | None = None


@dataclass
class _Rotary:
    x: str  # normalized hidden states feeding q/k/v
    weights: tuple[str, str, str]  # q, k, v weight initializers [hidden, out]
    biases: tuple[str | None, str | None, str | None]
    cos: str  # [B, S, D] tensors shared by the layers
    sin: str


class _Matcher:
    """An index of the graph (producers, consumers, constants) and the attention layers and
    rotary embedding found in it by following the dataflow from the cache inputs."""

    def __init__(self, model: Any, config: Mapping[str, Any], *, rotary: bool) -> None:
        self.onnx = import_onnx()
        self.model = model  # rewritten in place
        self.graph = self.model.graph
        self.config = _text_config(config)
        self.rotary = rotary
        self.init = {t.name: t for t in self.graph.initializer}
        self.producer: dict[str, Any] = {}
        self.consumers: dict[str, list[Any]] = {}
        for node in self.graph.node:
            for o in node.output:
                self.producer[o] = node
            for i in node.input:
                self.consumers.setdefault(i, []).append(node)
        self.inputs = {i.name for i in self.graph.input}
        self.outputs = {o.name for o in self.graph.output}
        self._counter = 0

    # ---------------------------------------------------------------- helpers
    def const(self, name: str) -> np.ndarray | None:
        from onnx import numpy_helper

        if name in self.init:
            return numpy_helper.to_array(self.init[name])
        node = self.producer.get(name)
        if node is not None and node.op_type == "Identity":  # exporters share equal weights this way
            return self.const(node.input[0])
        if node is not None and node.op_type == "Constant":
            for a in node.attribute:
                if a.name == "value":
                    return numpy_helper.to_array(a.t)
                if a.name in ("value_float", "value_int"):
                    return np.array(a.f if a.name == "value_float" else a.i)
        return None

    def attr(self, node: Any, name: str, default: Any = None) -> Any:
        for a in node.attribute:
            if a.name == name:
                return self.onnx.helper.get_attribute_value(a)
        return default

    def only_consumer(self, name: str) -> Any:
        users = self.consumers.get(name, [])
        if len(users) != 1 or name in self.outputs:
            raise _NoMatch(f"{name} feeds {len(users)} nodes where one was expected")
        return users[0]

    def scalar_scale(self, node: Any, tensor: str) -> tuple[float, str] | None:
        """For ``Mul``/``Div`` of ``tensor``-side input by a scalar constant: (factor, other input)."""
        if node.op_type not in ("Mul", "Div") or len(node.input) != 2:
            return None
        a, b = node.input
        for this, other, divides in ((a, b, node.op_type == "Div"), (b, a, False)):
            value = self.const(other)
            if value is not None and value.size == 1 and (node.op_type == "Mul" or other == b):
                factor = float(value.reshape(()))
                if divides:
                    if factor == 0:
                        return None
                    factor = 1.0 / factor
                return factor, this
        return None

    def fresh(self, stem: str) -> str:
        self._counter += 1
        return f"/inference4py/{stem}_{self._counter}"

    # ---------------------------------------------------------------- matching
    def find_layers(self) -> list[_Layer]:
        pasts: dict[int, dict[str, str]] = {}
        for name in self.inputs:
            m = _PAST.match(name)
            if m:
                pasts.setdefault(int(m.group(1)), {})[m.group(2)] = name
        if not pasts:
            raise _NoMatch("the graph has no past_key_values.N.key/value inputs")
        if "attention_mask" not in self.inputs:
            raise _NoMatch("the graph has no attention_mask input (GroupQueryAttention reads lengths from it)")
        layers = []
        for index in sorted(pasts):
            entry = pasts[index]
            if set(entry) != {"key", "value"}:
                raise _NoMatch(f"layer {index} lacks a key or a value cache input")
            layers.append(self.match_layer(index, entry["key"], entry["value"]))
        return layers

    def cache_concat(self, past: str) -> tuple[Any, str, str]:
        """The Concat appending new entries to ``past``: (node, new entries, present output)."""
        users = [n for n in self.consumers.get(past, []) if n.op_type != "Shape"]  # the past length is read too
        concat = [n for n in users if n.op_type == "Concat"]
        if len(users) != 1 or len(concat) != 1:
            raise _NoMatch(f"{past} is not consumed by exactly one Concat")
        node = concat[0]
        axis = self.attr(node, "axis")
        if axis not in (2, -2) or len(node.input) != 2 or node.input[0] != past:
            raise _NoMatch(f"{past} is not concatenated with the new entries on the sequence axis")
        present = node.output[0]
        if present not in self.outputs:
            raise _NoMatch(f"the cache Concat of {past} does not produce a graph output")
        return node, node.input[1], present

    def match_layer(self, index: int, past_k: str, past_v: str) -> _Layer:
        ck, k_new, present_k = self.cache_concat(past_k)
        cv, v_new, present_v = self.cache_concat(past_v)
        softmax = self.find_downstream(present_k, "Softmax", depth=10)
        if self.attr(softmax, "axis", -1) not in (-1, 3):
            raise _NoMatch(f"layer {index}: softmax is not over the key axis")
        scores, scale = self.scores_matmul(softmax.input[0], present_k)
        q_side, q_scale = self.strip_scale(scores.input[0])
        k_scale = self.key_side(scores.input[1], present_k)
        probs = softmax.output[0]
        users = self.consumers.get(probs, [])
        if sorted(n.op_type for n in users) == ["IsNaN", "Where"]:  # torch's SDPA export: Where(IsNaN(p), 0, p)
            where = next(n for n in users if n.op_type == "Where")
            isnan = next(n for n in users if n.op_type == "IsNaN")
            zero = self.const(where.input[1])
            if where.input[0] != isnan.output[0] or where.input[2] != probs or zero is None or np.any(zero != 0):
                raise _NoMatch(f"layer {index}: unexpected use of the attention probabilities")
            probs = where.output[0]
        mm = self.only_consumer(probs)
        if mm.op_type != "MatMul" or mm.input[0] != probs:
            raise _NoMatch(f"layer {index}: the probabilities do not multiply the values")
        self.value_side(mm.input[1], present_v)
        tr = self.only_consumer(mm.output[0])
        if tr.op_type != "Transpose" or list(self.attr(tr, "perm", [])) != [0, 2, 1, 3]:
            raise _NoMatch(f"layer {index}: the attention output is not transposed back to [B, S, H, D]")
        rs = self.only_consumer(tr.output[0])
        if rs.op_type != "Reshape":
            raise _NoMatch(f"layer {index}: the attention output is not reshaped to [B, S, hidden]")
        layer = _Layer(
            index,
            past_k,
            past_v,
            present_k,
            present_v,
            q_side,
            k_new,
            v_new,
            rs.output[0],
            q_scale * k_scale * scale,
            (ck, cv),
        )
        if self.rotary:
            layer.rotary = self.match_rotary(layer)
        return layer

    def find_downstream(self, start: str, op_type: str, depth: int) -> Any:
        frontier, seen, found = [start], {start}, []
        for _ in range(depth):
            nxt = []
            for t in frontier:
                for n in self.consumers.get(t, []):
                    if n.op_type == "Shape":
                        continue
                    if n.op_type == op_type:
                        found.append(n)
                        continue
                    for o in n.output:
                        if o not in seen:
                            seen.add(o)
                            nxt.append(o)
            if found:
                break
            frontier = nxt
        unique = {id(n): n for n in found}
        if len(unique) != 1:
            raise _NoMatch(f"{start} reaches {len(unique)} {op_type} nodes where one was expected")
        return next(iter(unique.values()))

    def scores_matmul(self, tensor: str, present_k: str) -> tuple[Any, float]:
        """Walk back from the softmax input over the scale and the additive mask to ``q @ k^T``."""
        scale = 1.0
        for _ in range(6):
            node = self.producer.get(tensor)
            if node is None:
                break
            if node.op_type == "MatMul":
                return node, scale
            scaled = self.scalar_scale(node, tensor)
            if scaled is not None:
                factor, tensor = scaled
                scale *= factor
                continue
            if node.op_type == "Add":
                # one side is the scores, the other the mask; the scores side reaches the key cache
                sides = [t for t in node.input if self.reaches(t, present_k, 8)]
                if len(sides) != 1:
                    raise _NoMatch("the softmax input is not scores + mask")
                mask_side = [t for t in node.input if t != sides[0]][0]
                if self.reaches(mask_side, present_k, 8):
                    raise _NoMatch("the attention mask depends on the keys")
                tensor = sides[0]
                continue
            raise _NoMatch(f"unexpected {node.op_type} between the scores and the softmax")
        raise _NoMatch("no q @ k^T MatMul before the softmax")

    def reaches(self, tensor: str, target: str, depth: int) -> bool:
        frontier = [tensor]
        for _ in range(depth):
            nxt = []
            for t in frontier:
                if t == target:
                    return True
                node = self.producer.get(t)
                if node is not None and node.op_type != "Shape":  # a shape is not a value dependency
                    nxt.extend(node.input)
            frontier = nxt
        return target in frontier

    def strip_scale(self, tensor: str) -> tuple[str, float]:
        scale = 1.0
        while True:
            node = self.producer.get(tensor)
            scaled = self.scalar_scale(node, tensor) if node is not None else None
            if scaled is None:
                return tensor, scale
            factor, tensor = scaled
            scale *= factor

    def key_side(self, tensor: str, present_k: str) -> float:
        """From the scores MatMul's right input back to the key cache: k^T, repeat_kv, scale."""
        scale, transposed = 1.0, 0
        for _ in range(12):
            if tensor == present_k:
                if transposed != 1:
                    raise _NoMatch("the keys are not transposed once before q @ k^T")
                return scale
            node = self.producer.get(tensor)
            if node is None:
                break
            scaled = self.scalar_scale(node, tensor)
            if scaled is not None:
                factor, tensor = scaled
                scale *= factor
                continue
            if node.op_type == "Transpose":
                perm = list(self.attr(node, "perm", []))
                if perm != [0, 1, 3, 2]:
                    raise _NoMatch(f"unexpected key transpose {perm}")
                transposed += 1
            elif node.op_type not in ("Reshape", "Expand", "Unsqueeze"):
                raise _NoMatch(f"unexpected {node.op_type} between the key cache and q @ k^T")
            tensor = node.input[0]
        raise _NoMatch("q @ k^T does not read the key cache")

    def value_side(self, tensor: str, present_v: str) -> None:
        for _ in range(8):
            if tensor == present_v:
                return
            node = self.producer.get(tensor)
            if node is None or node.op_type not in ("Reshape", "Expand", "Unsqueeze"):
                break
            tensor = node.input[0]
        raise _NoMatch("the probabilities do not multiply the value cache")

    # ---------------------------------------------------------------- rotary
    def match_rotary(self, layer: _Layer) -> _Rotary | None:
        try:
            xq, wq, bq, cos_q, sin_q = self.rotated(layer.q)
            xk, wk, bk, cos_k, sin_k = self.rotated(layer.k)
            xv, wv, bv = self.projection(layer.v)
        except _NoMatch:
            return None
        if not (xq == xk == xv and cos_q == cos_k and sin_q == sin_k):
            return None
        return _Rotary(xq, (wq, wk, wv), (bq, bk, bv), cos_q, sin_q)

    def rotated(self, tensor: str) -> tuple[str, str, str | None, str, str]:
        """``tensor = x * cos + rotate_half(x) * sin`` with ``x`` a projection: (input, weight, bias, cos, sin)."""
        add = self.producer.get(tensor)
        if add is None or add.op_type != "Add":
            raise _NoMatch("not a rotary sum")
        muls = [m for m in (self.producer.get(t) for t in add.input) if m is not None and m.op_type == "Mul"]
        if len(muls) != len(add.input):
            raise _NoMatch("not a rotary sum of products")
        plain = half = None
        for m in muls:
            for t, other in ((m.input[0], m.input[1]), (m.input[1], m.input[0])):
                p = self.producer.get(t)
                if p is not None and p.op_type == "Concat" and len(p.input) == 2:
                    neg = self.producer.get(p.input[0])
                    if neg is not None and neg.op_type == "Neg":
                        half = (p, other)
                        break
            else:
                plain = m
        if plain is None or half is None:
            raise _NoMatch("no rotate_half")
        concat, sin = half
        neg = self.producer[concat.input[0]]
        s2, s1 = self.producer.get(neg.input[0]), self.producer.get(concat.input[1])
        if s1 is None or s2 is None or s1.op_type != "Slice" or s2.op_type != "Slice":
            raise _NoMatch("rotate_half does not slice halves")
        x = s1.input[0]
        if s2.input[0] != x or x not in plain.input:
            raise _NoMatch("rotate_half is not of the rotated tensor")
        cos = [t for t in plain.input if t != x][0]
        cos, sin = self.unsqueezed(cos), self.unsqueezed(sin)
        w, b, xin = self.heads_projection(x)
        return xin, w, b, cos, sin

    def unsqueezed(self, tensor: str) -> str:
        node = self.producer.get(tensor)
        if node is None or node.op_type != "Unsqueeze":
            raise _NoMatch("cos/sin are not unsqueezed over the heads")
        axes = self.const(node.input[1]) if len(node.input) > 1 else np.array(self.attr(node, "axes", []))
        if axes is None or list(np.ravel(axes)) != [1]:
            raise _NoMatch("cos/sin are not unsqueezed on axis 1")
        return node.input[0]

    def heads_projection(self, tensor: str) -> tuple[str, str | None, str]:
        """``tensor = Transpose(Reshape(x @ W [+ b]), 0213)``: (W, b, x)."""
        tr = self.producer.get(tensor)
        if tr is None or tr.op_type != "Transpose" or list(self.attr(tr, "perm", [])) != [0, 2, 1, 3]:
            raise _NoMatch("not a [B, S, H, D] -> [B, H, S, D] transpose")
        rs = self.producer.get(tr.input[0])
        if rs is None or rs.op_type != "Reshape":
            raise _NoMatch("no head reshape")
        return self.matmul_bias(rs.input[0])

    def projection(self, tensor: str) -> tuple[str, str, str | None]:
        w, b, x = self.heads_projection(tensor)
        return x, w, b

    def matmul_bias(self, tensor: str) -> tuple[str, str | None, str]:
        node = self.producer.get(tensor)
        bias = None
        if node is not None and node.op_type == "Add":
            consts = [t for t in node.input if self.const(t) is not None]
            if len(consts) != 1:
                raise _NoMatch("projection bias is not a constant")
            bias = consts[0]
            node = self.producer.get([t for t in node.input if t != bias][0])
        if node is None or node.op_type != "MatMul" or self.const(node.input[1]) is None:
            raise _NoMatch("projection is not a MatMul by a constant weight")
        return node.input[1], bias, node.input[0]
