"""OpenAI's Responses API: ``POST /v1/responses``, and ``GET`` / ``DELETE /v1/responses/{id}`` over the store.

A request becomes a chat conversation and one :class:`~inference4py.tasks.options.RequestOptions`:
``instructions`` is a system message ahead of the conversation, ``input`` items are messages,
``function_call`` items an assistant message's tool calls, ``function_call_output`` items tool
messages and ``reasoning`` items the ``reasoning_content`` of the assistant turn they open (as chat
completions take an earlier turn's reasoning); ``previous_response_id`` puts the stored conversation
of that response first, reasoning included. Function
tools, ``tool_choice`` and ``text.format`` are translated into the chat forms the library takes.

The answer is built from the request's turn events (:func:`~inference4py.serve.turns.turn_steps`)
by :class:`~inference4py.serve.response_output.TurnOutput`, streamed or not, so the two are the
same response. A finished response is kept in a bounded in-memory store (``store: false`` keeps
nothing) so that a later request can continue it.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request

from inference4py.serve.dispatch import open_all, text_worker, with_thinking
from inference4py.serve.errors import reason
from inference4py.serve.images import ImagePolicy, image_part, resolve_images
from inference4py.serve.protocol import ApiError, FieldWarnings, ImageReader, now
from inference4py.serve.registry import ModelRegistry
from inference4py.serve.response_output import TurnOutput, new_id
from inference4py.serve.response_store import ResponseStore, StoredResponse
from inference4py.serve.responses_protocol import (
    IGNORED_FIELDS,
    LIBRARY_FIELDS,
    FunctionCallItem,
    FunctionCallOutputItem,
    InputItem,
    MessageItem,
    ReasoningItem,
    ResponseRequest,
    parse_input,
)
from inference4py.serve.sse import sse
from inference4py.serve.turns import turn_steps
from inference4py.serve.worker import ChunkStream
from inference4py.tasks.options import RequestOptions
from inference4py.tasks.turn import ReasoningDelta

__all__ = ["add_responses_routes"]

_log = logging.getLogger("inference4py.serve")
_TOOL_MODES = ("none", "auto", "required")


def add_responses_routes(app: FastAPI, models: ModelRegistry, images: ImagePolicy, *, stored: int = 256) -> None:
    """Add ``POST /v1/responses`` and ``GET`` / ``DELETE /v1/responses/{response_id}`` to ``app``.

    Args:
        app: The server's app.
        models: The served models.
        images: What the ``input_image`` parts of a vision-language model's requests may be.
        models: The served models.
        stored: How many finished responses are kept for ``previous_response_id`` and ``GET``
            (least recently used forgotten first; 0 keeps none).
    """
    store = ResponseStore(stored)

    @app.post("/v1/responses", response_model=None)
    async def create(body: ResponseRequest, request: Request) -> Any:
        _check_fields(body)
        worker = await text_worker(models, body.model, "chat", request)
        vision = models.kind(body.model) == "vision"
        conversation, messages = _conversation(body, store, image_part if vision else None)
        if vision:
            messages = await resolve_images(messages, images)
        streams = await open_all(worker, messages, _options(body))
        run = _Run(body, streams[0], store, conversation)
        if body.stream:
            return sse(_named(run.events()), request)
        return await run.collect()

    @app.get("/v1/responses/{response_id}")
    async def retrieve(response_id: str, stream: bool = False) -> dict[str, Any]:
        if stream:
            raise ApiError(400, "Replaying a stored response as events is not supported: leave stream out.", "stream")
        return _stored(store, response_id).response

    @app.delete("/v1/responses/{response_id}")
    async def delete(response_id: str) -> dict[str, Any]:
        _stored(store, response_id)
        store.delete(response_id)
        return {"id": response_id, "object": "response", "deleted": True}


def _stored(store: ResponseStore, response_id: str, param: str = "response_id") -> StoredResponse:
    stored = store.get(response_id)
    if stored is None:
        raise ApiError(
            404,
            f"No response with id {response_id!r} is stored here: it was created with store: false, deleted, "
            f"or forgotten (the server keeps the last {store.capacity} and none across restarts).",
            param,
            "not_found_error",
        )
    return stored


def _conversation(
    body: ResponseRequest, store: ResponseStore, image: ImageReader | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The conversation through this request's input: as items (to store), and as chat messages.

    The messages start with the request's instructions, then the previous response's conversation;
    ``image`` reads ``input_image`` parts (a vision-language model), None refuses them.
    """
    history: Sequence[dict[str, Any]] = ()
    if body.previous_response_id is not None:
        history = _stored(store, body.previous_response_id, "previous_response_id").items
    items = [*parse_input(list(history), "previous_response_id"), *parse_input(body.input)]
    messages = _messages(items, first=len(history), image=image)
    if not any(m["role"] != "system" for m in messages):
        raise ApiError(400, "input is empty: send a message to answer (a string, or a list of items).", "input")
    if body.instructions:
        messages.insert(0, {"role": "system", "content": body.instructions})
    return [*history, *_input_dicts(body.input)], messages


# ------------------------------------------------------------------------------- request -> options
def _check_fields(body: ResponseRequest) -> None:
    """Refuse what would change the answer's meaning here; log what is ignored; an unknown field is a 400."""
    if body.background:
        raise ApiError(
            400,
            "background: true is not supported: a response runs while its request is open. "
            "Leave background out, and stream the response (stream: true) to see it as it is written.",
            "background",
        )
    if body.conversation is not None:
        raise ApiError(
            400,
            "conversation is not supported here: continue a conversation with previous_response_id, "
            "or send its items in input.",
            "conversation",
        )
    if body.prompt is not None:
        raise ApiError(
            400, "prompt (a stored prompt template) is not supported here: send instructions and input.", "prompt"
        )
    extra = body.extra_fields()
    unknown = sorted(k for k in extra if k not in IGNORED_FIELDS and k not in LIBRARY_FIELDS and k != "reasoning")
    if unknown:  # an unknown name is no bad value: ignored, and said once in the log (as on the other routes)
        _UNKNOWN.warn("/v1/responses", {name: "not a Responses API field this server reads" for name in unknown})
    ignored = sorted(k for k in extra if k in IGNORED_FIELDS and extra[k] is not None)
    if body.text is not None and body.text.verbosity is not None:
        ignored.append("text.verbosity")
    if ignored:
        _log.warning("/v1/responses: ignoring %s (OpenAI service settings with no effect here)", ", ".join(ignored))


_UNKNOWN = FieldWarnings()


def _options(body: ResponseRequest) -> RequestOptions:
    extra = body.extra_fields()
    library = {k: v for k, v in extra.items() if k in LIBRARY_FIELDS and v is not None}
    reasoning = extra.get("reasoning")
    effort = reasoning.get("effort") if isinstance(reasoning, dict) else None
    options = RequestOptions(
        max_new_tokens=body.max_output_tokens,
        temperature=body.temperature,
        top_p=body.top_p,
        tools=_tools(body.tools),
        tool_choice=_tool_choice(body.tool_choice, body.tools),
        parallel_tool_calls=body.parallel_tool_calls,
        response_format=_response_format(body.text.format if body.text is not None else None),
        **library,
    )
    return with_thinking(options, effort)  # reasoning.effort: "none"/"minimal" switch thinking off


def _tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Responses' flat function tools in chat's form (``{"type": "function", "function": {...}}``)."""
    if not tools:
        return None
    out = []
    for i, tool in enumerate(tools):
        kind = tool.get("type")
        if kind != "function":
            raise ApiError(
                400,
                f"tools[{i}] has type {kind!r}: this server runs no hosted tools (web search, file search, code "
                "interpreter, MCP...). Declare your own functions as {'type': 'function', 'name': ..., "
                "'parameters': {...}} and run them yourself.",
                f"tools[{i}].type",
            )
        if not isinstance(tool.get("name"), str):
            raise ApiError(
                400, f"tools[{i}] needs a function name: {{'type': 'function', 'name': ...}}.", f"tools[{i}].name"
            )
        function = {k: tool[k] for k in ("name", "description", "parameters", "strict") if tool.get(k) is not None}
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(
    choice: str | dict[str, Any] | None, tools: list[dict[str, Any]] | None
) -> str | dict[str, Any] | None:
    """``"none"`` / ``"auto"`` / ``"required"``, or a named function in chat's form."""
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        name = choice["name"]
        names = [str(t.get("name")) for t in tools or ()]
        if name not in names:
            raise ApiError(
                400,
                f"tool_choice names function {name!r}, which is not among the tools ({', '.join(names) or 'none'}): "
                "add it to tools or name one of those.",
                "tool_choice",
            )
        return {"type": "function", "function": {"name": name}}
    if choice == "required" and not tools:
        raise ApiError(
            400, "tool_choice 'required' needs tools: declare them in tools, or leave tool_choice out.", "tool_choice"
        )
    if choice is None or choice in _TOOL_MODES:
        return choice
    raise ApiError(
        400,
        "tool_choice must be 'none', 'auto', 'required' or {'type': 'function', 'name': ...} "
        f"(hosted-tool, custom and allowed_tools choices are not supported here), got {choice!r}.",
        "tool_choice",
    )


def _response_format(text_format: dict[str, Any] | None) -> dict[str, Any] | None:
    """``text.format`` as chat's ``response_format`` (the library compiles the schema)."""
    kind = text_format.get("type") if text_format is not None else "text"
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        assert text_format is not None  # kind was read from it
        schema = text_format.get("schema")
        if not isinstance(schema, dict):
            raise ApiError(
                400,
                'text.format of type json_schema needs "schema": a JSON schema object, beside "name".',
                "text.format.schema",
            )
        inner = {k: text_format[k] for k in ("name", "description", "strict") if text_format.get(k) is not None}
        return {"type": "json_schema", "json_schema": {**inner, "schema": schema}}
    raise ApiError(
        400, f"text.format has type {kind!r}: use 'text', 'json_object' or 'json_schema'.", "text.format.type"
    )


# ------------------------------------------------------------------------------- items -> messages
def _messages(items: Sequence[InputItem], *, first: int, image: ImageReader | None) -> list[dict[str, Any]]:
    """The conversation as chat messages; ``items[first:]`` are this request's input (named in errors).

    Consecutive function calls (and the assistant text just before them) are one assistant
    message; each output must follow its call. A reasoning item's text is the ``reasoning_content`` of
    the assistant turn it belongs to: the message or calls after it, up to the next user, system or
    tool-result item (else the assistant message just before it). A turn with reasoning only (cut
    while the model reasoned) has nothing for a template to write it with: its reasoning is left out.
    """
    messages: list[dict[str, Any]] = []
    calls: set[str] = set()
    reasoning: list[str] = []  # the current turn's reasoning not yet given to one of its messages

    def assistant(message: dict[str, Any]) -> dict[str, Any]:
        """``message`` (the turn's assistant message) with the reasoning so far added to its own."""
        if any(reasoning):
            message["reasoning_content"] = message.get("reasoning_content", "") + "".join(reasoning)
        reasoning.clear()
        return message

    def end_turn() -> None:
        if reasoning and messages and messages[-1]["role"] == "assistant":
            assistant(messages[-1])
        reasoning.clear()

    for k, item in enumerate(items):
        where = f"input[{k - first}]" if k >= first else "previous_response_id"
        if isinstance(item, ReasoningItem):
            reasoning.append(item.text(where))  # empty for an item with no text part (OpenAI's opaque ones)
        elif isinstance(item, MessageItem):
            role = "system" if item.role == "developer" else item.role
            if role != "assistant":
                end_turn()
            message = {"role": role, "content": item.content_for(where, image)}
            messages.append(assistant(message) if role == "assistant" else message)
        elif isinstance(item, FunctionCallItem):
            call = {
                "id": item.call_id,
                "type": "function",
                "function": {"name": item.name, "arguments": _arguments(item, where)},
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                assistant(last).setdefault("tool_calls", []).append(call)
            else:
                messages.append(assistant({"role": "assistant", "content": "", "tool_calls": [call]}))
            calls.add(item.call_id)
        elif isinstance(item, FunctionCallOutputItem):
            end_turn()
            if item.call_id not in calls:
                raise ApiError(
                    400,
                    f"{where}: no function_call with call_id {item.call_id!r} comes before this function_call_output. "
                    "Send the call first (in input, or through previous_response_id), or correct the call_id.",
                    f"{where}.call_id",
                )
            messages.append({"role": "tool", "tool_call_id": item.call_id, "content": item.text(where)})
    end_turn()
    return messages


def _arguments(item: FunctionCallItem, where: str) -> dict[str, Any]:
    try:
        arguments = json.loads(item.arguments)
    except ValueError:
        arguments = None
    if not isinstance(arguments, dict):
        raise ApiError(
            400, f"{where}.arguments must be a JSON object, as text: got {item.arguments!r}.", f"{where}.arguments"
        )
    return arguments


def _input_dicts(value: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """This request's input items as they are stored (a string is a user message)."""
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    return list(value)


# ------------------------------------------------------------------------------- running a response
@dataclass
class _Run:
    """One response: the stream of its generation, turned into output items, then stored."""

    body: ResponseRequest
    stream: ChunkStream
    store: ResponseStore
    conversation: list[dict[str, Any]]  # the stored conversation through this request's input
    id: str = field(default_factory=lambda: new_id("resp"))
    created: int = field(default_factory=now)
    response: dict[str, Any] = field(default_factory=dict)  # the answer, once its items are written

    async def collect(self) -> dict[str, Any]:
        """The whole response (an error while generating is raised: the route answers its status)."""
        try:
            async with contextlib.aclosing(self._items(TurnOutput())) as events:
                async for _ in events:
                    pass
        finally:
            await self.stream.aclose()
        return self.response

    async def events(self) -> AsyncGenerator[dict[str, Any], None]:
        """The response's stream events, numbered; an error while generating ends them with response.failed."""
        number = 0

        def numbered(event: dict[str, Any]) -> dict[str, Any]:
            nonlocal number
            number += 1
            return {**event, "sequence_number": number - 1}

        started = self._object("in_progress", [])
        yield numbered({"type": "response.created", "response": started})
        yield numbered({"type": "response.in_progress", "response": started})
        output = TurnOutput()
        try:
            async with contextlib.aclosing(self._items(output)) as events:
                async for event in events:
                    yield numbered(event)
        except Exception as exc:  # reported in the stream: its status line went out already
            _log.error("response %s failed after it started: %s", self.id, exc)
            error = {"code": "server_error", "message": reason(exc) or type(exc).__name__}
            self.response = self._object("failed", output.items, error=error)
            yield numbered({"type": "response.failed", "response": self.response})
            return
        finally:
            await self.stream.aclose()
        kind = "response.incomplete" if self.response["status"] == "incomplete" else "response.completed"
        yield numbered({"type": kind, "response": self.response})

    async def _items(self, output: TurnOutput) -> AsyncGenerator[dict[str, Any], None]:
        finish, reasoning_tokens = "eos", 0
        async for step in turn_steps(self.stream):
            if step.chunk.token_id is not None and any(isinstance(e, ReasoningDelta) for e in step.events):
                reasoning_tokens += 1
            for event in output.feed(step.events):
                yield event
            finish = step.finish or finish
        cut = finish == "length"
        for event in output.close(cut=cut):
            yield event
        usage = {
            "input_tokens": self.stream.prompt_tokens,
            "input_tokens_details": {"cached_tokens": self.stream.cached_tokens, "cache_write_tokens": 0},
            "output_tokens": self.stream.generated,
            "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
            "total_tokens": self.stream.prompt_tokens + self.stream.generated,
        }
        incomplete = {"reason": "max_output_tokens"} if cut else None
        self.response = self._object("incomplete" if cut else "completed", output.items, usage, incomplete=incomplete)
        if self.body.store is not False:
            # an unfinished call is no call to continue from: it stays in the response, not the conversation
            said = [i for i in output.items if not (i["type"] == "function_call" and i["status"] != "completed")]
            self.store.put(self.id, StoredResponse(self.response, (*self.conversation, *said)))

    def _object(
        self,
        status: str,
        output: list[dict[str, Any]],
        usage: dict[str, Any] | None = None,
        *,
        error: dict[str, Any] | None = None,
        incomplete: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The response object, with the request's settings echoed as OpenAI's does."""
        body = self.body
        text = body.text.model_dump(exclude_none=True) if body.text is not None else {}
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "completed_at": now() if status == "completed" else None,
            "error": error,
            "incomplete_details": incomplete,
            "instructions": body.instructions,
            "max_output_tokens": body.max_output_tokens,
            "model": body.model,
            "output": output,
            "parallel_tool_calls": body.parallel_tool_calls is not False,
            "previous_response_id": body.previous_response_id,
            "reasoning": None,
            "store": body.store is not False,
            "temperature": body.temperature,
            "text": {"format": {"type": "text"}, **text},
            "tool_choice": body.tool_choice if body.tool_choice is not None else "auto",
            "tools": body.tools or [],
            "top_p": body.top_p,
            "truncation": "disabled",
            "usage": usage,
            "user": body.user,
            "metadata": body.metadata or {},
            "background": False,
        }


async def _named(events: AsyncGenerator[dict[str, Any], None]) -> AsyncGenerator[tuple[str, Any], None]:
    """The Responses events, each named by its ``type``."""
    async with contextlib.aclosing(events):
        async for event in events:
            yield event["type"], event
