"""Building the fused graph: one ``GroupQueryAttention`` node per matched layer.

Sequence lengths come from the attention mask; at the rotary level q/k/v become one
packed ``MatMul`` and the cos/sin tables are computed by the model's own rotary subgraph
for every position.  Nodes nothing reads any more are pruned.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from .match import _Matcher, _NoMatch, _Rotary
from .onnx_io import _session, import_onnx
from .refusals import _context


class _Fuser(_Matcher):
    """The matched layers rewritten in place into ``GroupQueryAttention`` (:meth:`run`)."""

    # ---------------------------------------------------------------- rewriting
    def run(self) -> tuple[Any, int, list[str]]:
        layers = self.find_layers()
        heads, kv_heads, head_size = self.head_counts()
        notes: list[str] = []
        rotary = None
        if not self.rotary and "position_ids" not in self.inputs:
            raise _NoMatch(
                "the graph derives positions from the cache length (it has no position_ids input), which "
                "a shared KV buffer changes; only the rotary level, where the operator rotates, would apply"
            )
        if self.rotary and head_size % 16:
            raise _NoMatch(f"head size {head_size} is not a multiple of 16 (onnxruntime's rotary kernel needs it)")
        if self.rotary:
            rots = [layer.rotary for layer in layers if layer.rotary is not None]
            if len(rots) == len(layers) and len({(r.cos, r.sin) for r in rots}) == 1:
                rotary = self.rotary_tables(rots[0], head_size)
            if rotary is None:
                raise _NoMatch(
                    "the queries and keys are not rotated by one shared rotary embedding of plain projections"
                )
        helper = self.onnx.helper
        TP = self.onnx.TensorProto
        new_nodes: list[Any] = []
        # lengths from the attention mask: seqlens_k = sum(mask) - 1, total = mask width
        mask = "attention_mask"
        s = {
            k: self.fresh(k)
            for k in ("mask_sum", "one", "seqlens64", "seqlens_k", "shape", "idx", "width", "total_len", "axes", "flat")
        }
        new_nodes += [
            helper.make_node("Constant", [], [s["axes"]], value=helper.make_tensor(s["axes"], TP.INT64, [1], [1])),
            helper.make_node("ReduceSum", [mask, s["axes"]], [s["mask_sum"]], keepdims=0),
            helper.make_node("Constant", [], [s["one"]], value=helper.make_tensor(s["one"], TP.INT64, [], [1])),
            helper.make_node("Cast", [s["mask_sum"]], [s["seqlens64"]], to=TP.INT64),
            helper.make_node("Sub", [s["seqlens64"], s["one"]], [s["seqlens_k"] + "_64"]),
            helper.make_node("Cast", [s["seqlens_k"] + "_64"], [s["seqlens_k"]], to=TP.INT32),
            helper.make_node("Shape", [mask], [s["shape"]]),
            helper.make_node("Constant", [], [s["idx"]], value=helper.make_tensor(s["idx"], TP.INT64, [], [1])),
            helper.make_node("Gather", [s["shape"], s["idx"]], [s["width"]], axis=0),
            helper.make_node("Cast", [s["width"]], [s["total_len"]], to=TP.INT32),
        ]
        flat = s["flat"]
        new_nodes.append(
            helper.make_node("Constant", [], [flat], value=helper.make_tensor(flat, TP.INT64, [3], [0, 0, -1]))
        )
        cos_cache = sin_cache = ""  # named only when the operator rotates
        if rotary is not None:
            cos_cache, sin_cache = self.fresh("cos_cache"), self.fresh("sin_cache")
            from onnx import numpy_helper

            self.graph.initializer.extend(
                [numpy_helper.from_array(rotary[0], cos_cache), numpy_helper.from_array(rotary[1], sin_cache)]
            )
        removed = set()
        for layer in layers:
            tag = f"layer{layer.index}"
            if rotary is not None and layer.rotary is not None:
                packed_in = self.pack_qkv(layer.rotary, tag, new_nodes)
                qkv = [packed_in, "", ""]
            else:
                qkv = [
                    self.to_bsh(layer.q, tag + "_q", flat, new_nodes),
                    self.to_bsh(layer.k, tag + "_k", flat, new_nodes),
                    self.to_bsh(layer.v, tag + "_v", flat, new_nodes),
                ]
            inputs = qkv + [layer.past_k, layer.past_v, s["seqlens_k"], s["total_len"]]
            attrs: dict[str, Any] = dict(num_heads=heads, kv_num_heads=kv_heads, scale=float(layer.scale))
            if rotary is not None:
                inputs += [cos_cache, sin_cache]
                attrs.update(do_rotary=1, rotary_interleaved=0)
            gqa_out = self.fresh(tag + "_attn")
            new_nodes.append(
                helper.make_node(
                    "GroupQueryAttention",
                    inputs,
                    [gqa_out, layer.present_k, layer.present_v],
                    name=f"/inference4py/{tag}/GroupQueryAttention",
                    domain="com.microsoft",
                    **attrs,
                )
            )
            for node in layer.concat_nodes:
                removed.add(id(node))
            # the attention output's readers now read the operator's output
            for node in self.consumers.get(layer.out, []):
                for i, t in enumerate(node.input):
                    if t == layer.out:
                        node.input[i] = gqa_out
            if layer.out in self.outputs:
                raise _NoMatch("the attention output is a graph output")
        kept = [n for n in self.graph.node if id(n) not in removed]
        del self.graph.node[:]
        self.graph.node.extend(kept + new_nodes)
        self.topological_sort()
        self.prune()
        if not any(op.domain == "com.microsoft" for op in self.model.opset_import):
            self.model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
        if rotary is not None:
            notes.append(f"rotary tables for {rotary[0].shape[0]} positions")
        return self.model, len(layers), notes

    def head_counts(self) -> tuple[int, int, int]:
        cfg = self.config
        heads = cfg.get("num_attention_heads") or cfg.get("n_head")
        hidden = cfg.get("hidden_size") or cfg.get("n_embd")
        if not isinstance(heads, int) or heads <= 0:
            raise _NoMatch("config.json does not give num_attention_heads")
        kv = cfg.get("num_key_value_heads") or heads
        head_size = cfg.get("head_dim") or (hidden // heads if isinstance(hidden, int) else None)
        if not isinstance(head_size, int):
            raise _NoMatch("config.json does not give the head size")
        return int(heads), int(kv), int(head_size)

    def rotary_tables(self, rot: _Rotary, head_size: int) -> tuple[np.ndarray, np.ndarray] | None:
        """cos/sin ``[positions, head_size / 2]`` from the model's own rotary subgraph."""
        positions = _context(self.config)
        if not positions:
            return None
        try:
            cos, sin = _evaluate(
                self.model,
                ["position_ids"],
                [rot.cos, rot.sin],
                {"position_ids": np.arange(positions, dtype=np.int64)[None, :]},
            )
        except _NoMatch:
            return None
        if cos.ndim != 3 or cos.shape[-1] != head_size or cos.shape[1] != positions:
            return None
        half = head_size // 2
        cos, sin = cos[0], sin[0]
        if not (np.array_equal(cos[:, :half], cos[:, half:]) and np.array_equal(sin[:, :half], sin[:, half:])):
            return None  # not the rotate_half layout (duplicated halves)
        return np.ascontiguousarray(cos[:, :half], dtype=np.float32), np.ascontiguousarray(
            sin[:, :half], dtype=np.float32
        )

    def pack_qkv(self, rot: _Rotary, tag: str, nodes: list[Any]) -> str:
        from onnx import numpy_helper

        weights = [w for w in (self.const(name) for name in rot.weights) if w is not None and w.ndim == 2]
        if (
            len(weights) != len(rot.weights)
            or len({w.shape[0] for w in weights}) != 1
            or len({w.dtype for w in weights}) != 1
        ):
            raise _NoMatch("q/k/v weights do not share an input size")
        packed_w = self.fresh(tag + "_qkv_weight")
        self.graph.initializer.append(numpy_helper.from_array(np.concatenate(weights, axis=1), packed_w))
        out = self.fresh(tag + "_qkv")
        nodes.append(self.onnx.helper.make_node("MatMul", [rot.x, packed_w], [out]))
        if any(b is not None for b in rot.biases):
            parts = []
            for b, w in zip(rot.biases, weights):
                bias = self.const(b) if b is not None else None
                parts.append(bias.reshape(-1) if bias is not None else np.zeros(w.shape[1], w.dtype))
            packed_b = self.fresh(tag + "_qkv_bias")
            self.graph.initializer.append(numpy_helper.from_array(np.concatenate(parts), packed_b))
            biased = self.fresh(tag + "_qkv_biased")
            nodes.append(self.onnx.helper.make_node("Add", [out, packed_b], [biased]))
            out = biased
        return out

    def to_bsh(self, tensor: str, tag: str, flat: str, nodes: list[Any]) -> str:
        """[B, N, S, D] -> [B, S, N*D]."""
        t, r = self.fresh(tag + "_bsnd"), self.fresh(tag + "_bsh")
        nodes.append(self.onnx.helper.make_node("Transpose", [tensor], [t], perm=[0, 2, 1, 3]))
        nodes.append(self.onnx.helper.make_node("Reshape", [t, flat], [r]))
        return r

    def topological_sort(self) -> None:
        produced = set(self.inputs) | {t.name for t in self.graph.initializer} | {""}
        pending = list(self.graph.node)
        ordered = []
        while pending:
            rest = []
            for node in pending:
                if all(i in produced for i in node.input):
                    ordered.append(node)
                    produced.update(node.output)
                else:
                    rest.append(node)
            if len(rest) == len(pending):
                raise _NoMatch("the rewritten graph has a cycle or a dangling input")
            pending = rest
        del self.graph.node[:]
        self.graph.node.extend(ordered)

    def prune(self) -> None:
        """Drop nodes, initializers and inputs no graph output depends on."""
        nodes, needed = _needed(self.graph, self.outputs)
        del self.graph.node[:]
        self.graph.node.extend(nodes)
        for items in (self.graph.initializer, self.graph.input, self.graph.value_info):
            kept = [t for t in items if t.name in needed]
            del items[:]
            items.extend(kept)


def _needed(graph: Any, outputs: Iterable[str]) -> tuple[list[Any], set[str]]:
    """The nodes ``outputs`` depend on (in graph order) and every tensor name they read or make."""
    producer = {o: n for n in graph.node for o in n.output}
    needed: set[str] = set()
    live: set[int] = set()
    stack = list(outputs)
    while stack:
        t = stack.pop()
        if t in needed:
            continue
        needed.add(t)
        node = producer.get(t)
        if node is not None and id(node) not in live:
            live.add(id(node))
            stack.extend(i for i in node.input if i)
    return [n for n in graph.node if id(n) in live], needed


def _evaluate(
    model: Any, inputs: Sequence[str], outputs: Sequence[str], feeds: Mapping[str, np.ndarray]
) -> list[np.ndarray]:
    """Run the part of ``model`` that computes ``outputs`` from ``inputs`` alone (a small graph of its
    own: only the nodes and initializers it needs are copied)."""
    helper = import_onnx().helper
    g = model.graph
    nodes, needed = _needed(g, outputs)
    missing = {i.name for i in g.input if i.name in needed} - set(inputs)
    if missing:
        raise _NoMatch(f"the rotary tables depend on {sorted(missing)}")
    sub = helper.make_model(
        helper.make_graph(
            nodes,
            "subgraph",
            [i for i in g.input if i.name in inputs],
            [helper.make_empty_tensor_value_info(o) for o in outputs],
            [t for t in g.initializer if t.name in needed],
        ),
        opset_imports=list(model.opset_import),
        ir_version=model.ir_version,
    )
    try:
        return _session(sub).run(list(outputs), dict(feeds))
    except Exception as exc:
        raise _NoMatch(f"the rotary subgraph could not be evaluated: {exc}") from exc
