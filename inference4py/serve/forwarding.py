"""Requests forwarded from Ray Serve's ingress to a replica, and the replica's in-process call of the server's app.

Shared by :mod:`inference4py.serve.ray_serve` (which builds the application) and
:mod:`inference4py.serve.ray_deployments` (the deployments themselves); nothing here imports Ray.

* :class:`ForwardedRequest`: one HTTP request as it travels, with the conversation's start
  (:func:`prefix_key`) the router reads and, for a Responses follow-up, the replica that holds the
  previous answer (:class:`ResponseOwners`);
* :class:`AppCaller`: the ASGI app run in process, its lifespan once, then one request per call,
  the response as a start (status, headers) and the body's pieces;
* :func:`rendezvous`: highest-random-weight hashing of a prefix onto replicas.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

__all__ = [
    "REPLICA_HEADER",
    "AppCaller",
    "ForwardedRequest",
    "ResponseOwners",
    "conversation_start",
    "prefix_key",
    "previous_response",
    "request_body",
    "rendezvous",
    "response_id",
]

REPLICA_HEADER = "x-inference4py-replica"
PREFIX_CHARS = 2048  # how much of a conversation's start names it
_HOP_HEADERS = {b"content-length", b"transfer-encoding", b"connection"}


@dataclass
class ForwardedRequest:
    """One HTTP request as the ingress passes it to a replica (``prompt``: the prefix the router reads)."""

    method: str
    path: str
    query: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes
    prompt: str = ""  # the conversation's start, as text ("" for requests without one)
    replica: str | None = None  # the replica that must answer (it holds the previous response), when known


def _text(content: Any) -> str:
    """The text of a message's content (a string, or the text parts of a list)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", "")) if isinstance(part, dict) else str(part) for part in content if part is not None
        )
    return ""


def request_body(path: str, body: bytes) -> dict[str, Any]:
    """The JSON object of an API request (``/v1/...``), read once; {} for other routes or another body."""
    if not body or not path.lstrip("/").startswith("v1/"):
        return {}
    try:
        data = json.loads(body)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def prefix_key(path: str, body: bytes) -> str:
    """:func:`conversation_start` of a request's body."""
    return conversation_start(request_body(path, body))


def conversation_start(data: dict[str, Any]) -> str:
    """The start of a request's conversation (``data``: :func:`request_body`): what a prefix cache would hold for it.

    Chat (``messages``), Messages (``system`` + ``messages``) and Responses (``instructions`` +
    ``input``): the system text and the first two messages; completions: the prompt's start.  Later
    turns of one conversation share this start, so they name the same replica.  "" when there is none.
    """
    if not data:
        return ""
    parts = [str(data.get("model", ""))]
    parts.append(_text(data.get("system")) + _text(data.get("instructions")))
    messages = data.get("messages")
    if messages is None and isinstance(data.get("input"), list):
        messages = data["input"]
    if isinstance(messages, list):
        for message in messages[:2]:
            if isinstance(message, dict):
                parts.append(f"{message.get('role', '')}:{_text(message.get('content'))}")
    elif isinstance(data.get("input"), str):
        parts.append(data["input"])
    prompt = data.get("prompt")
    if isinstance(prompt, str):
        parts.append(prompt)
    elif isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
        parts.append(prompt[0])
    text = "\n".join(parts)
    return text[:PREFIX_CHARS] if len(text) > len(parts[0]) + len(parts) else ""


_RESPONSE_ID = re.compile(rb'"id"\s*:\s*"(resp-[0-9a-f]{8,64})"')


def response_id(piece: bytes) -> str | None:
    """The id of a ``/v1/responses`` answer in a piece of its body (its JSON, or the stream's first event)."""
    found = _RESPONSE_ID.search(piece)
    return found.group(1).decode() if found else None


def previous_response(data: dict[str, Any]) -> str | None:
    """A Responses request's ``previous_response_id`` (``data``: :func:`request_body`), if it has one."""
    value = data.get("previous_response_id")
    return value if isinstance(value, str) else None


class ResponseOwners:
    """Which replica made which response (bounded, oldest forgotten first): a follow-up goes back to it,
    since each replica keeps its own answers for ``previous_response_id``."""

    def __init__(self, size: int = 65536) -> None:
        self.size = size
        self._owners: OrderedDict[str, str] = OrderedDict()

    def remember(self, response: str, replica: str) -> None:
        self._owners[response] = replica
        self._owners.move_to_end(response)
        while len(self._owners) > self.size:
            self._owners.popitem(last=False)

    def owner(self, response: str | None) -> str | None:
        return None if response is None else self._owners.get(response)


def rendezvous(key: str, replica: str) -> int:
    """The weight of ``replica`` for ``key`` (highest random weight hashing: the heaviest replica holds the key)."""
    return int.from_bytes(hashlib.blake2b(f"{key}\0{replica}".encode(), digest_size=8).digest(), "big")


class AppCaller:
    """Runs an ASGI app in process: its lifespan once, then one forwarded request at a time per call."""

    def __init__(self, app: Any, replica: str) -> None:
        self.app = app
        self.replica = replica
        self._lifespan: asyncio.Task[None] | None = None
        self._shutdown: asyncio.Event | None = None

    async def start(self) -> None:
        started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._shutdown = asyncio.Event()
        shutdown = self._shutdown
        sent_startup = False

        async def receive() -> dict[str, Any]:
            nonlocal sent_startup
            if not sent_startup:
                sent_startup = True
                return {"type": "lifespan.startup"}
            await shutdown.wait()
            return {"type": "lifespan.shutdown"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "lifespan.startup.complete" and not started.done():
                started.set_result(None)
            elif message["type"] == "lifespan.startup.failed" and not started.done():
                started.set_exception(RuntimeError(message.get("message", "the app did not start")))

        self._lifespan = asyncio.create_task(self.app({"type": "lifespan", "asgi": {"version": "3.0"}}, receive, send))
        await started

    async def stop(self) -> None:
        if self._shutdown is not None and self._lifespan is not None:
            self._shutdown.set()
            await asyncio.wait_for(self._lifespan, timeout=60)

    async def __call__(self, request: ForwardedRequest) -> AsyncIterator[Any]:
        """The response: first ``{"status", "headers"}``, then the body's pieces (bytes)."""
        messages: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        gone = asyncio.Event()
        body_sent = False

        async def receive() -> dict[str, Any]:
            nonlocal body_sent
            if not body_sent:
                body_sent = True
                return {"type": "http.request", "body": request.body, "more_body": False}
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            await messages.put(message)

        path = "/" + request.path.lstrip("/")
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": request.method,
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": request.query,
            "root_path": "",
            "headers": request.headers,
            "client": ("127.0.0.1", 0),
            "server": ("127.0.0.1", 80),
            "state": {},
        }
        task = asyncio.create_task(self.app(scope, receive, send))
        try:
            while True:
                getter = asyncio.ensure_future(messages.get())
                done, _ = await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
                if getter not in done:
                    getter.cancel()
                    if task.exception() is not None:
                        raise task.exception()  # type: ignore[misc]
                    return
                message = getter.result()
                if message["type"] == "http.response.start":
                    headers = [(k, v) for k, v in message.get("headers", []) if k.lower() not in _HOP_HEADERS]
                    headers.append((REPLICA_HEADER.encode(), self.replica.encode()))
                    yield {"status": message["status"], "headers": headers}
                elif message["type"] == "http.response.body":
                    if message.get("body"):
                        yield message["body"]
                    if not message.get("more_body", False):
                        return
        finally:
            gone.set()  # a client that left: the app cancels its job
            if not task.done():
                try:
                    await asyncio.wait_for(task, timeout=30)
                except (asyncio.TimeoutError, Exception):  # noqa: BLE001 - the response is over either way
                    task.cancel()
