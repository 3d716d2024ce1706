"""What a call allows the model to say: constraints, tools and their parsing, in one place per call.

A task's ``generate`` takes the OpenAI-style keywords ``json_schema``, ``response_format``,
``regex``, ``grammar``, ``choices``, ``tools``, ``tool_choice`` and ``parallel_tool_calls``.
:func:`output_control` checks them all before any token is generated and returns an
:class:`OutputControl`. The control gives the prompt its ``tools``, adds one logits processor
(the constraint mask, applied last) and, once generation ends, turns the text into tool calls.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from inference4py.errors import ConfigurationError
from inference4py.generation.result import FinishReason, GenerationResult

if TYPE_CHECKING:
    from inference4py.generation.constraints import ConstraintKind, ConstraintProcessor
    from inference4py.generation.processors import LogitsProcessor
    from inference4py.tasks.harmony import HarmonyTurn
    from inference4py.tasks.tools import ToolRequest
    from inference4py.tasks.turn import TurnSplitter
    from inference4py.tokenization import Tokenizer

__all__ = ["OutputControl", "output_control"]

_log = logging.getLogger("inference4py.tools")


@dataclass(frozen=True)
class OutputControl:
    """The checked output options of one call (see :func:`output_control`).

    Attributes:
        grammar: ``{kind: option}`` as the request gave it, or None when unconstrained.
        tools: The request's tools (rendered into the prompt), or None.
        tool_request: How to parse tool calls out of the text, or None.
        compiled: ``(kind, llguidance grammar)``, compiled once per request from ``grammar``.
        reasoning: ``(open, close)`` markers of the model's reasoning block, split from the answer;
            None to leave any reasoning in the text.
        in_reasoning: The prompt opened the reasoning block (the output starts inside it).
        harmony: The model writes its turn in OpenAI's Harmony format (gpt-oss), and the prompt opened
            it thus: channels tell reasoning, answer and calls apart (:mod:`inference4py.tasks.harmony`);
            None for other models.
    """

    grammar: Mapping[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_request: ToolRequest | None = None
    compiled: tuple[ConstraintKind, str] | None = None
    reasoning: tuple[str, str] | None = None
    in_reasoning: bool = False
    harmony: HarmonyTurn | None = None

    @property
    def active(self) -> bool:
        return self.grammar is not None or self.tool_request is not None

    def processor(self, tokenizer: Tokenizer, eos_token_ids: Sequence[int]) -> ConstraintProcessor | None:
        """A fresh constraint mask for one call (None when nothing is constrained)."""
        if self.compiled is None:
            return None
        from inference4py.generation.constraints import Constraint, ConstraintProcessor

        kind, grammar = self.compiled
        return ConstraintProcessor(Constraint.from_grammar(tokenizer, kind, grammar, eos_token_ids=eos_token_ids))

    def processors(
        self, tokenizer: Tokenizer, eos_token_ids: Sequence[int], extra: Sequence[LogitsProcessor]
    ) -> tuple[LogitsProcessor, ...]:
        """The builder's processors, then this call's constraint mask (last: it has the final word)."""
        mask = self.processor(tokenizer, eos_token_ids)
        return (*extra, mask) if mask is not None else tuple(extra)

    def finish(self, result: GenerationResult) -> GenerationResult:
        """Tool calls parsed out of the text: ``finish_reason="tool_calls"`` and the rest as content.

        A turn cut by the token budget keeps ``"length"``: the calls it completed are returned, and
        a call it was writing stays in the text. A reasoning block is split off first, into
        ``result.reasoning`` (by the same :class:`TurnSplitter` that splits a stream). A Harmony turn is
        split by its channels, by the code that splits its stream; a call it was writing when the budget
        cut it is left out (its arguments are no JSON object yet), as are the markers.
        """
        if self.harmony is not None:
            return self._split_harmony(result)
        if self.reasoning is not None:
            result = self._split_reasoning(result)
        request = self.tool_request
        if request is None or result.finish_reason == "stop":
            return result
        content, calls = request.parse(result.text)
        if not calls:
            return result
        reason: FinishReason = "length" if result.finish_reason == "length" else "tool_calls"
        return dataclasses.replace(result, text=content, finish_reason=reason, tool_calls=tuple(calls))

    def _split_reasoning(self, result: GenerationResult) -> GenerationResult:
        from inference4py.tasks.turn import ReasoningDelta, TextDelta, TurnSplitter

        splitter = TurnSplitter(None, reasoning=self.reasoning, in_reasoning=self.in_reasoning)
        events = splitter.feed(result.text) + splitter.close()
        thought = [e.text for e in events if isinstance(e, ReasoningDelta)]
        if not thought and not self.in_reasoning:
            return result
        answer = "".join(e.text for e in events if isinstance(e, TextDelta))
        return dataclasses.replace(result, text=answer, reasoning="".join(thought))

    def _split_harmony(self, result: GenerationResult) -> GenerationResult:
        from inference4py.tasks.harmony import split_harmony

        split = split_harmony(result.text, calls=self._calls_allowed(), turn=self.harmony)
        reason = result.finish_reason
        if reason == "eos" and split.calls and not split.open_call:  # as a stream's turn ends (serve/turns.py)
            reason = "tool_calls"
        calls = tuple(split.calls) if split.calls else result.tool_calls
        return dataclasses.replace(
            result, text=split.text, reasoning=split.reasoning, finish_reason=reason, tool_calls=calls
        )

    def _calls_allowed(self) -> bool:
        return self.tool_request is not None and self.tool_request.choice.mode != "none"

    def splitter(self, *, rng: random.Random | None = None) -> TurnSplitter:
        """A :class:`TurnSplitter` that tells this request's answer, reasoning and tool calls apart as it streams."""
        from inference4py.tasks.turn import TurnSplitter

        request = self.tool_request
        family = request.family if request is not None and self._calls_allowed() else None
        return TurnSplitter(
            family, reasoning=self.reasoning, in_reasoning=self.in_reasoning, harmony=self.harmony, rng=rng
        )

    def with_reasoning(self, markers: tuple[str, str], *, opened: bool) -> OutputControl:
        """This control, splitting a reasoning block marked by ``markers`` (``opened``: the prompt opened it)."""
        return dataclasses.replace(self, reasoning=markers, in_reasoning=opened)

    def with_harmony(self, turn: HarmonyTurn) -> OutputControl:
        """This control, splitting a turn written in Harmony (gpt-oss) as ``turn`` says the prompt opened it."""
        return dataclasses.replace(self, harmony=turn)


def output_control(
    options: Mapping[str, Any],
    *,
    template: str | None,
    token_to_id: Any = None,
) -> OutputControl:
    """Check a call's output options and build its :class:`OutputControl`.

    Args:
        options: ``json_schema`` (dict or JSON text), ``response_format`` (OpenAI's
            ``{"type": "json_object"}`` or ``{"type": "json_schema", "json_schema": {"schema": ...}}``),
            ``regex``, ``grammar`` (Lark), ``choices`` (strings), ``tools``, ``tool_choice``
            (``"none" | "auto" | "required" | {"type": "function", "function": {"name": ...}}``),
            ``parallel_tool_calls``. At most one constraint kind.
        template: The chat template the prompt is rendered with (tools need one that renders them).
        token_to_id: The tokenizer's ``token_to_id`` (a tool-call marker that is one token is forced as it;
            a Harmony vocabulary (gpt-oss) writes Harmony's calls whatever the template's markers).

    Raises:
        ConfigurationError: two constraint kinds, a bad schema, regex or grammar, llguidance missing.
        InvalidInputError: bad tools or tool_choice.
        UnsupportedModelError: tools for a model whose template cannot render or mark them.
    """
    if not options:
        return OutputControl()
    kinds: dict[str, Any] = {}
    if "json_schema" in options:
        kinds["json_schema"] = options["json_schema"]
    if "response_format" in options:
        kinds.update(_response_format(options["response_format"]))
    for key in ("regex", "grammar", "choices"):
        if key in options:
            kinds[key] = options[key]
    tools = options.get("tools")
    request = None
    if tools is not None and options.get("tool_choice") == "none" and not _renders_tools(template):
        # llama-server's answer: tools the model may not call, and its template cannot show, are left out
        from inference4py.tasks.tools import validate_tools

        validate_tools(tools)
        _log.warning(
            "tool_choice 'none': this model's chat template cannot render tools, so the %d tool(s) are left out of "
            "the prompt and the model answers without them",
            len(tools),
        )
        tools = None
    if tools is not None:
        from inference4py.tasks.tools import prepare_tools
        from inference4py.tokenization.harmony import harmony_markers

        request = prepare_tools(
            tools,
            options.get("tool_choice"),
            template,
            parallel_tool_calls=bool(options.get("parallel_tool_calls", True)),
            family="harmony" if harmony_markers(token_to_id) else None,
        )
        # with tool_choice="auto" another constraint decides the output (it cannot hold a call marker)
        tool_grammar = None if kinds and request.choice.mode == "auto" else request.constraint(token_to_id=token_to_id)
        if tool_grammar is not None:
            if kinds:
                raise ConfigurationError(
                    "tool_choice requires a tool call, which is itself a constraint: drop "
                    f"{next(iter(kinds))}, or use tool_choice='auto'."
                )
            kinds["grammar"] = tool_grammar
    elif "tool_choice" in options and options["tool_choice"] not in ("none", "auto"):
        raise ConfigurationError("tool_choice needs tools: pass tools=[{'type': 'function', 'function': {...}}].")
    compiled = None
    if kinds:
        from inference4py.generation.constraints import compile_grammar

        compiled = compile_grammar(**kinds)  # once per request, before any token (one kind at most: checked there)
    return OutputControl(kinds or None, request.tools if request is not None else None, request, compiled)


def _renders_tools(template: str | None) -> bool:
    from inference4py.tasks.tools import template_supports_tools

    return bool(template) and template_supports_tools(template or "")


def _response_format(value: Any) -> dict[str, Any]:
    """OpenAI's ``response_format`` as a constraint kind (``{}`` for plain text)."""
    if not isinstance(value, Mapping) or "type" not in value:
        raise ConfigurationError(
            'response_format must look like {"type": "json_object"} or {"type": "json_schema", '
            '"json_schema": {"name": ..., "schema": {...}}}.'
        )
    kind = value["type"]
    if kind == "text":
        return {}
    if kind == "json_object":
        return {"json_object": True}
    if kind == "json_schema":
        inner = value.get("json_schema")
        schema = inner.get("schema") if isinstance(inner, Mapping) else None
        if isinstance(schema, str):
            schema = json.loads(schema)
        if not isinstance(schema, Mapping):
            raise ConfigurationError(
                'response_format {"type": "json_schema"} needs "json_schema": {"name": ..., "schema": {...}}.'
            )
        return {"json_schema": dict(schema)}
    raise ConfigurationError(f'response_format type {kind!r} is unknown: use "text", "json_object" or "json_schema".')
