"""What a request must pass before a route sees it: the API key, the body size limit, and CORS.

Plain ASGI (not Starlette's BaseHTTPMiddleware) so streamed responses and disconnect detection
pass through untouched.  Refusals are the route's API's error objects (:mod:`inference4py.serve.errors`):
401 for a missing or wrong key, 413 for a body over the limit, 400 for a malformed Content-Length.
:class:`Cors` answers browsers' preflights, before the key check (a preflight carries no key), and
refuses calls from web pages elsewhere than this machine or the origins given.
"""

from __future__ import annotations

import hmac
import json
import logging
import re
from collections.abc import Sequence
from typing import Any

from inference4py.serve.asgi import ASGIApp, Message, Receive, Scope, Send
from inference4py.serve.errors import error_payload

__all__ = ["Cors", "Guard"]

_log = logging.getLogger("inference4py.serve")


_OPEN_PATHS = frozenset({"/health", "/"})  # the page itself holds no secret: it asks for the key


#: Origins of pages on this machine: localhost, 127.0.0.1 or [::1], any port (ollama's default).
_LOCAL_ORIGIN = re.compile(r"(?:https?://)?(?:localhost|127\.0\.0\.1|\[::1\])(?::\d{1,5})?", re.IGNORECASE)
_METHODS = b"GET, POST, DELETE, OPTIONS"  # what the routes take


class Cors:
    """Browsers' cross-origin rules: which web pages may call the API (outermost: refusals carry them too).

    A page on this machine (``http://localhost:3000``, ``http://127.0.0.1``, ``http://[::1]:8080``),
    a page of the server itself, or one of ``origins`` may call it; ``"*"`` in ``origins`` lets any
    page. A preflight (``OPTIONS`` with ``Origin`` and ``Access-Control-Request-Method``) is answered
    here, before the key check (it carries no key): 200 with the allowed methods and the requested
    headers by name (so ``Authorization`` passes) for an allowed origin, 200 without them otherwise
    (the browser then refuses the call). Any other request that a page elsewhere sends (one a browser
    does not preflight, e.g. a form post) is refused with 403 before it reaches a model: a web page
    must not drive a model on this machine. Requests without ``Origin`` (SDKs, curl) pass untouched.
    No credentials mode: the API key travels in the Authorization header, never in a cookie.
    """

    def __init__(self, app: ASGIApp, *, origins: Sequence[str]) -> None:
        self.app = app
        self.any = "*" in origins
        self.origins = frozenset(o.lower() for o in origins if o != "*")
        self._warned: set[str] = set()

    def allows(self, origin: str, host: str | None) -> bool:
        """Whether a page from ``origin`` may call a server reached as ``host`` (the Host header)."""
        lowered = origin.lower()
        same = host is not None and lowered.partition("://")[2] == host.lower()
        return self.any or same or lowered in self.origins or _LOCAL_ORIGIN.fullmatch(origin) is not None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.lower(): v for k, v in scope.get("headers", [])}
        raw = headers.get(b"origin")
        if raw is None:
            await self.app(scope, receive, send)
            return
        origin = raw.decode("latin-1")
        host = headers[b"host"].decode("latin-1") if b"host" in headers else None
        allowed = self.allows(origin, host)
        preflight = scope["method"] == "OPTIONS" and b"access-control-request-method" in headers
        if preflight:
            answer = [(b"content-length", b"0")]
            if allowed:
                answer += self._allow(raw) + [
                    (b"access-control-allow-methods", _METHODS),
                    (b"access-control-max-age", b"600"),
                ]
                requested = headers.get(b"access-control-request-headers")
                if requested:
                    answer.append((b"access-control-allow-headers", requested))
                if b"access-control-request-private-network" in headers:
                    answer.append((b"access-control-allow-private-network", b"true"))
            else:
                self._warn(origin)
                answer.append((b"vary", b"Origin"))
            await send({"type": "http.response.start", "status": 200, "headers": answer})
            await send({"type": "http.response.body", "body": b""})
            return
        if not allowed:
            self._warn(origin)
            message = (
                f"A web page from {origin} may not call this server: only pages on this machine (localhost) or "
                f"named with --cors-origin may. Start the server with --cors-origin {origin} to allow it."
            )
            await _answer(
                send, 403, error_payload(scope["path"], message, "permission_error", code="origin_not_allowed")
            )
            return
        extra = [*self._allow(raw), (b"access-control-expose-headers", b"Retry-After")]

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, send_with_cors)

    def _allow(self, origin: bytes) -> list[tuple[bytes, bytes]]:
        return [(b"access-control-allow-origin", b"*" if self.any else origin), (b"vary", b"Origin")]

    def _warn(self, origin: str) -> None:
        if origin not in self._warned and len(self._warned) < 64:
            self._warned.add(origin)
            _log.warning(
                "refused a browser request from %s: start the server with --cors-origin %s to allow it", origin, origin
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
