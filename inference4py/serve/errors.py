"""Error objects in the shape of the API a route belongs to: OpenAI's everywhere, Anthropic's on its Messages routes.

Every refusal of the server (a route's error, a validation error, the guard's 401 and 413) is built
here, from the request's path, so a client always gets the error object its own SDK parses.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from inference4py.errors import Inference4pyError
from inference4py.serve.asgi import ASGIApp, Message, Receive, Scope, Send
from inference4py.serve.protocol import error_body

__all__ = ["ANTHROPIC_PREFIX", "InternalErrors", "error_payload", "reason"]

_log = logging.getLogger("inference4py.serve")

ANTHROPIC_PREFIX = "/v1/messages"

# OpenAI's error types -> Anthropic's (https://docs.anthropic.com/en/api/errors)
_ANTHROPIC_TYPES = {
    "invalid_request_error": "invalid_request_error",
    "authentication_error": "authentication_error",
    "permission_error": "permission_error",
    "not_found_error": "not_found_error",
    "rate_limit_error": "rate_limit_error",
    "timeout_error": "timeout_error",
    "server_error": "api_error",
}


def reason(exc: BaseException) -> str:
    """What an error says to a client of the server: a library error's fix names the server option or API field."""
    return exc.message_for("server") if isinstance(exc, Inference4pyError) else str(exc)


def error_payload(
    path: str,
    message: str,
    kind: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
) -> dict[str, Any]:
    """The error object for a request to ``path``: Anthropic's under /v1/messages, OpenAI's elsewhere."""
    if path.startswith(ANTHROPIC_PREFIX):
        if code in ("request_too_large", "queue_full"):
            kind = "request_too_large" if code == "request_too_large" else "overloaded_error"
        return {"type": "error", "error": {"type": _ANTHROPIC_TYPES.get(kind, kind), "message": message}}
    return error_body(message, kind, param, code)


class InternalErrors:
    """A failure no route expected becomes a 500 error object, and the connection stays open.

    Starlette's own last-resort handler answers and then raises again, so uvicorn closes the
    connection and a client's pooled connection fails its next request. Here the exception is
    logged (with its traceback, for the server's owner) and answered once; a response already
    started (a stream) just ends: its routes send their own error event first.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except Exception:
            _log.exception("internal error while serving %s", scope.get("path"))
            if started:
                return
            payload = error_payload(scope.get("path", ""), "Internal server error; see the server log.", "server_error")
            body = json.dumps(payload).encode()
            headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
            await send({"type": "http.response.start", "status": 500, "headers": headers})
            await send({"type": "http.response.body", "body": body})
