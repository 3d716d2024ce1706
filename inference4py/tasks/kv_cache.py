"""The KV cache types a text generator runs with: the builder's ``kv_cache()`` and ``serve --kv-cache``.

A module of its own, without imports, so that the CLI's ``--help`` can list them without loading
numpy or onnx (``inference4py.optimize.kv_int8`` does the rewrite).
"""

from __future__ import annotations

__all__ = ["KV_CACHE_TYPES"]

#: "float": the graph's own cache; "int8": keys and values quantized per channel (GroupQueryAttention graphs).
KV_CACHE_TYPES = ("float", "int8")
