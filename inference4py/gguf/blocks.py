"""ggml's block formats as integer codes, per-block scales and per-block minimums.

Every quantized ggml type stores a weight as ``scale * code`` or ``scale * code + minimum``, with
one scale (and minimum) per block of 16 or 32 values along a row.  :func:`unpack` reads raw
blocks and returns those three parts exactly as the file holds them: the scale is computed in
float32 the way ``gguf.quants.dequantize`` computes it (``d * sub_scale`` for the K-quants), so
``scales * codes + minimums`` in float32 equals the gguf package's dequantization bit for bit.

:data:`LAYOUTS` says how each type maps onto onnxruntime's ``MatMulNBits`` (and
the embedding's gather) without rounding anything: the operator computes
``scale * (stored - zero_point)`` with integer storage, so a code is stored as ``code + offset``
and the zero point is either the operator's default (``2 ** (bits - 1)``) or an explicit 0; a
minimum becomes a separate small product (see :mod:`inference4py.gguf.graph`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = ["LAYOUTS", "Blocks", "Layout", "block_bytes", "unpack"]

_QK_K = 256


@dataclass(frozen=True)
class Layout:
    """How one ggml type is held by ``MatMulNBits``: ``bits``-wide storage in blocks of ``block``.

    ``stored = code + offset``; ``zero_point`` None means the operator's default zero point
    ``2 ** (bits - 1)`` (so ``offset`` equals it), 0 means an explicit zero point of 0 (codes use
    the full unsigned range).  ``minimum``: the type adds a per-block minimum.
    """

    bits: int
    block: int
    offset: int
    zero_point: int | None
    minimum: bool


@dataclass(frozen=True)
class Blocks:
    """A matrix ``[rows, cols]`` as ``scales * codes (+ minimums)``, scales per block of ``block``."""

    codes: np.ndarray  # [rows, cols] int16
    scales: np.ndarray  # [rows, cols // block] float32
    minimums: np.ndarray | None  # [rows, cols // block] float32, or None
    block: int


LAYOUTS: dict[str, Layout] = {
    "Q4_0": Layout(bits=4, block=32, offset=8, zero_point=None, minimum=False),
    "Q4_1": Layout(bits=4, block=32, offset=0, zero_point=0, minimum=True),
    "Q4_K": Layout(bits=4, block=32, offset=0, zero_point=0, minimum=True),
    "Q2_K": Layout(bits=4, block=16, offset=8, zero_point=None, minimum=True),
    "Q3_K": Layout(bits=4, block=16, offset=8, zero_point=None, minimum=False),
    "Q5_0": Layout(bits=8, block=32, offset=128, zero_point=None, minimum=False),
    "Q5_1": Layout(bits=8, block=32, offset=128, zero_point=None, minimum=True),
    "Q5_K": Layout(bits=8, block=32, offset=128, zero_point=None, minimum=True),
    "Q6_K": Layout(bits=8, block=16, offset=128, zero_point=None, minimum=False),
    "Q8_0": Layout(bits=8, block=32, offset=128, zero_point=None, minimum=False),
    "IQ4_NL": Layout(bits=8, block=32, offset=128, zero_point=None, minimum=False),
    "IQ4_XS": Layout(bits=8, block=32, offset=128, zero_point=None, minimum=False),
    "MXFP4": Layout(bits=8, block=32, offset=128, zero_point=None, minimum=False),
}

# (values per ggml block, bytes per ggml block)
_GGML_BLOCKS: dict[str, tuple[int, int]] = {
    "Q4_0": (32, 18),
    "Q4_1": (32, 20),
    "Q5_0": (32, 22),
    "Q5_1": (32, 24),
    "Q8_0": (32, 34),
    "Q2_K": (_QK_K, 84),
    "Q3_K": (_QK_K, 110),
    "Q4_K": (_QK_K, 144),
    "Q5_K": (_QK_K, 176),
    "Q6_K": (_QK_K, 210),
    "IQ4_NL": (32, 18),
    "IQ4_XS": (_QK_K, 136),
    "MXFP4": (32, 17),
}
_IQ4_VALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=np.int16)
_MXFP4_VALUES = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.int16)


def block_bytes(kind: str) -> tuple[int, int]:
    """(values, bytes) of one ggml block of ``kind``."""
    return _GGML_BLOCKS[kind]


def _f16(raw: np.ndarray, start: int) -> np.ndarray:
    """The float16 at byte ``start`` of each block, as float32 ``[n, 1]``."""
    return np.ascontiguousarray(raw[:, start : start + 2]).view(np.float16).astype(np.float32)


def _nibbles_split(qs: np.ndarray) -> np.ndarray:
    """``[n, 16]`` bytes -> ``[n, 32]`` values: low nibbles are values 0..15, high nibbles 16..31."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1)


def _high_bits(qh: np.ndarray) -> np.ndarray:
    """``[n, 4]`` bytes (a little-endian uint32) -> ``[n, 32]`` bits, bit j for value j."""
    return np.unpackbits(np.ascontiguousarray(qh), axis=1, bitorder="little")


def _q4_0(raw: np.ndarray) -> Blocks:
    codes = _nibbles_split(raw[:, 2:18]).astype(np.int16) - 8
    return Blocks(codes, _f16(raw, 0), None, 32)


def _q4_1(raw: np.ndarray) -> Blocks:
    return Blocks(_nibbles_split(raw[:, 4:20]).astype(np.int16), _f16(raw, 0), _f16(raw, 2), 32)


def _q5_0(raw: np.ndarray) -> Blocks:
    codes = (_nibbles_split(raw[:, 6:22]) | (_high_bits(raw[:, 2:6]) << 4)).astype(np.int16) - 16
    return Blocks(codes, _f16(raw, 0), None, 32)


def _q5_1(raw: np.ndarray) -> Blocks:
    codes = (_nibbles_split(raw[:, 8:24]) | (_high_bits(raw[:, 4:8]) << 4)).astype(np.int16)
    return Blocks(codes, _f16(raw, 0), _f16(raw, 2), 32)


def _q8_0(raw: np.ndarray) -> Blocks:
    return Blocks(np.ascontiguousarray(raw[:, 2:34]).view(np.int8).astype(np.int16), _f16(raw, 0), None, 32)


def _crumbs(qs: np.ndarray, groups: int) -> np.ndarray:
    """2-bit values: ``[n, groups * 32]`` bytes -> ``[n, groups * 128]``, value order (group, shift, byte)."""
    n = qs.shape[0]
    shifted = qs.reshape(n, groups, 1, 32) >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
    return (shifted & 3).reshape(n, -1)


def _q2_k(raw: np.ndarray) -> Blocks:
    scales, d, dmin = raw[:, 0:16], _f16(raw, 80), _f16(raw, 82)
    codes = _crumbs(raw[:, 16:80], 2).astype(np.int16)
    return Blocks(codes, d * (scales & 0x0F).astype(np.float32), -(dmin * (scales >> 4).astype(np.float32)), 16)


def _q3_k(raw: np.ndarray) -> Blocks:
    n = raw.shape[0]
    hmask, packed, d = raw[:, 0:32], raw[:, 96:108], _f16(raw, 108)
    low = _crumbs(raw[:, 32:96], 2).astype(np.int16)
    high = (hmask.reshape(n, 1, 32) >> np.arange(8, dtype=np.uint8).reshape(1, 8, 1)) & 1
    codes = low - 4 * (1 - high.reshape(n, -1).astype(np.int16))
    lo = (packed[:, 0:8].reshape(n, 1, 8) >> np.array([0, 4], dtype=np.uint8).reshape(1, 2, 1)).reshape(n, 16)
    hi = (packed[:, 8:12].reshape(n, 1, 4) >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 4, 1)).reshape(n, 16)
    sub = ((lo & 0x0F) | ((hi & 0x03) << 4)).astype(np.int16) - 32
    return Blocks(codes, d * sub.astype(np.float32), None, 16)


def _k_scale_min(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The eight 6-bit sub-block scales and minimums of a Q4_K / Q5_K super-block (12 bytes)."""
    first, second, rest = packed[:, 0:4], packed[:, 4:8], packed[:, 8:12]
    scale = np.concatenate([first & 0x3F, (rest & 0x0F) | ((first >> 2) & 0x30)], axis=1)
    minimum = np.concatenate([second & 0x3F, (rest >> 4) | ((second >> 2) & 0x30)], axis=1)
    return scale.astype(np.float32), minimum.astype(np.float32)


def _nibbles_by_32(qs: np.ndarray) -> np.ndarray:
    """``[n, 128]`` bytes -> ``[n, 256]``: each 32-byte group gives 32 low nibbles, then 32 high."""
    n = qs.shape[0]
    return ((qs.reshape(n, 4, 1, 32) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)) & 0x0F).reshape(n, -1)


def _q4_k(raw: np.ndarray) -> Blocks:
    d, dmin = _f16(raw, 0), _f16(raw, 2)
    scale, minimum = _k_scale_min(raw[:, 4:16])
    return Blocks(_nibbles_by_32(raw[:, 16:144]).astype(np.int16), d * scale, -(dmin * minimum), 32)


def _q5_k(raw: np.ndarray) -> Blocks:
    n = raw.shape[0]
    d, dmin = _f16(raw, 0), _f16(raw, 2)
    scale, minimum = _k_scale_min(raw[:, 4:16])
    high = (raw[:, 16:48].reshape(n, 1, 32) >> np.arange(8, dtype=np.uint8).reshape(1, 8, 1)) & 1
    codes = (_nibbles_by_32(raw[:, 48:176]) | (high.reshape(n, -1) << 4)).astype(np.int16)
    return Blocks(codes, d * scale, -(dmin * minimum), 32)


def _q6_k(raw: np.ndarray) -> Blocks:
    n = raw.shape[0]
    low = (raw[:, 0:128].reshape(n, 2, 1, 64) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)) & 0x0F
    high = (raw[:, 128:192].reshape(n, 2, 1, 32) >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)) & 3
    codes = (low.reshape(n, -1) | (high.reshape(n, -1) << 4)).astype(np.int16) - 32
    sub = np.ascontiguousarray(raw[:, 192:208]).view(np.int8).astype(np.float32)
    return Blocks(codes, _f16(raw, 208) * sub, None, 16)


def _iq4_nl(raw: np.ndarray) -> Blocks:
    return Blocks(_IQ4_VALUES[_nibbles_split(raw[:, 2:18])], _f16(raw, 0), None, 32)


def _iq4_xs(raw: np.ndarray) -> Blocks:
    n = raw.shape[0]
    d = _f16(raw, 0)
    high = np.ascontiguousarray(raw[:, 2:4]).view(np.uint16).reshape(n, 1) >> (2 * np.arange(8, dtype=np.uint16))
    low = (raw[:, 4:8].reshape(n, 4, 1) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2)).reshape(n, 8)
    sub = ((low & 0x0F) | ((high.astype(np.uint8) & 0x03) << 4)).astype(np.int16) - 32
    nibbles = (raw[:, 8:136].reshape(n, 8, 1, 16) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)) & 0x0F
    return Blocks(_IQ4_VALUES[nibbles.reshape(n, -1)], d * sub.astype(np.float32), None, 32)


def _mxfp4(raw: np.ndarray) -> Blocks:
    e = raw[:, 0:1].astype(np.uint32)
    # half of 2 ** (e - 127), as ggml's e8m0_to_fp32_half: subnormal for e < 2
    bits = np.where(e < 2, np.uint32(0x00200000) << e, (e - 1) << np.uint32(23)).astype(np.uint32)
    return Blocks(_MXFP4_VALUES[_nibbles_split(raw[:, 1:17])], bits.view(np.float32), None, 32)


_UNPACK: dict[str, Callable[[np.ndarray], Blocks]] = {
    "Q4_0": _q4_0,
    "Q4_1": _q4_1,
    "Q5_0": _q5_0,
    "Q5_1": _q5_1,
    "Q8_0": _q8_0,
    "Q2_K": _q2_k,
    "Q3_K": _q3_k,
    "Q4_K": _q4_k,
    "Q5_K": _q5_k,
    "Q6_K": _q6_k,
    "IQ4_NL": _iq4_nl,
    "IQ4_XS": _iq4_xs,
    "MXFP4": _mxfp4,
}


def unpack(kind: str, raw: np.ndarray) -> Blocks:
    """The rows ``raw`` (``[rows, bytes per row]`` uint8, as the file holds them) of a ``kind`` tensor.

    Args:
        kind: A ggml type name in :data:`LAYOUTS`.
        raw: Whole rows of ggml blocks.

    Returns:
        :class:`Blocks` whose ``scales * codes (+ minimums)`` per block, in float32, equals
        ``gguf.quants.dequantize`` of the same bytes.
    """
    values, size = _GGML_BLOCKS[kind]
    rows = raw.shape[0]
    blocks = np.ascontiguousarray(raw).reshape(-1, size)
    unpacked = _UNPACK[kind](blocks)
    cols = blocks.shape[0] * values // rows
    per_row = cols // unpacked.block
    return Blocks(
        unpacked.codes.reshape(rows, cols),
        np.ascontiguousarray(unpacked.scales.reshape(rows, per_row), dtype=np.float32),
        None
        if unpacked.minimums is None
        else np.ascontiguousarray(unpacked.minimums.reshape(rows, per_row), dtype=np.float32),
        unpacked.block,
    )
