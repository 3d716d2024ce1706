"""Pydantic models of Anthropic's Messages API requests (``/v1/messages`` and its ``count_tokens``).

Only the protocol lives here: field names, types and ranges as Anthropic documents them
(https://docs.anthropic.com/en/api/messages). Content blocks and tools are parsed one by one by
:func:`parse_block` and :func:`parse_tool`, so a bad one is answered with a message that names it
(``messages.0.content.1: ...``). :mod:`inference4py.serve.messages` turns a request into a chat
conversation and library options; nothing here runs a model.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from inference4py.serve.protocol import ApiError

__all__ = [
    "BLOCK_TYPES",
    "Block",
    "CountTokensRequest",
    "ImageBlock",
    "InputMessage",
    "MessagesRequest",
    "RedactedThinkingBlock",
    "TextBlock",
    "ThinkingBlock",
    "ToolChoice",
    "ToolParam",
    "ToolResultBlock",
    "ToolUseBlock",
    "parse_block",
    "parse_tool",
]


class _Block(BaseModel):
    # cache_control, citations and the like are Anthropic's billing and provenance details: ignored
    model_config = ConfigDict(extra="allow")


class TextBlock(_Block):
    type: Literal["text"]
    text: str


class ImageBlock(_Block):
    type: Literal["image"]
    source: dict[str, Any]


class ToolUseBlock(_Block):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]


class ToolResultBlock(_Block):
    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[Any] = ""
    is_error: bool = False


class ThinkingBlock(_Block):
    type: Literal["thinking"]
    thinking: str
    signature: str = ""


class RedactedThinkingBlock(_Block):
    type: Literal["redacted_thinking"]
    data: str


Block = Annotated[
    TextBlock | ImageBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock | RedactedThinkingBlock,
    Field(discriminator="type"),
]
#: The content block types a request may hold (an image only for a model that reads images).
BLOCK_TYPES = ("text", "image", "tool_use", "tool_result", "thinking", "redacted_thinking")
_BLOCK: TypeAdapter[Block] = TypeAdapter(Block)


class ToolParam(BaseModel):
    """A client tool: the model may call it, the client runs it."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1)
    description: str | None = None
    input_schema: dict[str, Any]
    type: Literal["custom"] | None = None


class ToolChoice(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class InputMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["user", "assistant"]
    content: str | list[Any]  # each block checked by parse_block, which names the bad one


class _Conversation(BaseModel):
    """The fields both routes read; any other field is accepted and ignored (see ``ignored_fields``)."""

    model_config = ConfigDict(extra="allow")

    model: str
    messages: list[InputMessage] = Field(min_length=1)
    system: str | list[Any] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: ToolChoice | None = None
    output_config: dict[str, Any] | None = None
    thinking: dict[str, Any] | None = None  # {"type": "enabled", "budget_tokens": N} or {"type": "disabled"}

    def ignored_fields(self) -> list[str]:
        """Fields sent that this server does not act on (metadata, service_tier, thinking...)."""
        return sorted(self.model_extra or {})


class MessagesRequest(_Conversation):
    max_tokens: int = Field(ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=1.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=0)
    stop_sequences: list[str] | None = None
    stream: bool = False
    seed: int | None = None  # not Anthropic's: the library's, as an extra body field (reproducible sampling)


class CountTokensRequest(_Conversation):
    pass


def parse_block(data: Any, where: str) -> Block:
    """One content block at ``where`` (``messages.0.content.1``), checked.

    Raises:
        ApiError: 400 for a block that is not an object, of an unknown type, or with missing or
            wrong-typed fields.
    """
    kind = data.get("type") if isinstance(data, dict) else None
    if not isinstance(kind, str):
        raise ApiError(400, f"{where}: a content block is an object with a type ({', '.join(BLOCK_TYPES)}).", where)
    if kind not in BLOCK_TYPES:
        raise ApiError(
            400, f"{where}: content blocks of type {kind!r} are not read here. Use {', '.join(BLOCK_TYPES)}.", where
        )
    try:
        return _BLOCK.validate_python(data)
    except ValidationError as exc:
        raise ApiError(400, _first_error(exc, where, skip=1), where) from exc


def parse_tool(data: Any, where: str) -> ToolParam:
    """One tool of the request's ``tools``, checked: a client tool (``name``, ``input_schema``).

    Raises:
        ApiError: 400 for one of Anthropic's server tools (web search, code execution...: they run
            on Anthropic's side) or a malformed tool.
    """
    kind = data.get("type") if isinstance(data, dict) else None
    if kind not in (None, "custom"):
        raise ApiError(
            400,
            f"{where}: {kind!r} is one of Anthropic's server tools, which run on Anthropic's side; none runs here. "
            "Declare client tools: {name, description, input_schema}.",
            where,
        )
    try:
        return ToolParam.model_validate(data)
    except ValidationError as exc:
        raise ApiError(400, _first_error(exc, where), where) from exc


def _first_error(exc: ValidationError, where: str, skip: int = 0) -> str:
    """Pydantic's first complaint, at its path under ``where`` (``skip`` drops a union's tag)."""
    first = exc.errors()[0]
    path = ".".join([where, *(str(p) for p in first["loc"][skip:])])
    return f"{path}: {first['msg']}"
