"""Fusing one in-memory graph: the levels tried in order, each rewrite checked, the report.

A level whose rewrite does not match or whose logits differ falls back to the next one;
a graph with nothing to fuse is refused with every level's reason.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from inference4py.errors import UnsupportedModelError

from .check import _check, _reference_logits
from .logits import slice_logits
from .match import _NoMatch
from .refusals import _unsupported_attention
from .rewrite import _Fuser

_LEVELS = ("rotary", "attention")


@dataclass
class FusionReport:
    """What :func:`fuse_attention` did to one graph."""

    level: str  # "rotary" or "attention"
    layers: int
    nodes_before: int
    nodes_after: int
    max_logit_difference: float
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"{self.layers} attention layers fused into GroupQueryAttention ({self.level} level), "
            f"{self.nodes_before} -> {self.nodes_after} nodes, largest logit difference "
            f"{self.max_logit_difference:.2e}"
        )


def fuse_attention(
    model: Any,
    config: Mapping[str, Any],
    *,
    level: str = "rotary",
    check: bool = True,
    reload: Callable[[], Any] | None = None,
) -> tuple[Any, FusionReport]:
    """Return ``model`` (an ``onnx.ModelProto`` with its weights) with fused attention.

    ``config`` is the model's config.json (head counts, head size, attention options).
    With ``check`` (the default) the result is compared with the original on random
    input; a level whose result differs falls back to the next one.  Without ``reload``
    the rewrite works on a copy and ``model`` is left as it is; with it, ``model`` itself
    is rewritten and ``reload()`` gives a fresh original for a fallback (for large
    models: one copy of the weights in memory instead of two).
    """
    refusal = _unsupported_attention(config)
    if refusal:
        raise UnsupportedModelError(f"Attention fusion is not available for this model: {refusal}")
    levels = _LEVELS[_LEVELS.index(level) :]
    reasons: list[str] = []
    nodes_before = len(model.graph.node)
    reference = _reference_logits(model) if check else None  # the original's logits, computed once
    source: Any = model
    for lvl in levels:
        if source is None:
            source = reload() if reload is not None else model
        work = source if reload is not None else _copy(source)
        source = None
        try:
            fused, layers, notes = _Fuser(work, config, rotary=(lvl == "rotary")).run()
        except _NoMatch as exc:
            reasons.append(f"{lvl}: {exc}")
            continue
        if slice_logits(fused):
            notes = [*notes, "the head computes only the positions asked for (num_logits_to_keep)"]
        diff = _check(fused, reference) if reference is not None else 0.0
        if diff is None:
            reasons.append(f"{lvl}: the fused graph's logits differ from the original's")
            continue
        return fused, FusionReport(lvl, layers, nodes_before, len(fused.graph.node), diff, notes + reasons)
    raise UnsupportedModelError(
        "Nothing in this graph could be fused into GroupQueryAttention (" + "; ".join(reasons) + "). "
        "The model still runs unfused; onnxruntime-genai's builder is another way to get a fused graph."
    )


def _copy(model: Any) -> Any:
    import copy

    return copy.deepcopy(model)
