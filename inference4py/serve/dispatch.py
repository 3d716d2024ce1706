"""From a parsed request to running generations: which worker answers it, and its streams opened together.

Shared by every text API the server speaks (chat completions, completions, Messages, Responses): the
routes differ in their protocol, not in how a model is chosen or a request started.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from inference4py.generation.result import GenerationResult
from inference4py.serve.protocol import ApiError
from inference4py.serve.registry import ModelRegistry
from inference4py.serve.worker import ChunkStream, ModelWorker
from inference4py.tasks.kinds import CHAT_KINDS, TEXT_KINDS, Kind
from inference4py.tasks.options import RequestOptions

if TYPE_CHECKING:
    from starlette.requests import Request

__all__ = [
    "CHAT_KINDS",
    "TEXT_KINDS",
    "collect_all",
    "named_model",
    "open_all",
    "require_kind",
    "text_worker",
    "with_thinking",
]

# OpenAI's reasoning_effort (chat) / reasoning.effort (Responses) as a thinking switch
_EFFORT_THINKS = {"none": False, "minimal": False, "low": True, "medium": True, "high": True}


def named_model(models: ModelRegistry, name: str, route: str) -> str:
    """``name``, or for a request that names no model, the one served model that answers ``route``.

    A chat or completion request without ``model`` goes to the only model that can answer it, as
    llama-server and vLLM take it; with several, ``model`` is required.

    Raises:
        ApiError: 400, no model named and not exactly one that answers ``route``.
    """
    if name:
        return name
    able = models.names(*(CHAT_KINDS if route == "chat" else TEXT_KINDS))
    if len(able) != 1:
        raise ApiError(
            400, f"model: Field required: name one of the served models ({', '.join(able) or 'none'}).", "model"
        )
    return able[0]


def require_kind(models: ModelRegistry, name: str, kind: Kind, *, refusal: str, served: str, none_served: str) -> None:
    """Refuse model ``name`` unless it is of ``kind``, saying which models of that kind are served.

    Raises:
        ApiError: 400 for a model of another kind: ``refusal``, then ``served`` and the names of the
            models of ``kind`` served here (``none_served`` when there are none); 404 for a model not
            served (:meth:`ModelRegistry.kind`).
    """
    if models.kind(name) != kind:
        names = models.names(kind)
        hint = f"{served}: {', '.join(names)}." if names else none_served
        raise ApiError(400, f"{refusal} {hint}", "model")


async def text_worker(models: ModelRegistry, name: str, route: str, request: Request) -> ModelWorker:
    """The worker of model ``name`` (loaded first when it is not), when it can answer ``route`` ("chat" or "completions").

    The model's kind is checked before it is loaded; it is then held until ``request`` is answered.

    Raises:
        ApiError: 404 for a model not served, 400 for one that cannot answer this route, and as
            :meth:`ModelRegistry.worker` (500 a load that fails, 503 no room to load).
    """
    kind = models.kind(name)
    if kind == "embedding":
        raise ApiError(400, f"{name!r} is an embedding model: send its input to /v1/embeddings.", "model")
    if kind == "reranker":
        raise ApiError(400, f"{name!r} is a reranker: send a query and documents to /v1/rerank.", "model")
    if kind == "speech":
        raise ApiError(
            400,
            f"{name!r} is a speech model: send audio to /v1/audio/transcriptions or /v1/audio/translations.",
            "model",
        )
    if route == "chat" and kind == "encoder-decoder":
        texts = models.names(*CHAT_KINDS)
        raise ApiError(
            400,
            f"{name!r} is an encoder-decoder model without a chat template: send its input as the prompt of "
            f"/v1/completions. Chat models served here: {', '.join(texts) or 'none'}.",
            "model",
        )
    if route == "completions" and kind == "vision":
        raise ApiError(
            400,
            f"{name!r} is a vision-language model: send its prompt and images as a chat to /v1/chat/completions "
            "(or /v1/responses, /v1/messages).",
            "model",
        )
    return await models.worker(name, request)


def _per_choice(n: int, options: RequestOptions) -> list[RequestOptions]:
    """One option set per choice; with a seed, choice i samples with seed + i (reproducible n > 1)."""
    if n == 1 or options.seed is None:
        return [options] * n
    return [options.replace(seed=options.seed + i) for i in range(n)]


async def open_all(worker: ModelWorker, prompt: Any, options: RequestOptions, n: int = 1) -> list[ChunkStream]:
    """The request's ``n`` generations, all submitted before any is read (they share the batch).

    Each has produced its first chunk, so an invalid request is refused before a response starts.
    """
    opened: list[ChunkStream] = []
    try:
        for choice_options in _per_choice(n, options):
            opened.append(await worker.open(prompt, choice_options))
    except BaseException:
        for stream in opened:
            await stream.aclose()
        raise
    return opened


async def collect_all(worker: ModelWorker, prompt: Any, options: RequestOptions, n: int = 1) -> list[GenerationResult]:
    """The request's ``n`` results (tool calls parsed); with a seed, choice i samples with seed + i."""
    streams = await open_all(worker, prompt, options, n)
    try:
        return [await stream.collect() for stream in streams]
    finally:
        for stream in streams:
            await stream.aclose()


def with_thinking(options: RequestOptions, switch: bool | str | None) -> RequestOptions:
    """``options`` with a reasoning template's thinking switched on or off, as each API asks for it.

    ``switch`` is a bool (Anthropic's ``thinking.type`` enabled / disabled) or an OpenAI effort
    (``"none"`` and ``"minimal"`` switch thinking off; ``"low"``..``"high"`` on); None leaves the
    template's default. It reaches the chat template as ``enable_thinking`` (the variable Qwen3's and
    SmolLM3's templates read) and an effort of ``"low"``, ``"medium"`` or ``"high"`` also as
    ``reasoning_effort`` (gpt-oss's template, which knows those three); a template without such a switch
    ignores them. The request's own ``chat_template_kwargs`` win.

    Raises:
        ApiError: an effort that is none of OpenAI's.
    """
    if switch is None:
        return options
    if isinstance(switch, str):
        if switch not in _EFFORT_THINKS:
            raise ApiError(
                400,
                f"reasoning effort {switch!r} is none of {', '.join(_EFFORT_THINKS)}.",
                "reasoning_effort",
            )
        effort: dict[str, Any] = {"reasoning_effort": switch} if _EFFORT_THINKS[switch] else {}
        switch = _EFFORT_THINKS[switch]
    else:
        effort = {}
    kwargs = {"enable_thinking": switch, **effort, **(options.chat_template_kwargs or {})}
    return options.replace(chat_template_kwargs=kwargs)
