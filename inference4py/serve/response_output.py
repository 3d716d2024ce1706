"""A turn's events as the Responses API's output items, and the stream events that build them.

:class:`TurnOutput` takes the :mod:`~inference4py.tasks.turn` events of an assistant turn (answer
text, reasoning, tool calls) and keeps its output items: a ``message`` item for answer text, a
``reasoning`` item for a reasoning block, a ``function_call`` item per call, in the order the
model wrote them. Each call of :meth:`~TurnOutput.feed` returns the stream events of what it added
(``response.output_item.added``, ``response.output_text.delta``, ...), without their sequence
numbers; a response that is not streamed drops them and keeps the items, so a streamed and a
whole response are built by the same code and cannot differ.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from inference4py.tasks.turn import CallArguments, CallEnd, CallStart, ReasoningDelta, TextDelta, TurnEvent

__all__ = ["TurnOutput", "new_id"]

ItemStatus = Literal["in_progress", "completed", "incomplete"]
_ID_PREFIX = {"message": "msg", "reasoning": "rs", "function_call": "fc"}


def new_id(prefix: str) -> str:
    """An id in OpenAI's Responses form (``resp_...``, ``msg_...``, ``fc_...``)."""
    return f"{prefix}_{uuid.uuid4().hex}"


@dataclass
class _Item:
    """An output item being written: its text (a message's, a reasoning block's, or a call's arguments)."""

    kind: Literal["message", "reasoning", "function_call"]
    index: int
    id: str
    text: str = ""
    call_id: str = ""
    name: str = ""

    def item(self, status: ItemStatus, *, started: bool = False) -> dict[str, Any]:
        """The item in the API's form; ``started``: as announced, before its content."""
        if self.kind == "function_call":
            return {
                "id": self.id,
                "type": "function_call",
                "call_id": self.call_id,
                "name": self.name,
                "arguments": self.text,
                "status": status,
            }
        content = [] if started else [self.part()]
        if self.kind == "reasoning":
            return {"id": self.id, "type": "reasoning", "summary": [], "content": content, "status": status}
        return {"id": self.id, "type": "message", "role": "assistant", "status": status, "content": content}

    def part(self, text: str | None = None) -> dict[str, Any]:
        text = self.text if text is None else text
        if self.kind == "reasoning":
            return {"type": "reasoning_text", "text": text}
        return {"type": "output_text", "text": text, "annotations": []}

    def where(self) -> dict[str, Any]:
        return {"item_id": self.id, "output_index": self.index}


class TurnOutput:
    """The output items of one assistant turn, built from its events.

    Attributes:
        items: The finished items, in output order (complete once :meth:`close` was called).
    """

    def __init__(self) -> None:
        self._done: dict[int, dict[str, Any]] = {}
        self._count = 0
        self._open: _Item | None = None  # the message or reasoning item being written
        self._calls: dict[int, _Item] = {}  # the turn's call index -> its item, while its arguments grow

    @property
    def items(self) -> list[dict[str, Any]]:
        return [self._done[i] for i in sorted(self._done)]

    def feed(self, events: Sequence[TurnEvent]) -> list[dict[str, Any]]:
        """The stream events of ``events``."""
        out: list[dict[str, Any]] = []
        for event in events:
            if isinstance(event, TextDelta):
                out += self._write("message", event.text)
            elif isinstance(event, ReasoningDelta):
                out += self._write("reasoning", event.text)
            elif isinstance(event, CallStart):
                out += self._close_open("completed")
                call = self._start("function_call")
                call.call_id, call.name = event.id, event.name
                self._calls[event.index] = call
                out.append(_added(call))
            elif isinstance(event, CallArguments):
                call = self._calls[event.index]
                call.text += event.text
                out.append({"type": "response.function_call_arguments.delta", **call.where(), "delta": event.text})
            elif isinstance(event, CallEnd):
                out += self._end_call(event.index, "completed")
        return out

    def close(self, *, cut: bool) -> list[dict[str, Any]]:
        """The stream events that finish the turn; ``cut``: the token budget ended it (its open items are incomplete).

        A call left unfinished ends ``incomplete``; a turn with no item at all gets an empty message.
        """
        status: ItemStatus = "incomplete" if cut else "completed"
        out = self._close_open(status)
        for index in sorted(self._calls):
            out += self._end_call(index, "incomplete")
        if not self._done:
            out += self._write("message", "")
            out += self._close_open(status)
        return out

    # ------------------------------------------------------------------ items
    def _start(self, kind: Literal["message", "reasoning", "function_call"]) -> _Item:
        item = _Item(kind, self._count, new_id(_ID_PREFIX[kind]))
        self._count += 1
        return item

    def _write(self, kind: Literal["message", "reasoning"], text: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if self._open is not None and self._open.kind != kind:
            out += self._close_open("completed")
        if self._open is None:
            self._open = self._start(kind)
            out.append(_added(self._open))
            out.append({"type": "response.content_part.added", **self._open.where(), **_part(self._open, "")})
        if text:
            self._open.text += text
            delta = "response.output_text.delta" if kind == "message" else "response.reasoning_text.delta"
            out.append({"type": delta, **self._open.where(), "content_index": 0, "delta": text, **_logprobs(kind)})
        return out

    def _close_open(self, status: ItemStatus) -> list[dict[str, Any]]:
        item, self._open = self._open, None
        if item is None:
            return []
        done = "response.output_text.done" if item.kind == "message" else "response.reasoning_text.done"
        events = [
            {"type": done, **item.where(), "content_index": 0, "text": item.text, **_logprobs(item.kind)},
            {"type": "response.content_part.done", **item.where(), **_part(item)},
        ]
        return events + [self._finish(item, status)]

    def _end_call(self, index: int, status: ItemStatus) -> list[dict[str, Any]]:
        call = self._calls.pop(index)
        done = {"type": "response.function_call_arguments.done", **call.where(), "arguments": call.text}
        return [done, self._finish(call, status)]

    def _finish(self, item: _Item, status: ItemStatus) -> dict[str, Any]:
        self._done[item.index] = item.item(status)
        return {"type": "response.output_item.done", "output_index": item.index, "item": item.item(status)}


def _added(item: _Item) -> dict[str, Any]:
    return {
        "type": "response.output_item.added",
        "output_index": item.index,
        "item": item.item("in_progress", started=True),
    }


def _part(item: _Item, text: str | None = None) -> dict[str, Any]:
    return {"content_index": 0, "part": item.part(text)}


def _logprobs(kind: str) -> dict[str, Any]:
    """Text events of a message carry their tokens' log-probabilities (none are asked for here)."""
    return {"logprobs": []} if kind == "message" else {}
