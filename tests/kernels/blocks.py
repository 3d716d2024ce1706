"""Random ggml blocks of every type, and numpy references of the operators' arithmetic.

Blocks are random bytes (every code pattern occurs) with their float16 scales set to sane values,
so no type needs a quantizer; gguf's own ``dequantize`` reads them back.
"""

from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType, quants

from inference4py.gguf.blocks import block_bytes

# byte offsets of each type's float16 scale fields inside a block
SCALE_FIELDS = {
    "Q4_0": (0,),
    "Q4_1": (0, 2),
    "Q5_0": (0,),
    "Q5_1": (0, 2),
    "Q8_0": (0,),
    "Q2_K": (80, 82),
    "Q3_K": (108,),
    "Q4_K": (0, 2),
    "Q5_K": (0, 2),
    "Q6_K": (208,),
    "IQ4_NL": (0,),
    "IQ4_XS": (0,),
}
QUANTIZED = (*SCALE_FIELDS, "MXFP4")
TYPES = (*QUANTIZED, "F16", "BF16", "F32")
# the activation rounding llama.cpp pairs with each type
ACTIVATION = {t: "q8_0" for t in ("Q4_0", "Q5_0", "Q8_0", "IQ4_NL", "MXFP4")} | {"Q4_1": "q8_1", "Q5_1": "q8_1"}
ACTIVATION |= {t: "q8_K" for t in ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS")}
ACTIVATION |= {"F16": "f16", "BF16": "bf16", "F32": "f32"}


def type_id(kind: str) -> int:
    return int(GGMLQuantizationType[kind])


def random_rows(kind: str, rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    """``[rows, row bytes]`` uint8: ``rows`` rows of ``cols`` values of ``kind``."""
    if kind == "F16":
        return rng.normal(0, 0.05, (rows, cols)).astype(np.float16).view(np.uint8)
    if kind == "F32":
        return rng.normal(0, 0.05, (rows, cols)).astype(np.float32).view(np.uint8)
    if kind == "BF16":
        bits = rng.normal(0, 0.05, (rows, cols)).astype(np.float32).view(np.uint32) >> 16
        return bits.astype(np.uint16).view(np.uint8).reshape(rows, -1)
    values, size = block_bytes(kind)
    blocks = rng.integers(0, 256, (rows * cols // values, size), dtype=np.uint8)
    if kind == "MXFP4":
        blocks[:, 0] = rng.integers(118, 126, blocks.shape[0])
    for at in SCALE_FIELDS.get(kind, ()):
        scale = rng.uniform(0.001, 0.02, blocks.shape[0]).astype(np.float16)
        blocks[:, at : at + 2] = scale.view(np.uint8).reshape(-1, 2)
    return blocks.reshape(rows, -1)


def dequantize(kind: str, raw: np.ndarray) -> np.ndarray:
    """gguf's own float32 values of the rows."""
    rows = raw.shape[0]
    if kind == "F32":
        return np.ascontiguousarray(raw).view(np.float32).reshape(rows, -1)
    return np.asarray(quants.dequantize(raw, GGMLQuantizationType[kind]), dtype=np.float32).reshape(rows, -1)


def _f16(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16).astype(np.float32)


def round_activations(kind: str, x: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """llama.cpp's rounding of activations ``x`` ``[m, k]`` for a ``kind`` product, as float64 values, and
    (q8_1 only) each block's float16 ``d * sum(codes)`` that the product uses instead of the exact sum."""
    x = x.astype(np.float32)
    m, k = x.shape
    act = ACTIVATION[kind]
    if act == "f32":
        return x.astype(np.float64), None
    if act == "f16":
        return _f16(x).astype(np.float64), None
    if act == "bf16":
        bits = x.view(np.uint32)
        rounded = ((bits + (0x7FFF + ((bits >> 16) & 1))) >> 16) << 16
        return rounded.astype(np.uint32).view(np.float32).astype(np.float64), None
    if act in ("q8_0", "q8_1"):
        blocks = x.reshape(m, k // 32, 32)
        amax = np.abs(blocks).max(axis=-1, keepdims=True)
        d = _f16(amax / np.float32(127))
        with np.errstate(divide="ignore"):
            inv = np.where(amax != 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
        codes = np.rint((blocks * inv).astype(np.float32))
        values = (codes.astype(np.float64) * d.astype(np.float64)).reshape(m, k)
        sums = None
        if act == "q8_1":
            # llama.cpp multiplies the sum of codes by the scale before its float16 rounding
            exact_d = (amax / np.float32(127)).astype(np.float32)
            sums = _f16((exact_d[..., 0] * codes.sum(axis=-1).astype(np.float32)).astype(np.float32))
        return values, sums
    blocks = x.reshape(m, k // 256, 256)
    pick = np.abs(blocks).argmax(axis=-1)[..., None]
    peak = np.take_along_axis(blocks, pick, axis=-1)
    with np.errstate(divide="ignore"):
        iscale = np.where(peak != 0, np.float32(-127) / peak, np.float32(0)).astype(np.float32)
        d = np.where(peak != 0, np.float32(1) / iscale, np.float32(0)).astype(np.float32)
    codes = np.minimum(np.rint((blocks * iscale).astype(np.float32)), 127)
    return (codes.astype(np.float64) * d.astype(np.float64)).reshape(m, k), None


def reference(kind: str, raw: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``x @ W.T`` with ``x`` rounded as llama.cpp rounds it for ``kind``, in float64."""
    w = dequantize(kind, raw).astype(np.float64)
    values, sums = round_activations(kind, x)
    if sums is None:
        return values @ w.T
    # Q4_1 / Q5_1: d * d_a * sum(q * q_a) + m * s_a, with s_a the float16 sum
    n, k = w.shape
    d, minimums = _scale_and_minimum(kind, raw)  # [n, blocks]
    codes = np.rint((w.reshape(n, k // 32, 32) - minimums[..., None]) / d[..., None])
    scaled = (codes * d[..., None]).reshape(n, k)
    return values @ scaled.T + sums.astype(np.float64) @ minimums.T


def _scale_and_minimum(kind: str, raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The float16 per-block scale ``d`` and minimum ``m`` of Q4_1 / Q5_1 rows, ``[rows, blocks]`` float64."""
    _, size = block_bytes(kind)
    blocks = np.ascontiguousarray(raw).reshape(-1, size)
    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float64).reshape(raw.shape[0], -1)
    m = blocks[:, 2:4].copy().view(np.float16).astype(np.float64).reshape(raw.shape[0], -1)
    return d, m


def magnitude(kind: str, raw: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``|x| @ |W|.T``: the scale of float32 summation error in a product."""
    return np.abs(x.astype(np.float64)) @ np.abs(dequantize(kind, raw).astype(np.float64)).T
