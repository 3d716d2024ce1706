"""Multi-head latent attention (MLA) of DeepSeek-V2 GGUF files (``deepseek2``), on stock ONNX operators.

Per token ``x`` a layer computes (DeepSeek-V2; transformers' ``DeepseekV2Attention``; llama.cpp's
``deepseek2`` graph)::

    q = q_b(norm(q_a(x)))  or  q_proj(x)            # [heads, nope + rope]   (q_lora_rank set / not)
    c, k_pe = split(kv_a(x), [kv_lora_rank, rope])
    c = norm(c)                                     # the latent: [kv_lora_rank], one for all heads
    k_pe = rope(k_pe); q_pe = rope(q_pe)            # adjacent pairs rotate (llama.cpp's NORM rope)
    score[h, t] = (q_nope[h] . k_b[h] c[t] + q_pe[h] . k_pe[t]) / sqrt(nope + rope)
    out = o_proj(concat_h(v_b[h] sum_t softmax(score[h])[t] c[t]))

The cache holds, per token and layer, the latent ``c`` (``past_key_values.{i}.key``,
``[batch, 1, past, kv_lora_rank]``) and the rotated rope key ``k_pe`` (``past_key_values.{i}.value``,
``[batch, 1, past, rope]``), not per-head keys and values: ``(kv_lora_rank + rope) x 4`` bytes a token and
layer in float32, against ``heads x (nope + rope + v) x 4`` expanded.  The key up-projection ``k_b`` is
absorbed into the query (``q_nope[h] @ k_b[h]`` is a query over the latent) and the value up-projection
``v_b`` is applied after the attention-weighted sum of latents, before ``o_proj``: always, at the prompt
and at every decode step, so nothing is chosen by a flag and both give the same numbers.

The expanded form (``MlaShape.expanded``: the latent up-projected to every head's key and value, which
are cached and attended as in ordinary multi-head attention) is built only to measure the absorbed form
against (``benchmarks/decode_depth.py --expanded``): at 4,096 tokens its cache is ~9x the latent's, and
every decode step reads it.

The graph is the growing-cache layout the engine runs for optimum exports (``present`` is ``past`` with
the new tokens concatenated, ``position_ids`` fed per row, ``attention_mask`` over past and new tokens,
left-padded batches masked), since onnxruntime's GroupQueryAttention needs keys and values of one size.

YaRN (DeepSeek-V2 and V2-Lite scale their rotary positions so): each rope pair's frequency is blended
between the original and the interpolated one by YaRN's ramp (:class:`~inference4py.gguf.hyper.Yarn`), and
the attention logits are multiplied by ``mscale^2`` (``mscale = 0.1 x mscale_all_dim x ln(factor) + 1``), as
DeepSeek's modeling code and llama.cpp compute it (``rope.scaling.yarn_log_multiplier`` holds ``0.1 x mscale_all_dim``).

``attn_k_b`` ``[heads, kv_lora_rank, nope]`` and ``attn_v_b`` ``[heads, v, kv_lora_rank]`` are what
llama.cpp's converter writes today; files converted before it split them hold ``attn_kv_b``
``[heads x (nope + v), kv_lora_rank]``, which is split here.  Both are held in float32 (dequantized
exactly): they are small (``heads x kv_lora_rank x (nope + v)``), and the products are batched by head.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from inference4py.errors import UnsupportedModelError
from inference4py.gguf.ffn import GraphBuilder
from inference4py.gguf.hyper import MAX_ROPE_POSITIONS, Hyper, Yarn, read_yarn, rope_caches
from inference4py.gguf.parts import Part
from inference4py.gguf.reader import FLOAT_TYPES, GGUFFile

__all__ = ["MlaAttention", "MlaShape", "mla_config", "read_mla"]

_NEG = float(np.finfo(np.float32).min)  # a masked score, as transformers' eager attention masks


def _read_yarn(gguf: GGUFFile) -> Yarn | None:
    yarn = read_yarn(gguf)
    if yarn is not None and yarn.mscale_all_dim is None:
        raise UnsupportedModelError(
            f"{gguf.path} scales its rotary positions by YaRN without {_key(gguf, '.rope.scaling.yarn_log_multiplier')} "
            "(DeepSeek's mscale_all_dim); the converter builds DeepSeek-V2's YaRN, which has it."
        )
    return yarn


@dataclass(frozen=True)
class MlaShape:
    """The latent attention's sizes, read from the metadata and checked against every layer's tensors."""

    heads: int
    q_lora_rank: int | None  # None: one q projection (DeepSeek-V2-Lite)
    kv_lora_rank: int
    rope: int  # the decoupled rope head (qk_rope_head_dim)
    nope: int  # qk_nope_head_dim
    v: int  # v_head_dim
    split_kv_b: bool  # the file holds attn_kv_b (older conversions), not attn_k_b / attn_v_b
    yarn: Yarn | None = None
    expanded: bool = False  # cache per-head keys and values instead of the latent (only to measure against)

    @property
    def scale(self) -> float:
        """The attention logits' scale: ``1 / sqrt(nope + rope)``, times YaRN's ``mscale^2`` where it applies."""
        mscale = 1.0 if self.yarn is None else self.yarn.mscale
        return mscale * mscale / math.sqrt(self.nope + self.rope)

    @property
    def cache_dims(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """(heads, last dim) of the key and value cache tensors: the latent, and the rope key (expanded: every
        head's key and value)."""
        if self.expanded:
            return (self.heads, self.nope + self.rope), (self.heads, self.v)
        return (1, self.kv_lora_rank), (1, self.rope)


def _key(gguf: GGUFFile, key: str) -> str:
    return gguf.architecture + key


def _need(gguf: GGUFFile, tensor: str, want: tuple[int, ...], why: str) -> None:
    gguf.check_tensor(tensor, want, needed_by="its latent attention layers", why=why)


def read_mla(gguf: GGUFFile, hp: Hyper) -> MlaShape | None:
    """The latent attention's sizes (None for an architecture without MLA), every layer's tensors checked.

    Raises:
        ModelLoadError: a key MLA needs is missing (``attention.kv_lora_rank``, ``rope.dimension_count``), or
            a tensor is missing or disagrees with the keys; the message names the key or tensor.
        UnsupportedModelError: YaRN without ``rope.scaling.yarn_log_multiplier`` or with an ``attn_factor``
            other than 1 (other rotary scalings are refused by :func:`read_hyper`).
    """
    if not hp.arch.mla:
        return None
    rank = int(gguf.require(".attention.kv_lora_rank"))
    rope = int(gguf.require(".rope.dimension_count"))
    q_rank = gguf.get(".attention.q_lora_rank")
    k_mla, v_mla = gguf.get(".attention.key_length_mla"), gguf.get(".attention.value_length_mla")
    if k_mla is not None and v_mla is not None:  # today's files: key_length is kv_lora_rank + rope (the MQA form)
        qk, v = int(k_mla), int(v_mla)
    else:  # older files: key_length / value_length are the expanded heads' sizes
        qk, v = int(gguf.require(".attention.key_length")), int(gguf.require(".attention.value_length"))
    nope = qk - rope
    if nope < 1 or rope % 2:
        raise UnsupportedModelError(
            f"{gguf.path}: query heads of {qk} values with a rope part of {rope} ({_key(gguf, '.rope.dimension_count')}) "
            "leave no room for the non-rotary part, or rotate an odd number of values."
        )
    heads, hidden = hp.heads, hp.hidden
    split = "blk.0.attn_k_b.weight" not in gguf and "blk.0.attn_kv_b.weight" in gguf
    why = (
        f"{_key(gguf, '.attention.kv_lora_rank')} = {rank}, rope {rope}, {heads} heads of {nope} + {rope}, "
        f"values of {v}"
    )
    for i in range(hp.layers):
        p = f"blk.{i}."
        _need(gguf, f"{p}attn_kv_a_mqa.weight", (rank + rope, hidden), why)
        _need(gguf, f"{p}attn_kv_a_norm.weight", (rank,), why)
        if split:
            _need(gguf, f"{p}attn_kv_b.weight", (heads * (nope + v), rank), why)
        else:
            _need(gguf, f"{p}attn_k_b.weight", (heads, rank, nope), why)
            _need(gguf, f"{p}attn_v_b.weight", (heads, v, rank), why)
        if q_rank is not None:
            _need(gguf, f"{p}attn_q_a.weight", (int(q_rank), hidden), f"{_key(gguf, '.attention.q_lora_rank')}")
            _need(gguf, f"{p}attn_q_a_norm.weight", (int(q_rank),), f"{_key(gguf, '.attention.q_lora_rank')}")
            _need(gguf, f"{p}attn_q_b.weight", (heads * (nope + rope), int(q_rank)), why)
        else:
            _need(
                gguf, f"{p}attn_q.weight", (heads * (nope + rope), hidden), f"no {_key(gguf, '.attention.q_lora_rank')}"
            )
        _need(gguf, f"{p}attn_output.weight", (hidden, heads * v), why)
    q = None if q_rank is None else int(q_rank)
    return MlaShape(heads, q, rank, rope, nope, v, split, _read_yarn(gguf))


def mla_config(shape: MlaShape) -> dict[str, Any]:
    """config.json fields (transformers' DeepseekV2Config names) describing the latent attention."""
    yarn = shape.yarn
    scaling = None
    if yarn is not None:
        scaling = {
            "rope_type": "yarn",
            "factor": yarn.factor,
            "original_max_position_embeddings": yarn.original,
            "mscale": yarn.mscale_all_dim,
            "mscale_all_dim": yarn.mscale_all_dim,
            "beta_fast": yarn.beta_fast,
            "beta_slow": yarn.beta_slow,
        }
    return {
        "rope_scaling": scaling,
        "q_lora_rank": shape.q_lora_rank,
        "kv_lora_rank": shape.kv_lora_rank,
        "qk_rope_head_dim": shape.rope,
        "qk_nope_head_dim": shape.nope,
        "v_head_dim": shape.v,
        "num_key_value_heads": 1,  # the cache: one latent and one rope key per token
        "head_dim": shape.kv_lora_rank,
    }


class MlaAttention:
    """The latent attention layers of one graph: the causal mask and rotary tables made once, then a layer each.

    Args:
        b: The graph builder.
        hp: The decoder's shape (its ``rotary_dim`` is the rope head).
        shape: The latent attention's sizes (:func:`read_mla`).
    """

    def __init__(self, b: GraphBuilder, hp: Hyper, shape: MlaShape) -> None:
        self.b, self.hp, self.shape = b, hp, shape
        self._ids: str | None = None
        if shape.yarn is not None:
            cos, sin = shape.yarn.caches(shape.rope, hp.rope_base, min(hp.context, MAX_ROPE_POSITIONS))
        else:
            cos, sin = rope_caches(hp, hp.rope_base, hp.rope_linear_factor, None)  # [positions, rope / 2]
        n = "/model/mla"
        self.cos, self.sin = (
            b.one(
                "Unsqueeze",
                [
                    b.one("Gather", [b.initializer(table, f"{which}_cache"), "position_ids"], f"{n}/{which}/Gather"),
                    b.ints([1]),
                ],
                f"{n}/{which}/Unsqueeze",
            )
            for which, table in (("cos", cos), ("sin", sin))
        )  # [batch, 1, seq, rope / 2]
        # allowed[b, 0, j, t]: key t is a real token (attention_mask) at or before query j (past + j)
        total = self._scalar_at(b.one("Shape", ["attention_mask"], f"{n}/mask/Shape"), 1, f"{n}/mask/total")
        seq = self._scalar_at(b.one("Shape", ["input_ids"], f"{n}/mask/Shape_ids"), 1, f"{n}/mask/seq")
        zero, one = b.initializer(np.array(0, np.int64), f"{n}/zero"), b.initializer(np.array(1, np.int64), f"{n}/one")
        keys = b.one("Range", [zero, total, one], f"{n}/mask/keys")  # [total]
        last = b.one(
            "Add",
            [b.one("Range", [zero, seq, one], f"{n}/mask/queries"), b.one("Sub", [total, seq], f"{n}/mask/past")],
            f"{n}/mask/last",
        )  # [seq]: the last key each query may see
        causal = b.one(
            "LessOrEqual",
            [keys, b.one("Unsqueeze", [last, b.ints([1])], f"{n}/mask/last_col")],
            f"{n}/mask/causal",
        )  # [seq, total]
        real = b.one(
            "Unsqueeze",
            [b.one("Cast", ["attention_mask"], f"{n}/mask/Cast", to=9), b.ints([1, 2])],
            f"{n}/mask/real",
        )  # [batch, 1, 1, total] bool
        allowed = b.one("And", [causal, real], f"{n}/mask/allowed")  # [batch, 1, seq, total]
        # the heads' queries are laid out token-major ([batch, seq, heads, ...]): the mask and the query's
        # rotary tables broadcast over heads on axis 2
        self.allowed_by_head = allowed
        self.allowed = b.one("Transpose", [allowed], f"{n}/mask/by_token", perm=[0, 2, 1, 3])  # [batch, seq, 1, total]
        self.cos_q, self.sin_q = (
            b.one("Transpose", [table], f"{n}/{which}/by_token", perm=[0, 2, 1, 3])
            for which, table in (("cos", self.cos), ("sin", self.sin))
        )  # [batch, seq, 1, rope / 2]
        self.masked = b.initializer(np.array(_NEG, np.float32), f"{n}/masked")

    def _scalar_at(self, vector: str, index: int, name: str) -> str:
        return self.b.one(
            "Gather", [vector, self.b.initializer(np.array(index, np.int64), f"{name}/index")], f"{name}/Gather", axis=0
        )

    def _rotate(self, x: str, name: str, by_token: bool = False) -> str:
        """``x`` ``[batch, heads, seq, rope]`` (``by_token``: ``[batch, seq, heads, rope]``) with each adjacent
        pair rotated by its position's angle."""
        b, half = self.b, self.shape.rope // 2
        pairs = b.one("Reshape", [x, b.ints([0, 0, 0, half, 2])], f"{name}/pairs")
        x0, x1 = b.node("Split", [pairs, b.ints([1, 1])], f"{name}/Split", outputs=2, axis=-1)
        x0 = b.one("Squeeze", [x0, b.ints([-1])], f"{name}/x0")
        x1 = b.one("Squeeze", [x1, b.ints([-1])], f"{name}/x1")
        cos, sin = (self.cos_q, self.sin_q) if by_token else (self.cos, self.sin)
        r0 = b.one(
            "Sub",
            [b.one("Mul", [x0, cos], f"{name}/x0cos"), b.one("Mul", [x1, sin], f"{name}/x1sin")],
            f"{name}/r0",
        )
        r1 = b.one(
            "Add",
            [b.one("Mul", [x0, sin], f"{name}/x0sin"), b.one("Mul", [x1, cos], f"{name}/x1cos")],
            f"{name}/r1",
        )
        both = b.one(
            "Concat",
            [b.one("Unsqueeze", [r, b.ints([-1])], f"{name}/r{k}/Unsqueeze") for k, r in enumerate((r0, r1))],
            f"{name}/Concat",
            axis=-1,
        )
        return b.one("Reshape", [both, b.ints([0, 0, 0, 2 * half])], f"{name}/rotated")

    def _rows_by_cache(self, x: str, cache: str, name: str, **attrs: Any) -> str:
        """``x`` ``[batch, seq, heads, d]`` folded to ``[batch, 1, seq x heads, d]`` times ``cache``
        ``[batch, 1, total, d']`` (``transB``: its transpose) with com.microsoft's FusedMatMul."""
        b = self.b
        rows = b.one("Reshape", [x, b.ints([0, 1, -1, 0])], f"{name}/rows")
        return b.one("FusedMatMul", [rows, cache], f"{name}/FusedMatMul", domain="com.microsoft", **attrs)

    def _head_ids(self) -> str:
        """``[batch, seq, heads]`` int64 ``0 .. heads - 1``: each head's up-projection as an "expert"."""
        if self._ids is None:
            b, n = self.b, "/model/mla/heads"
            heads = b.initializer(np.arange(self.shape.heads, dtype=np.int64), f"{n}/range")
            dims = b.one(
                "Concat", [b.one("Shape", ["input_ids"], f"{n}/Shape"), b.ints([self.shape.heads])], f"{n}/dims", axis=0
            )
            self._ids = b.one("Expand", [heads, dims], f"{n}/Expand")
        return self._ids

    def _by_latent(self, prefix: str, which: str) -> np.ndarray:
        """Every head's ``k`` (``[heads, nope, rank]``) or ``v`` (``[heads, v, rank]``) up-projection, dequantized:
        each head's rows against the latent, from ``attn_k_b`` / ``attn_v_b`` or an older file's ``attn_kv_b``."""
        s, gguf = self.shape, self.b.gguf
        if s.split_kv_b:
            kv_b = gguf.tensor(f"{prefix}attn_kv_b.weight").reshape(s.heads, s.nope + s.v, s.kv_lora_rank)
            return kv_b[:, : s.nope, :] if which == "k" else kv_b[:, s.nope :, :]
        if which == "k":
            return gguf.tensor(f"{prefix}attn_k_b.weight").transpose(
                0, 2, 1
            )  # [heads, rank, nope] -> [heads, nope, rank]
        return gguf.tensor(f"{prefix}attn_v_b.weight")

    def _per_head(self, x: str, which: str, prefix: str, name: str) -> str:
        """Each head's up-projection of ``x`` ``[batch, seq, heads, in]``: ``k`` (``attn_k_b``: nope -> rank,
        absorbed into the query) or ``v`` (``attn_v_b``: rank -> v, after the attention).  On the compiled
        operators the file's blocks are read in place (``GgmlExpertMatMul``, the heads as experts, activations
        rounded as llama.cpp rounds them for its products); otherwise float32, dequantized exactly."""
        s, b = self.shape, self.b
        tensor = f"{prefix}attn_{which}_b.weight"
        if b.ggml and not s.split_kv_b and b.gguf.info(tensor).type not in FLOAT_TYPES:
            return b.in_place.experts(x, [tensor], self._head_ids(), f"/{name}/{which}_b")
        rows = self._by_latent(prefix, which)  # [heads, nope | v, rank]
        matrix = rows if which == "k" else rows.transpose(0, 2, 1)  # [heads, in, out]
        weight = b.initializer(np.ascontiguousarray(matrix, np.float32), f"{name}.{which}_b.weight")
        y = b.one(
            "MatMul",
            [b.one("Unsqueeze", [x, b.ints([-2])], f"/{name}/{which}_b/Unsqueeze"), weight],
            f"/{name}/{which}_b/MatMul",
        )  # [batch, seq, heads, 1, out]
        return b.one("Squeeze", [y, b.ints([-2])], f"/{name}/{which}_b/Squeeze")

    def layer(self, x: str, layer: int) -> str:
        """Layer ``layer``'s attention output ``[batch, seq, hidden]`` for ``x`` (the normed hidden state);
        its cache outputs are ``present.{layer}.key`` / ``.value``."""
        b, s, hp = self.b, self.shape, self.hp
        gguf = b.gguf
        p, name = f"blk.{layer}.", f"model.layers.{layer}.self_attn"
        path = f"/model.layers.{layer}/self_attn"
        if s.q_lora_rank is not None:
            q = b.linear(x, [Part(f"{p}attn_q_a.weight")], f"{name}.q_a_proj")
            q = b.rms_norm(q, gguf.tensor(f"{p}attn_q_a_norm.weight"), f"{name}.q_a_layernorm", hp.eps)
            q = b.linear(q, [Part(f"{p}attn_q_b.weight")], f"{name}.q_b_proj")
        else:
            q = b.linear(x, [Part(f"{p}attn_q.weight")], f"{name}.q_proj")
        q = b.one("Reshape", [q, b.ints([0, 0, s.heads, s.nope + s.rope])], f"{path}/q/Reshape")
        q_nope, q_pe = b.node("Split", [q, b.ints([s.nope, s.rope])], f"{path}/q/Split", outputs=2, axis=-1)
        kv = b.linear(x, [Part(f"{p}attn_kv_a_mqa.weight")], f"{name}.kv_a_proj_with_mqa")  # [batch, seq, rank + rope]
        latent, k_pe = b.node("Split", [kv, b.ints([s.kv_lora_rank, s.rope])], f"{path}/kv/Split", outputs=2, axis=-1)
        latent = b.rms_norm(latent, gguf.tensor(f"{p}attn_kv_a_norm.weight"), f"{name}.kv_a_layernorm", hp.eps)
        k_pe = self._rotate(b.one("Unsqueeze", [k_pe, b.ints([1])], f"{path}/k_pe/Unsqueeze"), f"{path}/k_pe/rope")
        if s.expanded:
            return self._expanded(q_nope, q_pe, latent, k_pe, layer)
        latent = b.one("Unsqueeze", [latent, b.ints([1])], f"{path}/latent/Unsqueeze")  # [batch, 1, seq, rank]
        caches = []
        for kind, new in (("key", latent), ("value", k_pe)):  # [batch, 1, past + seq, rank | rope]
            b.one("Concat", [f"past_key_values.{layer}.{kind}", new], f"{path}/{kind}/Concat", axis=2)
            b.nodes[-1].output[0] = f"present.{layer}.{kind}"
            caches.append(f"present.{layer}.{kind}")
        latents, rope_keys = caches
        q_latent = self._per_head(q_nope, "k", p, name)  # [batch, seq, heads, rank]
        q_pe = self._rotate(q_pe, f"{path}/q_pe/rope", by_token=True)  # [batch, seq, heads, rope]
        # every token's heads as rows of one product with the one latent per token (MQA form): the cache is
        # read once for all heads, and transB reads it as it is stored (no transposed copy each step)
        scores = b.one(
            "Add",
            [
                self._rows_by_cache(q_latent, latents, f"{path}/scores_latent", transB=1, alpha=s.scale),
                self._rows_by_cache(q_pe, rope_keys, f"{path}/scores_rope", transB=1, alpha=s.scale),
            ],
            f"{path}/scores/Add",
        )
        scores = b.one(
            "Reshape", [scores, b.ints([0, -1, s.heads, 0])], f"{path}/scores/Reshape"
        )  # [batch, seq, heads, past + seq]
        scores = b.one("Where", [self.allowed, scores, self.masked], f"{path}/mask/Where")
        probs = b.one("Softmax", [scores], f"{path}/Softmax", axis=-1)
        context = b.one(
            "Reshape",
            [self._rows_by_cache(probs, latents, f"{path}/context"), b.ints([0, -1, s.heads, s.kv_lora_rank])],
            f"{path}/context/Reshape",
        )  # [batch, seq, heads, rank]
        values = self._per_head(context, "v", p, name)  # [batch, seq, heads, v]
        merged = b.one("Reshape", [values, b.ints([0, 0, s.heads * s.v])], f"{path}/out/Reshape")
        return b.linear(merged, [Part(f"{p}attn_output.weight")], f"{name}.o_proj")

    def _up_matrix(self, prefix: str, which: str) -> np.ndarray:
        """``[rank, heads x out]`` float32: the latent's up-projection to every head's ``k`` (nope) or ``v``."""
        rows = self._by_latent(prefix, which)  # [heads, nope | v, rank]
        return np.ascontiguousarray(rows.reshape(-1, self.shape.kv_lora_rank).T, np.float32)

    def _expanded(self, q_nope: str, q_pe: str, latent: str, k_pe: str, layer: int) -> str:
        """The layer as ordinary multi-head attention over up-projected keys and values, which are cached:
        ``present.{layer}.key`` ``[batch, heads, total, nope + rope]`` and ``.value`` ``[batch, heads, total, v]``."""
        b, s = self.b, self.shape
        p, name = f"blk.{layer}.", f"model.layers.{layer}.self_attn"
        path = f"/model.layers.{layer}/self_attn/expanded"

        def by_head(x: str, width: int, what: str) -> str:  # [batch, seq, heads x width] -> [batch, heads, seq, width]
            split = b.one("Reshape", [x, b.ints([0, 0, s.heads, width])], f"{path}/{what}/Reshape")
            return b.one("Transpose", [split], f"{path}/{what}/Transpose", perm=[0, 2, 1, 3])

        up = {
            which: b.one(
                "MatMul",
                [latent, b.initializer(self._up_matrix(p, which), f"{name}.{which}_up.weight")],
                f"{path}/{which}_up/MatMul",
            )
            for which in ("k", "v")
        }  # [batch, seq, heads x nope | v]
        k_nope = by_head(up["k"], s.nope, "k_nope")
        dims = b.one(
            "Concat",
            [b.one("Shape", [k_nope], f"{path}/k_pe/Shape", start=0, end=3), b.ints([s.rope])],
            f"{path}/k_pe/dims",
            axis=0,
        )
        k_pe_heads = b.one("Expand", [k_pe, dims], f"{path}/k_pe/Expand")  # [batch, heads, seq, rope]
        key = b.one("Concat", [k_nope, k_pe_heads], f"{path}/key/Concat", axis=-1)
        query = b.one(
            "Concat",
            [q_nope, self._rotate(q_pe, f"{path}/q_pe/rope", by_token=True)],
            f"{path}/query/Concat",
            axis=-1,
        )  # [batch, seq, heads, nope + rope]
        query = b.one("Transpose", [query], f"{path}/query/Transpose", perm=[0, 2, 1, 3])
        caches = []
        for kind, new in (("key", key), ("value", by_head(up["v"], s.v, "value"))):
            b.one("Concat", [f"past_key_values.{layer}.{kind}", new], f"{path}/{kind}/Concat_past", axis=2)
            b.nodes[-1].output[0] = f"present.{layer}.{kind}"
            caches.append(f"present.{layer}.{kind}")
        keys, values = caches
        scores = b.one(
            "FusedMatMul", [query, keys], f"{path}/scores/FusedMatMul", domain="com.microsoft", transB=1, alpha=s.scale
        )  # [batch, heads, seq, total]
        scores = b.one("Where", [self.allowed_by_head, scores, self.masked], f"{path}/mask/Where")
        probs = b.one("Softmax", [scores], f"{path}/Softmax", axis=-1)
        context = b.one("MatMul", [probs, values], f"{path}/context/MatMul")  # [batch, heads, seq, v]
        context = b.one("Transpose", [context], f"{path}/context/Transpose", perm=[0, 2, 1, 3])
        merged = b.one("Reshape", [context, b.ints([0, 0, s.heads * s.v])], f"{path}/out/Reshape")
        return b.linear(merged, [Part(f"{p}attn_output.weight")], f"{name}.o_proj")
