"""Tools and tool_choice: checking tools in OpenAI form and ``tool_choice`` against them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ...errors import InvalidInputError

ToolChoiceMode = Literal["none", "auto", "required"]


_TOOLS_EXAMPLE = "[{'type': 'function', 'function': {'name': 'get_weather', 'parameters': {'type': 'object', ...}}}]"


def _function_of(tool: Mapping[str, Any], i: int) -> Mapping[str, Any]:
    kind = tool.get("type", "function")
    if kind != "function":
        raise InvalidInputError(
            f"tools[{i}] has type {kind!r}: only function tools are supported; write it as {_TOOLS_EXAMPLE}."
        )
    if "function" not in tool:  # a bare function dict, as transformers accepts
        return tool
    function = tool["function"]
    if not isinstance(function, Mapping):
        raise InvalidInputError(
            f"tools[{i}]['function'] must be a dict with 'name' and 'parameters', got {type(function).__name__}."
        )
    return function


def _functions(tools: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    out: dict[str, Mapping[str, Any]] = {}
    for i, tool in enumerate(tools):
        if not isinstance(tool, Mapping):
            raise InvalidInputError(f"tools[{i}] must be a dict like {_TOOLS_EXAMPLE}, got {type(tool).__name__}.")
        function = _function_of(tool, i)
        name = function.get("name")
        if not isinstance(name, str) or not name.strip():
            raise InvalidInputError(
                f"tools[{i}] has no function name: give it one, e.g. "
                "{'type': 'function', 'function': {'name': 'get_weather', ...}}."
            )
        if name in out:
            raise InvalidInputError(f"tools has two functions named {name!r}: give each function its own name.")
        description = function.get("description")
        if description is not None and not isinstance(description, str):
            raise InvalidInputError(
                f"The description of tool {name!r} must be a string, got {type(description).__name__}."
            )
        parameters = function.get("parameters")
        if parameters is not None:
            if not isinstance(parameters, Mapping):
                raise InvalidInputError(
                    f"The parameters of tool {name!r} must be a JSON schema object like "
                    f"{{'type': 'object', 'properties': {{...}}}}, got {type(parameters).__name__}."
                )
            if parameters.get("type", "object") != "object":
                raise InvalidInputError(
                    f"The parameters of tool {name!r} have type {parameters.get('type')!r}: a function takes "
                    "named arguments, so the schema must be {'type': 'object', 'properties': {...}}; "
                    "wrap a single value in a property."
                )
        out[name] = function
    return out


def validate_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Check tools in OpenAI form (or bare function dicts, as transformers accepts).

    Args:
        tools: ``[{"type": "function", "function": {"name": ..., "description": ...,
            "parameters": {JSON schema of an object}}}, ...]``; a bare
            ``{"name": ..., "parameters": ...}`` is accepted too.

    Returns:
        Shallow copies of the tools, unchanged otherwise: this is what the chat
        template receives as ``tools`` (transformers passes dicts through as they are).

    Raises:
        InvalidInputError: Not a list of dicts, a non-function tool, a function
            without a name, two functions with one name, or parameters that are
            not an object schema.
    """
    if isinstance(tools, (str, bytes, Mapping)) or not isinstance(tools, Sequence):
        raise InvalidInputError(f"tools must be a list like {_TOOLS_EXAMPLE}, got {type(tools).__name__}.")
    _functions(tools)
    return [dict(tool) for tool in tools]


@dataclass(frozen=True)
class ToolChoice:
    """A checked ``tool_choice``.

    Attributes:
        mode: ``"none"`` (answer in text), ``"auto"`` (the model decides) or
            ``"required"`` (at least one call).
        function: The function that must be called (a named ``tool_choice``;
            ``mode`` is then ``"required"``), else None.
    """

    mode: ToolChoiceMode
    function: str | None = None


def validate_tool_choice(tool_choice: str | Mapping[str, Any] | None, tools: Sequence[Mapping[str, Any]]) -> ToolChoice:
    """Check ``tool_choice`` against the tools.

    Args:
        tool_choice: ``"none"``, ``"auto"``, ``"required"``,
            ``{"type": "function", "function": {"name": ...}}``, or None
            (OpenAI's default: ``"auto"`` with tools, ``"none"`` without).
        tools: The tools of the same request.

    Returns:
        A :class:`ToolChoice`.

    Raises:
        InvalidInputError: An unknown mode, a named function that is not among
            the tools, or ``"required"`` without tools.
    """
    functions = _functions(tools)
    names = ", ".join(repr(n) for n in functions) or "none"
    if tool_choice is None:
        return ToolChoice("auto" if functions else "none")
    if isinstance(tool_choice, str):
        if tool_choice in ("none", "auto"):
            return ToolChoice(tool_choice)  # type: ignore[arg-type]  # narrowed by the test above
        if tool_choice == "required":
            if not functions:
                raise InvalidInputError("tool_choice='required' needs tools: pass tools=[...] or another tool_choice.")
            return ToolChoice("required")
        hint = (
            f" To force function {tool_choice!r}, pass {{'type': 'function', 'function': {{'name': {tool_choice!r}}}}}."
            if tool_choice in functions
            else ""
        )
        raise InvalidInputError(
            f"tool_choice must be 'none', 'auto', 'required' or {{'type': 'function', 'function': {{'name': ...}}}}, "
            f"got {tool_choice!r}.{hint}"
        )
    if not isinstance(tool_choice, Mapping):
        raise InvalidInputError(
            "tool_choice must be 'none', 'auto', 'required' or {'type': 'function', 'function': {'name': ...}}, "
            f"got {type(tool_choice).__name__}."
        )
    function = tool_choice.get("function")
    name = function.get("name") if isinstance(function, Mapping) else tool_choice.get("name")
    if tool_choice.get("type", "function") != "function" or not isinstance(name, str):
        raise InvalidInputError(
            "A named tool_choice looks like {'type': 'function', 'function': {'name': 'get_weather'}}, "
            f"got {dict(tool_choice)!r}."
        )
    if name not in functions:
        raise InvalidInputError(
            f"tool_choice names function {name!r}, which is not among the tools ({names}): "
            "add it to tools or name one of those."
        )
    return ToolChoice("required", name)
