"""Constraints: llguidance Lark grammars that admit only tool calls in a family's format."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from inference4py.generation.constraints.bounds import bounded_schema

from .parsers import _ARGS, _TOOL_CALLS, _family
from .spec import ToolChoice, _functions, validate_tool_choice

TokenToId = Callable[[str], "int | None"]


# Compact JSON as the templates write it (json.dumps separators); no free whitespace,
# so a random model cannot pad forever.
_X_GUIDANCE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def _lark_literal(text: str, token_to_id: TokenToId | None) -> str:
    # A marker that is one token in the vocabulary is required as that token (the model
    # was trained to emit it; a special token cannot be spelled with text at all).
    token_id = token_to_id(text) if token_to_id is not None else None
    if token_id is not None:
        return f"<[{token_id}]>"
    return json.dumps(text, ensure_ascii=False)


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


def _text_rule(markers: Sequence[str], *, bare_list: bool = False) -> str:
    """Answer text of an ``auto`` turn: not empty, not opening with a JSON object (or, for Mistral, a
    list of objects: a call written without its marker would be lost as text), never containing a marker."""
    excluded = "".join(f" & ~/(?s:.*{re.escape(m)}.*)/" for m in markers)
    if bare_list:
        excluded += " & ~/(?s:\\s*\\[\\s*\\{.*)/"
    return f"TEXT: /(?s:.+)/ & ~/(?s:\\s*\\{{.*)/{excluded}"


def _lead_rule(marker: str, token_to_id: TokenToId | None) -> tuple[str, str]:
    """``(text before the first call, rules)``: answer text may precede the first marker.

    A marker that is one vocabulary token follows the TEXT lexeme as that token; a marker written as
    text ends one lexeme with the text before it (two lexemes would both match its first bytes).
    """
    literal = _lark_literal(marker, token_to_id)
    if literal.startswith("<["):
        return f"TEXT? {literal}", ""
    m = re.escape(marker)
    return "OPEN", f"OPEN: /(?s:.*){m}/ & ~/(?s:.*{m}.+)/ & ~/(?s:\\s*\\{{.*)/\n"


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
    if family == "hermes":
        open_, close = _lark_literal("<tool_call>", token_to_id), _lark_literal("</tool_call>", token_to_id)
        lead, rules = _lead_rule("<tool_call>", token_to_id) if auto else (open_, "")
        # under "auto", a call written bare (no <tool_call>, as small Qwen models do) is a call too
        lines = [
            f"start: {'TEXT | call_json SEP? | ' if auto else ''}{lead} body (SEP {open_} body)* SEP?"
            if parallel_tool_calls
            else f"start: {'TEXT | call_json SEP? | ' if auto else ''}{lead} body SEP?",
            f'body: "\\n" call_json "\\n" {close}',
            f"call_json: {_json_rule(_one_of([_call_schema(f, 'arguments') for f in chosen]))}",
        ]
        if auto:
            lines += [_text_rule(["<tool_call>"]), rules]
    elif family == "llama3_json":
        lines = [
            f"start: {'TEXT | ' if auto else ''}call_json SEP?",
            f"call_json: {_json_rule(_one_of([_call_schema(f, 'parameters') for f in chosen]))}",
        ]
        if auto:
            lines.append(_text_rule(["<|python_tag|>"]))
    elif family == "mistral":
        items = _one_of([_call_schema(f, "arguments") for f in chosen])
        array = {"type": "array", "items": items, "minItems": 1, **({} if parallel_tool_calls else {"maxItems": 1})}
        lead, rules = _lead_rule(_TOOL_CALLS, token_to_id) if auto else (_lark_literal(_TOOL_CALLS, token_to_id), "")
        lines = [f'start: {"TEXT | " if auto else ""}{lead} " "? calls SEP?', f"calls: {_json_rule(array)}"]
        if auto:
            lines += [_text_rule([_TOOL_CALLS], bare_list=True), rules]
    else:  # mistral_args
        marker, args = _lark_literal(_TOOL_CALLS, token_to_id), _lark_literal(_ARGS, token_to_id)
        lead, rules = _lead_rule(_TOOL_CALLS, token_to_id) if auto else (marker, "")
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
            lines += [_text_rule([_TOOL_CALLS]), rules]
    lines.append("SEP: /[ \\t\\r\\n]{1,3}/")
    return "\n".join(line for line in lines if line) + "\n"
