"""One owner per model: a single thread runs every request of a model, in arrival order.

HTTP handlers never touch a model. They hand the worker a job and await its result, or read its
chunks through an asyncio queue. A stream whose client has gone away is closed between two
tokens, so the model is free for the next request within one step. This first scheduler runs one
request at a time. Continuous batching (one decode step over all active requests) replaces it
behind the same two calls.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["ModelWorker"]

T = TypeVar("T")
_END = object()


class ModelWorker:
    """Runs one model's jobs on its own thread.

    Args:
        name: The served model name (for the thread's name).
        model: The loaded task object (``OnnxTextGenerator``...).
    """

    def __init__(self, name: str, model: Any) -> None:
        self.name = name
        self.model = model
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"inference4py-{name}")
        self.active = 0
        self.completed = 0

    async def run(self, job: Callable[[], T]) -> T:
        """Run ``job()`` on the model's thread and return its result (its exception is raised here)."""
        loop = asyncio.get_running_loop()
        self.active += 1
        try:
            return await loop.run_in_executor(self._pool, job)
        finally:
            self.active -= 1
            self.completed += 1

    async def stream(self, open_stream: Callable[[], Iterator[T]]) -> AsyncIterator[T]:
        """Items of ``open_stream()``, produced on the model's thread, as they come.

        Leaving the ``async for`` early (a client that disconnected) stops the producer before its
        next item; the iterator it opened is closed, which ends the engine loop.
        """
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        stop = threading.Event()

        def produce() -> None:
            items = None
            try:
                items = open_stream()
                for item in items:
                    loop.call_soon_threadsafe(queue.put_nowait, item)
                    if stop.is_set():
                        break
            except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
                loop.call_soon_threadsafe(queue.put_nowait, exc)
            finally:
                close = getattr(items, "close", None)
                if close is not None:
                    close()
                loop.call_soon_threadsafe(queue.put_nowait, _END)

        self.active += 1
        future = loop.run_in_executor(self._pool, produce)
        try:
            while True:
                item = await queue.get()
                if item is _END:
                    break
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop.set()
            await asyncio.shield(future)
            self.active -= 1
            self.completed += 1

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        closer = getattr(self.model, "close", None)
        if closer is not None:
            closer()
