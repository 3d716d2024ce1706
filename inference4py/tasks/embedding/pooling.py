"""Pooling token vectors into one vector per text, as sentence-transformers' Pooling and Normalize do.

numpy twins of ``sentence_transformers.models.Pooling`` (right-padded batches) and of
``Normalize`` (``torch.nn.functional.normalize``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from inference4py.errors import ConfigurationError

__all__ = ["POOLING_MODES", "check_modes", "l2_normalize", "pool"]

#: Pooling modes, in the order sentence-transformers concatenates them when several are on.
POOLING_MODES: tuple[str, ...] = ("cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")


def pool(hidden: np.ndarray, mask: np.ndarray, modes: Sequence[str]) -> np.ndarray:
    """Pool right-padded token vectors into one vector per row, modes concatenated in the given order.

    Args:
        hidden: ``[batch, seq, hidden]`` token vectors.
        mask: ``[batch, seq]`` attention mask (1 = token, 0 = padding), padding on the right.
        modes: Names from :data:`POOLING_MODES`.

    Returns:
        ``[batch, hidden * len(modes)]`` float32.
    """
    hidden = hidden.astype(np.float32, copy=False)
    weights = mask.astype(np.float32)[:, :, None]  # [batch, seq, 1]
    counts = weights.sum(axis=1)  # [batch, 1]
    lengths = mask.astype(np.int64).sum(axis=1)
    out = []
    for mode in modes:
        if mode == "cls":
            out.append(hidden[:, 0])
        elif mode == "max":
            out.append(np.where(weights > 0, hidden, -np.inf).max(axis=1))
        elif mode == "mean":
            out.append((hidden * weights).sum(axis=1) / np.maximum(counts, 1e-9))
        elif mode == "mean_sqrt_len_tokens":
            out.append((hidden * weights).sum(axis=1) / np.sqrt(np.maximum(counts, 1e-9)))
        elif mode == "weightedmean":
            position = np.arange(1, hidden.shape[1] + 1, dtype=np.float32)[None, :, None]
            w = weights * position
            out.append((hidden * w).sum(axis=1) / np.maximum(w.sum(axis=1), 1e-9))
        elif mode == "lasttoken":
            out.append(hidden[np.arange(hidden.shape[0]), np.maximum(lengths - 1, 0)])
        else:  # checked where modes are set
            raise ConfigurationError(f"Unknown pooling mode {mode!r}; choose from {', '.join(POOLING_MODES)}.")
    return np.concatenate(out, axis=1).astype(np.float32, copy=False)


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Each row divided by its L2 norm (rows of zeros stay zero), as torch's ``F.normalize``."""
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    return (vectors / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)


def check_modes(modes: str | Sequence[str]) -> tuple[str, ...]:
    chosen = (modes,) if isinstance(modes, str) else tuple(modes)
    bad = [m for m in chosen if m not in POOLING_MODES]
    if bad or not chosen:
        raise ConfigurationError(
            f"pooling {list(bad or chosen)} is not supported: choose one or more of {', '.join(POOLING_MODES)}."
        )
    return chosen
