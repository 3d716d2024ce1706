"""The OpenAI-compatible HTTP routes: parse the request, call the model's worker, shape the answer.

``create_app({"name": model, ...})`` returns an ASGI app (FastAPI) that a user can mount in their
own app; :func:`inference4py.serve.serve` runs it with uvicorn. Errors come back as OpenAI error
objects with the right status, never as a traceback, and the server keeps serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from inference4py.errors import (
    Inference4pyError,
    MemoryBudgetError,
    PromptTooLongError,
    QueueFullError,
    RequestTimeoutError,
)
from inference4py.generation.logprobs import TokenLogprob
from inference4py.generation.result import GenerationChunk, GenerationResult
from inference4py.serve.admin import add_admin_routes
from inference4py.serve.audio import add_audio_routes
from inference4py.serve.dispatch import collect_all, named_model, open_all, text_worker, with_thinking
from inference4py.serve.embeddings import add_embedding_routes
from inference4py.serve.errors import InternalErrors, error_payload, reason
from inference4py.serve.guard import Cors, Guard
from inference4py.serve.images import ImagePolicy, image_part, resolve_images
from inference4py.serve.messages import add_messages_routes
from inference4py.serve.metrics import prometheus
from inference4py.serve.page import add_page_route
from inference4py.serve.protocol import (
    ApiError,
    ChatCompletionRequest,
    CompletionRequest,
    FieldWarnings,
    error_body,
    new_id,
    now,
    template_messages,
)
from inference4py.serve.registry import ModelLeases, ModelRegistry
from inference4py.serve.rerank import add_rerank_routes
from inference4py.serve.responses import add_responses_routes
from inference4py.serve.settings import ServerSettings
from inference4py.serve.sse import sse
from inference4py.serve.tokenize import add_tokenize_routes
from inference4py.serve.turns import turn_steps
from inference4py.serve.worker import ChunkStream
from inference4py.tasks.options import RequestOptions
from inference4py.tasks.turn import CallArguments, CallStart, ReasoningDelta, TextDelta

__all__ = ["create_app"]

_log = logging.getLogger("inference4py.serve")
_UNION_TAGS = frozenset({"str", "list[str]", "list[int]", "int", "list[dict[str,any]]", "dict[str,any]"})
_FINISH = {"eos": "stop", "stop": "stop", "length": "length", "tool_calls": "tool_calls"}


def create_app(models: Mapping[str, Any], settings: ServerSettings | None = None) -> FastAPI:
    """An ASGI app serving ``models`` (served name -> loaded task object) over the OpenAI API.

    Args:
        models: Served name -> loaded model (``OnnxTextGenerator``, ``WhisperSpeechModel``...); these
            stay loaded.
        settings: Queue, batch, memory, time and access limits (:class:`ServerSettings`; its defaults
            when None), and the models loaded on demand (``models_dir``, ``max_loaded_models``,
            ``idle_unload``: :mod:`~inference4py.serve.registry`).

    Raises:
        ConfigurationError: as :class:`~inference4py.serve.registry.ModelRegistry`.
    """
    s = settings if settings is not None else ServerSettings()
    registry = ModelRegistry(models, s)
    images = ImagePolicy(
        tuple(s.allow_image_domains), int(s.max_image_mb * (1 << 20)), s.max_image_pixels, s.image_fetch_timeout
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        registry.start()
        yield
        await registry.close()  # the models' threads and sessions end with the server

    app = FastAPI(title="inference4py", docs_url=None, redoc_url=None, lifespan=lifespan)
    app.state.models = registry
    app.state.field_warnings = FieldWarnings()
    app.add_middleware(InternalErrors)  # innermost: a 500 keeps the connection open
    app.add_middleware(ModelLeases, models=registry)  # a model is held until its request is answered
    app.add_middleware(Guard, api_key=s.api_key, max_body=int(s.max_body_mb * (1 << 20)))
    app.add_middleware(Cors, origins=s.cors_origins)  # last, so outermost: refusals carry CORS too

    @app.exception_handler(ApiError)
    async def _http_error(request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(
            _error(request, exc.message, exc.kind, exc.param, exc.code), status_code=exc.status, headers=exc.headers
        )

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        # the path to the bad field, without pydantic's union-member tags ("stop.str" -> "stop")
        parts = [str(p) for p in first.get("loc", ()) if p != "body"]
        parts = [p for p in parts if p not in _UNION_TAGS]
        where = ".".join(parts)
        message = f"{where}: {first.get('msg', 'invalid value')}" if where else str(first.get("msg", "invalid request"))
        kind = first.get("type")
        if kind == "json_invalid":  # its location is a character offset, not a field
            message, where = "The request body is not valid JSON. Send a JSON object.", ""
        elif not where and kind in ("model_attributes_type", "dict_type", "missing"):
            sent = request.headers.get("content-type")
            if sent is None or "json" not in sent.lower():  # FastAPI reads a body as JSON only when told so
                message = (
                    f"The request body is read as JSON only with the header 'Content-Type: application/json' "
                    f"({f'got {sent!r}' if sent else 'none was sent'}): send the body with it."
                )
                return JSONResponse(_error(request, message, param="Content-Type"), status_code=400)
            message = "The request body must be a JSON object with the request's fields (model, messages or prompt...)."
        return JSONResponse(_error(request, message, param=where or None), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def _not_found(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = f"{request.method} {request.url.path}: {exc.detail}. Routes: /v1/models, /v1/chat/completions, /v1/completions, /v1/responses, /v1/messages, /v1/messages/count_tokens, /v1/embeddings, /v1/rerank, /v1/audio/transcriptions, /v1/audio/translations, /tokenize, /detokenize, /admin/models/{{name}}/load and /unload, /health, /metrics and the chat page at /."
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return JSONResponse(_error(request, message, kind), status_code=exc.status_code)

    @app.exception_handler(Inference4pyError)
    async def _library_error(request: Request, exc: Inference4pyError) -> JSONResponse:
        code = "context_length_exceeded" if isinstance(exc, PromptTooLongError) else None
        return JSONResponse(_error(request, reason(exc), code=code), status_code=400)

    @app.exception_handler(RequestTimeoutError)
    async def _timeout(request: Request, exc: RequestTimeoutError) -> JSONResponse:
        return JSONResponse(_error(request, reason(exc), "timeout_error", code="request_timeout"), status_code=408)

    @app.exception_handler(MemoryBudgetError)
    async def _no_memory(request: Request, exc: MemoryBudgetError) -> JSONResponse:
        # the server's limit, not a malformed request: it could never run here as asked (no Retry-After)
        return JSONResponse(_error(request, reason(exc), "server_error", code="insufficient_memory"), status_code=503)

    @app.exception_handler(QueueFullError)
    async def _busy(request: Request, exc: QueueFullError) -> JSONResponse:
        # overloaded, not rate-limited: this client sent nothing wrong; its SDK retries after Retry-After
        return JSONResponse(
            _error(request, reason(exc), "server_error", code="queue_full"),
            status_code=503,
            headers={"Retry-After": "1"},
        )

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(
            prometheus(registry.workers(), registry.states()), media_type="text/plain; version=0.0.4"
        )

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def list_models() -> dict[str, Any]:
        return {"object": "list", "data": registry.cards()}

    add_admin_routes(app, registry)
    add_audio_routes(app, registry)
    add_embedding_routes(app, registry)
    add_rerank_routes(app, registry)
    add_messages_routes(app, registry, images)
    add_responses_routes(app, registry, images, stored=s.responses_store)
    add_page_route(app)
    add_tokenize_routes(app, registry)

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(body: ChatCompletionRequest, request: Request) -> Any:
        body.model = named_model(registry, body.model, "chat")
        worker = await text_worker(registry, body.model, "chat", request)
        vision = registry.kind(body.model) == "vision"
        messages = template_messages(body.messages, image_part if vision else None)
        if vision:
            messages = await resolve_images(messages, images)
        options = _options(body, request).replace(
            response_format=body.response_format,
            tools=body.tools,
            tool_choice=body.tool_choice,
            parallel_tool_calls=body.parallel_tool_calls,
        )
        if body.logprobs or body.top_logprobs:
            options = options.replace(logprobs=True, top_logprobs=body.top_logprobs or 0)
        if body.reasoning_format is not None:
            options = options.replace(reasoning="inline" if body.reasoning_format in ("none", "inline") else "split")
        options = with_thinking(options, body.reasoning_effort)
        if body.stream:
            streams = await open_all(worker, messages, options, body.n)
            return sse(_unnamed(_chat_stream(body, streams)), request, done="[DONE]")
        return _chat_response(body.model, await collect_all(worker, messages, options, body.n))

    @app.post("/v1/completions", response_model=None)
    async def completions(body: CompletionRequest, request: Request) -> Any:
        body.model = named_model(registry, body.model, "completions")
        worker = await text_worker(registry, body.model, "completions", request)
        options = _options(body, request)
        if body.logprobs is not None:
            options = options.replace(logprobs=True, top_logprobs=body.logprobs)
        prompt = body.prompt
        if body.stream:
            streams = await open_all(worker, prompt, options, body.n)
            return sse(_unnamed(_completion_stream(body, streams)), request, done="[DONE]")
        return _completion_response(body.model, await collect_all(worker, prompt, options, body.n))

    return app


def _error(
    request: Request,
    message: str,
    kind: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
) -> dict[str, Any]:
    return error_payload(request.url.path, message, kind, param, code)


# ------------------------------------------------------------------------------- request -> options
def _options(body: Any, request: Request) -> RequestOptions:
    """The request options of the fields both endpoints share.

    A field the server ignores is logged once per name (never a 400 for its name alone); an OpenAI
    field it cannot honour is a 400 (``body.refusal()``).
    """
    refused = body.refusal()
    if refused is not None:
        raise refused
    request.app.state.field_warnings.warn(request.url.path, body.ignored_fields())
    logit_bias = None
    if body.logit_bias:
        try:
            logit_bias = {int(k): v for k, v in body.logit_bias.items()}
        except ValueError as exc:
            raise ApiError(400, 'logit_bias keys must be token ids, e.g. {"50256": -100}.', "logit_bias") from exc
    if body.ignore_eos and (getattr(body, "response_format", None) or getattr(body, "tools", None)):
        raise ApiError(
            400,
            "ignore_eos cannot go with response_format or tools: such an answer ends at its end token.",
            "ignore_eos",
        )
    return RequestOptions(
        max_new_tokens=body.generation_limit(getattr(body, "max_completion_tokens", None)),
        temperature=body.temperature,
        top_p=body.top_p,
        seed=body.seed,
        stop_sequences=(body.stop,)
        if isinstance(body.stop, str)
        else (tuple(body.stop) if body.stop is not None else None),
        presence_penalty=body.presence_penalty,
        frequency_penalty=body.frequency_penalty,
        logit_bias=logit_bias,
        top_k=max(body.top_k, 0) if body.top_k is not None else None,  # vLLM's -1: off
        min_p=body.min_p,
        repetition_penalty=body.repetition_penalty,
        eos_token_id=() if body.ignore_eos else None,
        chat_template_kwargs=body.chat_template_kwargs,
    )


# ------------------------------------------------------------------------------- results -> responses
def _usage(results: list[GenerationResult]) -> dict[str, int]:
    prompt = results[0].prompt_tokens
    completion = sum(r.generated_tokens for r in results)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _logprob_entry(t: TokenLogprob) -> dict[str, Any]:
    return {
        "token": t.token,
        "logprob": t.logprob,
        "bytes": list(t.token.encode("utf-8")),
        "top_logprobs": [
            {"token": a.token, "logprob": a.logprob, "bytes": list(a.token.encode("utf-8"))} for a in t.top_logprobs
        ],
    }


def _logprobs(result: GenerationResult) -> dict[str, Any] | None:
    if result.logprobs is None:
        return None
    return {"content": [_logprob_entry(t) for t in result.logprobs]}


def _chat_response(model: str, results: list[GenerationResult]) -> dict[str, Any]:
    choices = []
    for i, r in enumerate(results):
        message: dict[str, Any] = {"role": "assistant", "content": r.text}
        if r.reasoning is not None:
            message["reasoning_content"] = r.reasoning  # llama-server's and vLLM's name
        if r.tool_calls:
            message["tool_calls"] = [c.to_openai() for c in r.tool_calls]
            message["content"] = r.text or None
        choices.append(
            {"index": i, "message": message, "logprobs": _logprobs(r), "finish_reason": _FINISH[r.finish_reason]}
        )
    return {
        "id": new_id("chatcmpl"),
        "object": "chat.completion",
        "created": now(),
        "model": model,
        "choices": choices,
        "usage": _usage(results),
    }


def _completion_response(model: str, results: list[GenerationResult]) -> dict[str, Any]:
    choices = [
        {"index": i, "text": r.text, "logprobs": None, "finish_reason": _FINISH[r.finish_reason]}
        for i, r in enumerate(results)
    ]
    return {
        "id": new_id("cmpl"),
        "object": "text_completion",
        "created": now(),
        "model": model,
        "choices": choices,
        "usage": _usage(results),
    }


# ------------------------------------------------------------------------------- streaming
async def _unnamed(events: AsyncGenerator[dict[str, Any], None]) -> AsyncGenerator[tuple[None, Any], None]:
    """OpenAI's chat and completion events: ``data:`` lines without an event name."""
    async with contextlib.aclosing(events):
        async for event in events:
            yield None, event


async def _chat_stream(body: ChatCompletionRequest, streams: list[ChunkStream]) -> AsyncGenerator[dict[str, Any], None]:
    base = {"id": new_id("chatcmpl"), "object": "chat.completion.chunk", "created": now(), "model": body.model}
    for i in range(len(streams)):  # as OpenAI's: the role first, with no content yet
        role = {"index": i, "delta": {"role": "assistant", "content": None}, "logprobs": None, "finish_reason": None}
        yield {**base, "choices": [role]}
    async with contextlib.aclosing(_events(body, streams, base, _chat_choices)) as events:
        async for event in events:
            yield event


async def _chat_choices(index: int, stream: ChunkStream) -> AsyncIterator[dict[str, Any]]:
    """One choice's stream as chat deltas: content, then tool calls in OpenAI's pieces (id and name, then arguments)."""
    async for step in turn_steps(stream):
        delta: dict[str, Any] = {}
        calls: list[dict[str, Any]] = []
        for event in step.events:
            if isinstance(event, TextDelta):
                delta["content"] = delta.get("content", "") + event.text
            elif isinstance(event, ReasoningDelta):
                delta["reasoning_content"] = delta.get("reasoning_content", "") + event.text
            elif isinstance(event, CallStart):
                function = {"name": event.name, "arguments": ""}
                calls.append({"index": event.index, "id": event.id, "type": "function", "function": function})
            elif isinstance(event, CallArguments):
                calls.append({"index": event.index, "function": {"arguments": event.text}})
        if calls:
            delta["tool_calls"] = calls
        logprobs = _chunk_logprobs(step.chunk)
        if not delta and logprobs is None and step.finish is None:
            continue  # text held back (it may open a call): nothing to send yet
        reason = _FINISH[step.finish] if step.finish is not None else None
        yield {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": reason}


async def _text_choices(index: int, stream: ChunkStream) -> AsyncIterator[dict[str, Any]]:
    async for chunk in stream:
        reason = _FINISH[chunk.finish_reason] if chunk.finish_reason is not None else None
        yield {"index": index, "text": chunk.text, "logprobs": None, "finish_reason": reason}


def _chunk_logprobs(chunk: GenerationChunk) -> dict[str, Any] | None:
    if chunk.logprob is None:
        return None
    return {"content": [_logprob_entry(chunk.logprob)]}


async def _completion_stream(
    body: CompletionRequest, streams: list[ChunkStream]
) -> AsyncGenerator[dict[str, Any], None]:
    base = {"id": new_id("cmpl"), "object": "text_completion", "created": now(), "model": body.model}
    async with contextlib.aclosing(_events(body, streams, base, _text_choices)) as events:
        async for event in events:
            yield event


async def _events(
    body: Any,
    streams: list[ChunkStream],
    base: dict[str, Any],
    choices: Callable[[int, ChunkStream], AsyncIterator[dict[str, Any]]],
) -> AsyncGenerator[dict[str, Any], None]:
    """Each choice's events (``choices(index, stream)``), as they come, then the usage event when asked for."""
    merged: asyncio.Queue[tuple[int, dict[str, Any] | BaseException | None]] = asyncio.Queue()

    async def pump(index: int, stream: ChunkStream) -> None:
        try:
            async for choice in choices(index, stream):
                await merged.put((index, choice))
        except Exception as exc:  # forwarded to the event stream
            await merged.put((index, exc))
        await merged.put((index, None))

    tasks = [asyncio.create_task(pump(i, s)) for i, s in enumerate(streams)]
    try:
        open_streams = len(streams)
        while open_streams:
            index, item = await merged.get()
            if item is None:
                open_streams -= 1
            elif isinstance(item, BaseException):
                _log.error("a streamed request failed after its first event: %s", item)
                yield {**base, "choices": [], "error": error_body(reason(item), "server_error")["error"]}
                return
            else:
                yield {**base, "choices": [item]}
    finally:
        for task in tasks:
            task.cancel()
        for stream in streams:
            await stream.aclose()
    if body.stream_options is not None and body.stream_options.include_usage:
        prompt_tokens = streams[0].prompt_tokens
        generated = sum(s.generated for s in streams)
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": generated,
            "total_tokens": prompt_tokens + generated,
        }
        yield {**base, "choices": [], "usage": usage}
