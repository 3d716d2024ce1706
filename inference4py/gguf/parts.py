"""Which rows of which GGUF tensors a layer's products read, and llama.cpp's q/k row order."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from inference4py.errors import UnsupportedModelError
from inference4py.gguf.hyper import Hyper
from inference4py.gguf.reader import GGUFFile

__all__ = ["Part", "qkv_parts", "unpermute"]


def unpermute(weight: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's q/k row order (interleaved rotary pairs) back to the half-split order."""
    rows = weight.shape[0]
    half = rows // heads // 2
    return weight.reshape(heads, half, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def qkv_parts(gguf: GGUFFile, hp: Hyper, prefix: str) -> tuple[list[Part], np.ndarray | None]:
    """Layer ``prefix``'s q, k, v projection rows (q/k in half-split rotary order) and their bias."""
    if f"{prefix}attn_qkv.weight" in gguf:  # Phi-3 stores it fused, unpermuted
        bias = gguf.tensor(f"{prefix}attn_qkv.bias") if f"{prefix}attn_qkv.bias" in gguf else None
        return [Part(f"{prefix}attn_qkv.weight")], bias
    permuted = hp.arch.permuted_qk
    parts = [
        Part(f"{prefix}attn_q.weight", heads=hp.heads if permuted else None),
        Part(f"{prefix}attn_k.weight", heads=hp.kv_heads if permuted else None),
        Part(f"{prefix}attn_v.weight"),
    ]
    if f"{prefix}attn_q.bias" not in gguf:
        return parts, None
    if permuted:  # llama.cpp would have permuted these too; no such file is known
        raise UnsupportedModelError(f"{gguf.path}: q/k biases on a permuted {hp.arch.name} layout are not supported.")
    return parts, np.concatenate([gguf.tensor(f"{prefix}attn_{t}.bias").reshape(-1) for t in "qkv"])


@dataclass(frozen=True)
class Part:
    """Rows of one GGUF tensor that a linear layer reads: all of them, or ``rows``; llama.cpp's rotary
    row order undone over ``heads`` heads when given."""

    tensor: str
    rows: slice | None = None
    heads: int | None = None
