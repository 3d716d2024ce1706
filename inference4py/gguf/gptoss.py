"""gpt-oss's mixture-of-experts layers (``general.architecture`` ``gpt-oss``), on the experts' one product method.

Per token ``x`` (the output of the layer's ``post_attention_norm``) a gpt-oss layer's feed-forward part
computes, as transformers' ``GptOssMLP`` and llama.cpp's ``build_moe_ffn`` (``LLM_FFN_SWIGLU_OAI_MOE``,
``LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX_WEIGHT``) do::

    logits = x @ router.T + router_bias             # [experts]
    top, ids = topk(logits, k)                      # k = expert_used_count
    w = softmax(top)                                # over the k chosen logits only (Experts.route, as GraniteMoe's)
    g = min(x @ gate[e].T + gate_bias[e], limit)    # e = ids[j]; limit = 7
    u = clip(x @ up[e].T + up_bias[e], -limit, limit)
    y = sum_j w[j] * (down[e] @ ((u + 1) * g * sigmoid(alpha * g)) + down_bias[e])   # alpha = 1.702

GGUF has no key for ``alpha`` and ``limit``: transformers' ``GptOssExperts`` and llama.cpp fix them, and so
does this module.  Every product with an expert tensor goes through :meth:`Experts.products`, one tensor
at a time and without a fused activation (the biases come between the products and the activation): on
inference4py's compiled operators one ``GgmlExpertMatMul`` per product over the file's blocks in place
(MXFP4 in the published files), otherwise the exact float Gather + MatMul path.  The rest of a gpt-oss
layer is the shared decoder's (:mod:`inference4py.gguf.graph`): the attention sinks are
GroupQueryAttention's ``head_sink`` (an extra logit per head in the softmax's denominator, as
transformers' eager attention concatenates them), the q/k/v/o biases and YaRN's tables are read from
the file.
"""

from __future__ import annotations

import numpy as np

from inference4py.errors import UnsupportedModelError
from inference4py.gguf.ffn import GraphBuilder
from inference4py.gguf.hyper import Hyper
from inference4py.gguf.moe import Experts, ExpertShape

__all__ = ["ALPHA", "LIMIT", "GptOssExperts"]

ALPHA = 1.702  # the gate's sigmoid slope (transformers' GptOssExperts.alpha, llama.cpp's constant)
LIMIT = 7.0  # gate values clamped above at it, up values to [-LIMIT, LIMIT]


class GptOssExperts(Experts):
    """gpt-oss's mixture-of-experts layers; every layer's gpt-oss tensors are checked when it is made.

    Args:
        b: The graph builder.
        hp: The decoder's shape.
        shape: Its experts (:func:`~inference4py.gguf.moe.read_experts`).

    Raises:
        ModelLoadError: a layer lacks a tensor gpt-oss has (the router's or an expert's bias, the attention
            sinks, a q/k/v/o bias, ``post_attention_norm``), or holds one of another shape; the tensor is named.
        UnsupportedModelError: ``attention.sliding_window_pattern`` puts the window on other layers than the
            even ones, or ``rope.freq_base_swa`` gives the sliding layers their own rotary base (llama.cpp reads
            both; the released files have neither); the key is named.
    """

    def __init__(self, b: GraphBuilder, hp: Hyper, shape: ExpertShape) -> None:
        super().__init__(b, hp, shape)
        _check(b, hp, shape)
        scalars = {"alpha": ALPHA, "limit": LIMIT, "neg_limit": -LIMIT, "one": 1.0}
        self._scalars = {
            key: b.initializer(np.array(value, np.float32), f"/model/gpt_oss/{key}") for key, value in scalars.items()
        }

    def layer(self, x: str, prefix: str, name: str) -> str:
        """Layer ``prefix``'s (``blk.N.``) experts' output for ``x`` ``[batch, seq, hidden]``."""
        b, gguf, c = self.b, self.b.gguf, self._scalars
        n = f"/{name}"
        weights, ids = self.route(x, prefix, name, gguf.tensor(f"{prefix}ffn_gate_inp.bias").reshape(-1))
        gate = self._biased(x, prefix, "gate", ids, name)  # [batch, seq, k, expert_ff]
        up = self._biased(x, prefix, "up", ids, name)
        gate = b.one("Min", [gate, c["limit"]], f"{n}/gate/Min")
        up = b.one("Clip", [up, c["neg_limit"], c["limit"]], f"{n}/up/Clip")
        slope = b.one("Sigmoid", [b.one("Mul", [gate, c["alpha"]], f"{n}/glu/Mul_alpha")], f"{n}/glu/Sigmoid")
        glu = b.one("Mul", [gate, slope], f"{n}/glu/Mul")
        hidden = b.one("Mul", [b.one("Add", [up, c["one"]], f"{n}/up/Add_one"), glu], f"{n}/Mul")
        y = self._biased(hidden, prefix, "down", ids, name)  # [batch, seq, k, hidden]
        weighted = b.one(
            "Mul", [y, b.one("Unsqueeze", [weights, b.ints([-1])], f"{n}/weights/Unsqueeze")], f"{n}/Mul_weights"
        )
        return b.one("ReduceSum", [weighted, b.ints([2])], f"{n}/ReduceSum", keepdims=0)  # [batch, seq, hidden]

    def _biased(self, x: str, prefix: str, which: str, ids: str, name: str) -> str:
        """The chosen experts' ``which`` (gate, up, down) product plus each chosen expert's bias row."""
        b = self.b
        product = self.products(
            x, [f"{prefix}ffn_{which}_exps.weight"], ids, f"{name}.experts.{which}", per_expert=which == "down"
        )
        table = b.initializer(
            np.ascontiguousarray(b.gguf.tensor(f"{prefix}ffn_{which}_exps.bias"), dtype=np.float32),
            f"{name}.experts.{which}.bias",
        )  # [experts, out]
        bias = b.one("Gather", [table, ids], f"/{name}/experts/{which}/bias/Gather", axis=0)  # [batch, seq, k, out]
        return b.one("Add", [product, bias], f"/{name}/experts/{which}/bias/Add")


def _check(b: GraphBuilder, hp: Hyper, shape: ExpertShape) -> None:
    """Every layer's gpt-oss tensors, present and of the shapes the metadata gives (ModelLoadError naming one),
    and the keys llama.cpp reads beside them that the graph does not build (UnsupportedModelError)."""
    gguf = b.gguf
    pattern = gguf.get(".attention.sliding_window_pattern")  # llama.cpp: a period n (layer % n < n - 1) or flags
    if pattern is not None:
        if isinstance(pattern, (list, tuple)):
            sliding = [bool(v) for v in pattern][: hp.layers]
        else:
            n = int(pattern)
            sliding = [n == 0 or i % n < n - 1 for i in range(hp.layers)]
        if sliding != [hp.arch.sliding(i) for i in range(hp.layers)]:
            raise UnsupportedModelError(
                f"{gguf.path}: {gguf.architecture}.attention.sliding_window_pattern = {pattern!r} puts the sliding "
                "window on other layers than gpt-oss's even ones, which is all the converter builds."
            )
    base_swa = gguf.get(".rope.freq_base_swa")
    if base_swa is not None and float(base_swa) != hp.rope_base:
        raise UnsupportedModelError(
            f"{gguf.path}: {gguf.architecture}.rope.freq_base_swa = {float(base_swa)} gives the sliding layers their "
            f"own rotary base (rope.freq_base is {hp.rope_base}); the converter's gpt-oss layers share one."
        )
    q_size, kv_size = hp.heads * hp.head_dim, hp.kv_heads * hp.head_dim
    why = (
        f"{gguf.architecture}: {hp.heads} heads / {hp.kv_heads} kv heads of {hp.head_dim}, hidden size {hp.hidden}, "
        f"{shape.count} experts of {shape.ff} rows"
    )
    for i in range(hp.layers):
        p = f"blk.{i}."
        for tensor, want in (
            ("post_attention_norm.weight", (hp.hidden,)),
            ("attn_sinks.weight", (hp.heads,)),
            ("attn_q.bias", (q_size,)),
            ("attn_k.bias", (kv_size,)),
            ("attn_v.bias", (kv_size,)),
            ("attn_output.bias", (hp.hidden,)),
            ("ffn_gate_inp.bias", (shape.count,)),
            ("ffn_gate_exps.bias", (shape.count, shape.ff)),
            ("ffn_up_exps.bias", (shape.count, shape.ff)),
            ("ffn_down_exps.bias", (shape.count, hp.hidden)),
        ):
            gguf.check_tensor(p + tensor, want, needed_by="its gpt-oss layers", why=why)
