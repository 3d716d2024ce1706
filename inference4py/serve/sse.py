"""Server-sent events for every streaming route: frames as they come, and the request stopped when the client leaves."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from fastapi import Request
from fastapi.responses import StreamingResponse

__all__ = ["sse"]


def sse(
    events: AsyncGenerator[tuple[str | None, Any], None], request: Request, *, done: str | None = None
) -> StreamingResponse:
    """A text/event-stream response of ``(event name or None, JSON data)`` pairs.

    A client that went away is noticed between two events: closing ``events`` then closes the
    model's stream, and the engine stops. ``done`` is a last ``data:`` line (OpenAI's ``[DONE]``).
    """

    async def body() -> AsyncIterator[str]:
        async with contextlib.aclosing(events):
            async for name, data in events:
                if await request.is_disconnected():
                    return
                head = f"event: {name}\n" if name is not None else ""
                yield f"{head}data: {json.dumps(data, ensure_ascii=False)}\n\n"
        if done is not None:
            yield f"data: {done}\n\n"

    return StreamingResponse(body(), media_type="text/event-stream")
