"""Freed memory given back to the system after a long prompt.

A long prompt's arrays (its own KV buffers, a copy for the prefix cache, the pieces' logits and
activations) are a few MB each per layer: glibc serves such sizes from its heap once a large block
has been freed (its mmap threshold rises to 32 MB), and keeps the freed heap pages resident.
Measured on SmolLM2-135M (docs/serving.md): RSS 220 MB before a 4,000-token prompt, 468 MB after it
with every array freed, 192 MB after ``malloc_trim(0)``.  onnxruntime's arena shrinkage (the
``memory.enable_memory_arena_shrinkage`` run option) alone gave back 21 MB, and running without the
CPU arena nothing: the memory was glibc's, not the arena's.  The scheduler trims at the end of an
iteration in which a request with a long prompt left or the batch emptied, once the chunks are
delivered (the arena is shrunk after a prompt's last piece too): 202 MB after.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from typing import Any

__all__ = ["trim_heap"]


@functools.cache
def _libc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # musl and others: no glibc, nothing to trim
        return None
    return libc if hasattr(libc, "malloc_trim") else None


def trim_heap() -> bool:
    """Return the C heap's free pages to the system (glibc's ``malloc_trim``); False where there is none."""
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True
