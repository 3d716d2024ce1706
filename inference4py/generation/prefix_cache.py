"""The automatic prefix cache: the KV of finished requests' prompts, reused by requests that start the same way.

A conversation's next turn starts with the previous turn's prompt; a system prompt starts every
request.  When a request's prompt begins with tokens whose cache is still held, only
the rest is prefilled.  Entries are keyed by their token ids, bounded in bytes, and the least
recently used goes first.

A continued prompt gives what it gives without the cache, bit for bit: an entry holds only the
positions a prompt pass computed (never a generated answer's, which decode steps computed, nor a pass's
last row when it ran alone in its query tile), and a prefix is reused only where the rest of the prompt
is computed as one pass would compute it, with at least two tokens left
(:func:`~inference4py.engine.prompt_tiles.exact_split`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from inference4py.engine.prompt_tiles import longest_exact_split
from inference4py.engine.rows import KVPrefix

__all__ = ["PrefixCache"]


if TYPE_CHECKING:
    from inference4py.generation.memory import MemoryBudget


class PrefixCache:
    """Cached KV of token sequences, at most ``max_bytes`` in all (0 turns the cache off).

    Args:
        max_bytes: Memory the entries may hold together.
        min_tokens: Shorter shared prefixes are prefilled again rather than copied.
        tile: The decoder's ``prompt_tile``: where a reused prefix may end (:func:`~inference4py.engine.prompt_tiles.exact_split`).
    """

    def __init__(
        self, max_bytes: int, *, min_tokens: int = 4, tile: int = 1, memory: MemoryBudget | None = None
    ) -> None:
        self.max_bytes = max(0, int(max_bytes))
        self.tile = max(1, int(tile))
        self.memory = memory  # a server's budget: entries are kept only while it has room
        self.min_tokens = max(1, int(min_tokens))
        self._entries: OrderedDict[tuple[int, ...], KVPrefix] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0  # lookups that reused a prefix
        self.misses = 0
        self.reused_tokens = 0  # prompt tokens not prefilled thanks to the cache

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    @property
    def nbytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, prompt: Sequence[int]) -> KVPrefix | None:
        """The cache of the longest held prefix of ``prompt`` that continues exactly, with at least two prompt
        tokens left to prefill (:func:`~inference4py.engine.prompt_tiles.exact_split`)."""
        if not self.enabled:
            return None
        want = np.asarray(prompt, dtype=np.int64)
        best_key: tuple[int, ...] | None = None
        best = 0
        with self._lock:
            for key in self._entries:
                n = _common(key, want)
                if n > best:
                    best_key, best = key, n
            best = longest_exact_split(best, len(want), self.tile)
            if best_key is None or best < self.min_tokens:
                self.misses += 1
                return None
            self._entries.move_to_end(best_key)
            entry = self._entries[best_key]
            self.hits += 1
            self.reused_tokens += best
        return entry if best == entry.length else entry.cut(best)

    def store(self, tokens: Sequence[int], prefix: KVPrefix) -> None:
        """Keep ``prefix`` (the cache of ``tokens``, every position computed by a prompt pass in a tile of two
        rows or more: :func:`~inference4py.engine.prompt_tiles.exact_rows`), evicting the least recently used
        entries."""
        if not self.enabled or prefix.length < self.min_tokens or prefix.nbytes > self.max_bytes:
            return
        key = tuple(int(t) for t in tokens[: prefix.length])
        with self._lock:
            # an entry this one extends is redundant: the new one answers every lookup it would
            for old in [k for k in self._entries if len(k) <= len(key) and key[: len(k)] == k]:
                self._drop(old)
            if any(len(k) > len(key) and k[: len(key)] == key for k in self._entries):
                return  # a longer entry already holds this prefix
            while self.memory is not None and not self.memory.reserve(prefix.nbytes):
                if not self._entries:
                    return  # no room in the server's budget: not kept
                self._drop(next(iter(self._entries)))
            self._entries[key] = prefix
            self._bytes += prefix.nbytes
            while self._bytes > self.max_bytes and self._entries:
                self._drop(next(iter(self._entries)))

    def shrink(self, nbytes: int) -> int:
        """Evict least recently used entries until ``nbytes`` are freed (or none is left); the bytes freed."""
        freed = 0
        with self._lock:
            while freed < nbytes and self._entries:
                freed += self._drop(next(iter(self._entries)))
        return freed

    def clear(self) -> None:
        with self._lock:
            while self._entries:
                self._drop(next(iter(self._entries)))

    def _drop(self, key: tuple[int, ...]) -> int:
        """Forget one entry (the lock held); its bytes go back to the budget."""
        nbytes = self._entries.pop(key).nbytes
        self._bytes -= nbytes
        if self.memory is not None:
            self.memory.release(nbytes)
        return nbytes


def _common(key: tuple[int, ...], want: np.ndarray) -> int:
    """Length of the common prefix of ``key`` and ``want``."""
    n = min(len(key), len(want))
    if n == 0:
        return 0
    diff = np.flatnonzero(np.asarray(key[:n], dtype=np.int64) != want[:n])
    return int(diff[0]) if diff.size else n
