"""Pydantic models of the OpenAI API requests the server accepts, and the shapes it answers with.

Only the protocol lives here: field names, types and ranges as OpenAI documents them. The routes
(:mod:`inference4py.serve.app`) turn a request into library options; nothing here runs a model.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "EXTRA_FIELDS",
    "ApiError",
    "ChatCompletionRequest",
    "ChatMessage",
    "CompletionRequest",
    "EmbeddingRequest",
    "StreamOptions",
    "error_body",
    "new_id",
    "unknown_model",
]

# Library options accepted as extra body fields, as vLLM does; any other unknown field is a 400.
EXTRA_FIELDS = frozenset({"top_k", "min_p", "repetition_penalty"})


class ApiError(Exception):
    """An error a route answers with: an OpenAI error object and its HTTP status (see ``create_app``)."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        kind: str = "invalid_request_error",
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.kind, self.code = status, message, param, kind, code


def unknown_model(name: str, served: Iterable[str]) -> ApiError:
    """The 404 for a ``model`` field that names no served model."""
    return ApiError(
        404, f"The model {name!r} does not exist here. Served models: {', '.join(served)}.", "model", "not_found_error"
    )


class StreamOptions(BaseModel):
    include_usage: bool = False


class _Request(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    seed: int | None = None
    stop: str | list[str] | None = None
    n: int = Field(default=1, ge=1, le=16)
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    logit_bias: dict[str, float] | None = None

    def unknown_fields(self) -> list[str]:
        return sorted(k for k in (self.model_extra or {}) if k not in EXTRA_FIELDS)


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None

    def for_template(self) -> dict[str, Any]:
        """The message as chat templates read it (text parts joined; OpenAI's developer role as system)."""
        content = self.content
        if isinstance(content, list):
            content = "".join(str(part.get("text", "")) for part in content if part.get("type") == "text")
        out: dict[str, Any] = {"role": "system" if self.role == "developer" else self.role, "content": content or ""}
        if self.tool_calls:
            out["tool_calls"] = self.tool_calls
        if self.tool_call_id:
            out["tool_call_id"] = self.tool_call_id
        if self.name:
            out["name"] = self.name
        return out


class ChatCompletionRequest(_Request):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    response_format: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    # llama-server's switch: "none" (or "inline") leaves a reasoning model's thinking in the content;
    # "auto", "deepseek" or "split" (the default) send it apart, as reasoning_content
    reasoning_format: Literal["none", "inline", "auto", "deepseek", "split"] | None = None


class CompletionRequest(_Request):
    prompt: str | list[int]
    logprobs: int | None = Field(default=None, ge=0, le=20)
    echo: bool = False


class EmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str
    # token-id inputs parse, so that the route can refuse them with a message instead of a type error
    input: str | list[str] | list[int] | list[list[int]]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(default=None, ge=1)
    user: str | None = None

    def unknown_fields(self) -> list[str]:
        return sorted(self.model_extra or {})


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def now() -> int:
    return int(time.time())


def error_body(
    message: str, kind: str = "invalid_request_error", param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """OpenAI's error object."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}
