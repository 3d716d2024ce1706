"""Constraints: llguidance Lark grammars that admit only tool calls in a family's format."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

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
    return dict(parameters) if parameters else {"type": "object"}


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


def tool_call_constraint(
    tools: Sequence[Mapping[str, Any]],
    tool_choice: str | Mapping[str, Any] | ToolChoice | None,
    family: str,
    *,
    parallel_tool_calls: bool = True,
    token_to_id: TokenToId | None = None,
) -> str | None:
    """An llguidance Lark grammar that admits only tool calls in the family's format.

    With ``tool_choice="required"`` any of the tools may be called; with a named
    function only that one.  The arguments are constrained by the function's
    ``parameters`` schema (embedded with ``%json``), in compact JSON.

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
        engine's ``grammar=``), or None for ``"none"`` and ``"auto"``: nothing to
        constrain.

    Raises:
        InvalidInputError: Bad tools or tool_choice, or an unknown family.
    """
    choice = tool_choice if isinstance(tool_choice, ToolChoice) else validate_tool_choice(tool_choice, tools)
    _family(family)
    if choice.mode != "required":
        return None
    functions = _functions(tools)
    chosen = [functions[choice.function]] if choice.function is not None else list(functions.values())
    lines: list[str]
    if family == "hermes":
        call = (
            f'{_lark_literal("<tool_call>", token_to_id)} "\\n" call_json "\\n" '
            f"{_lark_literal('</tool_call>', token_to_id)}"
        )
        lines = [
            'start: call ("\\n" call)*' if parallel_tool_calls else "start: call",
            f"call: {call}",
            f"call_json: {_json_rule(_one_of([_call_schema(f, 'arguments') for f in chosen]))}",
        ]
    elif family == "llama3_json":
        lines = [
            "start: call_json",
            f"call_json: {_json_rule(_one_of([_call_schema(f, 'parameters') for f in chosen]))}",
        ]
    elif family == "mistral":
        items = _one_of([_call_schema(f, "arguments") for f in chosen])
        array = {"type": "array", "items": items, "minItems": 1, **({} if parallel_tool_calls else {"maxItems": 1})}
        lines = [f'start: {_lark_literal(_TOOL_CALLS, token_to_id)} " "? calls', f"calls: {_json_rule(array)}"]
    else:  # mistral_args
        marker, args = _lark_literal(_TOOL_CALLS, token_to_id), _lark_literal(_ARGS, token_to_id)
        alternatives = [f"call_{k}" for k in range(len(chosen))]
        lines = ["start: call+" if parallel_tool_calls else "start: call", f"call: {' | '.join(alternatives)}"]
        for rule, function in zip(alternatives, chosen):
            name = json.dumps(function["name"], ensure_ascii=False)
            lines.append(f"{rule}: {marker} {name} {args} {_json_rule(_arguments_schema(function))}")
    return "\n".join(lines) + "\n"
