"""KV-cache layouts, discovered from a graph's input and output names.

Conventions recognised (DESIGN.md):

* ``past_key_values.{i}.key|value`` -> ``present.{i}.key|value`` (optimum, genai decoders)
* GPT-2's combined ``past_{i}`` -> ``present_{i}`` ([2, batch, heads, seq, head_dim])
* encoder-decoder ``past_key_values.{i}.decoder.key|value`` (self attention: grows) and
  ``past_key_values.{i}.encoder.key|value`` (cross attention: computed once, frozen)
* genai ``past_key_self_{i}`` / ``past_value_self_{i}`` and ``past_key_cross_{i}`` ...

The layout records, for every cache tensor, the input name, the output name
that carries its next value, its dtype, its per-tensor shape template and the
axis that grows.  Head counts and head size come from the graph's static dims;
symbolic dims fall back to ``config.json``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from inference4py.engine.sessions import TensorInfo
from inference4py.errors import PipelineSpecError, UnsupportedModelError

__all__ = ["CacheEntry", "KVLayout", "discover_layout", "heads_from_config"]

# (pattern for past input, function giving the present output name, group)
_PATTERNS: list[tuple[re.Pattern[str], str, str]] = [
    (re.compile(r"^past_key_values\.(\d+)\.(decoder|encoder)\.(key|value)$"), "present.{0}.{1}.{2}", "{1}"),
    (re.compile(r"^past_key_values\.(\d+)\.(key|value)$"), "present.{0}.{1}", "self"),
    (re.compile(r"^past_(key|value)_(self|cross)_(\d+)$"), "present_{0}_{1}_{2}", "{1}"),
    (re.compile(r"^past_key_values_(\d+)_(key|value)$"), "present_{0}_{1}", "self"),
    (re.compile(r"^past_(\d+)$"), "present_{0}", "combined"),
]


@dataclass(frozen=True)
class CacheEntry:
    """One cache tensor: ``input`` is fed, ``output`` is its next value."""

    input: str
    output: str
    layer: int
    kind: str  # "self" | "cross" | "combined"
    dtype: Any
    shape: tuple[int | str | None, ...]  # as declared by the graph

    @property
    def seq_axis(self) -> int:
        # [batch, heads, seq, head_dim], or [2, batch, heads, seq, head_dim] for GPT-2's combined past
        return len(self.shape) - 2

    @property
    def batch_axis(self) -> int:
        return 1 if self.kind == "combined" else 0


@dataclass(frozen=True)
class KVLayout:
    entries: tuple[CacheEntry, ...]
    num_kv_heads: int
    head_dim: int

    @property
    def self_entries(self) -> tuple[CacheEntry, ...]:
        return tuple(e for e in self.entries if e.kind in ("self", "combined"))

    @property
    def cross_entries(self) -> tuple[CacheEntry, ...]:
        return tuple(e for e in self.entries if e.kind == "cross")

    @property
    def num_layers(self) -> int:
        return len({e.layer for e in self.entries})

    @property
    def dtype(self) -> Any:
        return self.entries[0].dtype if self.entries else np.float32

    def empty(self, entry: CacheEntry, batch: int) -> np.ndarray:
        """A zero-length past for ``entry`` (the first step sees no history)."""
        shape: list[int] = [batch, self.num_kv_heads, 0, self.head_dim]
        if entry.kind == "combined":
            shape = [2, *shape]
        return np.zeros(shape, dtype=entry.dtype)


def heads_from_config(config: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """(num_kv_heads, head_dim) from a transformers config.json, when it says."""
    cfg = dict(config)
    text = cfg.get("text_config")
    if isinstance(text, dict):  # multimodal configs nest the language model's
        cfg = {**cfg, **text}
    heads = cfg.get("num_attention_heads") or cfg.get("n_head") or cfg.get("num_heads") or cfg.get("decoder_attention_heads")
    kv = cfg.get("num_key_value_heads") or cfg.get("num_kv_heads") or cfg.get("n_head_kv") or heads
    hidden = cfg.get("hidden_size") or cfg.get("n_embd") or cfg.get("d_model")
    head_dim = cfg.get("head_dim") or cfg.get("d_kv")
    if head_dim is None and hidden and heads:
        head_dim = hidden // heads
    return (int(kv) if kv else None, int(head_dim) if head_dim else None)


def discover_layout(
    inputs: Mapping[str, TensorInfo],
    outputs: Mapping[str, TensorInfo],
    config: Mapping[str, Any] | None = None,
    *,
    graph_name: str = "decoder",
) -> KVLayout:
    """Find the cache tensors of a graph and their geometry.

    Raises:
        PipelineSpecError: a past input has no matching present output.
        UnsupportedModelError: head count / size cannot be determined.
    """
    entries: list[CacheEntry] = []
    for name, info in inputs.items():
        for pattern, out_template, group_template in _PATTERNS:
            m = pattern.match(name)
            if not m:
                continue
            groups = m.groups()
            out_name = out_template.format(*groups)
            group = group_template.format(*groups)
            layer = int(next(g for g in groups if g.isdigit()))
            kind = {"decoder": "self", "encoder": "cross", "self": "self", "cross": "cross"}.get(group, group)
            if out_name not in outputs:
                if kind == "cross" and name.endswith(("encoder.key", "encoder.value")):
                    # decoder_with_past graphs take the cross cache but do not return it
                    out_name = ""
                else:
                    raise PipelineSpecError(
                        f"The {graph_name} graph has the cache input '{name}' but no output '{out_name}' "
                        "to carry it to the next step. Re-export the model with past key values "
                        "(optimum: task '...-with-past'), or describe the names in an inference4py.json pipeline file."
                    )
            entries.append(CacheEntry(name, out_name, layer, kind, info.dtype, info.shape))
            break
    entries.sort(key=lambda e: (e.layer, e.kind, e.input))

    kv_heads = head_dim = None
    for e in entries:
        sample = inputs[e.input]
        off = 1 if e.kind == "combined" else 0
        kv_heads = kv_heads or sample.dim(1 + off)
        head_dim = head_dim or sample.dim(3 + off)
    if (kv_heads is None or head_dim is None) and entries:
        cfg_kv, cfg_hd = heads_from_config(config or {})
        kv_heads = kv_heads or cfg_kv
        head_dim = head_dim or cfg_hd
    if entries and (kv_heads is None or head_dim is None):
        raise UnsupportedModelError(
            f"Cannot tell the number of KV heads / head size of the {graph_name} graph: its cache inputs have "
            "symbolic shapes and config.json does not say (num_key_value_heads, hidden_size, head_dim). "
            "Add those keys to config.json."
        )
    return KVLayout(tuple(entries), int(kv_heads or 0), int(head_dim or 0))
