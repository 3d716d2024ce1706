"""Whisper's encoder and decoder as ONNX graphs, built with numpy + onnx from :class:`WhisperWeights`.

The two graphs use optimum's input and output names, which the native runtime
(:mod:`inference4py.engine.seq2seq`) runs:

* ``encoder_model.onnx``: ``input_features`` ``[batch, n_mels, 2 * source]`` -> ``last_hidden_state``
  ``[batch, source, d]`` and every decoder layer's cross-attention keys and values
  ``present.{i}.encoder.key|value`` ``[batch, heads, source, head]``, projected once per window;
* ``decoder_model_merged.onnx`` (the file name the encoder-decoder preset looks for): ``input_ids``
  ``[batch, new]``, ``past_key_values.{i}.decoder.key|value`` ``[batch, heads, past, head]`` and
  ``past_key_values.{i}.encoder.key|value`` -> ``logits`` ``[batch, 1, vocab]`` (the last position
  only: the loop reads no other), ``present.{i}.decoder.*`` and ``cross_attentions.{i}`` ``[batch,
  heads, new, source]`` (the weights word timestamps read; a caller that does not bind them pays
  nothing).

Unlike optimum's merged decoder, the decoder has no ``If`` over a first-run branch: the encoder hands
the cross cache over (the runtime takes it from the encoder's outputs), so the decoder is one graph
that onnxruntime optimizes and packs once.

Weights are written as the file holds them.  Where inference4py's compiled operators are available
(:mod:`inference4py.engine.kernels`; ``write_graphs(..., operators=True)``), a quantized matrix stays
quantized in memory too: whisper.cpp's quantized blocks are the file's own bytes, multiplied by
``GgmlMatMul`` (a linear's bias an ``Add`` after it) and, for the token embeddings, read by
``GgmlGather``, the tied output head multiplying the same initializer; CTranslate2's int8 rows are
Q8_0 blocks of scale 1.0 holding the codes, the product then divided by the row divisors
(:mod:`~inference4py.speech.files.quantized`).  The product rounds its input per block as
whisper.cpp's CPU backend does for the type (to q8_0, q8_1 or q8_K blocks), so its results differ from the
float path's by that rounding; the embeddings are exactly the float path's.

Everything else, and every matrix when the operators are not available, is on onnxruntime's float
path: float32 as is; float16 with a ``Cast`` before use; integer codes with a ``Cast`` and either a
``Div`` by their row divisors (CTranslate2's int8) or a ``Mul`` by their block scales and an
``Add`` of their block minimums (whisper.cpp's quantized blocks, codes unpacked to one byte each).
onnxruntime folds those nodes once when the session loads, so the graph computes with exactly the
file's numbers in float32 (those matrices are float32 in memory), while the folder on disk stays about
the file's size (twice it for 4- and 5-bit blocks).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from inference4py.engine.kernels import DOMAIN
from inference4py.gguf.store import ExternalData
from inference4py.speech.files.quantized import Quantized, quantized
from inference4py.speech.files.weights import Matrix, WhisperWeights

__all__ = ["DECODER_FILE", "ENCODER_FILE", "write_graphs"]

ENCODER_FILE = "encoder_model.onnx"
DECODER_FILE = "decoder_model_merged.onnx"  # the encoder-decoder preset's name (no If inside: see above)
OPSET = 21
FUSED_ENCODER_ATTENTION = True  # com.microsoft MultiHeadAttention for the encoder's self-attention
_LN_EPS = 1e-5


class _Builder:
    """Nodes and initializers of one graph; weights go to its own external-data file.

    ``operators``: quantized matrices run on the compiled operators (:mod:`~inference4py.speech.files.quantized`).
    """

    def __init__(self, weights: WhisperWeights, store: ExternalData, *, operators: bool = False) -> None:
        from onnx import TensorProto, helper

        self.w = weights
        self.store = store
        self.operators = operators
        self._blocks: dict[str, tuple[str, str | None, Quantized] | None] = {}  # matrix -> blocks, divisor (made once)
        self.helper = helper
        self.TensorProto = TensorProto
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self._names: set[str] = set()
        self._consts: dict[tuple[str, bytes], str] = {}
        self._weights: dict[str, str] = {}  # tensor name -> the float32 value made for it (made once)

    def fresh(self, name: str) -> str:
        base, n = name, 1
        while name in self._names:
            n += 1
            name = f"{base}_{n}"
        self._names.add(name)
        return name

    def node(self, op: str, inputs: list[str], outputs: int | list[str], name: str, **attrs: Any) -> list[str]:
        domain = attrs.pop("domain", "")
        outs = [self.fresh(f"{name}/out{i}") for i in range(outputs)] if isinstance(outputs, int) else outputs
        self.nodes.append(self.helper.make_node(op, inputs, outs, name=self.fresh(name), domain=domain, **attrs))
        return outs

    def one(self, op: str, inputs: list[str], name: str, **attrs: Any) -> str:
        return self.node(op, inputs, 1, name, **attrs)[0]

    def initializer(self, array: np.ndarray, name: str) -> str:
        name = self.fresh(name)
        self.inits.append(self.store.array(np.ascontiguousarray(array), name))
        return name

    def const(self, array: np.ndarray, name: str) -> str:
        """A small constant, shared by every node that needs the same value."""
        array = np.ascontiguousarray(array)
        key = (array.dtype.str + str(array.shape), array.tobytes())
        if key not in self._consts:
            self._consts[key] = self.initializer(array, name)
        return self._consts[key]

    def ints(self, *values: int) -> str:
        return self.const(np.asarray(values, dtype=np.int64), "ints")

    def scalar(self, value: float) -> str:
        return self.const(np.asarray(value, dtype=np.float32), "scalar")

    # ------------------------------------------------------------------ weights as stored
    def stored(self, m: Matrix, name: str, *, transpose: bool) -> str:
        """A float32 tensor computed from the stored numbers (folded by onnxruntime at load), made once.

        ``transpose`` stores a matrix ``[out, in]`` as ``[in, out]`` (MatMul's right side); the
        transpose moves the stored numbers, it never changes them.
        """
        if name in self._weights:
            return self._weights[name]
        values = m.values
        if m.scales is not None:  # ggml blocks: codes * scale (+ minimum) per block, then the matrix's shape
            rows, blocks = m.scales.shape
            codes = self.initializer(values.reshape(rows, blocks, m.block), name)
            out = self.one("Cast", [codes], f"{name}/Cast", to=self.TensorProto.FLOAT)
            scales = self.initializer(m.scales.reshape(rows, blocks, 1).astype(np.float32), f"{name}/scales")
            out = self.one("Mul", [out, scales], f"{name}/Mul")
            if m.minimums is not None:
                mins = self.initializer(m.minimums.reshape(rows, blocks, 1).astype(np.float32), f"{name}/minimums")
                out = self.one("Add", [out, mins], f"{name}/Add")
            out = self.one("Reshape", [out, self.ints(*values.shape)], f"{name}/Reshape")
            if transpose:
                out = self.one("Transpose", [out], f"{name}/Transpose", perm=[1, 0])
        else:
            if transpose:
                values = values.T
            out = self.initializer(values, name)
            if values.dtype != np.float32:
                out = self.one("Cast", [out], f"{name}/Cast", to=self.TensorProto.FLOAT)
                if m.divisor is not None:
                    shape = (1, -1) if transpose else (-1,) + (1,) * (values.ndim - 1)
                    div = self.initializer(m.divisor.reshape(shape).astype(np.float32), f"{name}/divisor")
                    out = self.one("Div", [out, div], f"{name}/Div")
        self._weights[name] = out
        return out

    def vector(self, name: str) -> str:
        """A bias, norm or position table, made once (float16 as stored, widened at load like the matrices)."""
        if name not in self._weights:
            raw = self.w.tensors[name]
            if isinstance(raw, np.ndarray) and raw.dtype == np.float16:
                return self.stored(Matrix(raw), name, transpose=False)
            self._weights[name] = self.initializer(self.w.vector(name), name)
        return self._weights[name]

    def quantized(self, name: str) -> tuple[str, str | None, Quantized] | None:
        """Matrix ``name``'s block initializer and divisor initializer (None: no divisor) when it runs on the
        compiled operators, made once (a tied head reads the embedding's); None when it stays on the float path."""
        if not self.operators:
            return None
        if name not in self._blocks:
            q = quantized(self.w, name)
            if q is None:
                self._blocks[name] = None
            else:
                blocks = self.fresh(name)
                self.inits.append(self.store.chunks(blocks, np.uint8, q.shape, q.parts))
                divisor = None if q.divisor is None else self.initializer(q.divisor, f"{name}/divisor")
                self._blocks[name] = (blocks, divisor, q)
        return self._blocks[name]

    def product(self, x: str, name: str, node: str) -> str:
        """``x`` ``[..., in]`` times matrix ``name`` ``[out, in]`` transposed: ``GgmlMatMul`` over its blocks (then a
        ``Div`` by CTranslate2's row divisors) or ``MatMul`` with its float32 numbers."""
        found = self.quantized(name)
        if found is None:
            return self.one("MatMul", [x, self.stored(self.w.matrix(name), name, transpose=True)], f"{node}/MatMul")
        blocks, divisor, q = found
        y = self.one("GgmlMatMul", [x, blocks], f"{node}/GgmlMatMul", domain=DOMAIN, type=q.type_id, K=q.cols)
        return y if divisor is None else self.one("Div", [y, divisor], f"{node}/Div")  # [..., out] / [out]

    def linear(self, x: str, name: str) -> str:
        y = self.product(x, f"{name}.weight", name)
        return self.one("Add", [y, self.vector(f"{name}.bias")], f"{name}/Add")

    def layer_norm(self, x: str, name: str) -> str:
        scale, bias = self.vector(f"{name}.weight"), self.vector(f"{name}.bias")
        return self.one("LayerNormalization", [x, scale, bias], f"{name}/LayerNorm", axis=-1, epsilon=_LN_EPS)

    def gelu(self, x: str, name: str) -> str:
        return self.one("Gelu", [x], f"{name}/Gelu", approximate="none")

    def embedding_table(self) -> str:
        """The token embeddings as float32, made once (a tied head reads the same table)."""
        return self.stored(self.w.matrix("decoder.embeddings"), "decoder.embeddings", transpose=False)

    def embed(self, ids: str) -> str:
        """The embeddings of ``ids`` ``[batch, new]`` -> ``[batch, new, d]``: ``GgmlGather`` over the table's blocks
        (exactly the float path's numbers: the blocks dequantized, CTranslate2's codes divided by their row's
        divisor) or ``Gather`` from the float32 table."""
        found = self.quantized("decoder.embeddings")
        if found is None:
            return self.one("Gather", [self.embedding_table(), ids], "embed/Gather")
        blocks, divisor, q = found
        x = self.one("GgmlGather", [blocks, ids], "embed/GgmlGather", domain=DOMAIN, type=q.type_id, K=q.cols)
        if divisor is None:
            return x
        per_id = self.one("Gather", [divisor, ids], "embed/divisor/Gather")  # [batch, new]
        return self.one("Div", [x, self.one("Unsqueeze", [per_id, self.ints(-1)], "embed/divisor")], "embed/Div")

    def head(self, x: str) -> str:
        """``x`` ``[rows, d]`` times the output projection: the embedding table (Gemm, transposed) or the untied one;
        on the compiled operators, ``GgmlMatMul`` over the table's blocks (the embedding's very initializer)."""
        name = "decoder.embeddings" if self.w.tied else "decoder.projection"
        if self.quantized(name) is not None:
            return self.product(x, name, "head")
        if self.w.tied:
            return self.one("Gemm", [x, self.embedding_table()], "head/Gemm", transB=1)
        projection = self.stored(self.w.matrix("decoder.projection"), "decoder.projection", transpose=True)
        return self.one("MatMul", [x, projection], "head/MatMul")

    # ------------------------------------------------------------------ attention pieces
    def heads(self, x: str, n_heads: int, head: int, name: str) -> str:
        """``[batch, seq, heads * head]`` -> ``[batch, heads, seq, head]``."""
        r = self.one("Reshape", [x, self.ints(0, -1, n_heads, head)], f"{name}/Reshape")
        return self.one("Transpose", [r], f"{name}/Transpose", perm=[0, 2, 1, 3])

    def merge(self, x: str, d_model: int, name: str) -> str:
        """``[batch, heads, seq, head]`` -> ``[batch, seq, heads * head]``."""
        t = self.one("Transpose", [x], f"{name}/Transpose", perm=[0, 2, 1, 3])
        return self.one("Reshape", [t, self.ints(0, -1, d_model)], f"{name}/Reshape")

    def attend(self, q: str, k: str, v: str, head: int, name: str, mask: str | None = None) -> tuple[str, str]:
        """softmax(q kᵀ / sqrt(head) [+ mask]) v, q scaled before the product as transformers does; also the weights."""
        kt = self.one("Transpose", [k], f"{name}/KT", perm=[0, 1, 3, 2])
        scaled = self.one("Mul", [q, self.scalar(float(head) ** -0.5)], f"{name}/Scale")
        scores = self.one("MatMul", [scaled, kt], f"{name}/Scores")
        if mask is not None:
            scores = self.one("Add", [scores, mask], f"{name}/Mask")
        probs = self.one("Softmax", [scores], f"{name}/Softmax", axis=-1)
        return self.one("MatMul", [probs, v], f"{name}/Context"), probs

    def graph(self, name: str, inputs: list[Any], outputs: list[Any]) -> Any:
        return self.helper.make_graph(self.nodes, name, inputs, outputs, initializer=self.inits)


def _encoder(b: _Builder) -> tuple[list[Any], list[Any]]:
    w, d = b.w, b.w.dims
    h = b.helper
    features = h.make_tensor_value_info(
        "input_features", b.TensorProto.FLOAT, ["batch_size", d.n_mels, 2 * d.source_positions]
    )
    x = "input_features"
    for i, stride in ((1, 1), (2, 2)):
        weight = b.stored(w.matrix(f"encoder.conv{i}.weight"), f"encoder.conv{i}.weight", transpose=False)
        bias = b.vector(f"encoder.conv{i}.bias")
        x = b.one("Conv", [x, weight, bias], f"conv{i}", kernel_shape=[3], pads=[1, 1], strides=[stride])
        x = b.gelu(x, f"conv{i}")
    x = b.one("Transpose", [x], "conv/Transpose", perm=[0, 2, 1])  # [batch, source, d]
    positions = b.vector("encoder.positions")
    x = b.one("Add", [x, positions], "positions/Add")
    head = d.d_model // d.encoder_heads
    for i in range(d.encoder_layers):
        p = f"encoder.layers.{i}"
        y = b.layer_norm(x, f"{p}.attn_norm")
        q, k, v = b.node("Split", [b.linear(y, f"{p}.attn.qkv")], 3, f"{p}/qkv", axis=-1, num_outputs=3)
        if FUSED_ENCODER_ATTENTION:
            ctx = b.one("MultiHeadAttention", [q, k, v], f"{p}/attn", domain="com.microsoft", num_heads=d.encoder_heads)
        else:
            heads, _ = b.attend(
                b.heads(q, d.encoder_heads, head, f"{p}/q"),
                b.heads(k, d.encoder_heads, head, f"{p}/k"),
                b.heads(v, d.encoder_heads, head, f"{p}/v"),
                head,
                f"{p}/attn",
            )
            ctx = b.merge(heads, d.d_model, f"{p}/ctx")
        x = b.one("Add", [x, b.linear(ctx, f"{p}.attn.out")], f"{p}/residual1")
        y = b.layer_norm(x, f"{p}.ffn_norm")
        y = b.linear(b.gelu(b.linear(y, f"{p}.fc1"), f"{p}/fc1"), f"{p}.fc2")
        x = b.one("Add", [x, y], f"{p}/residual2")
    b.node(
        "LayerNormalization",
        [
            x,
            b.vector("encoder.norm.weight"),
            b.vector("encoder.norm.bias"),
        ],
        ["last_hidden_state"],
        "encoder.norm",
        axis=-1,
        epsilon=_LN_EPS,
    )
    outputs = [
        h.make_tensor_value_info(
            "last_hidden_state", b.TensorProto.FLOAT, ["batch_size", d.source_positions, d.d_model]
        )
    ]
    # every decoder layer's cross-attention keys and values, projected once per window here
    head = d.d_model // d.decoder_heads
    shape = ["batch_size", d.decoder_heads, d.source_positions, head]
    for i in range(d.decoder_layers):
        p = f"decoder.layers.{i}"
        k, v = b.node(
            "Split", [b.linear("last_hidden_state", f"{p}.cross.kv")], 2, f"{p}/cross_kv", axis=-1, num_outputs=2
        )
        for name, value in (("key", k), ("value", v)):
            r = b.one("Reshape", [value, b.ints(0, -1, d.decoder_heads, head)], f"{p}/cross_{name}/Reshape")
            out = f"present.{i}.encoder.{name}"
            b.node("Transpose", [r], [out], f"{p}/cross_{name}/Transpose", perm=[0, 2, 1, 3])
            outputs.append(h.make_tensor_value_info(out, b.TensorProto.FLOAT, shape))
    return [features], outputs


def _decoder(b: _Builder) -> tuple[list[Any], list[Any]]:
    d, h, T = b.w.dims, b.helper, b.TensorProto
    head = d.d_model // d.decoder_heads
    self_shape = ["batch_size", d.decoder_heads, "past_decoder_sequence_length", head]
    cross_shape = ["batch_size", d.decoder_heads, "encoder_sequence_length", head]
    inputs = [h.make_tensor_value_info("input_ids", T.INT64, ["batch_size", "decoder_sequence_length"])]
    for i in range(d.decoder_layers):
        for kv in ("key", "value"):
            inputs.append(h.make_tensor_value_info(f"past_key_values.{i}.decoder.{kv}", T.FLOAT, self_shape))
        for kv in ("key", "value"):
            inputs.append(h.make_tensor_value_info(f"past_key_values.{i}.encoder.{kv}", T.FLOAT, cross_shape))

    # positions past .. past + new, and the causal mask [new, past + new]
    past = b.one("Gather", [b.one("Shape", ["past_key_values.0.decoder.key"], "past/Shape"), b.ints(2)], "past/length")
    new = b.one("Gather", [b.one("Shape", ["input_ids"], "new/Shape"), b.ints(1)], "new/length")
    past0, new0 = (b.one("Squeeze", [x, b.ints(0)], f"{x}/Squeeze") for x in (past, new))
    total = b.one("Add", [past0, new0], "total")
    one, zero = b.const(np.asarray(1, np.int64), "one"), b.const(np.asarray(0, np.int64), "zero")
    rows = b.one("Range", [past0, total, one], "rows/Range")  # [new]
    cols = b.one("Range", [zero, total, one], "cols/Range")  # [past + new]
    later = b.one(
        "Greater",
        [
            b.one("Unsqueeze", [cols, b.ints(0)], "cols/Unsqueeze"),
            b.one("Unsqueeze", [rows, b.ints(1)], "rows/Unsqueeze"),
        ],
        "mask/Greater",
    )
    mask = b.one("Where", [later, b.scalar(float(np.finfo(np.float32).min)), b.scalar(0.0)], "mask/Where")
    x = b.embed("input_ids")
    x = b.one("Add", [x, b.one("Gather", [b.vector("decoder.positions"), rows], "positions/Gather")], "embed/Add")

    present_shape = ["batch_size", d.decoder_heads, "past_decoder_sequence_length + decoder_sequence_length", head]
    attention_shape = ["batch_size", d.decoder_heads, "decoder_sequence_length", "encoder_sequence_length"]
    presents, attentions = [], []
    for i in range(d.decoder_layers):
        p = f"decoder.layers.{i}"
        y = b.layer_norm(x, f"{p}.attn_norm")
        q, k, v = b.node("Split", [b.linear(y, f"{p}.attn.qkv")], 3, f"{p}/qkv", axis=-1, num_outputs=3)
        keys, values = (f"present.{i}.decoder.{kv}" for kv in ("key", "value"))
        for kind, new, present in (("key", k, keys), ("value", v, values)):
            past = f"past_key_values.{i}.decoder.{kind}"
            heads = b.heads(new, d.decoder_heads, head, f"{p}/{kind[0]}")
            b.node("Concat", [past, heads], [present], f"{p}/{kind}s", axis=2)
        ctx, _ = b.attend(b.heads(q, d.decoder_heads, head, f"{p}/q"), keys, values, head, f"{p}/attn", mask)
        x = b.one("Add", [x, b.linear(b.merge(ctx, d.d_model, f"{p}/ctx"), f"{p}.attn.out")], f"{p}/res1")
        y = b.layer_norm(x, f"{p}.cross_norm")
        q = b.heads(b.linear(y, f"{p}.cross.q"), d.decoder_heads, head, f"{p}/cross_q")
        cross_k, cross_v = (f"past_key_values.{i}.encoder.{kv}" for kv in ("key", "value"))
        ctx, probs = b.attend(q, cross_k, cross_v, head, f"{p}/cross")
        b.node("Identity", [probs], [f"cross_attentions.{i}"], f"{p}/cross_attentions")
        x = b.one("Add", [x, b.linear(b.merge(ctx, d.d_model, f"{p}/cross_ctx"), f"{p}.cross.out")], f"{p}/res2")
        y = b.layer_norm(x, f"{p}.ffn_norm")
        y = b.linear(b.gelu(b.linear(y, f"{p}.fc1"), f"{p}/fc1"), f"{p}.fc2")
        x = b.one("Add", [x, y], f"{p}/res3")
        presents += [h.make_tensor_value_info(n, T.FLOAT, present_shape) for n in (keys, values)]
        attentions.append(h.make_tensor_value_info(f"cross_attentions.{i}", T.FLOAT, attention_shape))
    last = b.one("Slice", [x, b.ints(-1), b.ints(np.iinfo(np.int64).max), b.ints(1)], "last")  # [batch, 1, d]
    last = b.layer_norm(last, "decoder.norm")
    flat = b.one("Reshape", [last, b.ints(-1, d.d_model)], "head/Reshape")
    b.node("Reshape", [b.head(flat), b.ints(-1, 1, d.vocab_size)], ["logits"], "logits/Reshape")
    outputs = [h.make_tensor_value_info("logits", T.FLOAT, ["batch_size", 1, d.vocab_size])]
    return inputs, outputs + presents + attentions


def write_graphs(weights: WhisperWeights, folder: Path, *, operators: bool = False) -> None:
    """Write the encoder and the decoder (each with its ``.data`` file) into ``folder``; with ``operators``, the
    quantized matrices run on inference4py's compiled operators (see the module docstring)."""
    import onnx
    from onnx import helper

    for file, build in ((ENCODER_FILE, _encoder), (DECODER_FILE, _decoder)):
        store = ExternalData(folder, data_file=file + ".data")
        try:
            b = _Builder(weights, store, operators=operators)
            inputs, outputs = build(b)
            graph = b.graph(file.removesuffix(".onnx"), inputs, outputs)
        finally:
            store.close()
        opsets = [helper.make_opsetid("", OPSET), helper.make_opsetid("com.microsoft", 1)]
        if any(node.domain == DOMAIN for node in graph.node):
            opsets.append(helper.make_opsetid(DOMAIN, 1))
        model = helper.make_model(graph, opset_imports=opsets, producer_name="inference4py.speech.files")
        model.ir_version = 10
        onnx.save(model, str(folder / file))
