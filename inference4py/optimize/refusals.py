"""What cannot be fused, and why, read from config.json (soft-capping, ALiBi, sliding windows).

Also the two config.json readings the rest of the fusion shares: the text model's own
section of a multimodal config, and the context length.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _unsupported_attention(config: Mapping[str, Any]) -> str | None:
    cfg = _text_config(config)
    if cfg.get("attn_logit_softcapping"):
        return "its attention logits are soft-capped (attn_logit_softcapping), which the fused operator does not do."
    if cfg.get("alibi") or cfg.get("position_embedding_type") == "alibi":
        return "it uses ALiBi position biases."
    window = cfg.get("sliding_window")
    layer_types = cfg.get("layer_types") or []
    if any(t != "full_attention" for t in layer_types):
        return "some layers use sliding-window attention (layer_types)."
    if window and cfg.get("use_sliding_window", True):
        context = _context(cfg)
        if not context or window < context:
            return (
                f"it attends over a sliding window of {window} tokens; the fused graph would attend to the whole "
                "context and change outputs beyond the window."
            )
    return None


def _text_config(config: Mapping[str, Any]) -> dict[str, Any]:
    cfg = dict(config)
    if isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg, **cfg["text_config"]}
    return cfg


def _context(cfg: Mapping[str, Any]) -> int | None:
    from inference4py.engine.decoder import context_length

    return context_length(cfg)
