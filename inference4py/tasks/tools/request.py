"""One request: :class:`ToolRequest` and :func:`prepare_tools`, tools checked against the chat template."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...errors import UnsupportedModelError
from .calls import ToolCall
from .grammar import TokenToId, tool_call_constraint
from .parsers import TOOL_FAMILIES, detect_tool_family, parse_tool_calls, template_supports_tools
from .spec import ToolChoice, validate_tool_choice, validate_tools


@dataclass(frozen=True)
class ToolRequest:
    """The tools of one generation request, checked against the chat template.

    Made by :func:`prepare_tools`.  Render with
    ``tokenizer.apply_chat_template(messages_for_template(messages), tools=request.tools)``;
    after generation, :meth:`parse` the text; for ``"required"`` or a named function
    feed :meth:`constraint` to the constraint engine.

    Attributes:
        tools: The tools as the template receives them.
        choice: The checked tool_choice.
        family: The tool-call format of the template (one of :data:`TOOL_FAMILIES`).
        parallel_tool_calls: Whether several calls are allowed under a constraint.
    """

    tools: list[dict[str, Any]]
    choice: ToolChoice
    family: str
    parallel_tool_calls: bool = True

    def parse(self, text: str, *, rng: random.Random | None = None) -> tuple[str, list[ToolCall]]:
        """``(content, calls)`` of generated text; no calls are looked for with ``tool_choice="none"``."""
        if self.choice.mode == "none":
            return text, []
        return parse_tool_calls(text, self.family, rng=rng)

    def constraint(self, *, token_to_id: TokenToId | None = None) -> str | None:
        """The Lark grammar for ``"required"`` / a named function, else None (see :func:`tool_call_constraint`)."""
        return tool_call_constraint(
            self.tools,
            self.choice,
            self.family,
            parallel_tool_calls=self.parallel_tool_calls,
            token_to_id=token_to_id,
        )


def prepare_tools(
    tools: Sequence[Mapping[str, Any]],
    tool_choice: str | Mapping[str, Any] | None,
    template: str | None,
    *,
    parallel_tool_calls: bool = True,
    family: str | None = None,
) -> ToolRequest:
    """Check tools and tool_choice, and that the chat template can render and the library parse them.

    Args:
        tools: Tools in OpenAI form (see :func:`validate_tools`).
        tool_choice: See :func:`validate_tool_choice`.
        template: The chat template the prompt will be rendered with (for a model with
            named templates, its ``"tool_use"`` one when present).
        parallel_tool_calls: Allow several calls under a constraint.
        family: The tool-call format, when the model's vocabulary already says it (``"harmony"`` for
            gpt-oss's); None finds it from the template's markers (:func:`detect_tool_family`).

    Returns:
        A :class:`ToolRequest`.

    Raises:
        InvalidInputError: Bad tools or tool_choice.
        UnsupportedModelError: The model has no chat template, its template does not
            use ``tools`` (it would silently drop them), or its tool-call format is not
            one inference4py can parse.
    """
    checked = validate_tools(tools)
    choice = validate_tool_choice(tool_choice, checked)
    if not template:
        raise UnsupportedModelError(
            "This model has no chat template, so it cannot be given tools.", fix="tool_template"
        )
    if not template_supports_tools(template):
        raise UnsupportedModelError(
            "This model's chat template has no tool support (it never reads the 'tools' variable), so the tools "
            "would be silently left out of the prompt. Use a model trained for tool calling (e.g. Qwen2.5-Instruct, "
            "Llama 3.1+, Mistral v0.3).",
            fix="tool_template",
        )
    family = family if family is not None else detect_tool_family(template)
    if family is None:
        raise UnsupportedModelError(
            "This model's chat template renders tools, but in a tool-call format inference4py cannot parse "
            f"(known: {', '.join(TOOL_FAMILIES)}): call without tools and parse the text yourself."
        )
    return ToolRequest(checked, choice, family, parallel_tool_calls)
