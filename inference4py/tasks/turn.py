"""An assistant turn as it streams: answer text, reasoning, and tool calls, told apart token by token.

Every API the server speaks streams a turn in its own shape (OpenAI's ``delta.tool_calls``,
Anthropic's ``content_block_*`` events, the Responses API's output items), but they all need the
same thing from the generated text: which characters are the answer, which are the model's
reasoning (a ``<think>`` block), and where a tool call starts, what it is named and how its
arguments grow. :class:`TurnSplitter` says so, once, for all of them.

Feed it the text of each chunk; it returns :data:`TurnEvent` objects:

- :class:`TextDelta`: answer text (never a piece of a call marker or of a call);
- :class:`ReasoningDelta`: text inside the reasoning block;
- :class:`CallStart`: a call's index, id and function name, as soon as the name is complete;
- :class:`CallArguments`: the next piece of its arguments, as the model wrote them (JSON text);
- :class:`CallEnd`: the call complete, as a :class:`ToolCall`.

Calls are recognised in the formats :mod:`inference4py.tasks.tools` parses (Hermes/Qwen
``<tool_call>``, Llama 3.x JSON, Mistral ``[TOOL_CALLS]``). Text is held back only while it may
still be the start of a marker or a call, so the answer streams as it is written. A turn in OpenAI's
Harmony format (gpt-oss: channels for reasoning, answer and calls) is split by
:class:`~inference4py.tasks.harmony.HarmonySplitter`, which this class delegates to.

Example:
    >>> from inference4py.tasks.turn import TurnSplitter
    >>> splitter = TurnSplitter("hermes")
    >>> events = splitter.feed('<tool_call>\\n{"name": "f", "arguments": {"x": 1}}\\n</tool_call>')
    >>> [type(e).__name__ for e in events + splitter.close()]
    ['CallStart', 'CallArguments', 'CallEnd']
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass

from inference4py.generation.result import ToolCall
from inference4py.tasks.harmony import HarmonySplitter, HarmonyTurn
from inference4py.tasks.tools.calls import _as_arguments, _mistral_id, _openai_id
from inference4py.tasks.turn_events import CallArguments, CallEnd, CallStart, ReasoningDelta, TextDelta, TurnEvent

__all__ = [
    "CallArguments",
    "CallEnd",
    "CallStart",
    "ReasoningDelta",
    "TextDelta",
    "TurnEvent",
    "TurnSplitter",
]


_HERMES_OPEN, _HERMES_CLOSE = "<tool_call>", "</tool_call>"
_PYTHON_TAG = "<|python_tag|>"
_TOOL_CALLS, _ARGS = "[TOOL_CALLS]", "[ARGS]"
_WS = " \t\r\n"
_END_TOKENS = ("<|eom_id|>", "<|eot_id|>", "</s>", "```")  # (a fenced call's closing fence)


# ------------------------------------------------------------------------------- JSON scanning
def _value_end(s: str, i: int) -> int | None:
    """Where the JSON value starting at ``s[i]`` ends (exclusive); None while it is incomplete.

    Only the extent is found (strings, escapes, nesting); validity is json.loads's job once it ends.
    """
    if i >= len(s):
        return None
    if s[i] == '"':
        j = i + 1
        while j < len(s):
            if s[j] == "\\":
                j += 2
                continue
            if s[j] == '"':
                return j + 1
            j += 1
        return None
    if s[i] in "{[":
        depth, j, in_string = 0, i, False
        while j < len(s):
            c = s[j]
            if in_string:
                if c == "\\":
                    j += 1
                elif c == '"':
                    in_string = False
            elif c == '"':
                in_string = True
            elif c in "{[":
                depth += 1
            elif c in "}]":
                depth -= 1
                if depth == 0:
                    return j + 1
            j += 1
        return None
    match = re.compile(r"[^,}\]\s]*").match(s, i)  # a number, true, false or null
    assert match is not None  # the pattern matches the empty string
    return match.end() if match.end() < len(s) else None


def _skip(s: str, i: int) -> int:
    while i < len(s) and s[i] in _WS:
        i += 1
    return i


@dataclass
class _ObjectScan:
    """How far a call object ``{"name": ..., "arguments": {...}}`` has been written."""

    name: str | None = None
    args_start: int | None = None  # index of the arguments value
    args_end: int | None = None  # its end, once complete
    end: int | None = None  # the object's end, once complete
    broken: bool = False  # not a call object: give up on it


def _scan_call_object(s: str, i: int) -> _ObjectScan:
    """Scan the call object that starts at ``s[i]`` (``{``) as far as it is written."""
    scan = _ObjectScan()
    if i >= len(s):
        return scan
    if s[i] != "{":
        scan.broken = True
        return scan
    j = i + 1
    while True:
        j = _skip(s, j)
        if j >= len(s):
            return scan
        if s[j] == "}":
            scan.end = j + 1
            return scan
        key_end = _value_end(s, j)
        if s[j] != '"':
            scan.broken = True
            return scan
        if key_end is None:
            return scan
        key = json.loads(s[j:key_end])
        j = _skip(s, key_end)
        if j >= len(s):
            return scan
        if s[j] != ":":
            scan.broken = True
            return scan
        j = _skip(s, j + 1)
        if j >= len(s):
            return scan
        if key in ("arguments", "parameters"):
            scan.args_start = j
        value_end = _value_end(s, j)
        if value_end is None:
            return scan
        if key == "name":
            try:
                name = json.loads(s[j:value_end])
            except ValueError:
                name = None
            if not isinstance(name, str) or not name:
                scan.broken = True
                return scan
            scan.name = name
        elif key in ("arguments", "parameters"):
            scan.args_end = value_end
        j = _skip(s, value_end)
        if j >= len(s):
            return scan
        if s[j] == ",":
            j += 1
        elif s[j] != "}":
            scan.broken = True
            return scan


def _marker_prefix_at_end(text: str, marker: str) -> int:
    """The length of the longest end of ``text`` that begins ``marker`` (held back: it may become the marker)."""
    for k in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-k:]):
            return k
    return 0


_FENCE = re.compile(r"```(?:json)?[ \t]*\n[ \t\n]*")
_FENCES = ("```json\n", "```\n")


def _bare_start(s: str, *, final: bool) -> tuple[int, bool] | None:
    """Where a Hermes call written without its block starts (bare, or in a ```json fence), and if it
    surely is one: ``(where its object starts, decided)``; None when the output is no such call."""
    body = s.lstrip(_WS)
    offset = len(s) - len(body)
    fence = _FENCE.match(body)
    if fence is None and body and not final and any(f.startswith(body) and f != body for f in _FENCES):
        return 0, False  # may be a fence's start
    after = offset + (fence.end() if fence else 0)
    rest = s[after:]
    if not rest:
        return (0, False) if not final and (fence is not None or not body) else None
    if rest[0] != "{":
        return None
    head = re.sub(r"\s+", "", rest[:16])
    if head.startswith('{"name"'):
        return after, True
    if '{"name"'.startswith(head) and not final:
        return 0, False
    return None


# ------------------------------------------------------------------------------- the splitter
@dataclass
class _Call:
    index: int
    start: int  # where its object (or, for [ARGS], its arguments) starts in the call buffer
    id: str | None = None
    name: str | None = None
    sent: int = 0  # characters of the raw arguments already sent
    done: bool = False


class TurnSplitter:
    """Splits generated text into answer, reasoning and tool-call events as it arrives.

    Args:
        family: The tool-call format (one of :data:`inference4py.tasks.tools.TOOL_FAMILIES`), or None
            when the turn may not call tools (everything outside reasoning is answer text).
        reasoning: ``(open, close)`` markers of a reasoning block (``("<think>", "</think>")``), or None.
        in_reasoning: The prompt already opened the reasoning block (the template ends with ``<think>``).
        harmony: The turn is written in OpenAI's Harmony format (gpt-oss), opened by the prompt as this
            says: :class:`~inference4py.tasks.harmony.HarmonySplitter` splits it, ``reasoning`` is not
            used, and ``family`` only says whether calls are allowed (not None). None: the formats above.
        rng: Makes call ids reproducible (tests); None draws them from :mod:`secrets`.
    """

    def __init__(
        self,
        family: str | None,
        *,
        reasoning: tuple[str, str] | None = None,
        in_reasoning: bool = False,
        harmony: HarmonyTurn | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.family = family
        self._harmony = (
            HarmonySplitter(calls=family is not None, turn=harmony, rng=rng) if harmony is not None else None
        )
        self._reasoning = reasoning
        self._thinking = in_reasoning and reasoning is not None
        self._thought = self._thinking  # a block was opened: a second one is answer text
        self._new_id: Callable[[], str] = (
            (lambda: _mistral_id(rng)) if family in ("mistral", "mistral_args") else (lambda: _openai_id(rng))
        )
        self._pending = ""  # text not yet told apart
        self._at_line_start = True
        self._calls: list[_Call] = []
        self._buf: str | None = None  # the call region's text, once a call marker was seen
        self._pos = 0  # how far the call region has been consumed
        self._answered = False
        self._marker = ""
        self._region_calls = 0
        self._after_call = False
        self._started = False  # answer text was sent
        self._bare = False  # the calls were written without their marker
        self._list_closed = False  # Mistral's list of calls was closed
        self.calls: list[ToolCall] = self._harmony.calls if self._harmony is not None else []

    # ------------------------------------------------------------------ public
    def feed(self, text: str) -> list[TurnEvent]:
        """The events that ``text`` (the next piece of the output) completes."""
        if self._harmony is not None:
            return self._harmony.feed(text)
        self._pending += text
        return self._drain(final=False)

    def close(self) -> list[TurnEvent]:
        """The events of whatever was held back, at the end of the output."""
        if self._harmony is not None:
            return self._harmony.close()
        return self._drain(final=True)

    @property
    def open_call(self) -> bool:
        """A call was started and not finished (the output was cut inside it)."""
        if self._harmony is not None:
            return self._harmony.open_call
        return any(not c.done for c in self._calls)

    # ------------------------------------------------------------------ text and reasoning
    def _drain(self, *, final: bool) -> list[TurnEvent]:
        events: list[TurnEvent] = []
        while True:
            before = (len(self._pending), self._thinking, self._buf is None, self.family)
            if self._buf is not None:
                self._buf += self._pending
                self._pending = ""
                events.extend(self._scan_calls(final=final))
                if final and self._buf is not None and not self._calls_started():
                    events.extend(self._give_up())  # a marker with no call after it is text
                if self._buf is not None:
                    return events
                continue  # not a call after all: the held text is answer text
            if self._thinking:
                events.extend(self._reasoning_text(final=final))
            else:
                events.extend(self._answer_text(final=final))
            if (len(self._pending), self._thinking, self._buf is None, self.family) == before:
                return events

    def _reasoning_text(self, *, final: bool) -> list[TurnEvent]:
        assert self._reasoning is not None
        close = self._reasoning[1]
        at = self._pending.find(close)
        if at >= 0:
            text, self._pending = self._pending[:at], self._pending[at + len(close) :].lstrip(_WS)
            self._thinking = False
            return [ReasoningDelta(text)] if text else []
        keep = 0 if final else _marker_prefix_at_end(self._pending, close)
        text = self._pending[: len(self._pending) - keep]
        self._pending = self._pending[len(text) :]
        return [ReasoningDelta(text)] if text else []

    def _markers(self) -> list[str]:
        markers = []
        if self._reasoning is not None and not self._thought and not self._answered:
            markers.append(self._reasoning[0])
        if self.family == "hermes":
            markers.append(_HERMES_OPEN)
        elif self.family in ("mistral", "mistral_args"):
            markers.append(_TOOL_CALLS)
        elif self.family == "llama3_json":
            markers.append(_PYTHON_TAG)
        return markers

    def _answer_text(self, *, final: bool) -> list[TurnEvent]:
        s = self._pending
        found = [(s.find(m), m) for m in self._markers()]
        found = [(at, m) for at, m in found if at >= 0]
        cut = min(at for at, _ in found) if found else len(s)
        line_call = None
        if self.family == "llama3_json":
            line_call = self._line_object(s[:cut], final=final)
        elif self.family == "hermes" and not self._started and (cut or not found):  # bare or fenced, no block
            bare = _bare_start(s[:cut], final=final)
            if bare is not None:
                at, decided = bare
                if not decided:
                    return []  # may still become a call: hold it all (nothing was said before it)
                self._bare = True
                return self._enter_calls("", s[at:], "")
        if line_call is not None:
            at, decided = line_call
            if not decided:  # may still become a call: hold from there
                if not s[:at].strip():
                    return []  # (whitespace before it too: it is no answer if a call follows)
                return self._emit_text(s[:at], s[at:])
            self._bare = True
            return self._enter_calls(s[:at], s[at:], "")
        if found:
            at, marker = min(found)
            if self._reasoning is not None and marker == self._reasoning[0]:
                events = self._emit_text(s[:at], s[at + len(marker) :])
                self._thinking = self._thought = True
                return events
            return self._enter_calls(s[:at], s[at + len(marker) :], marker)
        keep = 0 if final else max((_marker_prefix_at_end(s, m) for m in self._markers()), default=0)
        if not final and not self._started and not s.strip():
            keep = len(s)  # leading whitespace: the turn may still open with a call
        return self._emit_text(s[: len(s) - keep], s[len(s) - keep :])

    def _emit_text(self, text: str, rest: str) -> list[TurnEvent]:
        self._pending = rest
        if not self._started and self._thought:
            text = text.lstrip(_WS)  # the answer after the reasoning block starts at its first word
        if not text:
            return []
        self._started = True
        if text.strip():
            self._answered = True
        self._at_line_start = text.endswith("\n")
        return [TextDelta(text)]

    def _line_object(self, s: str, *, final: bool) -> tuple[int, bool] | None:
        """A Llama 3 call may start at a ``{`` that opens the output or a line: ``(where, is a call)``."""
        for match in re.finditer(r"(?:^|(?<=\n))[ \t]*\{", s):
            if match.start() == 0 and not self._at_line_start:
                continue
            at = match.end() - 1
            head = re.sub(r"\s+", "", s[at : at + 16])
            if head.startswith('{"name"'):
                return at, True
            if '{"name"'.startswith(head) and not final:
                return at, False
        return None

    # ------------------------------------------------------------------ calls
    def _enter_calls(self, text: str, rest: str, marker: str) -> list[TurnEvent]:
        events = self._emit_text(text, "") if text.strip() else []  # a newline before the calls is no answer
        self._pending = ""
        self._buf, self._pos, self._marker = rest, 0, marker
        self._region_calls = len(self.calls)
        if marker == _HERMES_OPEN:
            self._pos = -1  # inside a <tool_call> block
        return events + self._scan_calls(final=False)

    def _scan_calls(self, *, final: bool) -> list[TurnEvent]:
        if self.family == "hermes" and not self._bare:
            return self._scan_hermes(final=final)
        if self.family == "mistral_args" or (self.family == "mistral" and self._args_form()):
            return self._scan_mistral_args(final=final)
        return self._scan_sequence(final=final)

    def _args_form(self) -> bool:
        head = (self._buf or "").lstrip(_WS)
        return bool(head) and not head.startswith(("[", "{"))

    def _call_events(self, call: _Call, scan: _ObjectScan) -> list[TurnEvent]:
        """Events for the progress of one call object; ``scan`` is its scan over the buffer."""
        buf = self._buf or ""
        events: list[TurnEvent] = []
        if call.id is None and scan.name is not None:
            call.id, call.name = self._new_id(), scan.name
            events.append(CallStart(call.index, call.id, scan.name))
        if call.id is None or scan.args_start is None:
            return events
        if buf[scan.args_start] == '"':  # arguments written as a JSON string: send the object it holds
            if scan.args_end is not None and call.sent == 0:
                value = _as_arguments(json.loads(buf[scan.args_start : scan.args_end]))
                if value is not None:
                    text = json.dumps(value, ensure_ascii=False)
                    call.sent = len(text)
                    events.append(CallArguments(call.index, text))
            return events
        upto = scan.args_end if scan.args_end is not None else len(buf)
        piece = buf[scan.args_start + call.sent : upto]
        if piece:
            call.sent += len(piece)
            events.append(CallArguments(call.index, piece))
        return events

    def _finish_call(self, call: _Call, raw: str) -> list[TurnEvent]:
        try:
            obj = json.loads(raw)
        except ValueError:
            return []
        name = obj.get("name") if isinstance(obj, dict) else None
        arguments = _as_arguments(obj.get("arguments", obj.get("parameters"))) if isinstance(obj, dict) else None
        if call.id is None or not isinstance(name, str) or arguments is None:
            return []
        events: list[TurnEvent] = []
        if call.sent == 0:  # no arguments written: {} (as the parsers read it)
            events.append(CallArguments(call.index, "{}"))
            call.sent = 2
        call.done = True
        tool_call = ToolCall(id=call.id, name=name, arguments=arguments)
        self.calls.append(tool_call)
        return [*events, CallEnd(call.index, tool_call)]

    def _current(self, start: int) -> _Call:
        if not self._calls or self._calls[-1].done:
            self._calls.append(_Call(index=len(self._calls), start=start))
        return self._calls[-1]

    def _object_step(self, start: int) -> tuple[_Call, int | None, list[TurnEvent]]:
        """The call object at ``start`` scanned as far as written: ``(call, where the object ends once it
        is complete, else None, events)``; an object that is no call gives the region up."""
        call = self._current(start)
        scan = _scan_call_object(self._buf or "", call.start)
        if scan.broken:
            return call, None, self._give_up()
        return call, scan.end, self._call_events(call, scan)

    def _scan_hermes(self, *, final: bool) -> list[TurnEvent]:
        buf = self._buf or ""
        events: list[TurnEvent] = []
        while True:
            if self._pos < 0:  # inside a block, after <tool_call>
                start = _skip(buf, 0)
                if start >= len(buf):
                    return events
                call, end, step = self._object_step(start)
                events += step
                if end is None:
                    return events
                close_at = _skip(buf, end)
                if not buf.startswith(_HERMES_CLOSE, close_at):
                    if len(buf) - close_at >= len(_HERMES_CLOSE) or final:
                        if final:  # an unclosed last block is still a call, as the parser reads it
                            events += self._finish_call(call, buf[call.start : end])
                            self._buf, self._pos = "", 0
                            return events
                        return events + self._give_up()
                    return events
                events += self._finish_call(call, buf[call.start : end])
                if not call.done:
                    return events + self._give_up()
                buf = buf[close_at + len(_HERMES_CLOSE) :]
                self._buf, self._pos = buf, 0
            # between blocks: text (kept as answer text) or the next block
            at = buf.find(_HERMES_OPEN)
            if at < 0:
                keep = 0 if final else _marker_prefix_at_end(buf, _HERMES_OPEN)
                text = buf[: len(buf) - keep]
                if text.strip():
                    events.append(TextDelta(text))
                self._buf = buf[len(buf) - keep :]
                return events
            if buf[:at].strip():
                events.append(TextDelta(buf[:at]))
            buf = buf[at + len(_HERMES_OPEN) :]
            self._buf, self._pos, self._region_calls = buf, -1, len(self.calls)

    def _scan_sequence(self, *, final: bool) -> list[TurnEvent]:
        """Llama 3 (``{...}; {...}``) and Mistral's list (``[{...}, {...}]``) forms."""
        buf = self._buf or ""
        events: list[TurnEvent] = []
        if self._pos == 0 and self.family == "mistral":
            first = _skip(buf, 0)
            if first >= len(buf):
                return events
            self._pos = first + 1 if buf[first] == "[" else first
        separator = {"llama3_json": ";", "mistral": ","}.get(self.family or "", "")
        while True:
            j = _skip(buf, self._pos)
            if j >= len(buf):
                return events
            if self._after_call:  # a separator, the list's end, an end token, or no more calls
                if separator and buf[j] == separator and not self._list_closed:
                    self._pos, self._after_call = j + 1, False
                    continue
                if self.family == "mistral" and buf[j] == "]" and not self._list_closed:
                    self._pos, self._list_closed = j + 1, True
                    continue
                tail = buf[j:]
                if tail in _END_TOKENS:  # what ends a turn after its calls is no answer text
                    self._pos = len(buf)
                    return events
                if not final and any(t.startswith(tail) for t in _END_TOKENS):
                    return events  # may be an end token
                self._pos = j
                return events + self._give_up()
            call, end, step = self._object_step(j)
            events += step
            if end is None:
                return events
            events += self._finish_call(call, buf[call.start : end])
            if not call.done:
                return events + self._give_up()
            self._pos, self._after_call = end, True

    def _scan_mistral_args(self, *, final: bool) -> list[TurnEvent]:
        """``name[ARGS]{...}`` calls, each after ``[TOOL_CALLS]``."""
        buf = self._buf or ""
        events: list[TurnEvent] = []
        while True:
            args = buf.find(_ARGS, self._pos)
            if args < 0:
                return events
            name = buf[self._pos : args].strip()
            if name.startswith(_TOOL_CALLS):  # the marker arrived after the previous call was scanned
                name = name[len(_TOOL_CALLS) :].strip()
            call = self._current(args + len(_ARGS))
            if call.id is None:
                call.id, call.name = self._new_id(), name
                events.append(CallStart(call.index, call.id, name))
            start = _skip(buf, call.start)
            end = _value_end(buf, start) if start < len(buf) else None
            upto = end if end is not None else len(buf)
            piece = buf[start + call.sent : upto] if start < len(buf) else ""
            if piece:
                call.sent += len(piece)
                events.append(CallArguments(call.index, piece))
            if end is None:
                return events
            events += self._finish_call(call, json.dumps({"name": name, "arguments": json.loads(buf[start:end])}))
            nxt = buf.find(_TOOL_CALLS, end)
            if nxt < 0:
                self._pos = end
                return events
            self._pos = nxt + len(_TOOL_CALLS)

    def _calls_started(self) -> bool:
        """A call of the current region was started (its name sent) or finished."""
        return len(self.calls) > self._region_calls or any(c.id is not None for c in self._calls if not c.done)

    def _give_up(self) -> list[TurnEvent]:
        """What follows is not a call: the rest is answer text, as the final parse leaves it."""
        buf = self._buf or ""
        broken = self._calls.pop() if self._calls and not self._calls[-1].done else None
        start = broken.start if broken is not None else self._pos
        if len(self.calls) == self._region_calls:  # nothing of this region was a call: the marker is text too
            rest = self._marker + buf
        else:
            rest = buf[max(start, 0) :]
            if rest.strip() in _END_TOKENS:  # what ends a turn after its calls is no answer text
                rest = ""
        self._buf, self.family = None, None
        self._pending = rest + self._pending
        return []
