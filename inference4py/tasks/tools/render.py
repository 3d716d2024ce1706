"""Messages with tool calls and tool results, normalised for a chat template (round-trip rendering)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ...errors import InvalidInputError
from .calls import ToolCall, _as_arguments


def _tool_call_for_template(call: Any, i: int, j: int) -> dict[str, Any]:
    where = f"messages[{i}]['tool_calls'][{j}]"
    if isinstance(call, ToolCall):
        return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": dict(call.arguments)}}
    if not isinstance(call, Mapping):
        raise InvalidInputError(
            f"{where} must be a dict like {{'id': ..., 'type': 'function', 'function': {{'name': ..., "
            f"'arguments': ...}}}}, got {type(call).__name__}."
        )
    function = call.get("function", call)  # a bare {"name", "arguments"} is wrapped the OpenAI way
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        raise InvalidInputError(f"{where} needs a function name: {{'function': {{'name': ..., 'arguments': ...}}}}.")
    arguments = _as_arguments(function.get("arguments"))
    if arguments is None:
        raise InvalidInputError(
            f"{where}: arguments must be a JSON object (a dict, or a string holding one), "
            f"got {function.get('arguments')!r}."
        )
    if "function" in call:
        return {**call, "function": {**function, "arguments": arguments}}
    out = {k: v for k, v in call.items() if k not in ("name", "arguments")}
    return {**out, "type": out.get("type", "function"), "function": {"name": function["name"], "arguments": arguments}}


def _tool_content(content: Any) -> Any:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, Mapping) and p.get("type") == "text" for p in content):
        return "".join(str(p.get("text", "")) for p in content)  # OpenAI's text parts
    if content is None:
        return ""
    return json.dumps(content, ensure_ascii=False)


# Where an assistant message's reasoning comes in (llama-server's and vLLM's name, vLLM's newer one,
# transformers' for gpt-oss), and the names templates read it by (Qwen3 and DeepSeek's; gpt-oss's)
_REASONING_GIVEN = ("reasoning_content", "reasoning", "thinking")
_REASONING_READ = ("reasoning_content", "thinking")


def _given_reasoning(message: Mapping[str, Any]) -> str | None:
    """The earlier turn's reasoning a message gives as text (under the first of its usual names it has), or None."""
    return next((message[k] for k in _REASONING_GIVEN if isinstance(message.get(k), str) and message[k]), None)


def messages_for_template(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Normalise an OpenAI-style conversation for a chat template.

    - ``tool_calls`` become ``{"id", "type": "function", "function": {"name", "arguments": dict}}``:
      OpenAI sends ``arguments`` as a JSON string, but templates (Qwen, Llama 3,
      Mistral) write ``arguments | tojson`` and transformers passes the string
      through, which would encode it twice.  :class:`ToolCall` objects and bare
      ``{"name", "arguments"}`` dicts are accepted too.
    - ``role: "tool"`` content that is OpenAI text parts is joined; a dict or number
      is written as JSON.
    - an assistant's reasoning, given as ``reasoning_content``, ``reasoning`` or ``thinking``, is
      given under both names templates read: ``reasoning_content`` (Qwen3) and ``thinking``
      (gpt-oss, whose template writes a tool-calling turn's reasoning back on its analysis channel;
      not for a calling turn that has content too, which that template refuses to take with thinking).

    Other messages are copied unchanged; the input is never modified.

    Args:
        messages: The conversation.

    Returns:
        New message dicts for ``apply_chat_template``.

    Raises:
        InvalidInputError: A tool call without a function name, or arguments that
            are not a JSON object.
    """
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise InvalidInputError(
            f"messages must be a list of dicts like [{{'role': 'user', 'content': 'Hi'}}], got {type(messages).__name__}."
        )
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            out.append(message)  # the renderer reports it
            continue
        copy = dict(message)
        calls = message.get("tool_calls")
        if calls:
            if isinstance(calls, (str, bytes, Mapping)) or not isinstance(calls, Sequence):
                raise InvalidInputError(f"messages[{i}]['tool_calls'] must be a list, got {type(calls).__name__}.")
            copy["tool_calls"] = [_tool_call_for_template(call, i, j) for j, call in enumerate(calls)]
        if message.get("role") == "tool":
            copy["content"] = _tool_content(message.get("content"))
        text = _given_reasoning(message) if message.get("role") == "assistant" else None
        if text is not None:
            for key in _REASONING_READ:
                # gpt-oss's template refuses a calling turn with both content and thinking (it writes one
                # of them on the analysis channel): such a turn keeps its preamble, the reasoning stays out
                if key == "thinking" and calls and message.get("content") and "thinking" not in message:
                    continue
                copy.setdefault(key, text)
        out.append(copy)
    return out
