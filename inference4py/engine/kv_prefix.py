"""The cache of a token prefix, as the prefix cache keeps it and a new row starts from it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["KVPrefix"]


@dataclass(frozen=True)
class KVPrefix:
    """The cache of a token prefix, one batch-of-one array per cache input (the layout's order).

    ``arrays[i]`` holds ``length`` positions on axis ``seq_axes[i]``.
    """

    length: int
    arrays: tuple[np.ndarray, ...]
    seq_axes: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays)

    def cut(self, length: int) -> KVPrefix:
        """The first ``length`` positions (views: a cached prefix is never written)."""
        arrays = []
        for arr, axis in zip(self.arrays, self.seq_axes):
            index = [slice(None)] * arr.ndim
            index[axis] = slice(0, length)
            arrays.append(arr[tuple(index)])
        return KVPrefix(length, tuple(arrays), self.seq_axes)
