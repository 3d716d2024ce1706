"""OpenAI's Harmony format (gpt-oss): whether a vocabulary writes it, and its markers' ids.

gpt-oss writes its turns as Harmony messages, ``<|start|>assistant<|channel|>analysis<|message|>...<|end|>``:
the channel says which text is reasoning, which is the answer and which is a tool call. The markers are
special tokens of its vocabulary (o200k_harmony), which decoding with ``skip_special_tokens`` would drop,
so generated text keeps them (:func:`~inference4py.generation.generate.stream_generate`) and the turn
splitter (:mod:`inference4py.tasks.harmony`) reads them. Both ask :func:`harmony_markers`, the one place
that says a model writes Harmony: its vocabulary has the markers as single tokens.

The turn's last tokens, ``<|return|>`` (the answer is complete) and ``<|call|>`` (a tool call is), stop
generation (``eos_token_id``) and are not among the markers kept in the text.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["HARMONY_MARKERS", "harmony_markers"]

HARMONY_MARKERS = ("<|start|>", "<|channel|>", "<|message|>", "<|constrain|>", "<|end|>")
"""Harmony's markers inside a turn, kept in generated text: a message's start, its channel, its content,
a content type's constraint and a message's end."""

# what makes a vocabulary Harmony's: the header and content markers (<|constrain|> is optional)
_REQUIRED = ("<|start|>", "<|channel|>", "<|message|>", "<|end|>")


def harmony_markers(token_to_id: Callable[[str], int | None] | None) -> dict[str, int]:
    """``{marker: id}`` of Harmony's markers when a vocabulary has them as tokens (gpt-oss), else ``{}``.

    Args:
        token_to_id: The tokenizer's ``token_to_id`` (None: no vocabulary, ``{}``).

    Example:
        >>> harmony_markers({"<|start|>": 1, "<|channel|>": 2, "<|message|>": 3, "<|end|>": 4}.get)
        {'<|start|>': 1, '<|channel|>': 2, '<|message|>': 3, '<|end|>': 4}
    """
    if token_to_id is None:
        return {}
    ids = {marker: token_to_id(marker) for marker in HARMONY_MARKERS}
    if any(ids[marker] is None for marker in _REQUIRED):
        return {}
    return {marker: i for marker, i in ids.items() if i is not None}
