"""What a request must pass before a route sees it: the API key, the body size limit, and CORS.

Plain ASGI (not Starlette's BaseHTTPMiddleware) so streamed responses and disconnect detection
pass through untouched.  Refusals are the route's API's error objects (:mod:`inference4py.serve.errors`):
401 for a missing or wrong key, 413 for a body over the limit, 400 for a malformed Content-Length.
CORS (:func:`add_cors`) answers browsers' preflights for the configured origins, before the key check:
a preflight carries no key.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from inference4py.serve.asgi import ASGIApp, Message, Receive, Scope, Send
from inference4py.serve.errors import error_payload

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = ["Guard", "add_cors"]


_OPEN_PATHS = frozenset({"/health", "/"})  # the page itself holds no secret: it asks for the key


def add_cors(app: FastAPI, origins: Sequence[str]) -> None:
    """Let browser pages from ``origins`` call ``app`` (added last, so it is outermost: refusals carry CORS too).

    No credentials mode: the API key travels in the Authorization header, which a preflight lists
    and the answer allows, never in a cookie; so ``"*"`` is valid (browsers refuse ``*`` only with
    credentials) and every origin is treated alike. A page on a public origin that calls a server on
    this machine or network gets Chrome's private-network preflight allowed, as its origin was named.
    """
    from starlette.middleware.cors import CORSMiddleware

    app.add_middleware(
        CORSMiddleware,
        allow_origins=["*"] if "*" in origins else list(origins),
        allow_methods=["*"],
        allow_headers=["*"],  # mirrors the preflight's list, so Authorization is allowed by name
        allow_credentials=False,
        allow_private_network=True,
        expose_headers=["Retry-After"],
    )


class Guard:
    """Checks ``Authorization: Bearer <api_key>`` (when a key is set) and that bodies stay under ``max_body`` bytes."""

    def __init__(self, app: ASGIApp, *, api_key: str | None, max_body: int) -> None:
        self.app = app
        self.api_key = api_key.encode() if api_key else None
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.lower(): v for k, v in scope.get("headers", [])}
        path = scope["path"]
        if self.api_key is not None and path not in _OPEN_PATHS and scope["method"] != "OPTIONS":
            given = _given_key(headers)
            if given is None or not hmac.compare_digest(given, self.api_key):
                message = (
                    "Missing API key: send the header 'Authorization: Bearer <key>' or 'x-api-key: <key>' (the key "
                    "the server was started with)."
                    if given is None
                    else "Incorrect API key: send the key the server was started with (--api-key / INFERENCE4PY_API_KEY)."
                )
                await _answer(send, 401, error_payload(path, message, "authentication_error", code="invalid_api_key"))
                return
        length = headers.get(b"content-length")
        if length is not None:
            try:
                size = int(length)
            except ValueError:
                await _answer(
                    send, 400, error_payload(path, "The Content-Length header is not a number.", param="Content-Length")
                )
                return
            if size > self.max_body:
                await _drain(receive, size)  # a client still sending would see a broken pipe, not the answer
                await _answer(send, 413, self._too_large(path, size))
                return
            await self.app(scope, receive, send)
            return
        if scope["method"] in ("POST", "PUT", "PATCH"):
            # a chunked body: read it here, up to the limit, then hand it to the app as one message
            body = bytearray()
            while True:
                part = await receive()
                if part["type"] != "http.request":
                    return  # the client left
                body += part.get("body", b"")
                if len(body) > self.max_body:
                    if part.get("more_body", False):
                        await _drain(receive, len(body))
                    await _answer(send, 413, self._too_large(path, None))
                    return
                if not part.get("more_body", False):
                    break
            await self.app(scope, _replay(bytes(body), receive), send)
            return
        await self.app(scope, receive, send)

    def _too_large(self, path: str, size: int | None) -> dict[str, Any]:
        got = f" ({size} bytes)" if size is not None else ""
        return error_payload(
            path,
            f"The request body{got} is larger than this server accepts ({self.max_body} bytes). Send less, "
            "or start the server with a larger --max-body-mb.",
            code="request_too_large",
        )


def _given_key(headers: dict[bytes, bytes]) -> bytes | None:
    """The key a client sent: OpenAI's SDKs send ``Authorization: Bearer``, Anthropic's ``x-api-key``."""
    authorization = headers.get(b"authorization")
    if authorization:
        scheme, _, token = authorization.partition(b" ")
        return token.strip() if scheme.lower() == b"bearer" else b""
    key = headers.get(b"x-api-key")
    return key.strip() if key is not None else None


_DRAIN_LIMIT = 256 << 20  # past this, the connection is answered (and closed) without reading on


async def _drain(receive: Receive, size: int) -> None:
    """Read and drop a refused body (up to a limit), so the client is listening when the answer comes."""
    if size > _DRAIN_LIMIT:
        return
    while True:
        part = await receive()
        if part["type"] != "http.request" or not part.get("more_body", False):
            return


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _answer(send: Send, status: int, payload: dict[str, Any]) -> None:
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
