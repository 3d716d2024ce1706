"""The Ray Serve deployments of :mod:`inference4py.serve.ray_serve` (imported only where Ray Serve runs them).

* :class:`PrefixAffinityRouter`: Serve's ``RequestRouter`` for conversations;
* :class:`ModelServer`: one replica, the server's app in process;
* :class:`Ingress`: the HTTP entry, every route forwarded to a replica and streamed back.
"""

# No "from __future__ import annotations": FastAPI reads the route's parameter types from the class Serve rewrites.
import json
import logging
import random
from collections.abc import AsyncIterator, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from ray import serve
from ray.serve.request_router import FIFOMixin, RequestRouter

from inference4py.serve.forwarding import (
    REPLICA_HEADER,
    AppCaller,
    ForwardedRequest,
    ResponseOwners,
    conversation_start,
    previous_response,
    rendezvous,
    request_body,
    response_id,
)
from inference4py.serve.settings import ServerSettings

__all__ = ["Ingress", "ModelServer", "PrefixAffinityRouter"]

_log = logging.getLogger("inference4py.serve")
_METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"]


class PrefixAffinityRouter(FIFOMixin, RequestRouter):
    """One replica per prompt prefix (rendezvous hashing), the least loaded one when it is busy."""

    def initialize_state(self, imbalance: int = 4) -> None:  # type: ignore[override]  # Serve passes its kwargs
        self._imbalance = imbalance

    async def choose_replicas(self, candidate_replicas: list[Any], pending_request: Any = None) -> list[list[Any]]:
        if not candidate_replicas:
            return []
        forwarded = None
        if pending_request is not None:
            forwarded = next((a for a in pending_request.args if isinstance(a, ForwardedRequest)), None)
        key = forwarded.prompt if forwarded is not None else ""
        if forwarded is not None and forwarded.replica is not None:  # it holds the previous response
            held = [r for r in candidate_replicas if r.replica_id.unique_id == forwarded.replica]
            if held:
                return [held]
        lengths = self.replica_queue_len_cache

        def load(replica: Any) -> int:
            value = lengths.get(replica.replica_id)
            return int(value) if value is not None else 0

        if not key:  # nothing to keep together: the less loaded of two, as Serve's default router does
            two = random.sample(candidate_replicas, min(2, len(candidate_replicas)))
            return [sorted(two, key=load)]
        ranked = sorted(candidate_replicas, key=lambda r: rendezvous(key, r.replica_id.unique_id), reverse=True)
        lightest = min(candidate_replicas, key=load)
        if load(ranked[0]) - load(lightest) > self._imbalance:
            ranked.remove(lightest)
            ranked.insert(0, lightest)
        return [[r] for r in ranked]


class ModelServer:
    """One replica: the models loaded, the server's app running in process."""

    async def __init__(  # type: ignore[misc]  # Serve awaits an async constructor
        self, models: Sequence[str], names: Sequence[str], settings: ServerSettings
    ) -> None:
        from inference4py.serve import create_app, load_models

        context = serve.get_replica_context()
        self.replica = context.replica_id.unique_id
        loaded = (
            load_models(models, names, kv_cache=settings.kv_cache_for, chat_template=settings.chat_template_for)
            if models
            else {}
        )
        self._caller = AppCaller(create_app(loaded, settings), self.replica)
        await self._caller.start()

    async def handle(self, request: ForwardedRequest) -> AsyncIterator[Any]:
        async for piece in self._caller(request):
            yield piece

    async def check_health(self) -> None:
        """Serve's health check: the app still answers ``/health`` (a replica whose models broke is replaced)."""
        start: Any = None
        async for piece in self._caller(ForwardedRequest("GET", "/health", b"", [], b"")):
            if start is None:
                start = piece
        if not start or start["status"] != 200:
            raise RuntimeError(f"replica {self.replica}: /health answered {start and start['status']}")


async def _rest(stream: Any, events: bool, owners: ResponseOwners | None, replica: str) -> AsyncIterator[bytes]:
    """The body after its start; a replica lost mid-stream ends an event stream with an error event.

    ``owners``: a Responses answer, whose id (in its JSON or the stream's first event) is remembered
    with the replica that made it.
    """
    try:
        async for piece in stream:
            if owners is not None and (found := response_id(piece)) is not None:
                owners.remember(found, replica)
                owners = None
            yield piece
    except Exception as exc:  # noqa: BLE001 - the replica died or was cancelled
        _log.warning("a replica was lost mid-response: %s", exc)
        if events:
            message = f"The replica serving this stream was lost ({type(exc).__name__}). Retry the request."
            error = {"error": {"message": message, "type": "server_error", "param": None, "code": "replica_lost"}}
            yield f"event: error\ndata: {json.dumps(error)}\n\n".encode()


app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)


@serve.ingress(app)
class Ingress:
    """The HTTP entry: each request forwarded to a ``ModelServer`` replica, its answer streamed back."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.owners = ResponseOwners()

    @app.api_route("/{path:path}", methods=_METHODS)
    async def forward(self, request: Request, path: str) -> Response:
        body = await request.body()
        data = request_body(path, body)  # parsed once, for the router's prefix and a Responses follow-up
        responses = path.rstrip("/").endswith("v1/responses")
        owner = self.owners.owner(previous_response(data)) if responses else None
        forwarded = ForwardedRequest(
            request.method,
            path,
            request.url.query.encode(),
            list(request.scope["headers"]),
            body,
            conversation_start(data),
            owner,
        )
        stream = self.model.options(stream=True).handle.remote(forwarded)
        try:
            start = await stream.__anext__()
        except Exception as exc:  # noqa: BLE001 - no replica answered: the API's own error object, 503
            return JSONResponse(
                {
                    "error": {
                        "message": f"No replica could answer ({type(exc).__name__}: {exc}). Retry shortly.",
                        "type": "server_error",
                        "param": None,
                        "code": "replica_unavailable",
                    }
                },
                status_code=503,
                headers={"Retry-After": "1"},
            )
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in start["headers"]}
        events = "text/event-stream" in headers.get("content-type", "")
        owners = self.owners if responses and start["status"] == 200 else None
        body_stream = _rest(stream, events, owners, headers.get(REPLICA_HEADER, ""))
        return StreamingResponse(body_stream, status_code=start["status"], headers=headers)
