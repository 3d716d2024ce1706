"""Error objects in the shape of the API a route belongs to: OpenAI's everywhere, Anthropic's on its Messages routes.

Every refusal of the server (a route's error, a validation error, the guard's 401 and 413) is built
here, from the request's path, so a client always gets the error object its own SDK parses.
"""

from __future__ import annotations

from typing import Any

from inference4py.serve.protocol import error_body

__all__ = ["ANTHROPIC_PREFIX", "error_payload"]

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


def error_payload(
    path: str,
    message: str,
    kind: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
) -> dict[str, Any]:
    """The error object for a request to ``path``: Anthropic's under /v1/messages, OpenAI's elsewhere."""
    if path.startswith(ANTHROPIC_PREFIX):
        if code == "request_too_large":
            kind = "request_too_large"
        return {"type": "error", "error": {"type": _ANTHROPIC_TYPES.get(kind, kind), "message": message}}
    return error_body(message, kind, param, code)
