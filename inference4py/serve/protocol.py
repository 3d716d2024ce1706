"""Pydantic models of the OpenAI API requests the server accepts, and the shapes it answers with.

Only the protocol lives here: field names, types and ranges as OpenAI documents them. The routes
(:mod:`inference4py.serve.app`) turn a request into library options; nothing here runs a model.

A field is honoured, ignored with a warning, or refused (docs/serving.md, "Fields"): OpenAI's and
the vLLM / llama.cpp fields the library can do are honoured; a field name the server does not know,
or another server's field it cannot honour (:data:`IGNORED_FIELDS`), is logged once and ignored;
an OpenAI field whose answer a text model cannot give (``echo``, ``functions``, audio output) is a
400. Values are strict: a string where a number or a boolean belongs is a 400, never coerced.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "IGNORED_FIELDS",
    "ApiError",
    "ChatCompletionRequest",
    "ChatMessage",
    "CompletionRequest",
    "EmbeddingRequest",
    "FieldWarnings",
    "StreamOptions",
    "error_body",
    "new_id",
    "template_messages",
    "unknown_model",
]

_log = logging.getLogger("inference4py.serve")

# Fields other servers' clients send that this server accepts without doing what they ask: the
# reason goes into the warning logged the first time one is seen (only when its value asks for
# something: ``skip_special_tokens: true`` is what the server does anyway). Every field not
# declared below is ignored the same way, with a warning; none is a 400 for its name alone.
IGNORED_FIELDS = {
    "id_slot": "llama.cpp's slot choice: the scheduler places each request itself",
    "n_probs": "llama.cpp's token probabilities: ask with logprobs and top_logprobs",
    "samplers": "llama.cpp's sampler order: the order is transformers' (penalties, temperature, top-k, top-p, min-p)",
    "skip_special_tokens": "vLLM's skip_special_tokens false: special tokens are always left out of the text",
    "include_stop_str_in_output": "vLLM's include_stop_str_in_output: a stop string never reaches the text",
}


class ApiError(Exception):
    """An error a route answers with: an OpenAI error object and its HTTP status (see ``create_app``)."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        kind: str = "invalid_request_error",
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.kind, self.code = status, message, param, kind, code
        self.headers = dict(headers) if headers else None  # e.g. Retry-After on a 503


def unknown_model(name: str, served: Iterable[str]) -> ApiError:
    """The 404 for a ``model`` field that names no served model."""
    return ApiError(
        404, f"The model {name!r} does not exist here. Served models: {', '.join(served)}.", "model", "not_found_error"
    )


class FieldWarnings:
    """Logs, once per field name, that a request sent a field the server ignores (logger ``inference4py.serve``)."""

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def warn(self, route: str, fields: Mapping[str, str]) -> None:
        """Warn about each of ``fields`` (name -> why it is ignored) not warned about before."""
        for name, why in fields.items():
            with self._lock:
                if name in self._seen:
                    continue
                self._seen.add(name)
            _log.warning("%s: ignored the field %r (%s); this is logged once per field name.", route, name, why)


# Strict: a string where a number or a boolean belongs is a 400, as OpenAI answers, never coerced.
class StreamOptions(BaseModel):
    model_config = ConfigDict(strict=True)

    include_usage: bool = False


class _Request(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)

    model: str = ""  # "": the one model served that answers the route (dispatch.named_model)
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
    # vLLM's sampling fields (honoured); top_k -1 means off, as in vLLM
    top_k: int | None = Field(default=None, ge=-1)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    repetition_penalty: float | None = Field(default=None, gt=0.0)
    ignore_eos: bool = False
    chat_template_kwargs: dict[str, Any] | None = None
    # llama.cpp's: n_predict is max_tokens when that is absent (-1, -2: no limit); the prefix cache is always on
    n_predict: int | None = Field(default=None, ge=-2)
    cache_prompt: bool | None = None
    # accepted, not honoured (IGNORED_FIELDS): a warning when the value asks for something
    id_slot: int | None = None
    n_probs: int | None = None
    samplers: Any = None
    skip_special_tokens: bool | None = None
    include_stop_str_in_output: bool | None = None

    def ignored_fields(self) -> dict[str, str]:
        """The fields this request sets that the server ignores: name -> why (for :class:`FieldWarnings`)."""
        asked = {
            "id_slot": self.id_slot is not None and self.id_slot >= 0,
            "n_probs": bool(self.n_probs),
            "samplers": self.samplers is not None,
            "skip_special_tokens": self.skip_special_tokens is False,
            "include_stop_str_in_output": bool(self.include_stop_str_in_output),
        }
        out = {name: IGNORED_FIELDS[name] for name, on in asked.items() if on}
        for name in sorted(self.model_extra or {}):
            out[name] = "not a field this server knows"
        return out

    def generation_limit(self, max_completion_tokens: int | None = None) -> int | None:
        """max_completion_tokens, else max_tokens, else llama.cpp's n_predict (negative: no limit)."""
        for value in (max_completion_tokens, self.max_tokens):
            if value is not None:
                return value
        if self.n_predict == 0:
            raise ApiError(
                400, "n_predict 0 asks for no tokens: give a positive count, or -1 for no limit.", "n_predict"
            )
        return self.n_predict if self.n_predict is not None and self.n_predict > 0 else None


# How a route reads an image part's value for a model that reads images: (value, where) -> the part's image
ImageReader = Callable[[Any, str], Any]

# OpenAI's content part types that carry something other than text (a text-only model refuses them)
_MEDIA_PARTS = frozenset({"image_url", "image", "input_image", "input_audio", "audio", "file", "input_file"})


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)

    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None

    def for_template(self, index: int = 0, image: ImageReader | None = None) -> dict[str, Any]:
        """The message as chat templates read it (text parts joined; OpenAI's developer role as system; an
        assistant's ``reasoning_content`` or ``reasoning`` kept, for templates that write it back).

        Args:
            index: The message's place in the request (for errors).
            image: For a model that reads images: makes an image part's value from its ``image_url``
                (``image(url, where)``); the content then stays a list of ``{"type": "text", ...}`` and
                ``{"type": "image", "image": ...}`` parts. None: a text-only model.

        Raises:
            ApiError: 400 naming ``messages[index].content`` for null content (but an assistant's
                with tool calls), a content part of an unknown type, or a part that is not text
                (an image, audio or a file) for a model that does not read it.
        """
        where = f"messages[{index}].content"
        content = self.content
        if content is None and not (self.role == "assistant" and self.tool_calls):
            needs = "content or tool_calls" if self.role == "assistant" else "content (a string or text parts)"
            raise ApiError(400, f"{where}: a {self.role} message needs {needs}, got null.", where)
        if isinstance(content, list) and image is not None and any(p.get("type") == "image_url" for p in content):
            content = [_vision_part(part, f"{where}[{j}]", self.role, image) for j, part in enumerate(content)]
        elif isinstance(content, list):
            images = image is not None
            content = "".join(_part_text(part, f"{where}[{j}]", self.role, images) for j, part in enumerate(content))
        out: dict[str, Any] = {"role": "system" if self.role == "developer" else self.role, "content": content or ""}
        if self.tool_calls:
            out["tool_calls"] = self.tool_calls
        extra = self.model_extra or {}
        for key in ("reasoning_content", "reasoning"):  # an earlier turn's reasoning, as this server sends it
            if self.role == "assistant" and isinstance(extra.get(key), str) and extra[key]:
                out[key] = extra[key]
        if self.tool_call_id:
            out["tool_call_id"] = self.tool_call_id
        if self.name:
            out["name"] = self.name
        return out


def _vision_part(part: dict[str, Any], where: str, role: str, image: ImageReader) -> dict[str, Any]:
    """One content part for a model that reads images: a text part, or an image part made by ``image``."""
    if part.get("type") != "image_url":
        return {"type": "text", "text": _part_text(part, where, role, images=True)}
    if role != "user":
        raise ApiError(400, f"{where}: images go in user messages, not in a {role} message.", where)
    value = part.get("image_url")
    url = value.get("url") if isinstance(value, dict) else value  # vLLM and llama-server also take the bare string
    return {"type": "image", "image": image(url, f"{where}.image_url.url")}


def _part_text(part: dict[str, Any], where: str, role: str, images: bool = False) -> str:
    """The text of one content part; anything but text (an assistant's refusal counts) is a 400
    (``images``: the model reads images, in parts of their own)."""
    kind = part.get("type")
    field = "refusal" if kind == "refusal" and role == "assistant" else "text" if kind == "text" else None
    if field is not None:
        text = part.get(field)
        if not isinstance(text, str):
            raise ApiError(400, f"{where}.{field}: a {kind} part needs its {field} as a string.", f"{where}.{field}")
        return text
    if kind in _MEDIA_PARTS:
        why = (
            f"this model reads text and images (image_url parts): it takes no {kind} parts."
            if images
            else f"this is a text-only model: it takes no {kind} parts. Send the content as text, or send images "
            "to a vision-language model."
        )
        raise ApiError(400, f"{where}: {why}", where)
    raise ApiError(
        400,
        f"{where}.type: unknown content part type {kind!r}. Send text parts: {{'type': 'text', 'text': '...'}}.",
        f"{where}.type",
    )


def template_messages(messages: Sequence[ChatMessage], image: ImageReader | None = None) -> list[dict[str, Any]]:
    """The request's messages as chat templates read them (:meth:`ChatMessage.for_template`)."""
    return [m.for_template(i, image) for i, m in enumerate(messages)]


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
    # OpenAI's: "none" / "minimal" switch a reasoning template's thinking off, "low".."high" on
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high"] | None = None
    # OpenAI's, refused when they ask for what a text model cannot give (:meth:`refusal`)
    functions: list[dict[str, Any]] | None = None
    function_call: str | dict[str, Any] | None = None
    modalities: list[str] | None = None
    audio: dict[str, Any] | None = None

    def refusal(self) -> ApiError | None:
        """The 400 for an OpenAI field whose answer this server cannot give, or None."""
        if self.functions is not None or self.function_call is not None:
            name = "functions" if self.functions is not None else "function_call"
            return ApiError(
                400, f"{name} is OpenAI's deprecated form of tools: send tools and tool_choice instead.", name
            )
        if self.audio is not None or any(m != "text" for m in self.modalities or ()):
            name = "audio" if self.audio is not None else "modalities"
            return ApiError(400, f"{name}: the models served here answer in text only; leave it out.", name)
        return None


class CompletionRequest(_Request):
    prompt: str | list[int]
    logprobs: int | None = Field(default=None, ge=0, le=20)
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = Field(default=None, ge=1)

    def refusal(self) -> ApiError | None:
        """The 400 for an OpenAI field whose answer this server cannot give, or None."""
        if self.echo:
            return ApiError(400, "echo is not supported yet: leave it false.", "echo")
        if self.suffix:
            return ApiError(400, "suffix (text after the completion) is not supported: leave it out.", "suffix")
        if self.best_of is not None and self.best_of != self.n:
            return ApiError(
                400, f"best_of {self.best_of} is not supported: leave it out, or equal to n ({self.n}).", "best_of"
            )
        return None


class EmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)

    model: str
    # token-id inputs parse, so that the route can refuse them with a message instead of a type error
    input: str | list[str] | list[int] | list[list[int]]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(default=None, ge=1)
    user: str | None = None

    def unknown_fields(self) -> list[str]:
        return sorted(self.model_extra or {})


class RerankDocument(BaseModel):
    """A document as Jina's and Cohere's clients may send it: an object with its text."""

    model_config = ConfigDict(extra="allow", strict=True)

    text: str


class RerankRequest(BaseModel):
    """The rerank request of llama-server, Jina and Cohere (``/v1/rerank``)."""

    model_config = ConfigDict(extra="allow", strict=True)

    model: str | None = None  # None: the one reranker served
    query: str
    documents: list[str | RerankDocument]
    top_n: int | None = Field(default=None, ge=1)
    return_documents: bool = False

    def texts(self) -> list[str]:
        return [doc if isinstance(doc, str) else doc.text for doc in self.documents]

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
