"""A started request's chunks as an assistant turn: answer text, reasoning and tool-call events.

The protocol modules (chat completions here, Messages in :mod:`~inference4py.serve.messages`,
Responses in :mod:`~inference4py.serve.responses`) each shape the same events their own way:
:func:`turn_steps` runs the request's :class:`~inference4py.tasks.turn.TurnSplitter` over its
stream, and :func:`turn_finish` says once how the turn ended.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from inference4py.generation.result import FinishReason, GenerationChunk
from inference4py.serve.worker import ChunkStream
from inference4py.tasks.turn import TurnEvent, TurnSplitter

__all__ = ["TurnStep", "turn_finish", "turn_steps"]


@dataclass(frozen=True)
class TurnStep:
    """One chunk of a stream and the turn events it completed (the last one's ``finish`` is set)."""

    chunk: GenerationChunk
    events: list[TurnEvent]
    finish: FinishReason | None = None


def turn_finish(reason: FinishReason, splitter: TurnSplitter) -> FinishReason:
    """How a turn ended: ``"tool_calls"`` when it ended after calls, ``"length"`` when the budget cut it."""
    if reason == "eos" and splitter.calls and not splitter.open_call:
        return "tool_calls"
    return reason


async def turn_steps(stream: ChunkStream, splitter: TurnSplitter | None = None) -> AsyncIterator[TurnStep]:
    """The stream's chunks with their turn events; the last step carries what was held back and the finish."""
    splitter = splitter if splitter is not None else stream.splitter()
    async for chunk in stream:
        events = splitter.feed(chunk.text) if chunk.text else []
        if chunk.finish_reason is None:
            yield TurnStep(chunk, events)
        else:
            yield TurnStep(chunk, events + splitter.close(), turn_finish(chunk.finish_reason, splitter))
