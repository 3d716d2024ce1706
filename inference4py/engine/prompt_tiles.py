"""Where a prompt may be split without changing a bit: the query tiles of onnxruntime's attention.

A prompt prefilled in two calls (a cached prefix, then the rest) gives the same logits as one call
only if every position is computed by the same kernel path both ways.  On CPU, onnxruntime's
``GroupQueryAttention`` runs a prompt pass as tiled flash attention: query rows in tiles of
``q_block`` counted from the first new row, each tile a matrix product against the keys.  A tile of
one row goes through the one-row product (another accumulation order), and a call of one new token
through the decode kernel, so both round differently from a row inside a tile of several.  Hence:

* a row computed inside a tile of two rows or more gets the same bits whichever tile it is in and
  wherever that tile starts (a row's dot products and its softmax over the key blocks do not depend on
  the other rows: checked on every graph family, ``tests/generation/test_prefix_splits.py``); only the
  last row of a pass can sit alone in its tile, when the pass's length is one more than a multiple of
  the tile;
* so a split after ``k`` of ``n`` tokens is exact (:func:`exact_split`) when at least two tokens are
  left for the second call and the last row is alone in its tile both ways or neither: ``k`` a
  multiple of the tile (the second call's tiles then fall where one call's would), or neither ``n``
  nor ``n - k`` one more than a multiple of it.  A cached pass's own last row is reused only when it
  did not run alone (:func:`exact_rows`);
* keys and values written by decode steps (a generated answer) differ in the last bits from those a
  prompt pass computes for the same tokens, so only prompt-pass positions may be reused.

The same rule lets a long prompt run in pieces (:func:`prefill_bounds`) with the logits of one run,
and lets the server's scheduler run a prompt a piece at a time between other requests' decode steps
(:func:`next_cut`, every piece as long as a step's budget allows).

The tile follows onnxruntime's own rule: key blocks sized to fill the L2 cache (``sysconf``'s
``_SC_LEVEL2_CACHE_SIZE``, as onnxruntime reads it), query blocks at most twice the head size.  The
unfused pass (flash off, or a graph whose attention has a softcap) has no tiles: any multiple is
exact there too.  ``tests/generation/test_prefix_splits.py`` checks the rule on every graph family.
"""

from __future__ import annotations

import os

__all__ = [
    "MIN_REST",
    "PREFILL_CHUNK",
    "exact_rows",
    "exact_split",
    "longest_exact_split",
    "next_cut",
    "prefill_bounds",
    "query_tile",
]

#: Tokens a continuing prefill must feed at least: one would take the decode kernel (and, with int4
#: weights, the one-row MatMulNBits product).
MIN_REST = 2

#: Tokens per run of a long prompt (rounded up to a whole number of tiles): a prompt's activations
#: (the FFN's ``[tokens, intermediate]`` products, onnxruntime's arena) grow with the tokens of one run,
#: so a long prompt runs in pieces of this size, as llama.cpp's ubatch does; the KV cache is the same.
PREFILL_CHUNK = 512


def query_tile(head_size: int) -> int:
    """Rows per query tile of onnxruntime's CPU flash attention for ``head_size``, on this machine."""
    head_size = max(1, int(head_size))
    kv_block = max(_l2_cache_bytes() // (4 * 4 * 2 * head_size), 1)  # float32, K and V, x4 (onnxruntime's sizing)
    return max(1, min(kv_block, 2 * head_size))


def _alone(rows: int, tile: int) -> bool:
    """Whether the last of a pass's ``rows`` rows runs alone in its query tile (the one-row product)."""
    return tile > 1 and rows % tile == 1


def exact_split(k: int, n: int, tile: int) -> bool:
    """Whether ``n`` prompt tokens continued from a cache of the first ``k`` (each computed in a tile of
    two rows or more) give the logits and cache of one pass over all ``n``, bit for bit."""
    if k < 0 or n - k < MIN_REST:
        return False
    return k % max(1, tile) == 0 or not (_alone(n, tile) or _alone(n - k, tile))


def longest_exact_split(common: int, n: int, tile: int) -> int:
    """The longest ``k <= common`` at which ``n`` prompt tokens continue exactly (:func:`exact_split`), 0 if none."""
    k = min(common, n - MIN_REST)
    while k > 0 and not exact_split(k, n, tile):
        k -= 1
    return max(k, 0)


def exact_rows(length: int, start: int, tile: int) -> int:
    """Of a row's first ``length`` positions, where a prompt pass computed ``start .. length - 1``, how many a
    later prompt may continue from: all, or all but the last when it ran alone in its tile."""
    return length - 1 if _alone(length - start, tile) else length


def next_cut(done: int, n: int, tile: int, limit: int) -> int:
    """Where the piece of a prompt pass that starts after ``done`` of its ``n`` new tokens ends: at most
    ``limit`` tokens on, cut at a multiple of ``tile`` counted from the pass's start (so every row is
    computed as in one run) with at least ``MIN_REST`` tokens after it; a piece holds one tile at least,
    and the rest of the prompt when no such cut is left."""
    tile = max(1, int(tile))
    size = tile * max(1, int(limit) // tile)
    cut = done + size  # ``done`` is 0 or an earlier cut: a multiple of the tile
    return cut if cut <= n - MIN_REST else n


def prefill_bounds(n: int, tile: int, chunk: int = PREFILL_CHUNK) -> list[int]:
    """Where a prompt pass of ``n`` new tokens is cut into runs: ``[0, ..., n]``, every run the whole
    tiles that ``chunk`` rounds up to (:func:`next_cut`)."""
    tile = max(1, int(tile))
    size = tile * max(1, -(-int(chunk) // tile))
    bounds = [0]
    while bounds[-1] < n:
        bounds.append(next_cut(bounds[-1], n, tile, size))
    return bounds


def _l2_cache_bytes() -> int:
    """The L2 cache size onnxruntime sizes its tiles by; where the system does not say, a size at which the
    query tile is twice the head size (onnxruntime's cap) for any head up to 256."""
    try:
        return int(os.sysconf("SC_LEVEL2_CACHE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return 4 << 20
