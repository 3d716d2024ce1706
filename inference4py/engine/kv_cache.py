"""KV-cache layouts, read from a graph's input and output names.

A cache is described by name templates, ``{layer}`` standing for the layer
index: each *past* input is fed the value of its *present* output from the
previous step.  Two formats exist:

* ``separate``: one key and one value tensor per layer, ``[batch, kv_heads, seq, head_dim]``;
* ``combined``: GPT-2's old ``past_{i}`` -> ``present_{i}``, ``[2, batch, kv_heads, seq, head_dim]``.

Templates come from the pipeline description (``state.kv_cache``) or are
detected here (DESIGN.md, "detect, don't declare"):

1. the naming conventions of the exporters we know (:data:`CONVENTIONS`):
   optimum and onnxruntime-genai decoders ``past_key_values.{i}.key`` ->
   ``present.{i}.key``; encoder-decoder self attention
   ``past_key_values.{i}.decoder.key`` (grows) and cross attention
   ``past_key_values.{i}.encoder.key`` (computed once, frozen); genai Whisper
   ``past_key_self_{i}`` / ``past_key_cross_{i}``; GPT-2's combined ``past_{i}``;
2. otherwise structure alone: float inputs of rank 4 (or 5) whose names carry a
   layer number, paired with outputs carrying the same layer numbers and the
   same name ending (``kv_in.{i}.key`` -> ``kv_out.{i}.key``), in graph order
   when the endings do not decide.

Head counts and head size come from the graph's static dims; symbolic dims fall
back to the description (``num_kv_heads`` / ``head_size``), then ``config.json``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from inference4py.engine.sessions import TensorInfo
from inference4py.errors import PipelineSpecError, UnsupportedModelError

__all__ = [
    "CacheEntry",
    "CacheNames",
    "KVLayout",
    "CONVENTIONS",
    "detect_cache_names",
    "discover_layout",
    "check_cache_names",
    "heads_from_config",
]

LAYER = "{layer}"
FORMATS = ("separate", "combined")


_COMPILED: dict[str, re.Pattern[str]] = {}


def _compile(template: str) -> re.Pattern[str]:
    pattern = _COMPILED.get(template)
    if pattern is None:
        if not isinstance(template, str) or template.count(LAYER) != 1:
            raise PipelineSpecError(
                f"KV name pattern {template!r} must contain '{{layer}}' exactly once, where the layer index goes "
                "(e.g. 'past_key_values.{layer}.key')."
            )
        head, tail = template.split(LAYER)
        pattern = re.compile(f"^{re.escape(head)}(\\d+){re.escape(tail)}$")
        _COMPILED[template] = pattern
    return pattern


@dataclass(frozen=True)
class CacheNames:
    """Name templates of one cache: ``pairs`` of (past input, present output) templates.

    ``separate`` caches have two pairs (key first, then value); ``combined`` one.
    """

    format: str
    pairs: tuple[tuple[str, str], ...]

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise PipelineSpecError(
                f"Unknown kv_cache format {self.format!r}. Valid formats: auto, {', '.join(FORMATS)}."
            )
        expected = 2 if self.format == "separate" else 1
        if len(self.pairs) != expected:
            raise PipelineSpecError(
                f"A {self.format} KV cache needs {expected} pair(s) of past/present name patterns, got {len(self.pairs)}."
            )
        for template in (t for pair in self.pairs for t in pair):
            _compile(template)

    @classmethod
    def separate(cls, past_key: str, past_value: str, present_key: str, present_value: str) -> CacheNames:
        return cls("separate", ((past_key, present_key), (past_value, present_value)))

    @classmethod
    def combined(cls, past: str, present: str) -> CacheNames:
        return cls("combined", ((past, present),))

    def to_json(self) -> dict[str, str]:
        """The ``*_pattern`` fields of the pipeline description."""
        if self.format == "combined":
            return {"format": "combined", "past_pattern": self.pairs[0][0], "present_pattern": self.pairs[0][1]}
        (pk, prk), (pv, prv) = self.pairs
        return {
            "format": "separate",
            "past_key_pattern": pk,
            "past_value_pattern": pv,
            "present_key_pattern": prk,
            "present_value_pattern": prv,
        }

    def match(self, name: str) -> tuple[int, str] | None:
        """(layer, present output name) when ``name`` is one of this cache's past inputs."""
        for past, present in self.pairs:
            m = _compile(past).match(name)
            if m:
                layer = int(m.group(1))
                return layer, present.replace(LAYER, str(layer))
        return None


#: Exporter conventions, tried in order: (self-attention cache, cross-attention cache or None).
CONVENTIONS: tuple[tuple[CacheNames, CacheNames | None], ...] = (
    (
        CacheNames.separate(
            "past_key_values.{layer}.decoder.key",
            "past_key_values.{layer}.decoder.value",
            "present.{layer}.decoder.key",
            "present.{layer}.decoder.value",
        ),
        CacheNames.separate(
            "past_key_values.{layer}.encoder.key",
            "past_key_values.{layer}.encoder.value",
            "present.{layer}.encoder.key",
            "present.{layer}.encoder.value",
        ),
    ),
    (
        CacheNames.separate(
            "past_key_values.{layer}.key",
            "past_key_values.{layer}.value",
            "present.{layer}.key",
            "present.{layer}.value",
        ),
        None,
    ),
    (
        CacheNames.separate(
            "past_key_self_{layer}", "past_value_self_{layer}", "present_key_self_{layer}", "present_value_self_{layer}"
        ),
        CacheNames.separate(
            "past_key_cross_{layer}",
            "past_value_cross_{layer}",
            "present_key_cross_{layer}",
            "present_value_cross_{layer}",
        ),
    ),
    (
        CacheNames.separate(
            "past_key_values_{layer}_key",
            "past_key_values_{layer}_value",
            "present_{layer}_key",
            "present_{layer}_value",
        ),
        None,
    ),
    (CacheNames.combined("past_{layer}", "present_{layer}"), None),
)


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
    names: CacheNames | None = None
    cross_names: CacheNames | None = None

    # Read on every decoding step: computed once per layout (the dataclass is frozen, entries never change).
    @functools.cached_property
    def self_entries(self) -> tuple[CacheEntry, ...]:
        return tuple(e for e in self.entries if e.kind in ("self", "combined"))

    @functools.cached_property
    def cross_entries(self) -> tuple[CacheEntry, ...]:
        return tuple(e for e in self.entries if e.kind == "cross")

    @property
    def dtype(self) -> Any:
        return self.entries[0].dtype if self.entries else np.float32

    @functools.cached_property
    def position_bytes(self) -> int:
        """Bytes one position of one sequence takes in the self-attention cache (keys and values, every layer)."""
        total = 0
        for entry in self.self_entries:
            off = 1 if entry.kind == "combined" else 0
            heads = _static(entry.shape, 1 + off) or self.num_kv_heads
            head_dim = _static(entry.shape, 3 + off) or self.head_dim
            total += (2 if entry.kind == "combined" else 1) * heads * head_dim * np.dtype(entry.dtype).itemsize
        return total

    def empty(self, entry: CacheEntry, batch: int) -> np.ndarray:
        """A zero-length past for ``entry`` (the first step sees no history)."""
        off = 1 if entry.kind == "combined" else 0
        heads = _static(entry.shape, 1 + off) or self.num_kv_heads
        head_dim = _static(entry.shape, 3 + off) or self.head_dim
        shape: list[int] = [batch, heads, 0, head_dim]  # [batch, kv_heads, 0, head_dim]
        if entry.kind == "combined":
            shape = [2, *shape]
        return np.zeros(shape, dtype=entry.dtype)


def _static(shape: tuple[int | str | None, ...], axis: int) -> int | None:
    if axis >= len(shape):
        return None
    d = shape[axis]
    return d if isinstance(d, int) and d > 0 else None


def heads_from_config(config: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """(num_kv_heads, head_dim) from a transformers config.json, when it says."""
    cfg = dict(config)
    text = cfg.get("text_config")
    if isinstance(text, dict):  # multimodal configs nest the language model's
        cfg = {**cfg, **text}
    heads = (
        cfg.get("num_attention_heads")
        or cfg.get("n_head")
        or cfg.get("num_heads")
        or cfg.get("decoder_attention_heads")
    )
    kv = cfg.get("num_key_value_heads") or cfg.get("num_kv_heads") or cfg.get("n_head_kv") or heads
    hidden = cfg.get("hidden_size") or cfg.get("n_embd") or cfg.get("d_model")
    head_dim = cfg.get("head_dim") or cfg.get("d_kv")
    if head_dim is None and hidden and heads:
        head_dim = hidden // heads
    return (int(kv) if kv else None, int(head_dim) if head_dim else None)


# --------------------------------------------------------------------------- detection

_FLOATS = (np.float32, np.float16, np.float64)
_NOT_CACHE = frozenset(
    {
        "input_ids",
        "attention_mask",
        "position_ids",
        "logits",
        "encoder_hidden_states",
        "encoder_attention_mask",
        "decoder_attention_mask",
        "input_features",
        "inputs_embeds",
    }
)
_NUMBER = re.compile(r"\d+")


def detect_cache_names(
    inputs: Mapping[str, TensorInfo], outputs: Mapping[str, TensorInfo]
) -> tuple[CacheNames | None, CacheNames | None]:
    """(self cache, cross cache) name templates of a graph; (None, None) when it has no cache inputs.

    Known exporter conventions first, then the structural pairing described in
    the module docstring.
    """
    for self_names, cross_names in CONVENTIONS:
        if any(self_names.match(name) for name in inputs):
            cross = cross_names if cross_names and any(cross_names.match(n) for n in inputs) else None
            return self_names, cross
    return _structural_names(inputs, outputs), None


def _templates(infos: Iterable[TensorInfo]) -> dict[str, list[int]]:
    """Name template -> layers, for float tensors of rank 4/5 named with a number (graph order kept)."""
    found: dict[str, list[int]] = {}
    for info in infos:
        if info.name in _NOT_CACHE or info.dtype not in _FLOATS or len(info.shape) not in (4, 5):
            continue
        m = _NUMBER.search(info.name)
        if not m:
            continue
        template = info.name[: m.start()] + LAYER + info.name[m.end() :]
        found.setdefault(template, []).append(int(m.group()))
    return found


def _structural_names(inputs: Mapping[str, TensorInfo], outputs: Mapping[str, TensorInfo]) -> CacheNames | None:
    past = _templates(inputs.values())
    present = _templates(outputs.values())
    if not past:
        return None
    pairs: list[tuple[str, str]] = []
    free = dict(present)
    unpaired = []
    for template, layers in past.items():
        tail = template.split(LAYER)[1]
        same = [t for t, ls in free.items() if t.split(LAYER)[1] == tail and sorted(ls) == sorted(layers)]
        if len(same) == 1:
            pairs.append((template, same[0]))
            del free[same[0]]
        else:
            unpaired.append(template)
    for template in unpaired:  # graph order decides what the name endings could not
        same = [t for t, ls in free.items() if sorted(ls) == sorted(past[template])]
        if not same:
            return None
        pairs.append((template, same[0]))
        del free[same[0]]
    pairs.sort(key=lambda p: list(past).index(p[0]))
    rank = len(inputs[_first_name(inputs, pairs[0][0])].shape)
    if len(pairs) == 1 and rank == 5:
        return CacheNames("combined", tuple(pairs))
    if len(pairs) == 2 and rank == 4:
        # Key first: names saying "value" / "v" go second, otherwise graph order stands.
        if _looks_like_value(pairs[0][0]) and not _looks_like_value(pairs[1][0]):
            pairs.reverse()
        return CacheNames("separate", tuple(pairs))
    return None


def _first_name(inputs: Mapping[str, TensorInfo], template: str) -> str:
    pattern = _compile(template)
    return next(n for n in inputs if pattern.match(n))


def _looks_like_value(template: str) -> bool:
    words = re.split(r"[^a-z]+", template.replace(LAYER, " ").lower())
    return any(w in ("value", "values", "v", "val") for w in words) and not any(w in ("key", "k") for w in words)


# --------------------------------------------------------------------------- layout


def check_cache_names(
    inputs: Mapping[str, TensorInfo],
    outputs: Mapping[str, TensorInfo],
    names: CacheNames,
    *,
    graph_name: str,
    declared: bool,
) -> None:
    """Validate declared or detected templates against a graph that takes a past.

    Raises:
        PipelineSpecError: a past input has no present output, or declared
            templates match no input at all.
    """
    matched = 0
    for name in inputs:
        hit = names.match(name)
        if hit is None:
            continue
        matched += 1
        if hit[1] not in outputs:
            raise PipelineSpecError(
                f"The {graph_name} graph has the cache input '{name}' but no output '{hit[1]}' to carry it to the "
                f"next step. Fix the present_* pattern in state.kv_cache of inference4py.json (outputs of the graph: "
                f"{', '.join(sorted(n for n in outputs if n != 'logits')[:8])}), or re-export the model with past key "
                "values (optimum: task '...-with-past')."
            )
    if declared and matched == 0:
        past = ", ".join(p for p, _ in names.pairs)
        raise PipelineSpecError(
            f"The KV cache patterns ({past}) match no input of the {graph_name} graph (inputs: "
            f"{', '.join(sorted(inputs)[:10])}). Fix the past_* patterns in state.kv_cache of inference4py.json, "
            'or set "format": "auto" to detect them.'
        )


def discover_layout(
    inputs: Mapping[str, TensorInfo],
    outputs: Mapping[str, TensorInfo],
    config: Mapping[str, Any] | None = None,
    *,
    graph_name: str = "decoder",
    names: CacheNames | None = None,
    cross_names: CacheNames | None = None,
    num_kv_heads: int | None = None,
    head_size: int | None = None,
) -> KVLayout:
    """Find the cache tensors of a graph and their geometry.

    Args:
        names / cross_names: templates from the pipeline description; detected
            from the names when None.
        num_kv_heads / head_size: used when the graph's dims are symbolic.

    Raises:
        PipelineSpecError: a past input has no matching present output.
        UnsupportedModelError: head count / size cannot be determined.
    """
    if names is None:
        names, detected_cross = detect_cache_names(inputs, outputs)
        cross_names = cross_names or detected_cross
    entries: list[CacheEntry] = []
    for name, info in inputs.items():
        hit = names.match(name) if names else None
        kind = "combined" if names is not None and names.format == "combined" else "self"
        if hit is None and cross_names is not None:
            hit = cross_names.match(name)
            kind = "cross"
        if hit is None:
            continue
        layer, out_name = hit
        if out_name not in outputs:
            if kind == "cross":
                out_name = ""  # decoder_with_past graphs take the cross cache but do not return it
            else:
                assert names is not None  # a self entry: hit came from names.match
                check_cache_names(inputs, outputs, names, graph_name=graph_name, declared=False)  # raises
        entries.append(CacheEntry(name, out_name, layer, kind, info.dtype, info.shape))
    entries.sort(key=lambda e: (e.layer, e.kind, e.input))

    kv_heads = head_dim = None
    for e in entries:
        off = 1 if e.kind == "combined" else 0
        kv_heads = kv_heads or _static(e.shape, 1 + off)
        head_dim = head_dim or _static(e.shape, 3 + off)
    kv_heads = kv_heads or num_kv_heads
    head_dim = head_dim or head_size
    if (kv_heads is None or head_dim is None) and entries:
        cfg_kv, cfg_hd = heads_from_config(config or {})
        kv_heads = kv_heads or cfg_kv
        head_dim = head_dim or cfg_hd
    if entries and (kv_heads is None or head_dim is None):
        raise UnsupportedModelError(
            f"Cannot tell the number of KV heads / head size of the {graph_name} graph: its cache inputs have "
            "symbolic shapes and neither the pipeline description (state.kv_cache.num_kv_heads / head_size) nor "
            "config.json (num_key_value_heads, hidden_size, head_dim) says. Add them to inference4py.json."
        )
    return KVLayout(
        tuple(entries),
        int(kv_heads or 0),
        int(head_dim or 0),
        names if entries else None,
        cross_names if any(e.kind == "cross" for e in entries) else None,
    )
