"""OpenAI's Harmony format (gpt-oss) told apart as reasoning, answer and tool calls, as it streams.

gpt-oss writes a turn as Harmony messages. After the chat template's ``<|start|>assistant`` a turn reads::

    <|channel|>analysis<|message|>User asks weather. Need to call tool.<|end|>
    <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}<|call|>

A message's header (up to ``<|message|>``) names its channel and, for a tool call, its recipient
(``to=functions.NAME``, after the channel or before it, beside the role). :class:`HarmonySplitter` routes
each message's content:

- ``analysis``: the model's reasoning (:class:`~inference4py.tasks.turn.ReasoningDelta`);
- ``final``, and ``commentary`` without a recipient (a preamble shown to the user): answer text
  (:class:`~inference4py.tasks.turn.TextDelta`), as is a message of an unknown channel or of none;
- a message to ``functions.NAME``: a tool call of ``NAME`` whose arguments are the content
  (:class:`~inference4py.tasks.turn.CallStart`, :class:`~inference4py.tasks.turn.CallArguments` as the
  JSON arrives, :class:`~inference4py.tasks.turn.CallEnd` once it is complete);
- a message to another recipient (a built-in tool such as ``python``), or to ``functions.NAME`` when the
  request allows no calls: reasoning (it is the model's work, not its answer).

The markers never reach the answer. ``<|return|>`` and ``<|call|>`` end the turn (they stop generation and
are not in the text), so a call's message ends with the output. What is not Harmony is told apart plainly:
output that opens with text instead of a header is answer text; a header never completed (the budget cut
it) and stray markers are dropped; a call whose arguments are not a JSON object when its message ends
(cut by the budget, say) stays open (:attr:`HarmonySplitter.open_call`) and is not among the calls.

:class:`~inference4py.tasks.turn.TurnSplitter` delegates to this class for a Harmony turn; the final
parse of a whole text (:func:`split_harmony`) runs the same code.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from inference4py.generation.result import ToolCall
from inference4py.tasks.tools.calls import _as_arguments, _openai_id
from inference4py.tasks.turn_events import CallArguments, CallEnd, CallStart, ReasoningDelta, TextDelta, TurnEvent
from inference4py.tokenization.harmony import HARMONY_MARKERS

__all__ = ["HarmonySplit", "HarmonySplitter", "HarmonyTurn", "harmony_opening", "split_harmony"]

_START, _CHANNEL, _MESSAGE, _END = "<|start|>", "<|channel|>", "<|message|>", "<|end|>"
_TURN_ENDS = ("<|return|>", "<|call|>")  # stop tokens: in a text only when it was decoded with them
_MARKERS = (*HARMONY_MARKERS, *_TURN_ENDS)
_HEADER_ENDS = (_MESSAGE, _START, _END, *_TURN_ENDS)  # what ends a header (only <|message|> completes it)
_OPENERS = (_CHANNEL, "<|constrain|>", _MESSAGE, "to=")  # how a header goes on after its role
_PREFIXES = (*_OPENERS, *_HEADER_ENDS)
_ROLE = re.compile(r"[^\s<]*")
_CHANNEL_NAME = re.compile(r"<\|channel\|>\s*([^\s<]*)")
_RECIPIENT = re.compile(r"(?:^|(?<=[\s>]))to=([^\s<]+)")
_FUNCTIONS = "functions."
_MAX_HEADER = 256  # characters of a header before it is taken for text (real ones are a few dozen)

Route = Literal["text", "reasoning", "call"]


@dataclass(frozen=True)
class HarmonyTurn:
    """How one request's turn is written in Harmony (made by the task from its rendered prompt).

    Attributes:
        opening: What the prompt wrote after its last ``<|start|>``: ``"assistant"`` for gpt-oss's
            template (the model writes the header on), ``"assistant<|channel|>final<|message|>"`` for a
            template that opens the answer itself; None when the prompt has no ``<|start|>``.
        inline: Reasoning stays in the answer text, as the model wrote it (markers included) — the
            ``reasoning="inline"`` option; tool calls are still told apart.
    """

    opening: str | None = "assistant"
    inline: bool = False


def harmony_opening(prompt_tail: str) -> str | None:
    """The :attr:`HarmonyTurn.opening` of a prompt from its last tokens' text (special tokens kept)."""
    at = prompt_tail.rfind(_START)
    return None if at < 0 else prompt_tail[at + len(_START) :]


@dataclass
class _Call:
    index: int
    id: str
    name: str
    raw: str = ""
    done: bool = False


def _marker_prefix_at_end(text: str) -> int:
    """How much of ``text``'s end may still become a marker (held back)."""
    for k in range(min(len(text), max(len(m) for m in _MARKERS) - 1), 0, -1):
        tail = text[-k:]
        if any(m.startswith(tail) for m in _MARKERS):
            return k
    return 0


def _first_marker(text: str, markers: tuple[str, ...]) -> tuple[int, str] | None:
    found = [(at, m) for m in markers if (at := text.find(m)) >= 0]
    return min(found) if found else None


def _without_markers(text: str) -> str:
    for marker in _MARKERS:
        text = text.replace(marker, "")
    return text


class HarmonySplitter:
    """Splits a Harmony turn into answer, reasoning and tool-call events as its text arrives.

    Args:
        calls: The request allows tool calls (messages to ``functions.NAME`` are calls); False routes
            them to the reasoning.
        turn: How the prompt opened the turn (see :class:`HarmonyTurn`).
        rng: Makes call ids reproducible (tests); None draws them from :mod:`secrets`.

    Example:
        >>> splitter = HarmonySplitter(calls=True)
        >>> events = splitter.feed("<|channel|>analysis<|message|>Greeting.<|end|>")
        >>> events += splitter.feed("<|start|>assistant<|channel|>final<|message|>Hi!")
        >>> [type(e).__name__ for e in events + splitter.close()]
        ['ReasoningDelta', 'TextDelta']
    """

    def __init__(self, *, calls: bool, turn: HarmonyTurn | None = None, rng: random.Random | None = None) -> None:
        turn = turn if turn is not None else HarmonyTurn()
        self._allow_calls = calls
        self._inline = turn.inline
        self._new_id: Callable[[], str] = lambda: _openai_id(rng)
        self._pending = ""
        self._in_body = False
        self._header = ""  # the current header's text, markers included
        self._started = False  # the header began with <|start|> (its first word is the role)
        self._output_from = 0  # where the output begins in the header (the prompt may have opened it)
        self._route: Route = "text"
        self._call: _Call | None = None
        self._said: set[Route] = set()  # kinds of text already sent: a later message of one is set apart
        self._gap = False  # the message's first content is set apart from the kind's earlier text
        self._calls: list[_Call] = []
        self.calls: list[ToolCall] = []
        if turn.opening is not None:  # the prompt's part of the turn: read, never sent
            self._pending = _START + turn.opening
            self._drain(final=False)
            self._output_from = len(self._header)

    # ------------------------------------------------------------------ public
    def feed(self, text: str) -> list[TurnEvent]:
        """The events that ``text`` (the next piece of the output) completes."""
        self._pending += text
        return self._drain(final=False)

    def close(self) -> list[TurnEvent]:
        """The events of whatever was held back, at the end of the output."""
        return self._drain(final=True)

    @property
    def open_call(self) -> bool:
        """A call was started and not finished (the output was cut inside it, or its arguments are no object)."""
        return any(not c.done for c in self._calls)

    # ------------------------------------------------------------------ the loop
    def _drain(self, *, final: bool) -> list[TurnEvent]:
        events: list[TurnEvent] = []
        while True:
            before = (len(self._pending), self._in_body, len(self._header))
            events += self._body(final=final) if self._in_body else self._header_step()
            if (len(self._pending), self._in_body, len(self._header)) == before:
                if final:
                    events += self._end_message(closing=True) if self._in_body else self._abandon_header()
                return events

    # ------------------------------------------------------------------ headers
    def _header_step(self) -> list[TurnEvent]:
        # (a header is held whole until its <|message|>: nothing of it is sent as it arrives)
        candidate = self._header + self._pending
        end = _first_marker(candidate, _HEADER_ENDS)
        upto = end[0] if end is not None else len(candidate)
        if not self._plausible(candidate[:upto]):
            return self._as_text(candidate)
        if end is None:
            self._header, self._pending = candidate, ""
            if len(candidate) - self._output_from > _MAX_HEADER:
                return self._as_text(candidate, whole=True)
            return []
        at, marker = end
        self._pending = candidate[at + len(marker) :]
        if marker != _MESSAGE:  # a header that never reached its content
            self._header = candidate[:at]
            events = self._abandon_header()
            self._started = marker == _START
            return events
        return self._open_message(candidate[:at])

    def _plausible(self, header: str) -> bool:
        """Whether ``header`` can still be a Harmony header (else the output is plain text)."""
        rest = header
        if self._started:  # after the role: the prompt's, when it wrote one (the output goes on after it)
            role = _ROLE.match(header, 0, self._output_from or len(header))
            rest = header[role.end() :] if role is not None else header
        rest = rest.lstrip()
        # (a marker's start too: a piece of the output may end inside one)
        return not rest or any(rest.startswith(o) for o in _OPENERS) or any(m.startswith(rest) for m in _PREFIXES)

    def _as_text(self, candidate: str, *, whole: bool = False) -> list[TurnEvent]:
        """Not a header: the output's part of it is answer text, up to its first marker (all of it, markers
        dropped, with ``whole``); what follows is read as the content of an unnamed message."""
        out = candidate[self._output_from :]
        if whole:
            text, self._pending = _without_markers(out), ""
        else:
            first = _first_marker(out, _MARKERS)
            cut = first[0] if first is not None else len(out)
            text, self._pending = out[:cut], out[cut:]
        self._reset_header()
        self._in_body, self._route, self._call = True, "text", None
        return [TextDelta(text)] if text else []

    def _abandon_header(self) -> list[TurnEvent]:
        """A header ended without content: plain words of the output are answer text, structure (a
        header the output opened with ``<|start|>``, markers, a recipient) is dropped."""
        out = self._header[self._output_from :]
        opened_here = self._started and not self._output_from
        self._reset_header()
        if out.strip() and not opened_here and "to=" not in out and _first_marker(out, _MARKERS) is None:
            return [TextDelta(out)]
        return []

    def _reset_header(self) -> None:
        self._header, self._started, self._output_from = "", False, 0

    def _open_message(self, header: str) -> list[TurnEvent]:
        channels = _CHANNEL_NAME.findall(header)
        channel = channels[-1] if channels else None
        recipient = _RECIPIENT.search(header)
        target = recipient.group(1) if recipient is not None else None
        output = (_START if self._started and not self._output_from else "") + header[self._output_from :]
        self._reset_header()
        self._in_body, self._call = True, None
        name = target[len(_FUNCTIONS) :] if target is not None and target.startswith(_FUNCTIONS) else ""
        if name and self._allow_calls:
            self._route = "call"
            self._call = _Call(index=len(self._calls), id=self._new_id(), name=name)
            self._calls.append(self._call)
            return [CallStart(self._call.index, self._call.id, name)]
        self._route = "reasoning" if channel == "analysis" or target is not None else "text"
        if self._route == "reasoning" and self._inline:  # the message as written, in the text
            return [TextDelta(output + _MESSAGE)]
        self._gap = self._route in self._said and not self._inline
        return []

    # ------------------------------------------------------------------ content
    def _body(self, *, final: bool) -> list[TurnEvent]:
        found = _first_marker(self._pending, _MARKERS)
        if found is None:
            keep = 0 if final else _marker_prefix_at_end(self._pending)
            piece = self._pending[: len(self._pending) - keep]
            self._pending = self._pending[len(piece) :]
            return self._content(piece)
        at, marker = found
        events = self._content(self._pending[:at])
        self._pending = self._pending[at + len(marker) :]
        if marker in (_MESSAGE, "<|constrain|>"):  # stray: dropped
            return events
        events += self._end_message(marker=marker)
        if marker == _START:
            self._started = True
        elif marker == _CHANNEL:  # a header without its <|start|>
            self._header = _CHANNEL
        return events

    def _content(self, piece: str) -> list[TurnEvent]:
        if not piece:
            return []
        if self._route == "call" and self._call is not None:
            self._call.raw += piece
            return [CallArguments(self._call.index, piece)]
        kind: Route = "reasoning" if self._route == "reasoning" and not self._inline else "text"
        if self._gap:  # two messages of one kind: a line between them
            piece, self._gap = "\n" + piece, False
        self._said.add(kind)
        return [ReasoningDelta(piece) if kind == "reasoning" else TextDelta(piece)]

    def _end_message(self, *, marker: str | None = None, closing: bool = False) -> list[TurnEvent]:
        """The message ends (at ``marker``, or with the output when ``closing``)."""
        events: list[TurnEvent] = []
        call, route = self._call, self._route
        self._in_body, self._route, self._call, self._gap = False, "text", None, False
        if route == "reasoning" and self._inline and marker in (_END, *_TURN_ENDS):
            events.append(TextDelta(marker or ""))
        if call is None:
            return events
        raw = call.raw.strip()
        try:
            arguments = _as_arguments(json.loads(raw)) if raw else {}
        except ValueError:
            arguments = None
        if arguments is None:
            return events  # not a call's arguments: the call stays open
        if not raw:  # no arguments written: {} (as the parsers read it)
            events.append(CallArguments(call.index, "{}"))
        call.done = True
        tool_call = ToolCall(id=call.id, name=call.name, arguments=arguments)
        self.calls.append(tool_call)
        return [*events, CallEnd(call.index, tool_call)]


@dataclass(frozen=True)
class HarmonySplit:
    """A whole Harmony turn, split (see :func:`split_harmony`).

    Attributes:
        text: The answer (``final`` and recipient-less ``commentary`` messages).
        reasoning: The reasoning (``analysis`` messages), or None when the turn has none.
        calls: The complete tool calls, in order.
        open_call: A call was begun and not completed (the output was cut inside it).
    """

    text: str
    reasoning: str | None
    calls: list[ToolCall] = field(default_factory=list)
    open_call: bool = False


def split_harmony(
    text: str, *, calls: bool = True, turn: HarmonyTurn | None = None, rng: random.Random | None = None
) -> HarmonySplit:
    """Split a complete Harmony turn, with the code that splits a stream (:class:`HarmonySplitter`).

    Example:
        >>> split_harmony("<|channel|>analysis<|message|>Hm.<|end|><|start|>assistant<|channel|>final<|message|>Hi")
        HarmonySplit(text='Hi', reasoning='Hm.', calls=[], open_call=False)
    """
    splitter = HarmonySplitter(calls=calls, turn=turn, rng=rng)
    events = splitter.feed(text) + splitter.close()
    thought = [e.text for e in events if isinstance(e, ReasoningDelta)]
    answer = "".join(e.text for e in events if isinstance(e, TextDelta))
    return HarmonySplit(answer, "".join(thought) if thought else None, list(splitter.calls), splitter.open_call)
