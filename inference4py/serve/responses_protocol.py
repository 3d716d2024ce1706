"""Pydantic models of OpenAI's Responses API request, and its input items read as chat messages.

Only the protocol lives here: field names, types and ranges as OpenAI documents them, and how an
input item (a message, a function call, a function call's output, an earlier turn's reasoning) reads
as the message a chat template takes. :mod:`inference4py.serve.responses` turns a request into library options and runs it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from inference4py.serve.protocol import ApiError, ImageReader

__all__ = [
    "IGNORED_FIELDS",
    "LIBRARY_FIELDS",
    "FunctionCallItem",
    "FunctionCallOutputItem",
    "InputItem",
    "MessageItem",
    "ReasoningItem",
    "ResponseRequest",
    "TextConfig",
    "parse_input",
]

#: OpenAI fields accepted and ignored (with a logged warning): they tune OpenAI's service, not the answer.
IGNORED_FIELDS = frozenset(
    {
        "include",
        "truncation",
        "service_tier",
        "safety_identifier",
        "prompt_cache_key",
        "prompt_cache_retention",
        "prompt_cache_options",
        "stream_options",
        "top_logprobs",
        "max_tool_calls",
        "context_management",
        "moderation",
        "access_programs",
        "background_options",
    }
)

#: The library's own sampling fields, accepted as extra body fields (as on /v1/chat/completions), and seed.
LIBRARY_FIELDS = frozenset({"top_k", "min_p", "repetition_penalty", "seed"})


class TextConfig(BaseModel):
    model_config = ConfigDict(extra="allow")

    format: dict[str, Any] | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class ResponseRequest(BaseModel):
    """``POST /v1/responses``: what a client may send (unknown fields are kept, for the route to judge)."""

    model_config = ConfigDict(extra="allow")

    model: str
    input: str | list[dict[str, Any]] = Field(default_factory=list)
    instructions: str | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    previous_response_id: str | None = None
    store: bool | None = None
    stream: bool | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    background: bool | None = None
    conversation: str | dict[str, Any] | None = None
    prompt: dict[str, Any] | None = None

    def extra_fields(self) -> dict[str, Any]:
        """The fields sent that are not declared above, with their values."""
        return dict(self.model_extra or {})


# ------------------------------------------------------------------------------- input items
class _Item(BaseModel):
    model_config = ConfigDict(extra="allow")  # ids and statuses of items sent back as they came


class MessageItem(_Item):
    """A message: OpenAI's ``EasyInputMessage`` (no ``type``) or an input / output message item."""

    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[dict[str, Any]]

    def text(self, where: str) -> str:
        return content_text(self.content, f"{where}.content")

    def content_for(self, where: str, image: ImageReader | None) -> str | list[dict[str, Any]]:
        """The content as the chat template reads it: its text, or for a model that reads images
        (``image``) and a user message with ``input_image`` parts, text and image parts in order."""
        content = self.content
        if image is None or isinstance(content, str) or not any(p.get("type") == "input_image" for p in content):
            return self.text(where)
        where = f"{where}.content"
        if self.role != "user":
            raise ApiError(400, f"{where}: images go in user messages, not in a {self.role} message.", where)
        return [
            _image_part(part, f"{where}[{j}]", image)
            if part.get("type") == "input_image"
            else {"type": "text", "text": _part_text(part, f"{where}[{j}]")}
            for j, part in enumerate(content)
        ]


class FunctionCallItem(_Item):
    """A call the model made (an earlier response's output, sent back)."""

    type: Literal["function_call"]
    call_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    arguments: str


class FunctionCallOutputItem(_Item):
    """What the client's function returned for call ``call_id``."""

    type: Literal["function_call_output"]
    call_id: str = Field(min_length=1)
    output: str | list[dict[str, Any]]

    def text(self, where: str) -> str:
        return content_text(self.output, f"{where}.output")


class SummaryText(BaseModel):
    """A part of a reasoning item's ``summary``."""

    type: Literal["summary_text"]
    text: str


class ReasoningText(BaseModel):
    """A part of a reasoning item's ``content``: the reasoning as the model wrote it."""

    type: Literal["reasoning_text"]
    text: str


class ReasoningItem(_Item):
    """The model's reasoning in an earlier turn (OpenAI's ``ResponseReasoningItem``, or this server's output).

    Its text is that turn's reasoning: the ``content`` parts' text when there are any (the reasoning
    as written, which this server's output items carry), else the ``summary`` parts' (OpenAI's
    summaries), each summary a paragraph. ``encrypted_content`` is OpenAI's own and is not read.
    """

    type: Literal["reasoning"]
    summary: list[SummaryText] = Field(default_factory=list)
    content: list[ReasoningText] | None = None

    def text(self, where: str) -> str:
        """The reasoning's text; empty for an item with no text part (OpenAI's reasoning items often carry
        only ``encrypted_content`` and an empty ``summary``: nothing this server can read, so nothing is
        added to the turn)."""
        if self.content:
            return "".join(part.text for part in self.content)
        return "\n\n".join(part.text for part in self.summary)


InputItem = MessageItem | FunctionCallItem | FunctionCallOutputItem | ReasoningItem

_ITEM_TYPES: dict[str, type[_Item]] = {
    "message": MessageItem,
    "function_call": FunctionCallItem,
    "function_call_output": FunctionCallOutputItem,
    "reasoning": ReasoningItem,
}
_TEXT_PARTS = {"input_text": "text", "output_text": "text", "refusal": "refusal"}


def _image_part(part: dict[str, Any], where: str, image: ImageReader) -> dict[str, Any]:
    """An ``input_image`` part (``image_url``: a data URL or an address) as an image part made by ``image``."""
    if part.get("file_id") is not None and part.get("image_url") is None:
        raise ApiError(
            400,
            f"{where}.file_id: this server keeps no files: send the image as image_url (a data URL).",
            f"{where}.file_id",
        )
    return {"type": "image", "image": image(part.get("image_url"), f"{where}.image_url")}


def content_text(content: str | list[dict[str, Any]], where: str) -> str:
    """A message's (or a function output's) text: the string, or its text parts joined.

    Raises:
        ApiError: a part that is not text (an image, a file, audio), named with its place.
    """
    if isinstance(content, str):
        return content
    return "".join(_part_text(part, f"{where}[{j}]") for j, part in enumerate(content))


def _part_text(part: dict[str, Any], where: str) -> str:
    kind = part.get("type")
    field = _TEXT_PARTS.get(str(kind))
    if field is None:
        raise ApiError(
            400,
            f"{where}: content parts of type {kind!r} are not supported here; the served models read text "
            f"(parts of type {', '.join(_TEXT_PARTS)}"
            + (", and input_image for vision-language models)." if kind == "input_image" else ")."),
            f"{where}.type",
        )
    value = part.get(field)
    if not isinstance(value, str):
        raise ApiError(400, f"{where} needs a string {field!r}.", f"{where}.{field}")
    return value


def parse_input(value: str | list[dict[str, Any]], where: str = "input") -> list[InputItem]:
    """The request's ``input`` as typed items (a string is one user message).

    Raises:
        ApiError: an item of a type not served here, or one missing a field, named by its place.
    """
    if isinstance(value, str):
        return [MessageItem(role="user", content=value)]
    return [_parse_item(item, f"{where}[{i}]") for i, item in enumerate(value)]


def _parse_item(item: dict[str, Any], where: str) -> InputItem:
    kind = item.get("type", "message" if "role" in item else None)
    model = _ITEM_TYPES.get(str(kind))
    if kind is None:
        raise ApiError(
            400,
            f"{where} has neither a type nor a role: a message is {{'role': 'user', 'content': ...}}; other items "
            f"name their type ({', '.join(_ITEM_TYPES)}).",
            f"{where}.type",
        )
    if model is None:
        raise ApiError(
            400,
            f"{where}: input items of type {kind!r} are not supported here. Supported: {', '.join(_ITEM_TYPES)} "
            "(a message may leave out its type).",
            f"{where}.type",
        )
    try:
        parsed: InputItem = model.model_validate(item)  # type: ignore[assignment]  # one of InputItem's members
    except ValidationError as exc:
        first = exc.errors()[0]
        # the path to the bad field, without pydantic's union-member tags ("output.str" -> "output"),
        # list places as indexes ("summary.0.text" -> "summary[0].text")
        path = [p for p in first["loc"] if p != "str" and not str(p).startswith("list[")]
        field = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)
        raise ApiError(400, f"{where}{field}: {first['msg']}", f"{where}{field}") from exc
    return parsed
