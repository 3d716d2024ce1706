"""A GGUF decoder as one ONNX graph in onnxruntime-genai's decoder layout, built with numpy + onnx.

The graph is the layout the library already runs fastest (a shared past/present buffer):

* inputs ``input_ids`` ``[batch, seq]`` int64, ``attention_mask`` ``[batch, total]`` int64 and
  ``past_key_values.{i}.key`` / ``.value`` ``[batch, kv_heads, past, head_dim]`` float32;
* input ``num_logits_to_keep`` (int64 scalar: the last k positions get logits, 0 keeps them all);
* outputs ``logits`` ``[batch, kept, vocab]`` float32 and ``present.{i}.key`` / ``.value``;
* one com.microsoft ``GroupQueryAttention`` per layer with rotary positions inside it (cos/sin
  caches as initializers, ``do_rotary=1``); ``seqlens_k`` / ``total_sequence_length`` come from
  ``attention_mask`` in the graph, as genai's builder computes them;
* RMS norms as ``SimplifiedLayerNormalization`` / ``SkipSimplifiedLayerNormalization`` (the
  residual stream runs through the Skip variant), a gated MLP, tied or separate lm_head.

Weights (``bits``): 32 keeps every matrix as dequantized (float32); 16 stores them as float16
with a Cast before use (the file halves; onnxruntime folds the Casts when the session loads, so
it computes in float32); 4 and 8 turn every linear layer, lm_head included, into ``MatMulNBits``
(symmetric blocks of 32, accuracy level 4, packed by onnxruntime's own quantizer from the
dequantized weights).  The embedding table stays float32 for 4 and 8 bits (float16 for 16).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from inference4py.errors import ConfigurationError, UnsupportedModelError
from inference4py.gguf.hyper import MAX_ROPE_POSITIONS, Hyper, hf_config, read_hyper
from inference4py.gguf.reader import GGUFFile

__all__ = ["BITS", "build_decoder"]

BITS = (4, 8, 16, 32)
BLOCK_SIZE = 32  # MatMulNBits block: genai's builder and inference4py.quantize use the same
ACCURACY_LEVEL = 4  # int8 activations in MatMulNBits: the fastest on CPU
OPSET = 21  # Gelu with approximate="tanh" needs 20


def rope_caches(
    hp: Hyper, base: float, linear_factor: float, factors: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin ``[positions, rotary_dim / 2]`` in float32, computed as transformers does."""
    dim = hp.rotary_dim
    inv_freq = 1.0 / (np.float32(base) ** (np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)))
    inv_freq = inv_freq.astype(np.float32)
    if factors is not None:  # Llama 3's rope_freqs: llama.cpp divides each frequency by its factor
        inv_freq = (inv_freq / factors.astype(np.float32).reshape(-1)[: dim // 2]).astype(np.float32)
    if linear_factor != 1.0:
        inv_freq = (inv_freq / np.float32(linear_factor)).astype(np.float32)
    positions = np.arange(min(hp.context, MAX_ROPE_POSITIONS), dtype=np.float32)
    freqs = np.outer(positions, inv_freq).astype(np.float32)
    return np.cos(freqs).astype(np.float32), np.sin(freqs).astype(np.float32)


def unpermute(weight: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's q/k row order (interleaved rotary pairs) back to the half-split order."""
    rows = weight.shape[0]
    half = rows // heads // 2
    return weight.reshape(heads, half, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def _qkv_weight(gguf: GGUFFile, hp: Hyper, prefix: str) -> tuple[np.ndarray, np.ndarray | None]:
    """Layer ``prefix``'s ``[q + k + v, hidden]`` projection (q/k rows in half-split rotary order) and bias."""
    if f"{prefix}attn_qkv.weight" in gguf:  # Phi-3 stores it fused, unpermuted
        bias = gguf.tensor(f"{prefix}attn_qkv.bias") if f"{prefix}attn_qkv.bias" in gguf else None
        return gguf.tensor(f"{prefix}attn_qkv.weight"), bias
    q, k, v = (gguf.tensor(f"{prefix}attn_{t}.weight") for t in "qkv")
    if hp.arch.permuted_qk:
        q, k = unpermute(q, hp.heads), unpermute(k, hp.kv_heads)
    if f"{prefix}attn_q.bias" not in gguf:
        return np.concatenate([q, k, v], axis=0), None
    if hp.arch.permuted_qk:  # llama.cpp would have permuted these too; no such file is known
        raise UnsupportedModelError(f"{gguf.path}: q/k biases on a permuted {hp.arch.name} layout are not supported.")
    bias = np.concatenate([gguf.tensor(f"{prefix}attn_{t}.bias").reshape(-1) for t in "qkv"])
    return np.concatenate([q, k, v], axis=0), bias


class _Builder:
    """Nodes and initializers of the graph being built."""

    def __init__(self, bits: int) -> None:
        from onnx import helper, numpy_helper

        self.helper = helper
        self.numpy_helper = numpy_helper
        self.bits = bits
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self._consts: dict[tuple[str, tuple[int, ...]], str] = {}
        self._quantizer: Any = None

    def node(
        self, op: str, inputs: list[str], name: str, *, outputs: int = 1, domain: str = "", **attrs: Any
    ) -> list[str]:
        outs = [f"{name}/output_{i}" for i in range(outputs)]
        self.nodes.append(self.helper.make_node(op, inputs, outs, name=name, domain=domain or None, **attrs))
        return outs

    def one(self, op: str, inputs: list[str], name: str, *, domain: str = "", **attrs: Any) -> str:
        return self.node(op, inputs, name, domain=domain, **attrs)[0]

    def initializer(self, array: np.ndarray, name: str) -> str:
        self.initializers.append(self.numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def ints(self, values: list[int]) -> str:
        key = ("i64", tuple(values))
        if key not in self._consts:
            self._consts[key] = self.initializer(
                np.array(values, dtype=np.int64), f"/constants/INT64/{'_'.join(map(str, values))}"
            )
        return self._consts[key]

    def scalar(self, value: float) -> str:
        return self.initializer(np.array(value, dtype=np.float32), f"/constants/FLOAT/{len(self.initializers)}")

    def weight(self, array: np.ndarray, name: str) -> str:
        """A float weight stored at the build's precision (16: float16 + Cast), used as float32."""
        if self.bits != 16:
            return self.initializer(array.astype(np.float32, copy=False), name)
        stored = self.initializer(array.astype(np.float16), name)
        return self.one("Cast", [stored], f"{name}/Cast", to=1)

    def linear(self, x: str, weight: np.ndarray, name: str, bias: np.ndarray | None = None) -> str:
        """``x @ weight.T (+ bias)`` for a ``[out, in]`` weight, at the build's precision."""
        out_features, in_features = weight.shape
        if self.bits in (4, 8):
            packed, scales = self._quantize(weight)
            y = self.one(
                "MatMulNBits",
                [
                    x,
                    self.initializer(packed, f"{name}.weight_Q{self.bits}"),
                    self.initializer(scales, f"{name}.weight_scales"),
                ],
                f"{name}/MatMulNBits",
                domain="com.microsoft",
                K=in_features,
                N=out_features,
                bits=self.bits,
                block_size=BLOCK_SIZE,
                accuracy_level=ACCURACY_LEVEL,
            )
        else:
            y = self.one("MatMul", [x, self.weight(weight.T, f"{name}.weight")], f"{name}/MatMul")
        if bias is not None:
            y = self.one("Add", [y, self.initializer(bias.astype(np.float32), f"{name}.bias")], f"{name}/Add")
        return y

    def _quantize(self, weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """onnxruntime's MatMulNBits packing (the quantizer inference4py.quantize runs) of a ``[out, in]`` weight."""
        if self._quantizer is None:
            try:
                from onnxruntime.quantization.matmul_nbits_quantizer import (
                    DefaultWeightOnlyQuantConfig,
                    DefaultWeightOnlyQuantizer,
                )
            except ImportError as exc:
                raise ConfigurationError(
                    f"Converting with bits={self.bits} needs onnxruntime's quantization tools (onnx_ir): "
                    'pip install "inference4py[gguf]".'
                ) from exc
            config = DefaultWeightOnlyQuantConfig(
                block_size=BLOCK_SIZE, is_symmetric=True, accuracy_level=ACCURACY_LEVEL, bits=self.bits
            )
            self._quantizer = DefaultWeightOnlyQuantizer(config)
        packed, scales, _zero_points = self._quantizer.qbits_block_quant(
            np.ascontiguousarray(weight.T, dtype=np.float32)
        )
        return packed, scales.reshape(-1)

    def rms_norm(self, x: str, weight: np.ndarray, name: str, eps: float) -> str:
        return self.one(
            "SimplifiedLayerNormalization",
            [x, self.initializer(weight.astype(np.float32), f"{name}.weight")],
            f"{name}/SimplifiedLayerNormalization",
            epsilon=eps,
            axis=-1,
            stash_type=1,
        )

    def skip_rms_norm(self, residual: str, x: str, weight: np.ndarray, name: str, eps: float) -> tuple[str, str]:
        """(norm(residual + x), residual + x)."""
        outs = self.node(
            "SkipSimplifiedLayerNormalization",
            [residual, x, self.initializer(weight.astype(np.float32), f"{name}.weight")],
            f"{name}/SkipSimplifiedLayerNormalization",
            outputs=4,
            domain="com.microsoft",
            epsilon=eps,
        )
        self.nodes[-1].output[1] = ""
        self.nodes[-1].output[2] = ""
        return outs[0], outs[3]


def build_decoder(gguf: GGUFFile, bits: int = 32) -> tuple[Any, dict[str, Any]]:
    """The decoder of a GGUF file as one ONNX graph, and the config.json dict describing it.

    Args:
        gguf: The opened file (:class:`~inference4py.gguf.reader.GGUFFile`).
        bits: 32 (float32 weights exactly as dequantized), 16 (float16 weights), 4 or 8
            (``MatMulNBits`` blocks of 32 requantized from the dequantized weights; the embedding
            table stays float32).

    Returns:
        ``(model, config)``: an ``onnx.ModelProto`` in onnxruntime-genai's decoder layout (save it
        with external data: its weights exceed protobuf's 2 GB for models above ~0.5B parameters in
        float32) and the transformers-style config.json dict (model_type, architectures,
        hidden_size, ..., sliding_window, tie_word_embeddings).

    Raises:
        ConfigurationError: ``bits`` is not 4, 8, 16 or 32.
        UnsupportedModelError: the architecture (or a feature of it, such as yarn rotary scaling)
            is not supported; the message lists the supported architectures.
        ModelLoadError: a tensor or metadata field the architecture needs is missing.

    Example:
        >>> model, config = build_decoder(GGUFFile("smollm2.gguf"), bits=4)  # doctest: +SKIP
    """
    if bits not in BITS:
        raise ConfigurationError(f"bits={bits} is not supported: use one of {', '.join(map(str, BITS))}.")
    try:
        from onnx import TensorProto, helper
    except ImportError as exc:
        raise ConfigurationError(
            'Converting a GGUF file needs the onnx package: pip install "inference4py[gguf]".'
        ) from exc

    hp = read_hyper(gguf)
    b = _Builder(bits)

    # attention_mask -> per-row valid length - 1 and the total length, as GroupQueryAttention wants them
    mask_sum = b.one("ReduceSum", ["attention_mask", b.ints([1])], "/model/attn_mask/ReduceSum", keepdims=0)
    seqlens = b.one(
        "Cast",
        [b.one("Sub", [mask_sum, b.ints([1])], "/model/attn_mask/Sub")],
        "/model/attn_mask/seqlens_k",
        to=TensorProto.INT32,
    )
    mask_shape = b.one("Shape", ["attention_mask"], "/model/attn_mask/Shape")
    total = b.one(
        "Cast",
        [
            b.one(
                "Gather",
                [mask_shape, b.initializer(np.array(1, np.int64), "/constants/INT64/scalar_1")],
                "/model/attn_mask/Gather",
                axis=0,
            )
        ],
        "/model/attn_mask/total_sequence_length",
        to=TensorProto.INT32,
    )

    factors = gguf.tensor("rope_freqs.weight") if "rope_freqs.weight" in gguf else None
    cos, sin = rope_caches(hp, hp.rope_base, hp.rope_linear_factor, factors)
    caches = {False: (b.initializer(cos, "cos_cache"), b.initializer(sin, "sin_cache"))}
    if hp.sliding_window is not None and hp.arch.local_rope_base is not None:
        cos_l, sin_l = rope_caches(hp, hp.arch.local_rope_base, 1.0, None)
        caches[True] = (b.initializer(cos_l, "cos_cache_local"), b.initializer(sin_l, "sin_cache_local"))

    # embeddings
    embed = gguf.tensor("token_embd.weight")  # [vocab, hidden]
    table = b.initializer(embed.astype(np.float16) if bits == 16 else embed, "model.embed_tokens.weight")
    x = b.one("Gather", [table, "input_ids"], "/model/embed_tokens/Gather")
    if bits == 16:
        x = b.one("Cast", [x], "/model/embed_tokens/Cast", to=TensorProto.FLOAT)
    if hp.arch.embed_scale:  # Gemma: scaled by sqrt(hidden) in float32, as transformers does
        x = b.one("Mul", [x, b.scalar(float(np.float32(math.sqrt(hp.hidden))))], "/model/embed_tokens/Mul")
    lm_weight = None if hp.tied else gguf.tensor("output.weight")
    tied_embed = embed if hp.tied else None
    del embed

    q_size, kv_size = hp.heads * hp.head_dim, hp.kv_heads * hp.head_dim
    h = b.rms_norm(x, gguf.tensor("blk.0.attn_norm.weight"), "model.layers.0.input_layernorm", hp.eps)
    residual = x
    for i in range(hp.layers):
        p, n = f"blk.{i}.", f"model.layers.{i}"
        qkv_w, qkv_b = _qkv_weight(gguf, hp, p)
        qkv = b.linear(h, qkv_w, f"{n}.attn.qkv_proj", qkv_b)
        del qkv_w
        if f"{p}attn_q_norm.weight" in gguf:  # Qwen3, Gemma 3: RMS norm of each head's query and key
            q, k, v = b.node(
                "Split", [qkv, b.ints([q_size, kv_size, kv_size])], f"/{n}/attn/qkv_split", outputs=3, axis=-1
            )
            per_head = b.ints([0, -1, hp.head_dim])
            for which, size in (("q", q_size), ("k", kv_size)):
                t = q if which == "q" else k
                t = b.one("Reshape", [t, per_head], f"/{n}/attn/{which}_norm/Reshape_1")
                t = b.rms_norm(t, gguf.tensor(f"{p}attn_{which}_norm.weight"), f"{n}.attn.{which}_norm", hp.eps)
                t = b.one("Reshape", [t, b.ints([0, -1, size])], f"/{n}/attn/{which}_norm/Reshape_2")
                q, k = (t, k) if which == "q" else (q, t)
            attn_in = [q, k, v]
        else:
            attn_in = [qkv, "", ""]
        sliding = hp.is_sliding(i)
        cos_name, sin_name = caches.get(sliding, caches[False])
        attn = b.node(
            "GroupQueryAttention",
            [*attn_in, f"past_key_values.{i}.key", f"past_key_values.{i}.value", seqlens, total, cos_name, sin_name],
            f"/{n}/attn/GroupQueryAttention",
            outputs=3,
            domain="com.microsoft",
            num_heads=hp.heads,
            kv_num_heads=hp.kv_heads,
            scale=hp.scale,
            local_window_size=hp.sliding_window if sliding and hp.sliding_window else -1,
            softcap=hp.attn_softcap,
            do_rotary=1,
            rotary_interleaved=0,
        )
        b.nodes[-1].output[1] = f"present.{i}.key"
        b.nodes[-1].output[2] = f"present.{i}.value"
        a = b.linear(attn[0], gguf.tensor(f"{p}attn_output.weight"), f"{n}.attn.o_proj")
        if f"{p}post_attention_norm.weight" in gguf:  # Gemma: norm of the attention output
            a = b.rms_norm(a, gguf.tensor(f"{p}post_attention_norm.weight"), f"{n}.post_attention_layernorm", hp.eps)
        h, residual = b.skip_rms_norm(
            residual, a, gguf.tensor(f"{p}ffn_norm.weight"), f"{n}.pre_feedforward_layernorm", hp.eps
        )

        if f"{p}ffn_gate.weight" in gguf:
            gate_w, up_w = gguf.tensor(f"{p}ffn_gate.weight"), gguf.tensor(f"{p}ffn_up.weight")
        else:  # Phi-3: one [2 * intermediate, hidden] matrix, the gate's rows first
            gate_w, up_w = np.split(gguf.tensor(f"{p}ffn_up.weight"), 2, axis=0)
        gate = b.linear(h, gate_w, f"{n}.mlp.gate_proj")
        up = b.linear(h, up_w, f"{n}.mlp.up_proj")
        del gate_w, up_w
        if hp.arch.activation == "gelu_tanh":
            act = b.one("Gelu", [gate], f"/{n}/mlp/act_fn/Gelu", approximate="tanh")
        else:
            act = b.one("Mul", [gate, b.one("Sigmoid", [gate], f"/{n}/mlp/act_fn/Sigmoid")], f"/{n}/mlp/act_fn/Mul")
        m = b.linear(b.one("Mul", [act, up], f"/{n}/mlp/Mul"), gguf.tensor(f"{p}ffn_down.weight"), f"{n}.mlp.down_proj")
        if f"{p}post_ffw_norm.weight" in gguf:  # Gemma: norm of the MLP output
            m = b.rms_norm(m, gguf.tensor(f"{p}post_ffw_norm.weight"), f"{n}.post_feedforward_layernorm", hp.eps)
        last = i == hp.layers - 1
        norm_name, norm = (
            ("output_norm.weight", "model.norm")
            if last
            else (f"blk.{i + 1}.attn_norm.weight", f"model.layers.{i + 1}.input_layernorm")
        )
        h, residual = b.skip_rms_norm(residual, m, gguf.tensor(norm_name), norm, hp.eps)

    # The head computes only the positions asked for: num_logits_to_keep = k > 0 keeps the last k,
    # 0 keeps all (as optimize/logits.py adds to exports). A 4/8-bit head keeps at least two rows:
    # onnxruntime's one-row MatMulNBits takes another kernel, whose logits differ from the prompt's.
    keep = "num_logits_to_keep"
    kept = b.one("Max", [keep, b.ints([2])], "/lm_head/keep/Max") if bits in (4, 8) else keep
    start = b.one(
        "Where",
        [
            b.one("Equal", [keep, b.ints([0])], "/lm_head/keep/Equal"),
            b.ints([0]),
            b.one("Neg", [kept], "/lm_head/keep/Neg"),
        ],
        "/lm_head/keep/Where",
    )
    start = b.one("Reshape", [start, b.ints([1])], "/lm_head/keep/Reshape")
    h = b.one("Slice", [h, start, b.ints([np.iinfo(np.int64).max]), b.ints([1])], "/lm_head/keep/Slice")

    # lm_head
    if lm_weight is not None:
        logits = b.linear(h, lm_weight, "lm_head")
    elif bits in (4, 8):
        assert tied_embed is not None
        logits = b.linear(h, tied_embed, "lm_head")  # its own quantized copy: the embedding stays float32
    else:  # tied, float: read the embedding table itself ([vocab, hidden]) through Gemm(transB=1), no copy
        flat = b.one("Reshape", [h, b.ints([-1, hp.hidden])], "/lm_head/Reshape_in")
        table_f32 = b.one("Cast", [table], "/lm_head/Cast", to=TensorProto.FLOAT) if bits == 16 else table
        y = b.one("Gemm", [flat, table_f32], "/lm_head/Gemm", transB=1)
        out_shape = b.one(
            "Concat", [b.one("Shape", [h], "/lm_head/Shape", start=0, end=2), b.ints([-1])], "/lm_head/Concat", axis=0
        )
        logits = b.one("Reshape", [y, out_shape], "/lm_head/Reshape_out")
    if hp.final_softcap:  # Gemma 2: tanh(logits / cap) * cap
        capped = b.one(
            "Tanh",
            [b.one("Div", [logits, b.scalar(hp.final_softcap)], "/lm_head/softcap/Div")],
            "/lm_head/softcap/Tanh",
        )
        logits = b.one("Mul", [capped, b.scalar(hp.final_softcap)], "/lm_head/softcap/Mul")
    for node in b.nodes:  # the last node's output becomes the graph output "logits"
        node.input[:] = ["logits" if t == logits else t for t in node.input]
    b.nodes[-1].output[0] = "logits"

    f32, i64 = TensorProto.FLOAT, TensorProto.INT64
    inputs = [
        helper.make_tensor_value_info("input_ids", i64, ["batch_size", "sequence_length"]),
        helper.make_tensor_value_info("attention_mask", i64, ["batch_size", "total_sequence_length"]),
        helper.make_tensor_value_info(keep, i64, []),
    ]
    outputs = [helper.make_tensor_value_info("logits", f32, ["batch_size", "logits_length", hp.vocab])]
    for i in range(hp.layers):
        for kind in ("key", "value"):
            inputs.append(
                helper.make_tensor_value_info(
                    f"past_key_values.{i}.{kind}", f32, ["batch_size", hp.kv_heads, "past_sequence_length", hp.head_dim]
                )
            )
            outputs.append(
                helper.make_tensor_value_info(
                    f"present.{i}.{kind}", f32, ["batch_size", hp.kv_heads, "total_sequence_length", hp.head_dim]
                )
            )
    graph = helper.make_graph(b.nodes, f"{hp.arch.name}-gguf", inputs, outputs, initializer=b.initializers)
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid("com.microsoft", 1)],
        producer_name="inference4py.gguf",
    )
    model.ir_version = 10
    return model, hf_config(hp, gguf)
