"""Mixture-of-experts layers of a GGUF decoder: the router, the chosen experts' products, the weighted sum.

A layer whose file holds ``blk.N.ffn_gate_inp`` (the router, ``[experts, hidden]``) and the 3-D expert
tensors ``ffn_gate_exps`` / ``ffn_up_exps`` (``[experts, expert_ff, hidden]``) and ``ffn_down_exps``
(``[experts, hidden, expert_ff]``) computes, per token ``x``, as llama.cpp's ``build_moe_ffn`` and
transformers' sparse MoE blocks do (Qwen3-MoE, Qwen2-MoE, OLMoE, Mixtral)::

    p = softmax(x @ router.T)                      # [experts]
    w, ids = topk(p, k)                             # k = expert_used_count
    w = w / sum(w)                                  # only where the architecture renormalises (archs.py)
    y = sum_j w[j] * down[ids[j]] @ (silu(gate[ids[j]] @ x) * up[ids[j]] @ x)
    y += sigmoid(x @ gate_inp_shexp.T) * shared_mlp(x)   # Qwen2-MoE's shared expert

Every product with an expert tensor goes through :meth:`Experts.products`.  On inference4py's compiled
operators (the default for a GGUF file, :mod:`inference4py.gguf.in_place`) it is one ``GgmlExpertMatMul``
over the expert tensors' blocks in the file, in place: the tokens are grouped by expert and only the
chosen experts' blocks are read, with activations rounded per block as llama.cpp rounds them.
Without them (or at ``--bits``) the products are an exact float path on stock operators: the chosen
experts' float32 matrices are gathered by their ids (``Gather`` of ``[experts, in, out]`` by
``[batch, seq, k]``), then multiplied by a batched ``MatMul``.  Only the chosen experts are computed,
each on its own token, weighted and summed, which is transformers' arithmetic.  Its cost grows with
the model: every expert is stored in float32 (4 bytes a weight), and the Gather copies each token's
chosen matrices, ``tokens x k x 3 x expert_ff x hidden`` floats a layer: for OLMoE-1B-7B's shape (8 of
64 experts of 1024 x 2048) 200 MB a token and layer.  It is the path for checking, not for real sizes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from inference4py.errors import ModelLoadError, UnsupportedModelError
from inference4py.gguf.ffn import GraphBuilder, activation, gated_mlp
from inference4py.gguf.hyper import Hyper
from inference4py.gguf.parts import Part
from inference4py.gguf.reader import FLOAT_TYPES, GGUFFile

__all__ = ["ExpertShape", "Experts", "is_moe", "moe_config", "read_experts"]

_log = logging.getLogger("inference4py.gguf")
_SOFTMAX = 1  # llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX (the value of <arch>.expert_gating_func)
_SIGMOID = 2  # LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID: DeepSeek-V3-style routers (deepseek2 files only here)
_GATING_NAMES = {1: "softmax", 2: "sigmoid", 4: "sqrt-softplus"}


@dataclass(frozen=True)
class ExpertShape:
    """A mixture-of-experts decoder's expert layout, read from the metadata and checked against the tensors."""

    count: int  # experts per layer
    used: int  # experts chosen per token (k)
    ff: int  # rows of one expert's gate and up matrices
    norm: bool  # the top-k weights are divided by their sum
    shared_ff: int | None  # rows of the shared expert's gate and up (Qwen2-MoE, DeepSeek-V2), None without one
    scale: float = 1.0  # the top-k weights are multiplied by it (DeepSeek-V2's routed_scaling_factor)
    first: int = 0  # the first layer with experts (DeepSeek-V2's first layers are dense)
    shared_gate: bool = False  # the shared expert's output is scaled by sigmoid(x @ ffn_gate_inp_shexp) (Qwen2-MoE)
    sigmoid: bool = False  # the router's scores are sigmoid(logits), not softmax (DeepSeek-V3-style)
    biased: bool = False  # experts are chosen by score + exp_probs_b (the weights stay the scores)
    groups: int = 1  # experts in groups; a token chooses among the groups_used best groups' experts
    groups_used: int = 1
    topk_softmax: bool = False  # the weights are the softmax of the k chosen router logits (GraniteMoe)

    def routes(self, layer: int) -> bool:
        """Whether layer ``layer`` has experts (else a dense MLP)."""
        return layer >= self.first


def is_moe(gguf: GGUFFile) -> bool:
    """Whether the file's decoder has mixture-of-experts layers."""
    return "blk.0.ffn_gate_inp.weight" in gguf or gguf.get(".expert_count") is not None


def _key(gguf: GGUFFile, key: str) -> str:
    return gguf.architecture + key


def _check_shape(gguf: GGUFFile, tensor: str, want: tuple[int, ...], why: str) -> None:
    gguf.check_tensor(tensor, want, needed_by="its mixture-of-experts layers", why=why)


def read_experts(gguf: GGUFFile, hp: Hyper) -> ExpertShape | None:
    """The expert layout of a mixture-of-experts file (None for a dense one), every layer's tensors checked.

    Raises:
        ModelLoadError: an expert tensor disagrees with ``expert_count`` / ``expert_used_count`` /
            ``expert_feed_forward_length`` / the hidden size, or one the layout needs is missing
            (the shared expert's gate of Qwen2-MoE included); the message names the tensor or key.
        UnsupportedModelError: a router other than softmax (``expert_gating_func``; deepseek2 files also
            sigmoid, with their ``exp_probs_b`` selection bias and expert groups), or an
            ``expert_weights_scale`` other than 1 where the architecture does not read it.
    """
    if not is_moe(gguf):
        if hp.arch.oai_experts:  # gpt-oss has no dense layers
            raise ModelLoadError(f"{gguf.path} has no tensor 'blk.0.ffn_gate_inp.weight': its gpt-oss layers route.")
        return None
    count = int(gguf.require(".expert_count"))
    used = int(gguf.require(".expert_used_count"))
    if not 0 < used <= count:
        raise ModelLoadError(
            f"{gguf.path}: {_key(gguf, '.expert_used_count')} = {used} but {_key(gguf, '.expert_count')} = {count}; "
            "a token chooses between 1 and expert_count experts."
        )
    gating = gguf.get(".expert_gating_func")
    from_file = hp.arch.experts_from_file  # DeepSeek-V2/V3: llama.cpp reads the routing from these keys
    sigmoid = from_file and gating is not None and int(gating) == _SIGMOID
    if gating is not None and int(gating) != _SOFTMAX and not sigmoid:
        known = _GATING_NAMES.get(int(gating))
        what = f"a {known} router" if known else f"an unknown router type ({int(gating)})"
        routes = "softmax (expert_gating_func 1) or sigmoid (2)" if from_file else "softmax (expert_gating_func 1)"
        raise UnsupportedModelError(
            f"{gguf.path}: {_key(gguf, '.expert_gating_func')} = {int(gating)} asks for {what}; the converter's "
            f"{gguf.architecture} layers route by {routes} only."
        )
    groups = int(gguf.get(".expert_group_count", 1) or 1) if from_file else 1
    groups_used = int(gguf.get(".expert_group_used_count", groups) or groups) if from_file else 1
    if groups > 1 and (count % groups or not 0 < groups_used <= groups or used > groups_used * (count // groups)):
        raise ModelLoadError(
            f"{gguf.path}: {_key(gguf, '.expert_group_count')} = {groups} and {_key(gguf, '.expert_group_used_count')} "
            f"= {groups_used} do not divide {count} experts into groups from which {used} can be chosen."
        )
    scale = gguf.get(".expert_weights_scale")
    if scale is not None and float(scale) not in (0.0, 1.0) and not from_file:
        raise UnsupportedModelError(
            f"{gguf.path}: {_key(gguf, '.expert_weights_scale')} = {float(scale)}; the converter's "
            f"{gguf.architecture} layers do not scale the routing weights."
        )
    lead = int(gguf.get(".leading_dense_block_count", 0) or 0) if from_file else 0
    if not 0 <= lead < hp.layers:
        raise ModelLoadError(
            f"{gguf.path}: {_key(gguf, '.leading_dense_block_count')} = {lead}, but the model has {hp.layers} layers."
        )
    first = f"blk.{lead}.ffn_gate_exps.weight"
    if first not in gguf:
        raise ModelLoadError(f"{gguf.path} says it has {count} experts but has no tensor {first!r}.")
    ff = gguf.info(first).shape[1]
    declared = gguf.get(".expert_feed_forward_length")
    if declared is not None and int(declared) != ff:
        raise ModelLoadError(
            f"{gguf.path}: tensor {first!r} has experts of {ff} rows, but "
            f"{_key(gguf, '.expert_feed_forward_length')} says {int(declared)}."
        )
    shared_ff = None
    shared_count = int(gguf.get(".expert_shared_count", 0) or 0) if from_file else 0
    # GraniteMoeShared: llama.cpp reads an ungated shared expert from its declared length alone
    declared_shared = 0 if from_file else int(gguf.get(".expert_shared_feed_forward_length", 0) or 0)
    if hp.arch.shared_expert_gate or shared_count or declared_shared:
        shared = f"blk.{lead}.ffn_up_shexp.weight"
        if shared not in gguf:
            what = f"{_key(gguf, '.expert_shared_count')} = {shared_count}" if shared_count else "a shared expert"
            raise ModelLoadError(f"{gguf.path} has no tensor {shared!r}: its {gguf.architecture} layers have {what}.")
        shared_ff = gguf.info(shared).shape[0]
        if declared_shared and shared_ff != declared_shared:
            raise ModelLoadError(
                f"{gguf.path}: tensor {shared!r} has a shared expert of {shared_ff} rows, but "
                f"{_key(gguf, '.expert_shared_feed_forward_length')} says {declared_shared}."
            )
    hidden = hp.hidden
    biased = f"blk.{lead}.exp_probs_b.bias" in gguf  # DeepSeek-V3's selection bias (e_score_correction_bias)
    for i in range(lead, hp.layers):
        p = f"blk.{i}."
        why = f"{_key(gguf, '.expert_count')} = {count}, hidden size {hidden}, experts of {ff} rows"
        if biased:
            _check_shape(gguf, f"{p}exp_probs_b.bias", (count,), why)
        _check_shape(gguf, f"{p}ffn_gate_inp.weight", (count, hidden), why)
        _check_shape(gguf, f"{p}ffn_gate_exps.weight", (count, ff, hidden), why)
        _check_shape(gguf, f"{p}ffn_up_exps.weight", (count, ff, hidden), why)
        _check_shape(gguf, f"{p}ffn_down_exps.weight", (count, hidden, ff), why)
        if shared_ff is not None:
            why = f"the shared expert of {shared_ff} rows" + (
                " and its sigmoid gate" if hp.arch.shared_expert_gate else ""
            )
            gate = f"{p}ffn_gate_inp_shexp.weight"  # [1, hidden]; llama-quantize writes it as [hidden]
            if hp.arch.shared_expert_gate:
                _check_shape(
                    gguf, gate, (hidden,) if gate in gguf and len(gguf.info(gate).shape) == 1 else (1, hidden), why
                )
            _check_shape(gguf, f"{p}ffn_gate_shexp.weight", (shared_ff, hidden), why)
            _check_shape(gguf, f"{p}ffn_up_shexp.weight", (shared_ff, hidden), why)
            _check_shape(gguf, f"{p}ffn_down_shexp.weight", (hidden, shared_ff), why)
    norm = bool(gguf.get(".expert_weights_norm", False)) if from_file else hp.arch.experts_norm
    return ExpertShape(
        count=count,
        used=used,
        ff=ff,
        norm=norm,
        shared_ff=shared_ff,
        scale=float(scale) if from_file and scale else 1.0,
        first=lead,
        shared_gate=hp.arch.shared_expert_gate,
        sigmoid=sigmoid,
        biased=biased,
        groups=groups,
        groups_used=groups_used,
        topk_softmax=hp.arch.topk_softmax,
    )


def moe_config(shape: ExpertShape) -> dict[str, Any]:
    """config.json fields (transformers' names) describing the experts."""
    config: dict[str, Any] = {
        "num_experts": shape.count,
        "num_local_experts": shape.count,
        "num_experts_per_tok": shape.used,
        "moe_intermediate_size": shape.ff,
        "norm_topk_prob": shape.norm,
    }
    if shape.shared_ff is not None:
        config["shared_expert_intermediate_size"] = shape.shared_ff
    if shape.scale != 1.0 or shape.first:
        config |= {"routed_scaling_factor": shape.scale, "first_k_dense_replace": shape.first}
    return config


class Experts:
    """The mixture-of-experts layers of one graph.

    Args:
        b: The graph builder.
        hp: The decoder's shape.
        shape: Its experts (:func:`read_experts`).
    """

    def __init__(self, b: GraphBuilder, hp: Hyper, shape: ExpertShape) -> None:
        self.b = b
        self.hp = hp
        self.shape = shape
        kinds = {
            b.gguf.info(f"blk.{i}.ffn_{w}_exps.weight").type
            for i in range(shape.first, hp.layers)
            for w in ("gate", "up", "down")
        }
        if not b.ggml and (b.bits in (4, 8, 16) or (b.bits is None and kinds - set(FLOAT_TYPES))):
            _log.warning(
                "%s: the expert matrices (%s) are held in float32, dequantized exactly, whatever the width: no "
                "expert-indexed operator reads them as stored yet",
                b.gguf.path.name,
                ", ".join(sorted(kinds)),
            )

    def layer(self, x: str, prefix: str, name: str) -> str:
        """Layer ``prefix``'s (``blk.N.``) mixture-of-experts output for ``x`` ``[batch, seq, hidden]``."""
        weights, ids = self.route(x, prefix, name)
        return self._mixed(x, weights, ids, prefix, name)

    def route(self, x: str, prefix: str, name: str, bias: np.ndarray | None = None) -> tuple[str, str]:
        """The chosen experts' weights and ids (``[batch, seq, k]`` each) for ``x``: the router's logits (plus
        ``bias``: gpt-oss's router has one) normalised by the family's rule (:class:`ExpertShape`)."""
        b, shape = self.b, self.shape
        logits = b.linear(x, [Part(f"{prefix}ffn_gate_inp.weight")], f"{name}.gate", bias)  # [batch, seq, experts]
        if shape.topk_softmax:  # GraniteMoe, gpt-oss: the k best logits, then their softmax
            top, ids = b.node(
                "TopK", [logits, b.ints([shape.used])], f"/{name}/router/TopK", outputs=2, axis=-1, largest=1, sorted=1
            )
            return b.one("Softmax", [top], f"/{name}/router/Softmax", axis=-1), ids
        if shape.sigmoid:
            probs = b.one("Sigmoid", [logits], f"/{name}/router/Sigmoid")
        else:
            probs = b.one("Softmax", [logits], f"/{name}/router/Softmax", axis=-1)
        if shape.biased or shape.groups > 1:
            weights, ids = self._choose(probs, prefix, name)
        else:
            weights, ids = b.node(
                "TopK", [probs, b.ints([shape.used])], f"/{name}/router/TopK", outputs=2, axis=-1, largest=1, sorted=1
            )  # [batch, seq, k] each
        if shape.norm:
            total = b.one("ReduceSum", [weights, b.ints([-1])], f"/{name}/router/ReduceSum", keepdims=1)
            weights = b.one("Div", [weights, total], f"/{name}/router/Div")
        if shape.scale != 1.0:  # DeepSeek-V2's routed_scaling_factor, after the renormalisation (llama.cpp's order)
            scale = b.initializer(np.array(shape.scale, np.float32), f"{name}.routed_scaling_factor")
            weights = b.one("Mul", [weights, scale], f"/{name}/router/Mul")
        return weights, ids

    def _mixed(self, x: str, weights: str, ids: str, prefix: str, name: str) -> str:
        """The chosen experts' outputs weighted and summed, plus the shared expert's (``weights``, ``ids``:
        ``[batch, seq, k]``)."""
        b, shape = self.b, self.shape
        gated = self.products(
            x,
            [f"{prefix}ffn_gate_exps.weight", f"{prefix}ffn_up_exps.weight"],
            ids,
            f"{name}.experts.gate_up",
            gate="silu",
        )  # [batch, seq, k, expert_ff]
        y = self.products(
            gated, [f"{prefix}ffn_down_exps.weight"], ids, f"{name}.experts.down", per_expert=True
        )  # [batch, seq, k, hidden]
        weighted = b.one(
            "Mul", [y, b.one("Unsqueeze", [weights, b.ints([-1])], f"/{name}/weights/Unsqueeze")], f"/{name}/Mul"
        )
        out = b.one("ReduceSum", [weighted, b.ints([2])], f"/{name}/ReduceSum", keepdims=0)  # [batch, seq, hidden]
        if shape.shared_ff is None:
            return out
        shared = gated_mlp(
            b,
            x,
            Part(f"{prefix}ffn_gate_shexp.weight"),
            Part(f"{prefix}ffn_up_shexp.weight"),
            Part(f"{prefix}ffn_down_shexp.weight"),
            "silu",
            f"{name}.shared_expert",
        )
        if not shape.shared_gate:  # DeepSeek-V2: the shared experts' output is added as it is
            return b.one("Add", [out, shared], f"/{name}/Add")
        # one row (a vector in llama-quantize's files, kept in float there): a float32 [hidden, 1] product
        column = b.gguf.tensor(f"{prefix}ffn_gate_inp_shexp.weight").reshape(-1, 1).astype(np.float32)
        logit = b.one(
            "MatMul",
            [x, b.initializer(column, f"{name}.shared_expert_gate.weight")],
            f"/{name}/shared_expert_gate/MatMul",
        )
        gate = b.one("Sigmoid", [logit], f"/{name}/shared_expert_gate/Sigmoid")  # [batch, seq, 1]
        return b.one("Add", [out, b.one("Mul", [gate, shared], f"/{name}/shared_expert_gate/Mul")], f"/{name}/Add")

    def _choose(self, probs: str, prefix: str, name: str) -> tuple[str, str]:
        """DeepSeek-V3-style choice, as llama.cpp's ``build_moe_ffn``: experts ranked by ``probs`` plus the
        selection bias, only among the ``groups_used`` groups whose two best experts score most; the weights
        are the chosen experts' ``probs`` (no bias).  Returns (weights, ids), ``[batch, seq, k]`` each."""
        b, shape = self.b, self.shape
        n = f"/{name}/router"
        choice = probs
        if shape.biased:
            bias = b.gguf.tensor(f"{prefix}exp_probs_b.bias").astype(np.float32)
            choice = b.one("Add", [probs, b.initializer(bias, f"{name}.gate.e_score_correction_bias")], f"{n}/bias")
        if shape.groups > 1:
            grouped = b.one("Reshape", [choice, b.ints([0, 0, shape.groups, -1])], f"{n}/groups")
            best_two = b.node("TopK", [grouped, b.ints([2])], f"{n}/groups/TopK", outputs=2, axis=-1)[0]
            group_scores = b.one("ReduceSum", [best_two, b.ints([-1])], f"{n}/groups/ReduceSum", keepdims=0)
            kept = b.node("TopK", [group_scores, b.ints([shape.groups_used])], f"{n}/groups/kept", outputs=2, axis=-1)[
                0
            ]
            last = b.one("ReduceMin", [kept, b.ints([-1])], f"{n}/groups/last", keepdims=1)
            keep = b.one(
                "Unsqueeze",
                [b.one("GreaterOrEqual", [group_scores, last], f"{n}/groups/keep"), b.ints([-1])],
                f"{n}/groups/keep_col",
            )  # [batch, seq, groups, 1]
            out = b.initializer(np.array(-np.inf, np.float32), f"{name}.gate.left_out")
            masked = b.one("Where", [keep, grouped, out], f"{n}/groups/Where")
            choice = b.one("Reshape", [masked, b.ints([0, 0, shape.count])], f"{n}/groups/flat")
        ids = b.node("TopK", [choice, b.ints([shape.used])], f"{n}/TopK", outputs=2, axis=-1, largest=1, sorted=1)[1]
        return b.one("GatherElements", [probs, ids], f"{n}/weights", axis=-1), ids

    def products(
        self, x: str, tensors: list[str], ids: str, name: str, *, per_expert: bool = False, gate: str | None = None
    ) -> str:
        """Each token's products with its chosen experts' matrices: the one place an expert tensor is multiplied.

        Args:
            x: ``[batch, seq, in]`` (one input for all k chosen experts: the gate and up products) or, with
                ``per_expert``, ``[batch, seq, k, in]`` (one input per chosen expert: the down product).
            tensors: One 3-D GGUF tensor ``[experts, out, in]``, or two of the same shape (gate, up).
            ids: ``[batch, seq, k]`` int64, the chosen experts.
            name: Names the initializers and nodes.
            gate: With two tensors, ``"silu"`` (or ``"gelu_tanh"``): ``act(x @ W0[e].T) * (x @ W1[e].T)``.

        Returns:
            ``[batch, seq, k, out]`` float32: row ``j`` is ``x (or x[..., j, :]) @ W[ids[..., j]].T``.

        A compiled operator replacing this keeps that contract: inputs ``X`` (float32, as ``x``), ``ids``
        (int64 ``[batch, seq, k]``), then one or two weights, each the GGUF tensor's bytes in place
        (uint8 ``[experts, out, row bytes]``); attributes ``type`` / ``type1`` (ggml type ids), ``K`` (in),
        ``N`` (out), ``experts``, ``gate`` (0 none, 1 silu, 2 gelu_tanh, as GgmlMatMul's); output
        ``[batch, seq, k, out]``, reading only the blocks of the experts in ``ids``; ``X`` of rank 3 is shared
        by the k experts, of rank 4 is one row per expert.
        """
        b = self.b
        if b.ggml:  # the file's blocks in place: only the chosen experts' are read
            return b.in_place.experts(x, tensors, ids, name, gate=gate)
        matrix = self._float_experts(tensors, name)  # [experts, in, out (x2 with a gate)]
        chosen = b.one("Gather", [matrix, ids], f"/{name}/Gather", axis=0)  # [batch, seq, k, in, out]
        rows = b.one("Unsqueeze", [x, b.ints([-2] if per_expert else [2, 3])], f"/{name}/Unsqueeze")
        y = b.one("MatMul", [rows, chosen], f"/{name}/MatMul")  # [batch, seq, k, 1, out]
        y = b.one("Squeeze", [y, b.ints([3])], f"/{name}/Squeeze")
        if gate is None:
            return y
        out = self.b.gguf.info(tensors[0]).shape[1]
        g, u = b.node("Split", [y, b.ints([out, out])], f"/{name}/Split", outputs=2, axis=-1)
        return b.one("Mul", [activation(b, g, gate, f"/{name}"), u], f"/{name}/Mul")

    def _float_experts(self, tensors: list[str], name: str) -> str:
        """``[experts, in, out]`` float32 (the tensors side by side on ``out``), written one expert at a time."""
        gguf = self.b.gguf
        count, out, cols = gguf.info(tensors[0]).shape

        def per_expert() -> Iterator[np.ndarray]:
            for e in range(count):
                yield np.concatenate(
                    [gguf.float_rows(t, e * out, (e + 1) * out).T for t in tensors], axis=1
                )  # [in, out x len(tensors)]

        return self.b.chunked(f"{name}.weight", np.float32, (count, cols, out * len(tensors)), per_expert())
