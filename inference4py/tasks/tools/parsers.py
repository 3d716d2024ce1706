"""Templates and families: whether a chat template takes tools, its tool-call family, and the parser per family."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ...errors import InvalidInputError
from .calls import ToolCall, _call_from, _mistral_id, _openai_id


@lru_cache(maxsize=16)
def template_supports_tools(template: str) -> bool:
    """Whether a chat template reads the ``tools`` variable (a cheap lexical check).

    The template is only lexed, not compiled: ``tools`` must appear as a name in
    a Jinja expression or statement (text such as ``"<tools>"`` does not count).
    """
    import jinja2

    try:
        tokens = list(jinja2.Environment().lex(template))
    except jinja2.exceptions.TemplateSyntaxError:
        return re.search(r"\{[{%][^}]*\btools\b", template) is not None
    return any(kind == "name" and value == "tools" for _, kind, value in tokens)


@dataclass(frozen=True)
class _Family:
    name: str
    markers: tuple[str, ...]  # all must appear in the template source
    parse: Callable[..., tuple[str, list[ToolCall]]]


def _strip_end_tokens(text: str, tokens: tuple[str, ...]) -> str:
    stripped = text.rstrip()
    for token in tokens:
        if stripped.endswith(token):
            return stripped[: -len(token)]
    return text


_HERMES_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)


def parse_hermes_tool_calls(text: str, *, rng: random.Random | None = None) -> tuple[str, list[ToolCall]]:
    """Parse ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`` blocks (Qwen2.5, Qwen3, Hermes).

    An output that is nothing but one call object, written without its block (bare or in a ```json
    fence), is read as that call.

    Args:
        text: The generated text (special tokens kept or not: ``<tool_call>`` is plain text
            in these vocabularies).
        rng: Makes the call ids reproducible (tests); None draws them from :mod:`secrets`.

    Returns:
        ``(content, calls)``: the text without the parsed blocks (stripped when any
        was found), and the calls in order.  A block that is not a valid call stays
        in the content.
    """
    calls: list[ToolCall] = []
    kept: list[str] = []
    last = 0
    for match in _HERMES_BLOCK.finditer(text):
        try:
            obj = json.loads(match.group(1))
        except ValueError:
            continue
        call = _call_from(obj, lambda: _openai_id(rng))
        if call is None:
            continue
        calls.append(call)
        kept.append(text[last : match.start()])
        last = match.end()
    if not calls:
        return _bare_call(text, rng)
    kept.append(text[last:])
    return "".join(kept).strip(), calls


_FENCE = re.compile(r"\s*```(?:json)?[ \t]*\n(.*?)\n?```\s*\Z", re.DOTALL)


def _bare_call(text: str, rng: random.Random | None) -> tuple[str, list[ToolCall]]:
    # a whole output that is one call object without its <tool_call> block, bare or in a ```json
    # fence (an "auto" turn allows both: small Qwen models write them)
    fenced = _FENCE.match(text)
    body = fenced.group(1) if fenced else text
    values = _json_values(body, 0, "\x00") if body.lstrip().startswith("{") else None
    call = _call_from(values[0], lambda: _openai_id(rng)) if values is not None and len(values) == 1 else None
    return ("", [call]) if call is not None else (text, [])


_DECODER = json.JSONDecoder()


def _json_values(text: str, start: int, separator: str) -> list[Any] | None:
    # JSON values from text[start:] to the end, joined by `separator` and whitespace; None otherwise.
    values = []
    i = start
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        try:
            value, i = _DECODER.raw_decode(text, i)
        except ValueError:
            return None
        values.append(value)
        while i < len(text) and text[i].isspace():
            i += 1
        if i == len(text):
            return values
        if not text.startswith(separator, i):
            return None
        i += len(separator)


_PYTHON_TAG = "<|python_tag|>"
_LINE_OBJECT = re.compile(r"(?:^|(?<=\n))[ \t]*\{")


def parse_llama3_tool_calls(text: str, *, rng: random.Random | None = None) -> tuple[str, list[ToolCall]]:
    """Parse Llama 3.x JSON calls: ``{"name": ..., "parameters": {...}}`` (several joined by ``;``).

    The calls must end the text; they start after ``<|python_tag|>`` when the text has
    one, else at a ``{`` that begins the text or a line.  A trailing ``<|eom_id|>`` or
    ``<|eot_id|>`` is ignored.

    Args:
        text: The generated text.
        rng: Makes the call ids reproducible (tests); None draws them from :mod:`secrets`.

    Returns:
        ``(content, calls)``: the text before the calls (stripped) and the calls;
        ``(text, [])`` when the text does not end in valid calls.
    """
    body = _strip_end_tokens(text, ("<|eom_id|>", "<|eot_id|>"))
    tag = body.find(_PYTHON_TAG)
    # after the tag, else at every "{" that opens the text or a line
    starts = [tag + len(_PYTHON_TAG)] if tag >= 0 else [m.start() for m in _LINE_OBJECT.finditer(body)]
    for start in starts:
        values = _json_values(body, start, ";")
        if not values:
            continue
        calls = [_call_from(v, lambda: _openai_id(rng)) for v in values]
        if all(c is not None for c in calls):
            content_end = tag if tag >= 0 else start
            return body[:content_end].strip(), [c for c in calls if c is not None]
    return text, []


_TOOL_CALLS = "[TOOL_CALLS]"
_ARGS = "[ARGS]"


def parse_mistral_tool_calls(text: str, *, rng: random.Random | None = None) -> tuple[str, list[ToolCall]]:
    """Parse Mistral calls: ``[TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]`` or ``[TOOL_CALLS]name[ARGS]{...}``.

    ``[TOOL_CALLS]`` is a control token: decode with special tokens kept.  When it was
    skipped, a text that starts with ``[{"name"`` is still read as the list form.

    Args:
        text: The generated text.
        rng: Makes the call ids reproducible (tests); None draws them from :mod:`secrets`.

    Returns:
        ``(content, calls)``: the text before ``[TOOL_CALLS]`` (stripped) and the
        calls, with 9-character ids (Mistral's templates require them);
        ``(text, [])`` when what follows the marker is not a valid list of calls.
    """
    body = _strip_end_tokens(text, ("</s>",))
    marker = body.find(_TOOL_CALLS)
    if marker < 0:
        stripped = body.lstrip()
        if not stripped.startswith('[{"name"'):
            return text, []
        marker, after = len(body) - len(stripped), len(body) - len(stripped)
    else:
        after = marker + len(_TOOL_CALLS)
    content = body[:marker].strip()
    tail = body[after:]

    def new_id() -> str:
        return _mistral_id(rng)

    if _ARGS in tail:  # [TOOL_CALLS]name[ARGS]{...}[TOOL_CALLS]name[ARGS]{...}
        calls = []
        for segment in tail.split(_TOOL_CALLS):
            name, sep, arguments = segment.partition(_ARGS)
            values = _json_values(arguments, 0, ",") if sep else None
            call = _call_from({"name": name.strip(), "arguments": values[0]}, new_id) if values else None
            if call is None or len(values or []) != 1:
                return text, []
            calls.append(call)
        return content, calls
    values = _json_values(tail, 0, ",")
    if values is None or len(values) != 1:
        return text, []
    items = values[0] if isinstance(values[0], list) else [values[0]]
    parsed = [_call_from(item, new_id) for item in items]
    if not parsed or any(c is None for c in parsed):
        return text, []
    return content, [c for c in parsed if c is not None]


def parse_harmony_tool_calls(text: str, *, rng: random.Random | None = None) -> tuple[str, list[ToolCall]]:
    """Parse OpenAI's Harmony turn (gpt-oss): messages to ``functions.NAME`` are calls of ``NAME``.

    ``<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}``
    (the recipient may also stand before the channel, beside the role). The markers are special tokens:
    the library's generated text keeps them (see :mod:`inference4py.tasks.harmony`, which this runs).

    Args:
        text: The generated text, its markers kept.
        rng: Makes the call ids reproducible (tests); None draws them from :mod:`secrets`.

    Returns:
        ``(content, calls)``: the answer (``final`` and recipient-less ``commentary`` messages; the
        ``analysis`` reasoning and the markers are left out) and the complete calls.
    """
    from inference4py.tasks.harmony import split_harmony

    split = split_harmony(text, rng=rng)
    return split.text, split.calls


# Checked in order: the first family whose markers all appear in the template wins.
_FAMILIES: tuple[_Family, ...] = (
    _Family("harmony", ("<|channel|>", "<|message|>"), parse_harmony_tool_calls),
    _Family("mistral_args", (_TOOL_CALLS, _ARGS), parse_mistral_tool_calls),
    _Family("mistral", (_TOOL_CALLS,), parse_mistral_tool_calls),
    _Family("hermes", ("<tool_call>",), parse_hermes_tool_calls),
    _Family("llama3_json", ("<|start_header_id|>", '"parameters"'), parse_llama3_tool_calls),
)
TOOL_FAMILIES: tuple[str, ...] = tuple(f.name for f in _FAMILIES)
"""The tool-call formats inference4py parses, by family name."""

_BY_NAME = {f.name: f for f in _FAMILIES}


def detect_tool_family(template: str) -> str | None:
    """The tool-call family of a chat template, by its markers; None when none matches.

    Example:
        >>> detect_tool_family("{% for tool in tools %}...<tool_call>...{% endfor %}")
        'hermes'
    """
    for family in _FAMILIES:
        if all(marker in template for marker in family.markers):
            return family.name
    return None


def _family(family: str) -> _Family:
    try:
        return _BY_NAME[family]
    except KeyError:
        raise InvalidInputError(
            f"Unknown tool-call family {family!r}: use one of {', '.join(TOOL_FAMILIES)}."
        ) from None


def parse_tool_calls(text: str, family: str, *, rng: random.Random | None = None) -> tuple[str, list[ToolCall]]:
    """Parse the tool calls of one family out of generated text.

    Args:
        text: The generated text.
        family: One of :data:`TOOL_FAMILIES` (see :func:`detect_tool_family`).
        rng: Makes the call ids reproducible (tests); None draws them from :mod:`secrets`.

    Returns:
        ``(content, calls)``; ``(text, [])`` when the text holds no valid call.

    Raises:
        InvalidInputError: ``family`` is unknown.
    """
    return _family(family).parse(text, rng=rng)
