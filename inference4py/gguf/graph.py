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

Weights (``bits``).  None, the default, keeps every weight as the file holds it.  With inference4py's
compiled operators (:mod:`inference4py.engine.kernels`; ``ggml=True``) every matrix is the GGUF
file's own bytes, used in place: an initializer whose external data is the file itself at the
tensor's offset (nothing copied; the session maps the file), multiplied by ``GgmlMatMul`` (q, k, v
in one, gate and up in one) and read by ``GgmlGather`` for the embedding; llama.cpp's interleaved
q/k row order stays as stored and the attention rotates interleaved pairs.  Without them, each ggml block
type runs on ``MatMulNBits`` with the file's own codes and scales (:mod:`inference4py.gguf.blocks`
says which width and block per type), a type with per-block minimums adds their small product
(each block's sum of the input times its minimum), and the embedding table is read by
a gather of its own blocks and scales, the same bytes a tied head multiplies with.  32 dequantizes every
matrix to float32; 16 stores float16 with a Cast before use (onnxruntime folds the Casts when the
session loads, so it computes in float32); 4 and 8 re-round every linear layer into symmetric
``MatMulNBits`` blocks of 32 (lossy, only when asked; the embedding stays float32).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from inference4py.engine.kernels import DOMAIN
from inference4py.errors import ConfigurationError, UnsupportedModelError
from inference4py.gguf.blocks import LAYOUTS, Layout, unpack
from inference4py.gguf.ffn import gated_mlp
from inference4py.gguf.gptoss import GptOssExperts
from inference4py.gguf.hyper import Hyper, hf_config, read_hyper, rope_caches
from inference4py.gguf.in_place import InPlace
from inference4py.gguf.mla import MlaAttention, MlaShape, mla_config, read_mla
from inference4py.gguf.moe import Experts, moe_config, read_experts
from inference4py.gguf.parts import Part, qkv_parts, unpermute
from inference4py.gguf.reader import FLOAT_TYPES, SUPPORTED_TYPES, GGUFFile
from inference4py.gguf.store import ExternalData

__all__ = ["BITS", "Part", "write_decoder"]

BITS = (4, 8, 16, 32)
BLOCK_SIZE = 32  # MatMulNBits block: genai's builder and inference4py.quantize use the same
ACCURACY_LEVEL = 4  # int8 activations in MatMulNBits: the fastest on CPU
OPSET = 21  # Gelu with approximate="tanh" needs 20
_CHUNK_VALUES = 1 << 24  # rows of a large tensor are read and written about 16M values at a time


def _no_exact_operator(gguf: GGUFFile, tensor: str, kind: str) -> UnsupportedModelError:
    return UnsupportedModelError(
        f"{gguf.path}: tensor {tensor!r} is stored as {kind}, which no onnxruntime operator holds as stored. "
        f"Types converted exactly as the file holds them: {', '.join(SUPPORTED_TYPES)}. Convert with --bits 32 "
        "(gguf_bits(32) in Python; float32, exact but larger) or, accepting a second rounding, --bits 8 or 4."
    )


@dataclass(frozen=True)
class _Quantized:
    """A matrix held as the file holds it: MatMulNBits' initializers, and what the embedding reuses."""

    name: str
    weight: str  # [N, blocks, block bytes] uint8, shared by a tied head and the embedding's gather
    scales: np.ndarray  # [N, blocks] float32, written once (scales_of) for the head and the embedding
    minimums: str | None  # [blocks, N] float32: the per-block minimums, transposed for MatMul
    layout: Layout
    rows: int
    cols: int


def _pack(stored: np.ndarray, bits: int) -> np.ndarray:
    """Unsigned ``[rows, cols]`` values -> bytes: 8-bit as they are, 4-bit two per byte (low nibble first)."""
    values = stored.astype(np.uint8)
    return values if bits == 8 else values[:, 0::2] | (values[:, 1::2] << 4)


class _Builder:
    """Nodes and initializers of the graph being built; initializers go to ``store`` as they are made."""

    def __init__(self, gguf: GGUFFile, bits: int | None, store: ExternalData, *, ggml: bool = False) -> None:
        from onnx import helper, numpy_helper

        self.ggml = ggml  # matrices as the file's own bytes, on the compiled operators (write_decoder: bits None only)
        self.helper = helper
        self.numpy_helper = numpy_helper
        self.gguf = gguf
        self.bits = bits
        self.store = store
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self.in_place = InPlace(gguf, store, self.one, self.initializers)
        self._consts: dict[tuple[str, tuple[int, ...]], str] = {}
        self._block_sums: dict[tuple[str, int], str] = {}
        self._written: set[str] = set()
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
        self.initializers.append(self.store.array(array, name))
        return name

    def chunked(self, name: str, dtype: Any, shape: tuple[int, ...], parts: Iterator[np.ndarray]) -> str:
        self.initializers.append(self.store.chunks(name, dtype, shape, parts))
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

    # ------------------------------------------------------------------ reading weights
    def kind(self, tensor: str) -> str:
        return self.gguf.info(tensor).type

    def mode(self, kind: str, tensor: str) -> str:
        """How a ``kind`` matrix is held at this width: nbits (as stored), float32, float16 or requantized."""
        if self.bits is None:
            if self.ggml and (kind in LAYOUTS or kind in FLOAT_TYPES):
                return "ggml"
            if kind in LAYOUTS:
                return "nbits"
            if kind in FLOAT_TYPES:
                return "float32"
            raise _no_exact_operator(self.gguf, tensor, kind)
        return {32: "float32", 16: "float16"}.get(self.bits, "requantized")

    def _chunks(self, parts: list[Part], raw: bool, cols: int) -> Iterator[np.ndarray]:
        """The stacked rows of ``parts`` (raw blocks, or dequantized float32) in chunks of about 16M values."""
        step = max(1, _CHUNK_VALUES // max(cols, 1))
        for part in parts:
            window = range(self.gguf.info(part.tensor).shape[0])
            if part.rows is not None:
                window = window[part.rows]
            spans = (
                [(window.start, window.stop)]
                if part.heads is not None
                else [(start, min(start + step, window.stop)) for start in range(window.start, window.stop, step)]
            )
            for start, stop in spans:
                rows = (
                    np.asarray(self.gguf.raw_rows(part.tensor)[start:stop])
                    if raw
                    else self.gguf.float_rows(part.tensor, start, stop)
                )
                yield rows if part.heads is None else unpermute(rows, part.heads)

    def shape(self, parts: list[Part]) -> tuple[int, int]:
        rows = 0
        cols = self.gguf.info(parts[0].tensor).shape[-1]
        for part in parts:
            total = self.gguf.info(part.tensor).shape[0]
            rows += len(range(total)[part.rows]) if part.rows is not None else total
        return rows, cols

    # ------------------------------------------------------------------ linear layers
    def linear(self, x: str, parts: list[Part], name: str, bias: np.ndarray | None = None) -> str:
        """``x @ W.T (+ bias)`` for ``W`` the parts' rows stacked (``[out, in]``), held at the build's width.

        Parts of different storage (Q4_K_M files keep some rows in Q6_K) become one product each,
        concatenated: no part is converted to another part's format.  On the compiled operators, up
        to three parts of any types are one ``GgmlMatMul``.
        """
        if self.ggml and len(parts) <= 3:
            y = self.in_place.matmul(x, [(p.tensor, p.rows) for p in parts], name)
            if bias is not None:
                y = self.one("Add", [y, self.initializer(bias.astype(np.float32), f"{name}.bias")], f"{name}/Add")
            return y
        groups: list[list[Part]] = []
        for part in parts:
            if groups and self.kind(groups[-1][0].tensor) == self.kind(part.tensor):
                groups[-1].append(part)
            else:
                groups.append([part])
        outs = [self._linear(x, group, name if len(groups) == 1 else f"{name}.{i}") for i, group in enumerate(groups)]
        y = outs[0] if len(outs) == 1 else self.one("Concat", outs, f"/{name}/Concat", axis=-1)
        if bias is not None:
            y = self.one("Add", [y, self.initializer(bias.astype(np.float32), f"{name}.bias")], f"{name}/Add")
        return y

    def _linear(self, x: str, parts: list[Part], name: str) -> str:
        kind = self.kind(parts[0].tensor)
        mode = self.mode(kind, parts[0].tensor)
        if mode == "nbits":
            return self.matmul_nbits(x, self.quantized(parts, kind, name), name)
        if mode == "requantized":
            return self._requantized(x, parts, name)
        rows, cols = self.shape(parts)
        weight = np.concatenate(list(self._chunks(parts, False, cols)), axis=0)
        if mode == "float32":
            stored = self.initializer(np.ascontiguousarray(weight.T, dtype=np.float32), f"{name}.weight")
        else:
            half = self.initializer(np.ascontiguousarray(weight.T, dtype=np.float16), f"{name}.weight")
            stored = self.one("Cast", [half], f"{name}.weight/Cast", to=1)
        return self.one("MatMul", [x, stored], f"{name}/MatMul")

    def quantized(self, parts: list[Part], kind: str, name: str) -> _Quantized:
        """Write the parts' blocks as MatMulNBits holds them (codes, scales, minimums as stored)."""
        layout = LAYOUTS[kind]
        rows, cols = self.shape(parts)
        blocks = cols // layout.block
        scales: list[np.ndarray] = []
        minimums: list[np.ndarray] = []

        def packed() -> Iterator[np.ndarray]:
            for raw in self._chunks(parts, True, cols):
                unpacked = unpack(kind, raw)
                scales.append(unpacked.scales)
                if unpacked.minimums is not None:
                    minimums.append(unpacked.minimums)
                yield _pack(unpacked.codes + layout.offset, layout.bits)

        blob = layout.block * layout.bits // 8
        weight = self.chunked(f"{name}.weight_Q{layout.bits}", np.uint8, (rows, blocks, blob), packed())
        minimum_name = None
        if layout.minimum:
            minimum_name = self.initializer(
                np.ascontiguousarray(np.concatenate(minimums, axis=0).T), f"{name}.weight_minimums"
            )
        return _Quantized(name, weight, np.concatenate(scales, axis=0), minimum_name, layout, rows, cols)

    def matmul_nbits(self, x: str, q: _Quantized, name: str) -> str:
        """``x @ W.T`` with ``W = scale * code (+ minimum)`` per block: MatMulNBits, plus the minimums'
        small product (each block's sum of ``x`` times its minimum) for the types that have one."""
        inputs = [x, q.weight, self.scales_of(q)]
        if q.layout.zero_point is not None:  # zero points of 0, packed as MatMulNBits wants them
            per_row = -(-q.scales.shape[1] * q.layout.bits // 8)
            inputs.append(self.initializer(np.zeros(q.rows * per_row, np.uint8), f"{q.name}.weight_zero_points"))
        y = self.one(
            "MatMulNBits",
            inputs,
            f"{name}/MatMulNBits",
            domain="com.microsoft",
            K=q.cols,
            N=q.rows,
            bits=q.layout.bits,
            block_size=q.layout.block,
            accuracy_level=ACCURACY_LEVEL,
        )
        if q.minimums is None:
            return y
        sums = self.block_sums(x, q.cols, q.layout.block)
        return self.one(
            "Add", [y, self.one("MatMul", [sums, q.minimums], f"{name}/minimums/MatMul")], f"{name}/Add_min"
        )

    def block_sums(self, x: str, cols: int, block: int) -> str:
        """``x`` ``[batch, seq, cols]`` summed over each block of ``block`` columns: ``[batch, seq, cols / block]``."""
        key = (x, block)
        if key not in self._block_sums:
            tag = f"{x.strip('/').replace('/', '_')}_{block}"
            grouped = self.one("Reshape", [x, self.ints([0, 0, cols // block, block])], f"/block_sums/{tag}/Reshape")
            self._block_sums[key] = self.one(
                "ReduceSum", [grouped, self.ints([-1])], f"/block_sums/{tag}/ReduceSum", keepdims=0
            )
        return self._block_sums[key]

    def _requantized(self, x: str, parts: list[Part], name: str) -> str:
        """A lossy width asked for explicitly: onnxruntime's symmetric MatMulNBits blocks of the dequantized rows."""
        bits = int(self.bits or 4)
        rows, cols = self.shape(parts)
        blocks = -(-cols // BLOCK_SIZE)
        scales: list[np.ndarray] = []

        def packed() -> Iterator[np.ndarray]:
            for chunk in self._chunks(parts, False, cols):
                weight, scale = self._quantize(chunk)
                scales.append(scale.reshape(chunk.shape[0], -1))
                yield weight

        weight = self.chunked(f"{name}.weight_Q{bits}", np.uint8, (rows, blocks, BLOCK_SIZE * bits // 8), packed())
        symmetric = Layout(bits=bits, block=BLOCK_SIZE, offset=1 << (bits - 1), zero_point=None, minimum=False)
        quantized = _Quantized(name, weight, np.concatenate(scales, axis=0), None, symmetric, rows, cols)
        return self.matmul_nbits(x, quantized, name)

    def _quantize(self, weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """onnxruntime's MatMulNBits packing (the quantizer inference4py.quantize runs) of ``[out, in]`` rows."""
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

    # ------------------------------------------------------------------ the embedding table and the head
    def float_table(self, tensor: str, name: str) -> str:
        """A ``[rows, cols]`` table in float32 (float16 at 16 bits), written in row chunks."""
        rows, cols = self.shape([Part(tensor)])
        dtype = np.float16 if self.bits == 16 else np.float32
        return self.chunked(name, dtype, (rows, cols), self._chunks([Part(tensor)], False, cols))

    def embedding(self, q: _Quantized, ids: str, name: str) -> str:
        """Rows ``ids`` of a table held as stored: the rows' own blocks gathered and scaled by their own scales.

        The bytes and scales are the very initializers a tied head multiplies with: nothing is copied
        into another layout (GatherBlockQuantized would want its scales in a shape of its own).
        """
        from onnx import TensorProto

        blocks = q.scales.shape[1]
        layout = q.layout
        codes = self.one("Gather", [q.weight, ids], f"{name}/Gather", axis=0)  # [batch, seq, blocks, block bytes]
        if layout.bits == 4:  # two values a byte, the low nibble first
            low = self.one(
                "BitwiseAnd", [codes, self.initializer(np.array(15, np.uint8), f"{name}/low_mask")], f"{name}/low"
            )
            high = self.one(
                "BitShift",
                [codes, self.initializer(np.array(4, np.uint8), f"{name}/high_shift")],
                f"{name}/high",
                direction="RIGHT",
            )
            pairs = [self.one("Unsqueeze", [t, self.ints([-1])], f"{t}/Unsqueeze") for t in (low, high)]
            codes = self.one("Concat", pairs, f"{name}/nibbles", axis=-1)
        values = self.one("Cast", [codes], f"{name}/Cast", to=TensorProto.FLOAT)
        values = self.one("Reshape", [values, self.ints([0, 0, blocks, layout.block])], f"{name}/blocks")
        zero = 1 << (layout.bits - 1) if layout.zero_point is None else layout.zero_point
        if zero:
            values = self.one("Sub", [values, self.scalar(float(zero))], f"{name}/zero_point")
        scale = self.one("Gather", [self.scales_of(q), ids], f"{name}/scales/Gather", axis=0)  # [batch, seq, blocks]
        y = self.one(
            "Mul",
            [values, self.one("Unsqueeze", [scale, self.ints([-1])], f"{name}/scales/Unsqueeze")],
            f"{name}/scales/Mul",
        )
        if q.minimums is not None:
            picked = self.one("Gather", [q.minimums, ids], f"{name}/minimums/Gather", axis=1)  # [blocks, batch, seq]
            picked = self.one("Transpose", [picked], f"{name}/minimums/Transpose", perm=[1, 2, 0])
            picked = self.one("Unsqueeze", [picked, self.ints([-1])], f"{name}/minimums/Unsqueeze")
            y = self.one("Add", [y, picked], f"{name}/minimums/Add")
        return self.one("Reshape", [y, self.ints([0, 0, -1])], f"{name}/Reshape")

    def scales_of(self, q: _Quantized) -> str:
        """A matrix's block scales, ``[N, blocks]`` float32 (a shape MatMulNBits takes), written once for all
        its readers: a tied head and the embedding's gather."""
        name = f"{q.name}.weight_scales"
        if name not in self._written:
            self._written.add(name)
            self.initializer(q.scales, name)
        return name

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


def write_decoder(
    gguf: GGUFFile, folder: Path, bits: int | None = None, *, ggml: bool = False, expanded_mla: bool = False
) -> dict[str, Any]:
    """Write the decoder of a GGUF file into ``folder`` as ``model.onnx`` + ``model.onnx.data``.

    Weights are read and written one tensor (a large one, one chunk of rows) at a time, so the
    conversion holds about one tensor in memory whatever the model's size.

    Args:
        gguf: The opened file (:class:`~inference4py.gguf.reader.GGUFFile`).
        folder: An existing, empty folder.
        bits: None (the default) keeps every weight as the file holds it: each block type on
            ``MatMulNBits`` with the file's own codes, scales and minimums, the embedding table on
            a gather of those blocks sharing a tied head's bytes, float tensors in float32.
            32 dequantizes every weight to float32 (exact), 16 stores float16 (exact for F16 files),
            8 and 4 re-round every matrix into symmetric ``MatMulNBits`` blocks of 32 (lossy: only
            when asked for).
        ggml: With ``bits=None``, every matrix is the file's own bytes in place, on inference4py's
            compiled operators (the caller checks they are available); the graph then holds every
            other initializer inside it, since its external data is the GGUF file.
        expanded_mla: A latent-attention file caches every head's keys and values instead of the latent
            (:class:`~inference4py.gguf.mla.MlaShape` ``expanded``): only to measure the absorbed form against.

    Returns:
        The transformers-style config.json dict (model_type, architectures, hidden_size, ...,
        sliding_window, tie_word_embeddings).

    Raises:
        ConfigurationError: ``bits`` is not None, 4, 8, 16 or 32.
        UnsupportedModelError: the architecture (or a feature of it, such as yarn rotary scaling)
            is not supported, or (with ``bits=None``) a tensor type no operator holds as stored.
        ModelLoadError: a tensor or metadata field the architecture needs is missing.

    Example:
        >>> config = write_decoder(GGUFFile("smollm2.gguf"), Path("out"))  # doctest: +SKIP
    """
    if bits is not None and bits not in BITS:
        raise ConfigurationError(f"bits={bits} is not supported: use one of {', '.join(map(str, BITS))}.")
    try:
        from onnx import TensorProto, helper
    except ImportError as exc:
        raise ConfigurationError(
            'Converting a GGUF file needs the onnx package: pip install "inference4py[gguf]".'
        ) from exc

    hp = read_hyper(gguf)
    if bits is None:  # every type checked before anything is written
        for info in gguf.tensors():
            if len(info.shape) > 1 and info.type not in SUPPORTED_TYPES:
                raise _no_exact_operator(gguf, info.name, info.type)
    in_place = ggml and bits is None
    shape, mla = read_experts(gguf, hp), read_mla(gguf, hp)
    if mla is not None and expanded_mla:
        mla = replace(mla, expanded=True)
    store = ExternalData(folder, inline=in_place)
    try:
        b = _Builder(gguf, bits, store, ggml=in_place)
        experts = None if shape is None else (GptOssExperts if hp.arch.oai_experts else Experts)(b, hp, shape)
        model = _build(b, hp, experts, mla, TensorProto, helper)
    finally:
        store.close()
    if in_place:
        store.path.unlink()  # nothing was written to it: the weights are the GGUF file's
    (folder / "model.onnx").write_bytes(model.SerializeToString())
    return hf_config(hp, gguf) | ({} if shape is None else moe_config(shape)) | ({} if mla is None else mla_config(mla))


def _build(
    b: _Builder, hp: Hyper, experts: Experts | None, mla: MlaShape | None, TensorProto: Any, helper: Any
) -> Any:  # onnx's names
    gguf, bits = b.gguf, b.bits
    latent = None if mla is None else MlaAttention(b, hp, mla)  # DeepSeek-V2: its own mask and rotary tables

    seqlens, total = ("", "") if latent else _gqa_lengths(b, TensorProto)

    factors = gguf.tensor("rope_freqs.weight") if "rope_freqs.weight" in gguf else None
    cos, sin = rope_caches(hp, hp.rope_base, hp.rope_linear_factor, factors)
    caches = {} if latent else {False: (b.initializer(cos, "cos_cache"), b.initializer(sin, "sin_cache"))}
    if hp.sliding_window is not None and hp.arch.local_rope_base is not None:
        cos_l, sin_l = rope_caches(hp, hp.arch.local_rope_base, 1.0, None)
        caches[True] = (b.initializer(cos_l, "cos_cache_local"), b.initializer(sin_l, "sin_cache_local"))

    # embeddings
    embed_kind = b.kind("token_embd.weight")  # [vocab, hidden]
    quantized_embed, table = None, None
    if b.mode(embed_kind, "token_embd.weight") == "ggml":
        x = b.in_place.embedding("token_embd.weight", "input_ids", "/model/embed_tokens")
    elif b.mode(embed_kind, "token_embd.weight") == "nbits":  # as the file holds it; a tied head shares the bytes
        quantized_embed = b.quantized([Part("token_embd.weight")], embed_kind, "model.embed_tokens")
        x = b.embedding(quantized_embed, "input_ids", "/model/embed_tokens")
    else:
        table = b.float_table("token_embd.weight", "model.embed_tokens.weight")
        x = b.one("Gather", [table, "input_ids"], "/model/embed_tokens/Gather")
        if bits == 16:
            x = b.one("Cast", [x], "/model/embed_tokens/Cast", to=TensorProto.FLOAT)
    if hp.arch.embed_scale:  # Gemma: scaled by sqrt(hidden) in float32, as transformers does
        x = b.one("Mul", [x, b.scalar(float(np.float32(math.sqrt(hp.hidden))))], "/model/embed_tokens/Mul")
    if hp.embedding_scale != 1.0:  # Granite's embedding multiplier
        x = b.one("Mul", [x, b.scalar(hp.embedding_scale)], "/model/embed_tokens/Mul_scale")

    h = b.rms_norm(x, gguf.tensor("blk.0.attn_norm.weight"), "model.layers.0.input_layernorm", hp.eps)
    residual = x
    for i in range(hp.layers):
        p, n = f"blk.{i}.", f"model.layers.{i}"
        # DeepSeek-V2: the latent and the rope key cached, the up-projections absorbed (gguf/mla.py)
        a = latent.layer(h, i) if latent is not None else _gqa_attention(b, hp, h, i, caches, seqlens, total)
        if hp.arch.ffn_norm == "ffn_norm" and f"{p}post_attention_norm.weight" in gguf:  # Gemma: the attention's
            a = b.rms_norm(a, gguf.tensor(f"{p}post_attention_norm.weight"), f"{n}.post_attention_layernorm", hp.eps)
        if hp.residual_scale != 1.0:  # Granite: residual + a * residual_multiplier (the MLP's below too)
            a = b.one("Mul", [a, b.scalar(hp.residual_scale)], f"/{n}/attn/residual_scale")
        h, residual = b.skip_rms_norm(
            residual, a, gguf.tensor(f"{p}{hp.arch.ffn_norm}.weight"), f"{n}.pre_feedforward_layernorm", hp.eps
        )
        down, act = Part(f"{p}ffn_down.weight"), hp.arch.activation

        if experts is not None and experts.shape.routes(i):  # the router and the chosen experts
            m = experts.layer(h, p, f"{n}.mlp")
        elif f"{p}ffn_gate.weight" in gguf:
            m = gated_mlp(b, h, Part(f"{p}ffn_gate.weight"), Part(f"{p}ffn_up.weight"), down, act, f"{n}.mlp")
        else:  # Phi-3: one [2 * intermediate, hidden] matrix, the gate's rows first
            half = gguf.info(f"{p}ffn_up.weight").shape[0] // 2
            gate_part = Part(f"{p}ffn_up.weight", rows=slice(0, half))
            up_part = Part(f"{p}ffn_up.weight", rows=slice(half, 2 * half))
            m = gated_mlp(b, h, gate_part, up_part, down, act, f"{n}.mlp")
        if f"{p}post_ffw_norm.weight" in gguf:  # Gemma: norm of the MLP output
            m = b.rms_norm(m, gguf.tensor(f"{p}post_ffw_norm.weight"), f"{n}.post_feedforward_layernorm", hp.eps)
        if hp.residual_scale != 1.0:
            m = b.one("Mul", [m, b.scalar(hp.residual_scale)], f"/{n}/mlp/residual_scale")
        last = i == hp.layers - 1
        norm_name, norm = (
            ("output_norm.weight", "model.norm")
            if last
            else (f"blk.{i + 1}.attn_norm.weight", f"model.layers.{i + 1}.input_layernorm")
        )
        h, residual = b.skip_rms_norm(residual, m, gguf.tensor(norm_name), norm, hp.eps)

    # The head computes only the positions asked for: num_logits_to_keep = k > 0 keeps the last k,
    # 0 keeps all (as optimize/logits.py adds to exports). A MatMulNBits head keeps at least two rows:
    # onnxruntime's one-row MatMulNBits takes another kernel, whose logits differ from the prompt's.
    head = "token_embd.weight" if hp.tied else "output.weight"
    head_mode = b.mode(b.kind(head), head)
    keep = "num_logits_to_keep"
    kept = b.one("Max", [keep, b.ints([2])], "/lm_head/keep/Max") if head_mode in ("nbits", "requantized") else keep
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
    if head_mode == "ggml":  # the file's blocks (a tied head's are the embedding's very initializer)
        logits = b.linear(h, [Part(head)], "lm_head")
    elif quantized_embed is not None and hp.tied:  # the embedding's own blocks
        logits = b.matmul_nbits(h, quantized_embed, "lm_head")
    elif head_mode in ("nbits", "requantized"):  # re-rounded: a tied head gets its own quantized copy
        logits = b.linear(h, [Part(head)], "lm_head")
    else:  # float: the [vocab, hidden] table read through Gemm(transB=1), the embedding's own when tied
        if table is None or not hp.tied:
            table = b.float_table(head, "lm_head.weight")
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
    if hp.logit_scale != 1.0:  # Granite: logits / logits_scaling
        logits = b.one("Div", [logits, b.scalar(hp.logit_scale)], "/lm_head/logit_scale/Div")
    for node in b.nodes:  # the last node's output becomes the graph output "logits"
        node.input[:] = ["logits" if t == logits else t for t in node.input]
    b.nodes[-1].output[0] = "logits"

    f32, i64 = TensorProto.FLOAT, TensorProto.INT64
    inputs = [
        helper.make_tensor_value_info("input_ids", i64, ["batch_size", "sequence_length"]),
        helper.make_tensor_value_info("attention_mask", i64, ["batch_size", "total_sequence_length"]),
        helper.make_tensor_value_info(keep, i64, []),
    ]
    if mla is not None:  # the growing-cache layout: positions per row, fed by the engine
        inputs.insert(2, helper.make_tensor_value_info("position_ids", i64, ["batch_size", "sequence_length"]))
    outputs = [helper.make_tensor_value_info("logits", f32, ["batch_size", "logits_length", hp.vocab])]
    dims = {"key": (hp.kv_heads, hp.head_dim), "value": (hp.kv_heads, hp.head_dim)}
    if mla is not None:  # [batch, 1, seq, kv_lora_rank] latents and [batch, 1, seq, rope] rope keys
        dims = dict(zip(("key", "value"), mla.cache_dims))
    for i in range(hp.layers):
        for kind, (heads, size) in dims.items():
            inputs.append(
                helper.make_tensor_value_info(
                    f"past_key_values.{i}.{kind}", f32, ["batch_size", heads, "past_sequence_length", size]
                )
            )
            outputs.append(
                helper.make_tensor_value_info(
                    f"present.{i}.{kind}", f32, ["batch_size", heads, "total_sequence_length", size]
                )
            )
    graph = helper.make_graph(b.nodes, f"{hp.arch.name}-gguf", inputs, outputs, initializer=b.initializers)
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid("com.microsoft", 1)]
        + ([helper.make_opsetid(DOMAIN, 1)] if b.ggml else []),
        producer_name="inference4py.gguf",
    )
    model.ir_version = 10
    return model


def _gqa_lengths(b: _Builder, TensorProto: Any) -> tuple[str, str]:  # onnx's name
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
    return seqlens, total


def _gqa_attention(
    b: _Builder, hp: Hyper, h: str, i: int, caches: dict[bool, tuple[str, str]], seqlens: str, total: str
) -> str:
    """Layer ``i``'s grouped-query attention for ``h``: q, k, v, GroupQueryAttention (rotary inside), o_proj."""
    gguf, p, n = b.gguf, f"blk.{i}.", f"model.layers.{i}"
    q_size, kv_size = hp.heads * hp.head_dim, hp.kv_heads * hp.head_dim
    qkv_rows, qkv_b = qkv_parts(gguf, hp, p)
    qkv = b.linear(h, qkv_rows, f"{n}.attn.qkv_proj", qkv_b)
    if f"{p}attn_q_norm.weight" in gguf:  # Qwen3, Gemma 3: RMS norm of each head's query and key
        q, k, v = b.node("Split", [qkv, b.ints([q_size, kv_size, kv_size])], f"/{n}/attn/qkv_split", outputs=3, axis=-1)
        for which, size in (("q", q_size), ("k", kv_size)):
            t, weight = q if which == "q" else k, gguf.tensor(f"{p}attn_{which}_norm.weight")
            if weight.size == hp.head_dim:  # each head's (OLMoE: one norm over all heads at once)
                t = b.one("Reshape", [t, b.ints([0, -1, hp.head_dim])], f"/{n}/attn/{which}_norm/Reshape_1")
            t = b.rms_norm(t, weight, f"{n}.attn.{which}_norm", hp.eps)
            t = b.one("Reshape", [t, b.ints([0, -1, size])], f"/{n}/attn/{which}_norm/Reshape_2")
            q, k = (t, k) if which == "q" else (q, t)
        attn_in = [q, k, v]
    else:
        attn_in = [qkv, "", ""]
    sliding = hp.is_sliding(i)
    cos_name, sin_name = caches.get(sliding, caches[False])
    sinks = f"{p}attn_sinks.weight"  # gpt-oss: one more logit per head in the softmax (GQA's head_sink)
    sink = [] if sinks not in gguf else ["", "", b.initializer(gguf.tensor(sinks).reshape(-1), f"{n}.attn.sinks")]
    attn = b.node(
        "GroupQueryAttention",
        [*attn_in, f"past_key_values.{i}.key", f"past_key_values.{i}.value", seqlens, total, cos_name, sin_name, *sink],
        f"/{n}/attn/GroupQueryAttention",
        outputs=3,
        domain="com.microsoft",
        num_heads=hp.heads,
        kv_num_heads=hp.kv_heads,
        scale=hp.scale,
        local_window_size=hp.sliding_window if sliding and hp.sliding_window else -1,
        softcap=hp.attn_softcap,
        do_rotary=1,
        # llama.cpp's q/k row order rotates adjacent pairs: kept as stored on the file's own bytes
        rotary_interleaved=1 if b.ggml and hp.arch.permuted_qk else 0,
    )
    b.nodes[-1].output[1] = f"present.{i}.key"
    b.nodes[-1].output[2] = f"present.{i}.value"
    o_bias = gguf.tensor(f"{p}attn_output.bias") if f"{p}attn_output.bias" in gguf else None  # gpt-oss
    return b.linear(attn[0], [Part(f"{p}attn_output.weight")], f"{n}.attn.o_proj", o_bias)
