"""One owner per model: a single thread runs every request of a model, in arrival order.

HTTP handlers never touch a model. They hand the worker a job and await its result, or read its
chunks through an asyncio queue. A stream whose client has gone away is closed between two
tokens, so the model is free for the next request within one step. This first scheduler runs one
request at a time. Continuous batching (one decode step over all active requests) replaces it
behind the same two calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections.abc import AsyncGenerator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["ModelWorker", "QueueFull"]


class QueueFull(Exception):
    """More requests wait for this model than its queue holds (the route answers 429)."""


T = TypeVar("T")
_END = object()


class ModelWorker:
    """Runs one model's jobs on its own thread.

    Args:
        name: The served model name (for the thread's name).
        model: The loaded task object (``OnnxTextGenerator``...).
    """

    def __init__(self, name: str, model: Any, *, max_queue: int = 256) -> None:
        self.name = name
        self.model = model
        self.max_queue = max_queue
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"inference4py-{name}")
        # counters for /metrics (read on the event loop; the thread only runs jobs)
        self.requests = 0  # requests admitted
        self.rejected = 0  # answered 429
        self.waiting = 0  # admitted, not started
        self.running = 0  # started, not finished (1 at most with one owner thread)
        self.completed = 0
        self.cancelled = 0  # streams whose client went away
        self.prompt_tokens = 0
        self.generated_tokens = 0

    def _admit(self) -> None:
        if self.waiting >= self.max_queue:
            self.rejected += 1
            raise QueueFull(f"{self.waiting} requests already wait for {self.name!r}; retry shortly.")
        self.requests += 1
        self.waiting += 1

    def _started(self) -> None:  # scheduled on the loop by the model's thread
        self.waiting -= 1
        self.running += 1

    def _finished(self) -> None:  # idem, whatever became of the caller
        self.running -= 1
        self.completed += 1

    @staticmethod
    def _tell(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is gone: the server is shutting down
            loop.call_soon_threadsafe(callback)

    async def run(self, job: Callable[[], T]) -> T:
        """Run ``job()`` on the model's thread and return its result (its exception is raised here).

        Raises:
            QueueFull: the model's queue is full.
        """
        loop = asyncio.get_running_loop()
        self._admit()

        def counted() -> T:
            self._tell(loop, self._started)
            try:
                return job()
            finally:
                self._tell(loop, self._finished)

        return await loop.run_in_executor(self._pool, counted)

    def count(self, prompt: int, generated: int) -> None:
        self.prompt_tokens += prompt
        self.generated_tokens += generated

    async def stream(self, open_stream: Callable[[], Iterator[T]]) -> AsyncGenerator[T, None]:
        """Items of ``open_stream()``, produced on the model's thread, as they come.

        Leaving early (a client that disconnected) stops the producer before its next item; the
        iterator it opened is closed, which ends the engine loop, and the model is free.
        """
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        stop = threading.Event()
        self._admit()

        def produce() -> None:
            self._tell(loop, self._started)
            items = None
            try:
                items = open_stream()
                for item in items:
                    self._tell(loop, functools.partial(queue.put_nowait, item))
                    if stop.is_set():
                        break
            except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
                self._tell(loop, functools.partial(queue.put_nowait, exc))
            finally:
                close = getattr(items, "close", None)
                if close is not None:
                    close()
                self._tell(loop, functools.partial(queue.put_nowait, _END))
                self._tell(loop, self._finished)

        future = loop.run_in_executor(self._pool, produce)
        finished = False
        try:
            while True:
                item = await queue.get()
                if item is _END:
                    finished = True
                    break
                if isinstance(item, BaseException):
                    finished = True
                    raise item
                yield item
        finally:
            if not finished:
                self.cancelled += 1  # the consumer left early: the client went away
            stop.set()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(future)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        closer = getattr(self.model, "close", None)
        if closer is not None:
            closer()
