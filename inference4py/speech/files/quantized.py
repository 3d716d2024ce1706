"""Which of a Whisper model's matrices run on inference4py's compiled operators, and the bytes they run on.

``GgmlMatMul`` and ``GgmlGather`` (:mod:`inference4py.engine.kernels`) take a matrix as uint8 rows
of ggml blocks.  Two kinds of stored matrix become such rows without changing a number:

* whisper.cpp's quantized blocks (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and the K-quants): the file's own
  bytes, as they are;
* CTranslate2's int8 rows (``value = code / divisor``, one float32 divisor per row): each 32 codes
  become one Q8_0 block whose float16 scale is exactly 1.0 (34 bytes), so the product is
  ``codes @ x`` and the graph divides its output ``[..., rows]`` by the divisors.  A row whose length
  is not a whole number of blocks stays on the float path (Whisper's rows all are).

Everything else (float32 / float16 matrices, CTranslate2's int16, the convolutions) stays on
onnxruntime's float path (:meth:`inference4py.speech.files.graph._Builder.stored`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from inference4py.speech.files.ggml import GGML_TYPES
from inference4py.speech.files.weights import Lazy, Matrix, WhisperWeights

__all__ = ["Quantized", "any_quantized", "quantized", "unit_q8_0"]

_Q8_0_VALUES = 32
_ONE = np.frombuffer(np.float16(1.0).tobytes(), dtype=np.uint8)  # 0x3C00, little endian


@dataclass(frozen=True)
class Quantized:
    """A matrix ``[rows, cols]`` as the compiled operators take it.

    ``parts`` are uint8 ``[rows_i, row bytes]`` rows of ggml blocks of type ``type_id``, one after
    another; ``divisor`` (float32 ``[rows]``, CTranslate2's) divides the product's output, or None.
    """

    type_id: int
    cols: int
    parts: tuple[np.ndarray, ...]
    divisor: np.ndarray | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return sum(int(p.shape[0]) for p in self.parts), int(self.parts[0].shape[1])


def unit_q8_0(codes: np.ndarray) -> np.ndarray:
    """int8 ``[rows, cols]`` -> uint8 ``[rows, cols / 32 * 34]``: Q8_0 blocks holding the codes, each scale 1.0.

    Raises:
        ValueError: ``cols`` is not a multiple of 32 (a converter bug: :func:`quantized` checks first).
    """
    rows, cols = codes.shape
    if codes.dtype != np.int8 or cols % _Q8_0_VALUES:
        raise ValueError(
            f"Q8_0 blocks hold int8 rows of a multiple of {_Q8_0_VALUES} codes, not {codes.dtype} {codes.shape}"
        )
    blocks = np.empty((rows, cols // _Q8_0_VALUES, 2 + _Q8_0_VALUES), dtype=np.uint8)
    blocks[:, :, :2] = _ONE
    blocks[:, :, 2:] = np.ascontiguousarray(codes).view(np.uint8).reshape(rows, -1, _Q8_0_VALUES)
    return blocks.reshape(rows, -1)


def _int8_rows(value: object) -> Matrix | None:
    """``value`` when it is CTranslate2's int8 rows of whole Q8_0 blocks (a matrix with row divisors), else None."""
    if not isinstance(value, Matrix) or value.divisor is None:
        return None
    codes = value.values
    whole = codes.dtype == np.int8 and codes.ndim == 2 and codes.shape[1] % _Q8_0_VALUES == 0
    return value if whole else None


def quantized(weights: WhisperWeights, name: str) -> Quantized | None:
    """Matrix ``name`` as blocks the compiled operators multiply, or None when it stays on the float path."""
    value = weights.tensors[name]
    if isinstance(value, Lazy):
        blocks = value.blocks  # every quantized type whisper.cpp's files hold is one the operators hold
        return None if blocks is None else Quantized(blocks.type_id, value.shape[-1], blocks.parts)
    rows = _int8_rows(value)
    if rows is None:
        return None
    return Quantized(GGML_TYPES["Q8_0"], rows.shape[1], (unit_q8_0(rows.values),), rows.divisor)


def any_quantized(weights: WhisperWeights) -> bool:
    """Whether :func:`quantized` puts any matrix of ``weights`` on the compiled operators (none are made here):
    False for a file of float16 / float32 matrices, whose graphs then need no operator library."""
    return any(
        (isinstance(value, Lazy) and value.blocks is not None) or _int8_rows(value) is not None
        for value in weights.tensors.values()
    )
