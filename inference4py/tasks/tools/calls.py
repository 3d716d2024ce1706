"""Tool calls: :class:`ToolCall`, call ids, and reading a parsed ``{"name", "arguments"}`` object as a call."""

from __future__ import annotations

import json
import random
import secrets
import string
from collections.abc import Callable
from typing import Any

from inference4py.generation.result import ToolCall as ToolCall  # a result type: generation/result.py


def _openai_id(rng: random.Random | None) -> str:
    if rng is None:
        return "call_" + secrets.token_hex(12)
    return f"call_{rng.getrandbits(96):024x}"


_ALNUM = string.ascii_letters + string.digits


def _mistral_id(rng: random.Random | None) -> str:
    # Mistral's templates raise unless a tool call id is 9 letters/digits.
    if rng is None:
        return "".join(secrets.choice(_ALNUM) for _ in range(9))
    return "".join(rng.choice(_ALNUM) for _ in range(9))


def _as_arguments(value: Any) -> dict[str, Any] | None:
    if value is None:
        return {}
    if isinstance(value, str):  # some models write the arguments as a JSON string
        try:
            value = json.loads(value)
        except ValueError:
            return None
    return dict(value) if isinstance(value, dict) else None


def _call_from(obj: Any, new_id: Callable[[], str]) -> ToolCall | None:
    # {"name": ..., "arguments"|"parameters": {...}} -> ToolCall, or None when it is not a call.
    if not isinstance(obj, dict):
        return None
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return None
    arguments = _as_arguments(obj.get("arguments", obj.get("parameters")))
    if arguments is None:
        return None
    call_id = obj.get("id")
    return ToolCall(id=call_id if isinstance(call_id, str) and call_id else new_id(), name=name, arguments=arguments)
