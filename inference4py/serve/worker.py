"""One owner per model: HTTP handlers hand it requests and read chunks, never touching the model.

A text generator is owned by a continuous-batching scheduler
(:class:`~inference4py.tasks.batched.BatchedTextGenerator`): every running request shares one
decode step.  Other models (Whisper, encoder-decoder tasks, vision-language models) run their jobs
one at a time on the model's own thread.  Either way a request's chunks reach the event loop through an asyncio queue,
and a consumer that leaves early (a client that disconnected) cancels its request, which frees its
row before the next step.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from inference4py.errors import QueueFullError, RequestTimeoutError
from inference4py.generation.generate import collect
from inference4py.generation.memory import MemoryBudget
from inference4py.generation.result import GenerationChunk, GenerationResult
from inference4py.serve.metrics import Histogram
from inference4py.tasks.options import RequestOptions
from inference4py.tasks.turn import TurnSplitter

__all__ = ["ChunkStream", "ModelWorker", "source_bytes", "weights_bytes"]

T = TypeVar("T")
_END = object()


class ChunkStream:
    """A started request's chunks, as an async iterator; ``aclose()`` (or leaving early) cancels it.

    ``prompt_tokens`` and ``cached_tokens`` describe the prompt; ``finish`` parses tool calls out
    of a collected result as the library's ``generate()`` does, and ``splitter()`` gives a fresh
    :class:`~inference4py.tasks.turn.TurnSplitter` that tells its answer, reasoning and calls apart
    as they stream.
    """

    def __init__(
        self,
        worker: ModelWorker,
        items: asyncio.Queue[Any],
        cancel: Callable[[], None],
        prompt_tokens: int,
        finish: Callable[[GenerationResult], GenerationResult],
        started: float,
        cached: Callable[[], int] = lambda: 0,
        splitter: Callable[[], TurnSplitter] = lambda: TurnSplitter(None),
    ) -> None:
        self._worker = worker
        self._items = items
        self._cancel = cancel
        self.prompt_tokens = prompt_tokens
        self.finish = finish
        self._started = started
        self._cached = cached
        self.splitter = splitter
        self._first: GenerationChunk | None = None
        self._last = started
        self._done = False
        self._counted = False
        self.generated = 0

    @property
    def cached_tokens(self) -> int:
        return self._cached()

    async def _next(self) -> GenerationChunk | None:
        if self._done:
            return None
        item = await self._items.get()
        if item is _END:
            self._end(cancelled=False)
            return None
        if isinstance(item, BaseException):
            self._end(cancelled=False, error=item)
            raise item
        chunk: GenerationChunk = item
        now = time.perf_counter()
        if chunk.token_id is not None:
            if self.generated == 0:
                self._worker.ttft.observe(now - self._started)
            else:
                self._worker.itl.observe(now - self._last)
            self._last = now
            self.generated += 1
        if chunk.finish_reason is not None:
            self._end(cancelled=False)
        return chunk

    async def prime(self) -> None:
        """Wait for the first chunk: an error raised before it is raised here (the route still answers a status)."""
        self._first = await self._next()

    def __aiter__(self) -> AsyncIterator[GenerationChunk]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[GenerationChunk]:
        try:
            if self._first is not None:
                first, self._first = self._first, None
                yield first
            while True:
                chunk = await self._next()
                if chunk is None:
                    return
                yield chunk
        finally:
            if not self._done:
                self._end(cancelled=True)

    async def aclose(self) -> None:
        if not self._done:
            self._end(cancelled=True)

    async def collect(self) -> GenerationResult:
        """Every chunk, as one result (tool calls parsed)."""
        chunks = [chunk async for chunk in self]
        result = collect(chunks, prompt_tokens=self.prompt_tokens, started=self._started)
        return self.finish(result)

    def _end(self, *, cancelled: bool, error: BaseException | None = None) -> None:
        self._done = True
        if cancelled:
            self._cancel()
        if not self._counted:
            self._counted = True
            self._worker.finished(self, cancelled=cancelled, error=error)


class ModelWorker:
    """Owns one served model.

    Args:
        name: The served model name.
        model: The loaded task object (``OnnxTextGenerator``, ``WhisperSpeechModel``...).
        max_queue: Requests that may wait; one more is refused (:class:`QueueFullError`: a 503).
        max_concurrent: Sequences a text generator decodes together.
        kv_budget: Positions a text generator's running requests may reserve together (None: no limit).
        prefix_cache_mb: Memory for a text generator's prefix cache (0: off).
        timeout: Seconds a request may run (None: no limit).
        memory: The server's byte budget, shared by its models (None: none).
    """

    def __init__(
        self,
        name: str,
        model: Any,
        *,
        max_queue: int = 256,
        max_concurrent: int = 8,
        kv_budget: int | None = None,
        prefix_cache_mb: float = 256,
        timeout: float | None = None,
        memory: MemoryBudget | None = None,
    ) -> None:
        from inference4py.tasks.text_generation import OnnxTextGenerator
        from inference4py.tasks.vision_language import VisionLanguageModel

        self.name = name
        self.model = model
        # a vision-language model runs its requests one at a time on its own thread: its prompts start from
        # embeddings with the image features written in, which the text scheduler's rows do not take
        self._vision = isinstance(model, VisionLanguageModel)
        self.max_queue = max_queue
        self.timeout = timeout
        self.batched = (
            model.batched(
                max_concurrent=max_concurrent,
                kv_budget=kv_budget,
                max_waiting=max_queue,
                prefix_cache_mb=prefix_cache_mb,
                timeout=timeout,
                name=name,
                memory=memory,
            )
            if isinstance(model, OnnxTextGenerator)
            else None
        )
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"inference4py-{name}")
        self._lock = threading.Lock()
        # counted on the event loop, for /metrics
        self.requests = 0
        self.rejected = 0
        self.completed = 0
        self.cancelled = 0
        self.prompt_tokens = 0
        self.generated_tokens = 0
        self._waiting = 0  # jobs of the model's own thread
        self._running = 0
        self._timed_out = 0
        self.ttft = Histogram()
        self.itl = Histogram()

    # ------------------------------------------------------------------ numbers for /metrics
    def _stat(self, name: str) -> int:
        return int(getattr(self.batched.stats, name)) if self.batched is not None else 0

    @property
    def waiting(self) -> int:
        return self._waiting + (self.batched.waiting if self.batched is not None else 0)

    @property
    def running(self) -> int:
        return self._running + (self.batched.running if self.batched is not None else 0)

    @property
    def timed_out(self) -> int:
        return self._timed_out

    @property
    def prefilled_tokens(self) -> int:
        return self._stat("prefilled_tokens")

    @property
    def steps(self) -> int:
        return self._stat("steps")

    @property
    def step_rows(self) -> int:
        return self._stat("step_rows")

    @property
    def prefix_hits(self) -> int:
        return int(self.batched.prefix_cache.hits) if self.batched is not None else 0

    @property
    def prefix_reused_tokens(self) -> int:
        return int(self.batched.prefix_cache.reused_tokens) if self.batched is not None else 0

    @property
    def kv_usage(self) -> float:
        return float(self.batched.kv_usage) if self.batched is not None else 0.0

    @property
    def prefix_hit_rate(self) -> float:
        """Requests that started from a cached prefix, over requests admitted."""
        return self.prefix_hits / self.requests if self.requests else 0.0

    @property
    def prefix_bytes(self) -> int:
        return int(self.batched.prefix_cache.nbytes) if self.batched is not None else 0

    def count(self, prompt: int, generated: int) -> None:
        """Count the tokens of a request run through :meth:`run`."""
        self.prompt_tokens += prompt
        self.generated_tokens += generated

    def finished(self, stream: ChunkStream, *, cancelled: bool, error: BaseException | None) -> None:
        self.completed += 1
        self.cancelled += cancelled
        self._timed_out += isinstance(error, RequestTimeoutError)
        self.prompt_tokens += stream.prompt_tokens
        self.generated_tokens += stream.generated

    # ------------------------------------------------------------------ generation
    async def open(self, prompt: Any, options: RequestOptions) -> ChunkStream:
        """Start a generation and wait for its first chunk; errors before it are raised here.

        Raises:
            QueueFullError: the model's queue is full.
            Inference4pyError: the request is invalid (the message says why).
        """
        loop = asyncio.get_running_loop()
        items: asyncio.Queue[Any] = asyncio.Queue()
        started = time.perf_counter()

        def deliver(item: Any) -> None:  # called on the scheduler's or the model's thread
            with contextlib.suppress(RuntimeError):  # the loop is gone: the server is shutting down
                loop.call_soon_threadsafe(items.put_nowait, item)

        if self.batched is not None:
            batched = self.batched
            try:
                submission = await asyncio.to_thread(batched.submit, prompt, deliver, options)
            except QueueFullError:
                self.rejected += 1
                raise
            self.requests += 1
            stream = ChunkStream(
                self,
                items,
                submission.cancel,
                submission.prompt_tokens,
                submission.finish,
                started,
                cached=lambda: submission.cached_tokens,
                splitter=submission.prepared.control.splitter,
            )
        else:
            # encoded (and checked: an empty input is a 400) before the request is queued; the encoder
            # token ids are what the model then runs, as stream_chunks takes them as they are
            encode = getattr(self.model, "encode_source", None)
            prompt_tokens = 0
            if encode is not None:
                prompt = await asyncio.to_thread(encode, prompt)
                prompt_tokens = len(prompt)
            elif self._vision:  # images decoded, prompt expanded and checked here, before it waits for the model
                prompt = await asyncio.to_thread(self.model.prepare, prompt, options)
                prompt_tokens = prompt.prompt_tokens
            stream = self._sequential(prompt, options, deliver, items, started, prompt_tokens)
        await stream.prime()
        return stream

    def _sequential(
        self,
        prompt: Any,
        options: RequestOptions,
        deliver: Callable[[Any], None],
        items: asyncio.Queue[Any],
        started: float,
        prompt_tokens: int,
    ) -> ChunkStream:
        """A model without a scheduler: its stream runs on the model's thread, one request at a time."""
        self._admit()
        stop = threading.Event()
        model, vision = self.model, self._vision

        def produce() -> None:
            self._move(waiting=-1, running=1)
            chunks: Iterator[GenerationChunk] | None = None
            try:
                if stop.is_set():
                    return
                # a prepared VisionRequest carries its options; an encoder-decoder's ids take them
                chunks = model.stream_chunks(None, prompt) if vision else model.stream_chunks(prompt, options=options)
                for chunk in chunks:
                    deliver(chunk)
                    if stop.is_set():
                        break
            except BaseException as exc:  # handed to the consumer, raised there
                deliver(exc)
            finally:
                close = getattr(chunks, "close", None)
                if close is not None:
                    close()
                deliver(_END)
                self._move(running=-1)

        self._pool.submit(produce)
        return ChunkStream(self, items, stop.set, prompt_tokens, lambda r: r, started)

    def _admit(self) -> None:
        if self.waiting >= self.max_queue:
            self.rejected += 1
            raise QueueFullError(f"{self.waiting} requests already wait for {self.name!r}; retry shortly.")
        self.requests += 1
        self._move(waiting=1)

    def _move(self, *, waiting: int = 0, running: int = 0) -> None:
        """Change the own thread's gauges (from the loop or from that thread)."""
        with self._lock:
            self._waiting += waiting
            self._running += running

    def submit(self, job: Callable[[], T]) -> asyncio.Future[T]:
        """Queue ``job()`` for the model's own thread (one job at a time): its result, to await.

        Admission happens here, at once. Cancelling the future before the job started takes it off
        the queue (its place in ``waiting`` too); once started, the job runs to its end.

        Raises:
            QueueFullError: the model's queue is full.
        """
        self._admit()

        def counted() -> T:
            self._move(waiting=-1, running=1)
            try:
                return job()
            finally:
                self._move(running=-1)

        queued = self._pool.submit(counted)
        result = asyncio.wrap_future(queued)

        def ended(future: asyncio.Future[T]) -> None:
            self.completed += 1
            if future.cancelled() and queued.cancel():  # never started: it no longer waits
                self._move(waiting=-1)

        result.add_done_callback(ended)
        return result

    async def run(self, job: Callable[[], T]) -> T:
        """Run ``job()`` on the model's own thread (one job at a time) and return its result.

        Raises:
            QueueFullError: the model's queue is full.
        """
        return await self.submit(job)

    def close(self) -> None:
        if self.batched is not None:
            self.batched.close()
        self._pool.shutdown(wait=True)
        closer = getattr(self.model, "close", None)
        if closer is not None:
            closer()


_WEIGHT_FILES = (".onnx", ".onnx_data", ".data", ".bin", ".safetensors")


def weights_bytes(model: Any) -> int:
    """What a loaded model's weights take: the size of its folder's graph and weight files.

    onnxruntime holds each initializer once per session, so the files' size is what a session keeps
    resident (within a few percent: a memory budget's estimate, not a measurement).  An int8-cache
    model runs its first prompts on a float twin (:mod:`inference4py.engine.float_prompt`), a second
    session: its weights count twice.
    """
    from inference4py.engine.float_prompt import FLOAT_GRAPH

    folder = getattr(model, "folder", None)
    if folder is None:
        return 0
    if getattr(getattr(model, "runtime", None), "float_prompt", None) is not None:
        return 2 * source_bytes(folder, skip=FLOAT_GRAPH)
    return source_bytes(folder)


def source_bytes(source: Any, *, skip: str | None = None) -> int:
    """The weight files' size of a model folder (but for the file named ``skip``), or a model file's (a
    GGUF file converts to about its size)."""
    from pathlib import Path

    path = Path(source)
    if path.is_file():
        return path.stat().st_size
    if not path.is_dir():
        return 0
    return sum(
        p.stat().st_size for p in path.rglob("*") if p.is_file() and p.suffix in _WEIGHT_FILES and p.name != skip
    )
