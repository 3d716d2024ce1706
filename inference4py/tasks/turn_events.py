"""The events of an assistant turn as it streams (see :class:`~inference4py.tasks.turn.TurnSplitter`).

Their own module so that every splitter (:mod:`inference4py.tasks.turn`, :mod:`inference4py.tasks.harmony`)
makes the same ones; :mod:`inference4py.tasks.turn` re-exports them.
"""

from __future__ import annotations

from dataclasses import dataclass

from inference4py.generation.result import ToolCall

__all__ = ["CallArguments", "CallEnd", "CallStart", "ReasoningDelta", "TextDelta", "TurnEvent"]


@dataclass(frozen=True)
class TextDelta:
    """Answer text."""

    text: str


@dataclass(frozen=True)
class ReasoningDelta:
    """Text of the model's reasoning block (without its markers)."""

    text: str


@dataclass(frozen=True)
class CallStart:
    """A tool call begins: its position in the turn, its id and the function's name."""

    index: int
    id: str
    name: str


@dataclass(frozen=True)
class CallArguments:
    """The next piece of call ``index``'s arguments, as JSON text (the pieces join to a JSON object)."""

    index: int
    text: str


@dataclass(frozen=True)
class CallEnd:
    """Call ``index`` is complete."""

    index: int
    call: ToolCall


TurnEvent = TextDelta | ReasoningDelta | CallStart | CallArguments | CallEnd
