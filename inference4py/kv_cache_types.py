"""The KV cache types a text generator runs with: the builder's ``kv_cache()`` and ``serve --kv-cache``.

A module of its own, without imports, so that the CLI's ``--help`` can list them without loading
numpy or onnx.  It sits in the layer of the converters (docs/architecture.md), below both its
users: the task and edge layers that accept a type, and ``inference4py.optimize.kv_int8``,
which does the int8 rewrite.
"""

from __future__ import annotations

__all__ = ["KV_CACHE_TYPES"]

#: "float": the graph's own cache; "int8": keys and values quantized per channel (GroupQueryAttention graphs).
KV_CACHE_TYPES = ("float", "int8")
