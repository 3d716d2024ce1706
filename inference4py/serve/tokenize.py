"""``POST /tokenize`` and ``POST /detokenize`` in llama-server's shape: a served model's tokenizer over HTTP.

- ``/tokenize`` ``{"content": str, "add_special": false, "with_pieces": false, "model": optional}``
  answers ``{"tokens": [ids]}``, or with ``with_pieces`` ``{"tokens": [{"id": id, "piece": text}]}``;
  a piece that is not whole UTF-8 (a byte-level token cut inside a character) is its list of bytes,
  as llama-server gives it.
- ``/detokenize`` ``{"tokens": [ids], "model": optional}`` answers ``{"content": str}``: the text of
  the ids with special tokens written out, so that detokenizing what ``/tokenize`` gave returns the
  content.

``model`` may be left out when the server serves one text model. Both run on the tokenizer the
model generates with (``model.tokenizer``), off the event loop, without touching the model's queue.
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from pydantic import BaseModel, ConfigDict

from inference4py.serve.dispatch import TEXT_KINDS
from inference4py.serve.protocol import ApiError
from inference4py.serve.registry import ModelRegistry
from inference4py.tokenization import Tokenizer

__all__ = ["DetokenizeRequest", "TokenizeRequest", "add_tokenize_routes"]

_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


class TokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)

    content: str
    add_special: bool = False
    with_pieces: bool = False
    parse_special: bool = True
    model: str | None = None


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)

    tokens: list[int]
    model: str | None = None


def add_tokenize_routes(app: FastAPI, models: ModelRegistry) -> None:
    """Add ``POST /tokenize`` and ``POST /detokenize`` (llama-server's routes, at the root) to ``app``."""

    @app.post("/tokenize")
    async def tokenize(body: TokenizeRequest, request: Request) -> dict[str, Any]:
        _warn(request, body, {"parse_special": "special-token text is always read as the special token"})
        tokenizer = await _tokenizer(models, body.model, request)
        ids = await asyncio.to_thread(tokenizer.encode, body.content, add_special_tokens=body.add_special)
        if not body.with_pieces:
            return {"tokens": ids}
        return {"tokens": [{"id": i, "piece": _piece(tokenizer, i)} for i in ids]}

    @app.post("/detokenize")
    async def detokenize(body: DetokenizeRequest, request: Request) -> dict[str, Any]:
        _warn(request, body, {})
        tokenizer = await _tokenizer(models, body.model, request)
        size = tokenizer.vocab_size
        for i, token in enumerate(body.tokens):
            if not 0 <= token < size:
                raise ApiError(
                    400, f"tokens[{i}]: {token} is not a token id of this model (0..{size - 1}).", f"tokens[{i}]"
                )
        decode = functools.partial(tokenizer.decode, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        return {"content": await asyncio.to_thread(decode, body.tokens)}


def _warn(request: Request, body: BaseModel, asked: Mapping[str, str]) -> None:
    """Log (once per name) the fields this request sets that are ignored: unknown ones, and ``asked`` when off."""
    ignored = {name: why for name, why in asked.items() if getattr(body, name) is False}
    ignored.update({name: "not a field this server knows" for name in sorted(body.model_extra or {})})
    request.app.state.field_warnings.warn(request.url.path, ignored)


async def _tokenizer(models: ModelRegistry, name: str | None, request: Request) -> Tokenizer:
    """The tokenizer of model ``name`` (loaded first when it is not); without a name, of the one text model served.

    Raises:
        ApiError: 400 when no name is given and there is not exactly one text model, or the model
            has no tokenizer; 404 for a model not served; as :meth:`ModelRegistry.worker`.
    """
    if name is None:
        texts = models.names(*TEXT_KINDS)
        if len(texts) != 1:
            which = (
                f"one of: {', '.join(texts)}" if texts else f"a model with a tokenizer ({', '.join(models.names())})"
            )
            raise ApiError(400, f"model is needed: this server serves {len(texts)} text models. Name {which}.", "model")
        name = texts[0]
    models.kind(name)  # a 404 for a name not served, before anything is loaded
    worker = await models.worker(name, request)
    tokenizer = getattr(worker.model, "tokenizer", None)
    if not isinstance(tokenizer, Tokenizer):
        raise ApiError(400, f"{name!r} has no text tokenizer to use here.", "model")
    return tokenizer


def _piece(tokenizer: Tokenizer, token: int) -> str | list[int]:
    """A token's text, or its bytes when they are not whole UTF-8 (a character cut between tokens)."""
    text = tokenizer.decode([token], skip_special_tokens=False, clean_up_tokenization_spaces=False)
    if "\ufffd" not in text:
        return text
    raw = _token_bytes(tokenizer.id_to_token(token))
    # only bytes that decode to what the tokenizer itself gives; else its text, replacement marks and all
    if raw is not None and raw.decode("utf-8", errors="replace") == text:
        return list(raw)
    return text


def _token_bytes(entry: str | None) -> bytes | None:
    """The bytes of a vocabulary entry: a byte-fallback piece ``<0xNN>``, or a byte-level BPE entry."""
    if entry is None:
        return None
    byte = _BYTE_PIECE.fullmatch(entry)
    if byte is not None:
        return bytes([int(byte.group(1), 16)])
    table = _byte_level_table()
    if all(ch in table for ch in entry):
        return bytes(table[ch] for ch in entry)
    return None


@functools.lru_cache(maxsize=1)
def _byte_level_table() -> dict[str, int]:
    """GPT-2's byte-level alphabet, character -> byte: printable Latin-1 bytes stand for themselves,
    the other 68 (controls, space, soft hyphen...) for the characters from U+0100 on, in byte order."""
    kept = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table = {chr(b): b for b in kept}
    shifted = [b for b in range(256) if b not in table.values()]
    table.update({chr(0x100 + n): b for n, b in enumerate(shifted)})
    return table
