"""Constraints: llguidance Lark grammars that admit only tool calls in a family's format."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from inference4py.generation.constraints.bounds import bounded_schema
from inference4py.tokenization.harmony import HARMONY_MARKERS

from .parsers import _ARGS, _TOOL_CALLS, _family
from .spec import ToolChoice, _functions, validate_tool_choice

TokenToId = Callable[[str], "int | None"]


# Compact JSON as the templates write it (json.dumps separators); no free whitespace,
# so a random model cannot pad forever.
_X_GUIDANCE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def _lark_literal(text: str, token_to_id: TokenToId | None) -> str:
    # A marker that is one token in the vocabulary may come as that token (the model was trained to
    # emit it; a special token cannot be spelled with text at all) or spelled in pieces, as a model
    # exported with another tokenizer file writes "<" "tool" "_call" ">".
    token_id = token_to_id(text) if token_to_id is not None else None
    spelled = json.dumps(text, ensure_ascii=False)
    if token_id is not None:
        return f"(<[{token_id}]> | {spelled})"
    return spelled


def _arguments_schema(function: Mapping[str, Any]) -> dict[str, Any]:
    parameters = function.get("parameters")
    return bounded_schema(dict(parameters)) if parameters else {"type": "object"}  # every value ends


def _call_schema(function: Mapping[str, Any], arguments_key: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"name": {"const": function["name"]}, arguments_key: _arguments_schema(function)},
        "required": ["name", arguments_key],
        "additionalProperties": False,
    }


def _one_of(schemas: list[dict[str, Any]]) -> dict[str, Any]:
    return schemas[0] if len(schemas) == 1 else {"anyOf": schemas}


def _json_rule(schema: dict[str, Any]) -> str:
    return "%json " + json.dumps({**schema, "x-guidance": _X_GUIDANCE}, ensure_ascii=False)


def _starts(*, bare_list: bool = False, fenced: bool = False) -> str:
    """Exclusions of what answer text may not open with: a call written without its marker (a JSON
    object; for Mistral a list of objects; for Hermes an object in a ```json fence) is a call."""
    excluded = " & ~/(?s:\\s*\\{.*)/"
    if bare_list:
        excluded += " & ~/(?s:\\s*\\[\\s*\\{.*)/"
    if fenced:
        excluded += " & ~/(?s:\\s*```(json)?\\s*\\{.*)/"
    return excluded


def _text_rule(markers: Sequence[str], starts: str) -> str:
    """Answer text of an ``auto`` turn: not empty, not opening like a call (``starts``), never holding a marker."""
    excluded = "".join(f" & ~/(?s:.*{re.escape(m)}.*)/" for m in markers)
    return f"TEXT: /(?s:.+)/{starts}{excluded}"


def _lead_rule(marker: str, token_to_id: TokenToId | None, starts: str) -> tuple[str, str]:
    """``(text before the first call, rules)``: answer text may precede the first marker.

    A marker that is one vocabulary token follows the TEXT lexeme as that token; a marker written as
    text ends one lexeme with the text before it (two lexemes would both match its first bytes), and
    that text opens no more freely than an answer does (``starts``).
    """
    m = re.escape(marker)
    opened = f"OPEN: /(?s:.*){m}/ & ~/(?s:.*{m}.+)/{starts}\n"
    token_id = token_to_id(marker) if token_to_id is not None else None
    if token_id is not None:
        return f"(TEXT? <[{token_id}]> | OPEN)", opened
    return "OPEN", opened


_HARMONY_TEXT_MARKERS = (*HARMONY_MARKERS, "<|return|>", "<|call|>")  # (the last two end a turn)


def _harmony_rules(chosen: list[Mapping[str, Any]], token_to_id: TokenToId | None) -> list[str]:
    """A Harmony turn of one call (gpt-oss: ``<|call|>`` ends the turn), after the prompt's ``<|start|>assistant``.

    The model may reason first, on the analysis channel, as it always does; then comes the call, in the
    form OpenAI documents: ``<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}``.
    Where the markers are no single tokens (a Harmony template over another vocabulary) only the call is
    allowed: free text could not then be told from a marker spelled in pieces.
    """
    ids = [token_to_id(m) if token_to_id is not None else None for m in ("<|channel|>", "<|message|>", "<|end|>")]
    channel, message, constrain, end, start = (
        _lark_literal(m, token_to_id) for m in ("<|channel|>", "<|message|>", "<|constrain|>", "<|end|>", "<|start|>")
    )
    calls = [f"call_{k}" for k in range(len(chosen))]
    tokens = all(i is not None for i in ids)
    lines = [
        "start: analysis? call" if tokens else "start: call",
        f"call: {' | '.join(calls)}",
    ]
    if tokens:
        lines += [
            f'analysis: {channel} "analysis" {message} TEXT {end} {start} "assistant"',
            _text_rule(list(_HARMONY_TEXT_MARKERS), ""),
        ]
    for rule, function in zip(calls, chosen):
        header = json.dumps(f"commentary to=functions.{function['name']} ", ensure_ascii=False)
        lines.append(
            f'{rule}: {channel} {header} {constrain} "json" {message} {_json_rule(_arguments_schema(function))}'
        )
    return lines


def tool_call_constraint(
    tools: Sequence[Mapping[str, Any]],
    tool_choice: str | Mapping[str, Any] | ToolChoice | None,
    family: str,
    *,
    parallel_tool_calls: bool = True,
    token_to_id: TokenToId | None = None,
) -> str | None:
    """An llguidance Lark grammar of the turn a tool choice allows, in the family's call format.

    - ``"required"``: one call or more (several only with ``parallel_tool_calls``) of any tool;
    - a named function: calls of that function only;
    - ``"auto"``: answer text, or text then calls: a call is then always well formed, and an answer
      cannot open with a bare JSON object (a call without its marker);
    - ``"none"``: nothing to constrain (None).

    Harmony (gpt-oss) marks a call by its channel and recipient, so ``"auto"`` needs no grammar (None);
    ``"required"`` or a named function allow the analysis, then one call (``<|call|>`` ends the turn).

    The arguments are constrained by the function's ``parameters`` schema (embedded with ``%json``),
    in compact JSON. A little whitespace may follow the last call (models write a newline before
    their end token); after it only the end of the turn or another call is allowed, so a turn of
    calls stops at the end of its calls.

    Args:
        tools: The tools of the request.
        tool_choice: As for :func:`validate_tool_choice`, or a :class:`ToolChoice`.
        family: One of :data:`TOOL_FAMILIES`.
        parallel_tool_calls: Allow several calls (OpenAI's option); Llama 3 always
            makes one.
        token_to_id: The tokenizer's ``token_to_id``: markers such as ``<tool_call>``
            or ``[TOOL_CALLS]`` that are one vocabulary entry are then required as
            that token (``<[id]>``), else as text.

    Returns:
        Lark grammar text (for ``LLMatcher.grammar_from_lark`` / the constraint
        engine's ``grammar=``), or None for ``"none"``.

    Raises:
        InvalidInputError: Bad tools or tool_choice, or an unknown family.
    """
    choice = tool_choice if isinstance(tool_choice, ToolChoice) else validate_tool_choice(tool_choice, tools)
    _family(family)
    if choice.mode == "none":
        return None
    auto = choice.mode == "auto"
    functions = _functions(tools)
    chosen = [functions[choice.function]] if choice.function is not None else list(functions.values())
    lines: list[str]
    if family == "harmony":
        if auto:
            return None
        lines = _harmony_rules(chosen, token_to_id)
        return "\n".join(lines) + "\n"
    if family == "hermes":
        open_, close = _lark_literal("<tool_call>", token_to_id), _lark_literal("</tool_call>", token_to_id)
        starts = _starts(fenced=True)
        lead, rules = _lead_rule("<tool_call>", token_to_id, starts) if auto else (open_, "")
        # under "auto", a call written bare or in a ```json fence (no <tool_call>, as small Qwen
        # models write it) is a call too
        bare = 'TEXT | call_json SEP? | FENCE call_json "\\n```" SEP? | ' if auto else ""
        lines = [
            f"start: {bare}{lead} body (SEP {open_} body)* SEP?"
            if parallel_tool_calls
            else f"start: {bare}{lead} body SEP?",
            f'body: "\\n" call_json "\\n" {close}',
            f"call_json: {_json_rule(_one_of([_call_schema(f, 'arguments') for f in chosen]))}",
        ]
        if auto:
            lines += [_text_rule(["<tool_call>"], starts), rules, "FENCE: /```(json)?\\n/"]
    elif family == "llama3_json":
        lines = [
            f"start: {'TEXT | ' if auto else ''}call_json SEP?",
            f"call_json: {_json_rule(_one_of([_call_schema(f, 'parameters') for f in chosen]))}",
        ]
        if auto:
            lines.append(_text_rule(["<|python_tag|>"], _starts()))
    elif family == "mistral":
        items = _one_of([_call_schema(f, "arguments") for f in chosen])
        array = {"type": "array", "items": items, "minItems": 1, **({} if parallel_tool_calls else {"maxItems": 1})}
        starts = _starts(bare_list=True)
        lead, rules = (
            _lead_rule(_TOOL_CALLS, token_to_id, starts) if auto else (_lark_literal(_TOOL_CALLS, token_to_id), "")
        )
        lines = [f'start: {"TEXT | " if auto else ""}{lead} " "? calls SEP?', f"calls: {_json_rule(array)}"]
        if auto:
            lines += [_text_rule([_TOOL_CALLS], starts), rules]
    else:  # mistral_args
        marker, args = _lark_literal(_TOOL_CALLS, token_to_id), _lark_literal(_ARGS, token_to_id)
        starts = _starts()
        lead, rules = _lead_rule(_TOOL_CALLS, token_to_id, starts) if auto else (marker, "")
        alternatives = [f"call_{k}" for k in range(len(chosen))]
        lines = [
            f"start: {'TEXT | ' if auto else ''}{lead} call_body ({marker} call_body)* SEP?"
            if parallel_tool_calls
            else f"start: {'TEXT | ' if auto else ''}{lead} call_body SEP?",
            f"call_body: {' | '.join(alternatives)}",
        ]
        for rule, function in zip(alternatives, chosen):
            name = json.dumps(function["name"], ensure_ascii=False)
            lines.append(f"{rule}: {name} {args} {_json_rule(_arguments_schema(function))}")
        if auto:
            lines += [_text_rule([_TOOL_CALLS], starts), rules]
    lines.append("SEP: /[ \\t\\r\\n]{1,3}/")
    return "\n".join(line for line in lines if line) + "\n"
