"""Chat templates: a model's Jinja template rendered the way transformers' ``apply_chat_template`` does.

:func:`render_chat_template` checks the messages and tools, then renders the
template in jinja2's immutable sandbox with transformers' extras: a ``tojson``
that does not escape HTML, ``raise_exception``, ``strftime_now``, loop controls
and the ``{% generation %}`` tag.  Compiled templates are cached.  jinja2 is
imported on first use, never when this module is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any

from ..errors import ConfigurationError, InvalidInputError

__all__ = ["render_chat_template"]


def _raise_exception(message: str) -> None:
    import jinja2

    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False
) -> str:
    # Like transformers: no HTML escaping (jinja's own tojson escapes <, >, &, ')
    # and the json.dumps options exposed.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


@lru_cache(maxsize=16)
def _compile_template(template: str) -> Any:
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class _GenerationTag(jinja2.ext.Extension):
        # Some templates mark assistant turns with {% generation %}...{% endgeneration %}
        # (transformers' AssistantTracker); rendering just keeps the body.
        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

        def _render(self, caller: Any) -> str:
            return caller()

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    try:
        return env.from_string(template)
    except jinja2.exceptions.TemplateSyntaxError as exc:
        raise ConfigurationError(
            f"The chat template is not valid Jinja (line {exc.lineno}: {exc.message}). "
            "Fix the template or pass another one with chat_template(...) on the builder."
        ) from exc


def _validate_messages(messages: Any) -> list[dict[str, Any]]:
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise InvalidInputError(
            "messages must be a list of dicts like [{'role': 'user', 'content': 'Hi'}], "
            f"got {type(messages).__name__}."
        )
    if len(messages) == 0:
        raise InvalidInputError(
            "messages is empty: pass at least one message, e.g. [{'role': 'user', 'content': 'Hi'}]."
        )
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise InvalidInputError(
                f"messages[{i}] must be a dict with 'role' and 'content', got {type(message).__name__}."
            )
        role = message.get("role")
        if not isinstance(role, str) or not role:
            raise InvalidInputError(
                f"messages[{i}] needs a non-empty string 'role' (e.g. 'system', 'user', 'assistant'), got {role!r}."
            )
        content = message.get("content")
        # Assistant turns that only carry tool calls may have no content; multimodal
        # content is a list of parts.  Anything else must be text.
        if content is None and "tool_calls" in message:
            pass
        elif not isinstance(content, (str, list)):
            raise InvalidInputError(f"messages[{i}] needs a string 'content', got {type(content).__name__}.")
        out.append(dict(message))
    return out


def render_chat_template(
    template: str,
    messages: Sequence[Mapping[str, Any]],
    *,
    add_generation_prompt: bool = True,
    tools: Sequence[Mapping[str, Any]] | None = None,
    special_tokens: Mapping[str, Any] | None = None,
    **extra: Any,
) -> str:
    """Render a Jinja chat template the way transformers' ``apply_chat_template`` does.

    Args:
        template: The Jinja source.
        messages: ``[{"role": ..., "content": ...}, ...]``.
        add_generation_prompt: Append the prompt that starts an assistant turn.
        tools: JSON schemas of tools (dicts), passed to the template as ``tools``.
        special_tokens: ``bos_token``, ``eos_token``... as strings.
        **extra: More template variables; they override ``special_tokens``.

    Returns:
        The rendered prompt text.

    Raises:
        InvalidInputError: Bad messages or tools, or the template raised an error
            (e.g. via ``raise_exception``) for these messages.
        ConfigurationError: The template is not valid Jinja.
    """
    import jinja2

    checked = _validate_messages(messages)
    tool_schemas = None
    if tools is not None:
        tool_schemas = []
        for tool in tools:
            if not isinstance(tool, Mapping):
                raise InvalidInputError(
                    "tools must be JSON schemas (dicts) like "
                    "{'type': 'function', 'function': {'name': ..., 'parameters': {...}}}; "
                    f"got {type(tool).__name__}."
                )
            tool_schemas.append(dict(tool))
    documents = extra.pop("documents", None)
    compiled = _compile_template(template)
    variables = {**dict(special_tokens or {}), **extra}
    try:
        return compiled.render(
            messages=checked,
            tools=tool_schemas,
            documents=documents,
            add_generation_prompt=add_generation_prompt,
            **variables,
        )
    except jinja2.exceptions.TemplateError as exc:
        raise InvalidInputError(f"The chat template rejected these messages: {exc}") from exc
