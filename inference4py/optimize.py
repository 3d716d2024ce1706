"""Attention fusion for exported decoder graphs: ``inference4py optimize FOLDER OUT``.

optimum (and ``torch.onnx``) export a decoder's attention as dozens of small
operators per layer: shape arithmetic, the rotary embedding, ``repeat_kv``, the
causal mask, ``Concat`` of the past cache, ``MatMul``/``Softmax``/``MatMul``.  On a
CPU those small kernels cost as much as the layer's weights.  This module
rewrites each layer's attention into one onnxruntime ``GroupQueryAttention``
node, the operator onnxruntime-genai's builder emits, so the engine runs the graph
with one pre-allocated KV buffer shared by past and present.

The rewrite is found from the graph, not from an architecture name.  For each
cache entry (``past_key_values.N.key`` -> ``present.N.key``) it follows the
dataflow: the ``Concat`` that appends the new keys, the ``MatMul``/``Softmax``/
``MatMul`` that read the cache, the ``Transpose``/``Reshape`` that hands the
result to the output projection.  Two levels:

* ``rotary``: when the keys and queries are rotated by the usual
  ``x * cos + rotate_half(x) * sin`` and their projections are plain ``MatMul``
  (+ bias), q/k/v become one packed ``MatMul`` and the rotation moves into the
  operator (``do_rotary``, cos/sin tables computed by the model's own rotary
  subgraph for every position).  This is the graph onnxruntime-genai builds.
* ``attention``: otherwise the rotated queries/keys are handed to the operator as
  they are (``do_rotary=0``).

Every rewrite is checked before it is written: the fused and the original graph
run the same random prompt and decode steps, and their logits must agree to
float32 precision; a rewrite that does not agree falls back to the next level,
and a graph with nothing to fuse is refused with the reason.  Models whose
attention is not plain causal softmax attention (sliding windows, logit soft
capping, ALiBi) are left alone.

The fused graph keeps ``input_ids``, ``attention_mask``, the cache inputs and
outputs, and the logits; ``GroupQueryAttention`` reads each row's length from
the attention mask and expects right-padded rows, which is what inference4py's
engine feeds it (``position_ids`` is dropped when the operator rotates).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from inference4py.errors import ConfigurationError, ModelLoadError, ModelNotFoundError, UnsupportedModelError

__all__ = ["FusionReport", "fuse_attention", "fused_model_folder", "optimize_folder"]

_log = logging.getLogger(__name__)

_PAST = re.compile(r"^past_key_values\.(\d+)\.(key|value)$")
_LEVELS = ("rotary", "attention")
_EXTERNAL_DATA_BYTES = 1_800_000_000  # protobuf's limit is 2 GB: larger graphs keep weights beside the file


@dataclass
class FusionReport:
    """What :func:`fuse_attention` did to one graph."""

    level: str  # "rotary" or "attention"
    layers: int
    nodes_before: int
    nodes_after: int
    max_logit_difference: float
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"{self.layers} attention layers fused into GroupQueryAttention ({self.level} level), "
            f"{self.nodes_before} -> {self.nodes_after} nodes, largest logit difference "
            f"{self.max_logit_difference:.2e}"
        )


# --------------------------------------------------------------------------- public


def optimize_folder(
    folder: str | os.PathLike[str], out: str | os.PathLike[str], *, level: str = "rotary"
) -> FusionReport:
    """Fuse the attention of a decoder-only model folder into ``out``.

    The folder's decoder graph (``model.onnx`` or ``decoder_model_merged.onnx``,
    also under ``onnx/``) is rewritten; every other file (config, tokenizer,
    generation config, chat template) is copied.

    Args:
        level: ``"rotary"`` (fold the rotary embedding and q/k/v projections into the
            operator when possible, else fall back) or ``"attention"`` (attention only).

    Raises:
        ModelNotFoundError: no folder, or no decoder graph in it.
        ConfigurationError: ``out`` is ``folder``, or an unknown level.
        UnsupportedModelError: nothing in the graph can be fused (the reason is named).
        ModelLoadError: the ``onnx`` package is missing or the graph cannot be read.
    """
    if level not in _LEVELS:
        raise ConfigurationError(f"level={level!r} is not a fusion level: use one of {list(_LEVELS)}.")
    src, dst = Path(folder).expanduser(), Path(out).expanduser()
    if not src.is_dir():
        raise ModelNotFoundError(f"Model folder {src} does not exist.")
    if dst.exists() and dst.resolve() == src.resolve():
        raise ConfigurationError(
            "The output folder must differ from the model folder: the fused graph replaces a file."
        )
    graph_path = _decoder_graph(src)
    onnx = _import_onnx()
    config = _read_json(src / "config.json")
    try:
        model = onnx.load(str(graph_path))
    except Exception as exc:  # onnx raises DecodeError / OSError / ValueError
        raise ModelLoadError(f"Could not read {graph_path} as an ONNX graph: {exc}") from exc
    fused, report = fuse_attention(model, config, level=level, reload=lambda: onnx.load(str(graph_path)))
    dst.mkdir(parents=True, exist_ok=True)
    rel = graph_path.relative_to(src)
    for path in src.rglob("*"):
        if path.is_dir() or path == graph_path or _is_weight_file_of(path, graph_path):
            continue
        target = dst / path.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    _save(fused, dst / rel)
    return report


#: Bumped whenever the rewrite changes, so cached fused folders of older rewrites are not reused.
FUSION_VERSION = 1


def fused_model_folder(
    folder: str | os.PathLike[str], *, level: str = "rotary", cache_dir: str | os.PathLike[str] | None = None
) -> Path:
    """The fused copy of ``folder``, made once and kept in the inference4py cache.

    What the builders' ``fuse_attention()`` uses.  The cache key is the decoder graph's
    path, size and modification time, the level and :data:`FUSION_VERSION`, so a
    re-downloaded or edited model is fused again.  The copy lives in
    ``cache_dir`` (default: ``INFERENCE4PY_CACHE``, else ``~/.cache/inference4py``) under
    ``fused/``; it holds the rewritten graph and copies of the folder's other files.

    Raises:
        Everything :func:`optimize_folder` raises (an unfusable model is refused with the reason).
    """
    import hashlib

    from inference4py import _env

    src = Path(folder).expanduser()
    if not src.is_dir():
        raise ModelNotFoundError(f"Model folder {src} does not exist.")
    graph = _decoder_graph(src)
    st = graph.stat()
    key = hashlib.sha256(
        f"{graph.resolve()}|{st.st_size}|{st.st_mtime_ns}|{level}|{FUSION_VERSION}".encode()
    ).hexdigest()
    root = Path(cache_dir).expanduser() if cache_dir is not None else _env.inference4py_cache() / "fused"
    out = root / key[:24]
    done = out / ".inference4py-fused"
    if done.is_file():
        return out
    tmp = root / f"{key[:24]}.partial-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        report = optimize_folder(src, tmp, level=level)
        (tmp / ".inference4py-fused").write_text(f"{src}\n{report.summary()}\n", encoding="utf-8")
        if out.exists():  # an unfinished copy of another process
            shutil.rmtree(out, ignore_errors=True)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    _log.info("fused %s into %s: %s", src, out, report.summary())
    return out


def fuse_attention(
    model: Any,
    config: Mapping[str, Any],
    *,
    level: str = "rotary",
    check: bool = True,
    reload: Callable[[], Any] | None = None,
) -> tuple[Any, FusionReport]:
    """Return ``model`` (an ``onnx.ModelProto`` with its weights) with fused attention.

    ``config`` is the model's config.json (head counts, head size, attention options).
    With ``check`` (the default) the result is compared with the original on random
    input; a level whose result differs falls back to the next one.  Without ``reload``
    the rewrite works on a copy and ``model`` is left as it is; with it, ``model`` itself
    is rewritten and ``reload()`` gives a fresh original for a fallback (for large
    models: one copy of the weights in memory instead of two).
    """
    refusal = _unsupported_attention(config)
    if refusal:
        raise UnsupportedModelError(f"Attention fusion is not available for this model: {refusal}")
    levels = _LEVELS[_LEVELS.index(level) :]
    reasons: list[str] = []
    nodes_before = len(model.graph.node)
    reference = _reference_logits(model) if check else None  # the original's logits, computed once
    source: Any = model
    for lvl in levels:
        if source is None:
            source = reload() if reload is not None else model
        work = source if reload is not None else _copy(source)
        source = None
        try:
            fused, layers, notes = _Fuser(work, config, rotary=(lvl == "rotary")).run()
        except _NoMatch as exc:
            reasons.append(f"{lvl}: {exc}")
            continue
        diff = _check(fused, reference) if reference is not None else 0.0
        if diff is None:
            reasons.append(f"{lvl}: the fused graph's logits differ from the original's")
            continue
        return fused, FusionReport(lvl, layers, nodes_before, len(fused.graph.node), diff, notes + reasons)
    raise UnsupportedModelError(
        "Nothing in this graph could be fused into GroupQueryAttention (" + "; ".join(reasons) + "). "
        "The model still runs unfused; onnxruntime-genai's builder is another way to get a fused graph."
    )


def _copy(model: Any) -> Any:
    import copy

    return copy.deepcopy(model)


# --------------------------------------------------------------------------- the rewrite


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


class _Fuser:
    def __init__(self, model: Any, config: Mapping[str, Any], *, rotary: bool) -> None:
        self.onnx = _import_onnx()
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


# --------------------------------------------------------------------------- checking


def _session(model: Any) -> Any:
    """An onnxruntime session of an in-memory model (through a temporary file beyond protobuf's 2 GB)."""
    import tempfile

    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 4
    if model.ByteSize() < _EXTERNAL_DATA_BYTES:
        return ort.InferenceSession(model.SerializeToString(), sess_options=opts, providers=["CPUExecutionProvider"])
    with tempfile.TemporaryDirectory(prefix="inference4py-fuse-") as tmp:
        path = Path(tmp) / "model.onnx"
        _import_onnx().save(
            model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location="model.onnx_data"
        )
        # external data files are read when the session loads; the folder can go afterwards
        opts.add_session_config_entry("session.use_device_allocator_for_initializers", "1")
        return ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])


def _evaluate(
    model: Any, inputs: Sequence[str], outputs: Sequence[str], feeds: Mapping[str, np.ndarray]
) -> list[np.ndarray]:
    """Run the part of ``model`` that computes ``outputs`` from ``inputs`` alone (a small graph of its
    own: only the nodes and initializers it needs are copied)."""
    helper = _import_onnx().helper
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


_CHECK_PROMPT, _CHECK_STEPS = 6, 4


def _check_tokens(vocab: Any) -> list[np.ndarray]:
    """The check's input: a random prompt, then one random token per decode step."""
    rng = np.random.default_rng(0)
    high = vocab if isinstance(vocab, int) and vocab > 0 else 100
    return [rng.integers(0, high, size=(1, _CHECK_PROMPT), dtype=np.int64)] + [
        rng.integers(0, high, size=(1, 1), dtype=np.int64) for _ in range(_CHECK_STEPS)
    ]


def _reference_logits(original: Any) -> tuple[list[np.ndarray], list[np.ndarray]] | None:
    """The original graph's last-position logits over the check's prompt and steps, as exported
    (each step's present fed back as past): (token chunks, logits per chunk)."""
    try:
        sess = _session(original)
    except Exception as exc:
        raise UnsupportedModelError(f"The original graph does not load in onnxruntime: {str(exc)[:300]}") from exc
    vocab = next(o for o in sess.get_outputs() if o.name == "logits").shape[-1]
    chunks = _check_tokens(vocab)
    names = [o.name for o in sess.get_outputs()]
    past: dict[str, np.ndarray] = {}
    logits, total = [], 0
    try:
        for chunk in chunks:
            total += chunk.shape[1]
            out = dict(zip(names, sess.run(names, _feeds(sess, chunk, total, past))))
            past = {n.replace("present", "past_key_values", 1): v for n, v in out.items() if n.startswith("present")}
            logits.append(out["logits"][:, -1].astype(np.float32))
    except _NoMatch as exc:
        raise UnsupportedModelError(f"Attention fusion cannot check this graph: {exc}.") from exc
    except Exception as exc:
        raise UnsupportedModelError(
            f"The original graph does not run a prompt and decode steps: {str(exc)[:300]}"
        ) from exc
    return chunks, logits


def _check(fused: Any, reference: tuple[list[np.ndarray], list[np.ndarray]]) -> float | None:
    """Largest logit difference of the fused graph from the reference (None: too large, or it fails).

    The fused graph runs the way inference4py's engine runs GroupQueryAttention graphs: one
    buffer per cache tensor bound as both past and present, the attention mask as wide as the
    buffer once the prompt is in.
    """
    chunks, expected = reference
    try:
        shared = _SharedRun(_session(fused), capacity=sum(c.shape[1] for c in chunks) + 2)
    except Exception as exc:
        _log.info("fused graph does not load: %s", exc)
        return None
    worst, total = 0.0, 0
    for chunk, ref in zip(chunks, expected):
        total += chunk.shape[1]
        try:
            got = shared.run(chunk, total)
        except Exception as exc:
            _log.info("fused graph check failed to run: %s", exc)
            return None
        if ref.shape != got.shape:
            return None
        diff = float(np.max(np.abs(ref - got)))
        tol = 1e-3 + 1e-3 * float(np.max(np.abs(ref)))
        if not np.isfinite(diff) or diff > tol or int(ref.argmax()) != int(got.argmax()):
            _log.info("fused logits differ by %g (tolerance %g)", diff, tol)
            return None
        worst = max(worst, diff)
    return worst


class _SharedRun:
    """The fused graph with one KV buffer per cache tensor bound as past and present (IO binding)."""

    def __init__(self, sess: Any, capacity: int) -> None:
        import onnxruntime as ort

        from inference4py.engine.sessions import ORT_TO_NUMPY

        self.sess, self.capacity, self.ort = sess, capacity, ort
        self.kv = {}
        self.inputs = {i.name: i for i in sess.get_inputs()}
        for i in sess.get_inputs():
            if i.name.startswith("past_key_values"):
                heads, size = i.shape[1], i.shape[3]
                if not isinstance(heads, int) or not isinstance(size, int):
                    raise _NoMatch(f"cannot size {i.name} {i.shape}")
                arr: np.ndarray = np.zeros((1, heads, capacity, size), dtype=ORT_TO_NUMPY.get(i.type, np.float32))
                self.kv[i.name] = (arr, ort.OrtValue.ortvalue_from_numpy(arr))
        self.dtypes = {n: ORT_TO_NUMPY.get(i.type, np.int64) for n, i in self.inputs.items()}

    def run(self, ids: np.ndarray, total: int) -> np.ndarray:
        n = ids.shape[1]
        binding = self.sess.io_binding()
        keep = []

        def bind(name: str, value: np.ndarray) -> None:
            value = np.ascontiguousarray(value.astype(self.dtypes[name]))
            keep.append(value)
            binding.bind_cpu_input(name, value)

        bind("input_ids", ids)
        if total == n:  # the first prompt: the mask is as wide as the prompt
            bind("attention_mask", np.ones((1, n)))
        else:  # later: the whole buffer, ones over the valid tokens
            bind("attention_mask", (np.arange(self.capacity) < total)[None, :])
        if "position_ids" in self.inputs:
            bind("position_ids", np.arange(total - n, total)[None, :])
        binding.bind_output("logits", "cpu")
        for name, (_, value) in self.kv.items():
            binding.bind_ortvalue_input(name, value)
            binding.bind_ortvalue_output(name.replace("past_key_values", "present", 1), value)
        self.sess.run_with_iobinding(binding)
        return binding.get_outputs()[0].numpy()[:, -1].astype(np.float32)


def _feeds(sess: Any, ids: np.ndarray, total: int, past: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    from inference4py.engine.sessions import ORT_TO_NUMPY

    feeds: dict[str, np.ndarray] = {}
    n = ids.shape[1]
    for i in sess.get_inputs():
        dtype = ORT_TO_NUMPY.get(i.type, np.float32)
        if i.name == "input_ids":
            feeds[i.name] = ids.astype(dtype)
        elif i.name == "attention_mask":
            feeds[i.name] = np.ones((1, total), dtype=dtype)
        elif i.name == "position_ids":
            feeds[i.name] = np.arange(total - n, total, dtype=dtype)[None, :]
        elif i.name in past:
            feeds[i.name] = past[i.name]
        elif i.name.startswith("past_key_values"):
            shape = [1 if j == 0 else (0 if j == 2 else d) for j, d in enumerate(i.shape)]
            if not all(isinstance(d, int) for d in shape):
                raise _NoMatch(f"cannot size {i.name} {i.shape}")
            feeds[i.name] = np.zeros(shape, dtype=dtype)
        elif i.name == "use_cache_branch":
            feeds[i.name] = np.array([bool(past)])
        else:
            raise _NoMatch(f"the check does not know how to feed input {i.name!r}")
    return feeds


# --------------------------------------------------------------------------- files


def _unsupported_attention(config: Mapping[str, Any]) -> str | None:
    cfg = _text_config(config)
    if cfg.get("attn_logit_softcapping"):
        return "its attention logits are soft-capped (attn_logit_softcapping), which the fused operator does not do."
    if cfg.get("alibi") or cfg.get("position_embedding_type") == "alibi":
        return "it uses ALiBi position biases."
    window = cfg.get("sliding_window")
    layer_types = cfg.get("layer_types") or []
    if any(t != "full_attention" for t in layer_types):
        return "some layers use sliding-window attention (layer_types)."
    if window and cfg.get("use_sliding_window", True):
        context = _context(cfg)
        if not context or window < context:
            return (
                f"it attends over a sliding window of {window} tokens; the fused graph would attend to the whole "
                "context and change outputs beyond the window."
            )
    return None


def _text_config(config: Mapping[str, Any]) -> dict[str, Any]:
    cfg = dict(config)
    if isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg, **cfg["text_config"]}
    return cfg


def _context(cfg: Mapping[str, Any]) -> int | None:
    from inference4py.engine.decoder import context_length

    return context_length(cfg)


def _decoder_graph(folder: Path) -> Path:
    if any(folder.glob("encoder_model*.onnx")) or any(folder.glob("onnx/encoder_model*.onnx")):
        raise UnsupportedModelError(
            f"{folder} holds an encoder-decoder model; attention fusion handles decoder-only graphs "
            "(model.onnx or decoder_model_merged.onnx)."
        )
    for rel in ("model.onnx", "decoder_model_merged.onnx", "onnx/model.onnx", "onnx/decoder_model_merged.onnx"):
        if (folder / rel).is_file():
            return folder / rel
    raise ModelNotFoundError(f"{folder} holds no decoder graph (model.onnx or decoder_model_merged.onnx) to optimize.")


def _is_weight_file_of(path: Path, graph: Path) -> bool:
    """The graph's external-data file (rewritten together with the graph)."""
    return path.parent == graph.parent and path.name in (
        graph.name + "_data",
        graph.name + ".data",
        graph.stem + ".onnx_data",
    )


def _save(model: Any, path: Path) -> None:
    onnx = _import_onnx()
    path.parent.mkdir(parents=True, exist_ok=True)
    size = sum(t.ByteSize() for t in model.graph.initializer)
    if size > _EXTERNAL_DATA_BYTES:
        data = path.name + "_data"
        (path.parent / data).unlink(missing_ok=True)
        onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location=data)
    else:
        onnx.save(model, str(path))


def _read_json(path: Path) -> dict[str, Any]:
    import json

    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ModelLoadError(f"{path} is not valid JSON: {exc}") from exc


def _import_onnx() -> Any:
    try:
        import onnx
    except ImportError as exc:
        raise ModelLoadError(
            'Optimizing a graph needs the onnx package: pip install "inference4py[quantize]" (or pip install onnx).'
        ) from exc
    return onnx
