"""Anthropic's Messages API for served text models: ``POST /v1/messages`` and ``/v1/messages/count_tokens``.

A request becomes what the chat route runs: chat messages for the model's template and one
:class:`~inference4py.tasks.options.RequestOptions`.

- ``system`` becomes a system message; user and assistant turns keep their order (consecutive
  turns of one role stay separate messages, as the template renders them).
- An assistant turn's ``tool_use`` blocks become its ``tool_calls``; a user turn's ``tool_result``
  blocks become ``tool`` messages, in order, before the rest of its text.
- ``tools`` and ``tool_choice`` become OpenAI's forms, which the library constrains and parses.

The answer comes back as Anthropic's content blocks: ``thinking`` (reasoning), ``text`` and
``tool_use``. Streamed, the same blocks come as Anthropic's server-sent events, cut from the
request's turn events (:mod:`inference4py.serve.turns`). Errors are Anthropic's error objects
(:mod:`inference4py.serve.errors`).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncGenerator
from typing import Any

from fastapi import FastAPI, Request

from inference4py.errors import RequestTimeoutError
from inference4py.generation.result import FinishReason, GenerationResult
from inference4py.serve.dispatch import collect_all, open_all, text_worker, with_thinking
from inference4py.serve.errors import ANTHROPIC_PREFIX, error_payload, reason
from inference4py.serve.images import ImagePart, ImagePolicy, image_part, resolve_images
from inference4py.serve.messages_protocol import (
    CountTokensRequest,
    ImageBlock,
    MessagesRequest,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    parse_block,
    parse_tool,
)
from inference4py.serve.protocol import ApiError
from inference4py.serve.registry import ModelRegistry
from inference4py.serve.sse import sse
from inference4py.serve.turns import turn_steps
from inference4py.serve.worker import ChunkStream
from inference4py.tasks.options import RequestOptions
from inference4py.tasks.turn import CallArguments, CallEnd, CallStart, ReasoningDelta, TextDelta, TurnEvent

__all__ = ["add_messages_routes"]

_log = logging.getLogger("inference4py.serve")
_STOP_REASONS: dict[FinishReason, str] = {
    "eos": "end_turn",
    "stop": "stop_sequence",
    "length": "max_tokens",
    "tool_calls": "tool_use",
}
_TOOL_CHOICES = {"auto": "auto", "any": "required", "none": "none"}


def add_messages_routes(app: FastAPI, models: ModelRegistry, images: ImagePolicy) -> None:
    """Add ``POST /v1/messages`` and ``POST /v1/messages/count_tokens`` to ``app``; ``images`` is what
    the image blocks of a vision-language model's requests may be."""

    async def conversation_of(body: CountTokensRequest | MessagesRequest) -> list[dict[str, Any]]:
        if models.kind(body.model) != "vision":
            return _conversation(body, body.model, vision=False)
        return await resolve_images(_conversation(body, body.model, vision=True), images)

    @app.post("/v1/messages", response_model=None)
    async def messages(body: MessagesRequest, request: Request) -> Any:
        _warn_ignored(body, request)
        worker = await text_worker(models, body.model, "chat", request)
        conversation = await conversation_of(body)
        options = _output_options(body).replace(
            max_new_tokens=body.max_tokens,
            temperature=body.temperature,
            top_p=body.top_p,
            top_k=body.top_k,
            stop_sequences=tuple(body.stop_sequences) if body.stop_sequences else None,
            seed=body.seed,
        )
        if body.stream:
            streams = await open_all(worker, conversation, options)
            return sse(_message_events(body.model, streams[0]), request)
        (result,) = await collect_all(worker, conversation, options)
        return _message(body.model, result)

    @app.post("/v1/messages/count_tokens")
    async def count_tokens(body: CountTokensRequest, request: Request) -> dict[str, int]:
        _warn_ignored(body, request)
        worker = await text_worker(models, body.model, "chat", request)
        conversation = await conversation_of(body)
        # the ids the model would be prompted with: template, tools and all (prepare is what a request runs)
        prepared = await asyncio.to_thread(worker.model.prepare, conversation, _output_options(body))
        return {"input_tokens": len(prepared.ids)}


def _warn_ignored(body: CountTokensRequest | MessagesRequest, request: Request) -> None:
    ignored = body.ignored_fields()
    if body.output_config is not None:
        ignored += [f"output_config.{k}" for k in body.output_config if k != "format"]
    if body.thinking is not None and "budget_tokens" in body.thinking:
        ignored.append("thinking.budget_tokens")  # the switch is honoured (enable_thinking), not a budget
    if ignored:
        _log.warning("%s ignores field(s) it does not act on: %s", request.url.path, ", ".join(ignored))


# ------------------------------------------------------------------------------- request -> conversation
def _conversation(body: CountTokensRequest | MessagesRequest, model: str, *, vision: bool) -> list[dict[str, Any]]:
    """The request's system prompt and turns as chat messages for the model's template.

    A user turn with image blocks (``vision``: a vision-language model) is one message of text and
    image parts, in the blocks' order; the images are :class:`~inference4py.serve.images.ImagePart`
    until :func:`~inference4py.serve.images.resolve_images` gives them their bytes.

    Raises:
        ApiError: 400 for an empty turn or text block, a block in a turn it does not belong to, a
            tool_result that answers no tool_use of the assistant turn before it, an image for a
            text-only model, an image source that is not base64 or a URL, or a last turn from the assistant.
    """
    out: list[dict[str, Any]] = []
    system = _system_text(body.system)
    if system:
        out.append({"role": "system", "content": system})
    asked: set[str] = set()  # tool_use ids of the last assistant turn
    for i, message in enumerate(body.messages):
        where = f"messages.{i}"
        if not message.content:
            raise ApiError(400, f"{where}: the content is empty. Send text or content blocks.", f"{where}.content")
        if isinstance(message.content, str):
            blocks: list[Any] = [TextBlock(type="text", text=message.content)]
        else:
            blocks = [parse_block(b, f"{where}.content.{j}") for j, b in enumerate(message.content)]
        for j, block in enumerate(blocks):
            _check_block(block, message.role, f"{where}.content.{j}", model, vision)
        if message.role == "assistant":
            out.append(_assistant_turn(blocks))
            asked = {b.id for b in blocks if isinstance(b, ToolUseBlock)}
        else:
            out.extend(_user_turn(blocks, asked, where))
    if body.messages[-1].role == "assistant":
        raise ApiError(
            400,
            f"messages.{len(body.messages) - 1}: the conversation ends with an assistant turn (a prefill), and this "
            "server does not continue an assistant turn. End with a user turn.",
            "messages",
        )
    return out


def _system_text(system: str | list[Any] | None) -> str:
    if system is None or isinstance(system, str):
        return system or ""
    texts = []
    for j, data in enumerate(system):
        block = parse_block(data, f"system.{j}")
        if not isinstance(block, TextBlock):
            raise ApiError(400, f"system.{j}: the system prompt takes text blocks only, not {block.type}.", "system")
        texts.append(block.text)
    return "".join(texts)


def _check_block(block: Any, role: str, where: str, model: str, vision: bool) -> None:
    if isinstance(block, ImageBlock) and not vision:
        raise ApiError(
            400,
            f"{where}: an image block, but {model!r} is a text-only model, which reads no images. Drop the "
            "image block, or send it to a vision-language model.",
            where,
        )
    if isinstance(block, ImageBlock) and role != "user":
        raise ApiError(400, f"{where}: image blocks belong to user turns, not {role} turns.", where)
    if isinstance(block, TextBlock) and not block.text:
        raise ApiError(400, f"{where}: text content blocks must be non-empty.", where)
    if role == "user" and isinstance(block, (ToolUseBlock, ThinkingBlock, RedactedThinkingBlock)):
        raise ApiError(400, f"{where}: {block.type} blocks belong to assistant turns, not user turns.", where)
    if role == "assistant" and isinstance(block, ToolResultBlock):
        raise ApiError(400, f"{where}: tool_result blocks belong to user turns, not assistant turns.", where)


def _assistant_turn(blocks: list[Any]) -> dict[str, Any]:
    """An assistant message: its text, its calls (arguments as a dict), its reasoning as ``reasoning_content``."""
    turn: dict[str, Any] = {"role": "assistant", "content": "".join(b.text for b in blocks if isinstance(b, TextBlock))}
    calls = [
        {"id": b.id, "type": "function", "function": {"name": b.name, "arguments": b.input}}
        for b in blocks
        if isinstance(b, ToolUseBlock)
    ]
    if calls:
        turn["tool_calls"] = calls
    reasoning = "".join(b.thinking for b in blocks if isinstance(b, ThinkingBlock))
    if reasoning:  # the key reasoning templates (Qwen3, DeepSeek-R1) read; others ignore it
        turn["reasoning_content"] = reasoning
    return turn  # redacted_thinking is opaque data of Anthropic's models: nothing to render


def _user_turn(blocks: list[Any], asked: set[str], where: str) -> list[dict[str, Any]]:
    """A user turn's tool results (``tool`` messages, in order), then its text as a user message."""
    out: list[dict[str, Any]] = []
    for j, block in enumerate(blocks):
        if isinstance(block, ToolResultBlock):
            if block.tool_use_id not in asked:
                raise ApiError(
                    400,
                    f"{where}.content.{j}: tool_result for tool_use_id {block.tool_use_id!r}, which no tool_use "
                    f"block of the assistant turn before it has (its ids: {', '.join(sorted(asked)) or 'none'}).",
                    f"{where}.content.{j}.tool_use_id",
                )
            content = _tool_result_text(block, f"{where}.content.{j}")
            out.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": content})
    if any(isinstance(b, ImageBlock) for b in blocks):  # text and images in their order, as one message
        parts = [
            {"type": "image", "image": _image(b, f"{where}.content.{j}")}
            if isinstance(b, ImageBlock)
            else {"type": "text", "text": b.text}
            for j, b in enumerate(blocks)
            if isinstance(b, (ImageBlock, TextBlock))
        ]
        out.append({"role": "user", "content": parts})
        return out
    text = "".join(b.text for b in blocks if isinstance(b, TextBlock))
    if text:
        out.append({"role": "user", "content": text})
    return out


def _image(block: ImageBlock, where: str) -> ImagePart:
    """An image block's source: ``base64`` data (decoded here) or a ``url`` (fetched if the server allows it)."""
    source = block.source
    kind = source.get("type")
    if kind == "base64":
        data = source.get("data")
        if not isinstance(data, str):
            raise ApiError(400, f"{where}.source.data: a base64 image source needs its data as a string.", where)
        return ImagePart(f"{where}.source.data", encoded=data)
    if kind == "url":
        return image_part(source.get("url"), f"{where}.source.url")
    raise ApiError(
        400,
        f"{where}.source.type: image sources of type {kind!r} are not read here: send base64 data "
        '({"type": "base64", "media_type": "image/png", "data": ...}) or a url.',
        f"{where}.source.type",
    )


def _tool_result_text(block: ToolResultBlock, where: str) -> str:
    if isinstance(block.content, str):
        return block.content
    texts = []
    for j, data in enumerate(block.content):
        part = parse_block(data, f"{where}.content.{j}")
        if isinstance(part, ImageBlock):
            raise ApiError(
                400,
                f"{where}.content.{j}: an image in a tool result is not read here: send tool results as text.",
                where,
            )
        if not isinstance(part, TextBlock):
            raise ApiError(400, f"{where}.content.{j}: a tool result holds text blocks, not {part.type}.", where)
        texts.append(part.text)
    return "".join(texts)


# ------------------------------------------------------------------------------- request -> options
def _output_options(body: CountTokensRequest | MessagesRequest) -> RequestOptions:
    """What the output may be: the tools and how they may be called, or a JSON schema (output_config.format).

    Raises:
        ApiError: 400 for a server tool, a malformed tool, a tool_choice naming no given tool or
            asking for a call with no tools, an output format other than json_schema.
    """
    tools = [parse_tool(t, f"tools.{i}") for i, t in enumerate(body.tools or [])]
    names = [t.name for t in tools]
    choice = body.tool_choice
    tool_choice: str | dict[str, Any] | None = None
    parallel = None
    if choice is not None:
        if choice.type in ("any", "tool") and not tools:
            raise ApiError(400, f'tool_choice {{"type": "{choice.type}"}} needs tools: send them.', "tool_choice")
        if choice.type == "tool":
            if choice.name not in names:
                raise ApiError(
                    400,
                    f"tool_choice names {choice.name!r}, which is not among the tools ({', '.join(names)}).",
                    "tool_choice.name",
                )
            tool_choice = {"type": "function", "function": {"name": choice.name}}
        else:
            tool_choice = _TOOL_CHOICES[choice.type]
        if choice.disable_parallel_tool_use:
            parallel = False
    openai_tools = [
        {
            "type": "function",
            "function": {
                "name": t.name,
                **({"description": t.description} if t.description is not None else {}),
                "parameters": t.input_schema,
            },
        }
        for t in tools
    ]
    schema = _output_schema(body.output_config)
    options = RequestOptions(
        tools=openai_tools or None,
        tool_choice=tool_choice if tools else None,
        parallel_tool_calls=parallel if tools else None,
        json_schema=schema,
    )
    return with_thinking(options, _thinking(body.thinking))


def _thinking(thinking: dict[str, Any] | None) -> bool | None:
    """Anthropic's ``thinking`` as a switch (``budget_tokens`` is not a bound here: the model thinks as it will)."""
    if thinking is None:
        return None
    kind = thinking.get("type")
    if kind not in ("enabled", "disabled", "adaptive"):
        raise ApiError(400, 'thinking.type must be "enabled", "disabled" or "adaptive".', "thinking.type")
    return kind != "disabled"


def _output_schema(config: dict[str, Any] | None) -> dict[str, Any] | None:
    form = (config or {}).get("format")
    if form is None:
        return None
    if not isinstance(form, dict) or form.get("type") != "json_schema" or not isinstance(form.get("schema"), dict):
        raise ApiError(
            400,
            'output_config.format must be {"type": "json_schema", "schema": {...}}.',
            "output_config.format",
        )
    return dict(form["schema"])


# ------------------------------------------------------------------------------- result -> message
def _message_id() -> str:
    return f"msg_{uuid.uuid4().hex[:24]}"


def _message(model: str, result: GenerationResult) -> dict[str, Any]:
    """A non-streamed answer: the thinking block (a reasoning model's), the text block (when there is
    text), then one tool_use block per call."""
    content: list[dict[str, Any]] = []
    if result.reasoning:
        content.append({"type": "thinking", "thinking": result.reasoning, "signature": ""})
    if result.text:
        content.append({"type": "text", "text": result.text})
    content += [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments} for c in result.tool_calls]
    return {
        "id": _message_id(),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": _STOP_REASONS[result.finish_reason],
        "stop_sequence": result.stop_sequence if result.finish_reason == "stop" else None,
        "usage": {"input_tokens": result.prompt_tokens, "output_tokens": result.generated_tokens},
    }


# ------------------------------------------------------------------------------- streaming
Event = tuple[str, dict[str, Any]]


class _Blocks:
    """Turn events as content-block events: one block open at a time, opened by its first piece."""

    def __init__(self) -> None:
        self.count = 0
        self._open: str | None = None  # "text", "thinking", or the call index ("call:0")

    def feed(self, events: list[TurnEvent]) -> list[Event]:
        out: list[Event] = []
        for event in events:
            if isinstance(event, TextDelta) and event.text:
                out += self._delta("text", {"type": "text", "text": ""}, {"type": "text_delta", "text": event.text})
            elif isinstance(event, ReasoningDelta) and event.text:
                start: dict[str, Any] = {"type": "thinking", "thinking": "", "signature": ""}
                out += self._delta("thinking", start, {"type": "thinking_delta", "thinking": event.text})
            elif isinstance(event, CallStart):
                start = {"type": "tool_use", "id": event.id, "name": event.name, "input": {}}
                out += self._start(f"call:{event.index}", start)
            elif isinstance(event, CallArguments) and event.text:
                delta = {"type": "input_json_delta", "partial_json": event.text}
                out += self._delta(f"call:{event.index}", None, delta)
            elif isinstance(event, CallEnd) and self._open == f"call:{event.index}":
                out += self.close()
        return _merged(out)

    def close(self) -> list[Event]:
        if self._open is None:
            return []
        self._open = None
        return [("content_block_stop", {"type": "content_block_stop", "index": self.count - 1})]

    def _start(self, key: str, block: dict[str, Any]) -> list[Event]:
        out = self.close()
        self._open = key
        self.count += 1
        return [
            *out,
            ("content_block_start", {"type": "content_block_start", "index": self.count - 1, "content_block": block}),
        ]

    def _delta(self, key: str, start: dict[str, Any] | None, delta: dict[str, Any]) -> list[Event]:
        out: list[Event] = []
        if self._open != key:
            if start is None:
                return []  # arguments of a call whose block is closed: the splitter sends none
            out = self._start(key, start)
        return [*out, ("content_block_delta", {"type": "content_block_delta", "index": self.count - 1, "delta": delta})]


def _merged(events: list[Event]) -> list[Event]:
    """Successive text (or thinking, or argument) deltas of one block in one event."""
    out: list[Event] = []
    for name, data in events:
        if out and name == "content_block_delta" and out[-1][0] == name and out[-1][1]["index"] == data["index"]:
            last, delta = out[-1][1]["delta"], data["delta"]
            field = {"text_delta": "text", "thinking_delta": "thinking", "input_json_delta": "partial_json"}[
                delta["type"]
            ]
            out[-1] = (name, {**out[-1][1], "delta": {**last, field: last[field] + delta[field]}})
        else:
            out.append((name, data))
    return out


async def _message_events(model: str, stream: ChunkStream) -> AsyncGenerator[Event, None]:
    """message_start, ping, each block's start, deltas and stop, message_delta (how it ended, usage), message_stop.

    A failure after the first event ends the stream with an ``error`` event in Anthropic's shape.
    """
    message: dict[str, Any] = {
        "id": _message_id(),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": stream.prompt_tokens, "output_tokens": 0},
    }
    yield "message_start", {"type": "message_start", "message": message}
    yield "ping", {"type": "ping"}
    blocks = _Blocks()
    finish: FinishReason = "length"
    stop_sequence = None
    try:
        async for step in turn_steps(stream):
            for event in blocks.feed(step.events):
                yield event
            if step.finish is not None:
                finish, stop_sequence = step.finish, step.chunk.stop_sequence
    except Exception as exc:  # the response has started: the error becomes its last event
        _log.error("a streamed message failed after its first event: %s", exc)
        kind = "timeout_error" if isinstance(exc, RequestTimeoutError) else "server_error"
        yield "error", error_payload(ANTHROPIC_PREFIX, reason(exc), kind)
        return
    finally:
        await stream.aclose()
    for event in blocks.close():
        yield event
    delta = {"stop_reason": _STOP_REASONS[finish], "stop_sequence": stop_sequence if finish == "stop" else None}
    yield "message_delta", {"type": "message_delta", "delta": delta, "usage": {"output_tokens": stream.generated}}
    yield "message_stop", {"type": "message_stop"}
