"""Stored responses, so that a request can continue one (``previous_response_id``) or fetch it again.

A bounded, least-recently-used map in the server's memory: response id -> the response object as it
was answered and the conversation it ends (input and output items, in the Responses API's form).
It lives on the event loop (the routes' only thread), so it takes no lock; a restart forgets it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["ResponseStore", "StoredResponse"]


@dataclass(frozen=True)
class StoredResponse:
    """One stored response.

    Attributes:
        response: The response object, as it was answered (never changed afterwards).
        items: The conversation through this response: the earlier turns' items, this request's
            input items and this response's output items (instructions are not part of it: OpenAI's
            ``instructions`` apply to one request).
    """

    response: dict[str, Any]
    items: Sequence[dict[str, Any]]


class ResponseStore:
    """The last ``capacity`` responses (0 keeps none); reading one makes it the most recent."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._held: OrderedDict[str, StoredResponse] = OrderedDict()

    def __len__(self) -> int:
        return len(self._held)

    def get(self, response_id: str) -> StoredResponse | None:
        stored = self._held.get(response_id)
        if stored is not None:
            self._held.move_to_end(response_id)
        return stored

    def put(self, response_id: str, stored: StoredResponse) -> None:
        if self.capacity <= 0:
            return
        self._held[response_id] = stored
        self._held.move_to_end(response_id)
        while len(self._held) > self.capacity:
            self._held.popitem(last=False)

    def delete(self, response_id: str) -> bool:
        """Forget a response; False when it was not held."""
        return self._held.pop(response_id, None) is not None
