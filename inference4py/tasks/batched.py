"""Many callers, one model: continuous batching over an :class:`~inference4py.OnnxTextGenerator`.

::

    with OnnxTextGenerator.smolLM2().build() as model, model.batched(max_concurrent=8) as batched:
        # from any number of threads at once:
        result = batched.generate([{"role": "user", "content": "Hi"}], max_new_tokens=64)

Every call is checked and encoded on the caller's thread (errors come back before any token), then
handed to one :class:`~inference4py.generation.scheduler.Scheduler` that decodes all running
requests in one batched step.  A greedy request gives exactly the ids it gives alone.  The server
(``inference4py serve``) is a thin layer over this class.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from inference4py.errors import ConfigurationError, InvalidInputError
from inference4py.generation.beam import returns_several
from inference4py.generation.generate import collect
from inference4py.generation.memory import MemoryBudget
from inference4py.generation.result import GenerationChunk, GenerationResult
from inference4py.generation.scheduler import Deliver, Scheduler, SchedulerStats, Ticket
from inference4py.tasks.base import renamed
from inference4py.tasks.options import RequestOptions
from inference4py.tasks.request import PreparedRequest

if TYPE_CHECKING:
    from inference4py.engine.decoder import DecoderRuntime
    from inference4py.tasks.prompts import Prompt
    from inference4py.tokenization import Tokenizer

__all__ = ["BatchableModel", "BatchedTextGenerator", "Submission"]


class BatchableModel(Protocol):
    """What continuous batching needs of a text model (an :class:`~inference4py.OnnxTextGenerator`)."""

    @property
    def tokenizer(self) -> Tokenizer: ...

    @property
    def runtime(self) -> DecoderRuntime: ...

    def prepare(self, prompt: Prompt, options: RequestOptions) -> PreparedRequest: ...


class Submission:
    """A request handed to the scheduler: its ticket, and what shapes its final result."""

    def __init__(self, ticket: Ticket, prepared: PreparedRequest) -> None:
        self.ticket = ticket
        self.prepared = prepared

    @property
    def prompt_tokens(self) -> int:
        return self.ticket.prompt_tokens

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens taken from the prefix cache (known once the request started)."""
        return self.ticket.cached_tokens

    def cancel(self) -> None:
        self.ticket.cancel()

    def finish(self, result: GenerationResult) -> GenerationResult:
        """The collected result with tool calls parsed, as ``generate()`` returns it."""
        return self.prepared.finish(result)


class BatchedTextGenerator:
    """Thread-safe generation over one model with continuous batching.

    Args:
        model: The loaded text generator (its sessions are then run by the scheduler's thread).
        max_concurrent: Sequences decoded together at most; more wait in the queue.
        max_waiting: Requests that may wait; one more raises ``QueueFullError``.
        kv_budget: Positions (prompt + max_new_tokens, summed over running requests) the batch may
            reserve; None: no limit beyond ``max_concurrent``.
        prefix_cache_mb: Memory for the automatic prefix cache (0 turns it off).
        timeout: Seconds a request may run from submission (None: no limit).
        batch_invariant: Never step one row alone, so a request's tokens are the same alone as in any
            batch (None: on graphs whose kernels round a one-row product differently, i.e. int4
            MatMulNBits; see docs/serving.md).
        name: Names the scheduler's thread.
        memory: A server's :class:`~inference4py.generation.memory.MemoryBudget`, shared with its other
            models: each request's KV bytes (prompt + max_new_tokens positions) are reserved in it while it
            runs, and the prefix cache keeps entries only while it has room. None: no byte budget.
        step_seconds: While requests decode, a new prompt is prefilled in pieces of about this many
            seconds between their steps (measured as the pieces run), so a long prompt delays each
            running stream's next token by about this much, never by the whole prompt.

    Greedy search and sampling are batched; beam search and several sequences per call are not
    (``generate()`` on the model runs them).
    """

    def __init__(
        self,
        model: BatchableModel,
        *,
        max_concurrent: int = 8,
        max_waiting: int = 256,
        kv_budget: int | None = None,
        prefix_cache_mb: float = 256,
        timeout: float | None = None,
        batch_invariant: bool | None = None,
        name: str = "model",
        memory: MemoryBudget | None = None,
        step_seconds: float = 0.5,
    ) -> None:
        if max_concurrent < 1:
            raise ConfigurationError(f"max_concurrent must be >= 1, got {max_concurrent}.")
        if timeout is not None and timeout <= 0:
            raise ConfigurationError(f"timeout must be a positive number of seconds, got {timeout}.")
        self.model = model
        self._scheduler = Scheduler(
            model.runtime,
            model.tokenizer,
            max_rows=max_concurrent,
            max_waiting=max_waiting,
            kv_budget=kv_budget,
            prefix_cache_bytes=int(prefix_cache_mb * (1 << 20)),
            timeout=timeout,
            batch_invariant=batch_invariant,
            name=name,
            memory=memory,
            step_seconds=step_seconds,
        )

    # ------------------------------------------------------------------ state
    @property
    def stats(self) -> SchedulerStats:
        return self._scheduler.stats

    @property
    def waiting(self) -> int:
        return self._scheduler.waiting

    @property
    def running(self) -> int:
        return self._scheduler.running

    @property
    def kv_usage(self) -> float:
        """How full the KV cache is, 0 to 1 (see ``Scheduler.kv_usage``)."""
        return self._scheduler.kv_usage

    @property
    def prefix_cache(self) -> Any:
        """The :class:`~inference4py.generation.prefix_cache.PrefixCache` (hits, reused tokens, size)."""
        return self._scheduler.cache

    def close(self) -> None:
        """Stop the scheduler (running requests end with ``GeneratorClosedError``); the model stays open."""
        self._scheduler.close()

    def __enter__(self) -> BatchedTextGenerator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ calls
    def submit(self, prompt: Prompt, deliver: Deliver, options: RequestOptions) -> Submission:
        """Queue one request; ``deliver`` receives its chunks (or one exception) on the scheduler's thread.

        Errors in the request itself are raised here, before it is queued.

        Raises:
            InvalidInputError, PromptTooLongError, ConfigurationError: as ``generate()``.
            QueueFullError: too many requests wait.
        """
        options.refuse_speculation("Continuous batching (batched(), the server)")
        model = self.model
        prepared = model.prepare(prompt, options)
        config = prepared.config
        if returns_several(config):
            raise ConfigurationError(
                "Batched generation runs greedy search or sampling, one sequence per request; for beam search "
                "(num_beams > 1) or several sequences call the model's generate()."
            )
        chooser = prepared.chooser(model.tokenizer)
        all_logits = bool(config.logprobs and config.prompt_logprobs)
        ticket = self._scheduler.submit(prepared.ids, config, chooser, deliver, all_logits=all_logits)
        return Submission(ticket, prepared)

    def open(self, prompt: Prompt, options: RequestOptions) -> tuple[Submission, Iterator[GenerationChunk]]:
        """Submit, and the iterator of the request's chunks (read on the caller's thread; leaving early cancels)."""
        items: queue.SimpleQueue[GenerationChunk | BaseException] = queue.SimpleQueue()
        submission = self.submit(prompt, items.put, options)
        return submission, _chunks(items, submission)

    def stream_chunks(
        self, prompt: Prompt, *, options: RequestOptions | None = None, **overrides: Any
    ) -> Iterator[GenerationChunk]:
        """The request's chunks as they come; closing the iterator early cancels the request."""
        return self.open(prompt, RequestOptions.of_call(options, overrides))[1]

    def generate(
        self,
        prompt: Prompt,
        on_token: Callable[[str], None] | None = None,
        *,
        options: RequestOptions | None = None,
        **overrides: Any,
    ) -> GenerationResult:
        """As the model's ``generate()``, run in the shared batch (blocks this thread until done)."""
        started = time.perf_counter()
        submission, chunks = self.open(prompt, RequestOptions.of_call(options, overrides))
        result = collect(chunks, prompt_tokens=submission.prompt_tokens, started=started, on_token=on_token)
        return submission.finish(result)

    def generate_batch(
        self, prompts: Sequence[Prompt], *, options: RequestOptions | None = None, **overrides: Any
    ) -> list[GenerationResult]:
        """Every prompt submitted at once, one result per prompt in order (each checked before any is read)."""
        request = RequestOptions.of_call(options, overrides)
        if not isinstance(prompts, (list, tuple)) or not prompts:
            raise InvalidInputError("generate_batch needs a non-empty list of prompts.")
        started = time.perf_counter()
        pending: list[tuple[Submission, Iterator[GenerationChunk]]] = []
        try:
            for prompt in prompts:
                pending.append(self.open(prompt, request))
        except BaseException:
            for submission, _ in pending:
                submission.cancel()
            raise
        return [
            submission.finish(collect(chunks, prompt_tokens=submission.prompt_tokens, started=started))
            for submission, chunks in pending
        ]

    def generate_batch_request(self, prompts: Sequence[Prompt], options: RequestOptions) -> list[GenerationResult]:
        """Deprecated: ``generate_batch(prompts, options=options)``."""
        renamed("generate_batch_request(prompts, options)", "generate_batch(prompts, options=options)")
        return self.generate_batch(prompts, options=options)


def _chunks(
    items: queue.SimpleQueue[GenerationChunk | BaseException], submission: Submission
) -> Iterator[GenerationChunk]:
    """Chunks from the scheduler until the last one; leaving early cancels the request."""
    try:
        while True:
            item = items.get()
            if isinstance(item, BaseException):
                raise item
            yield item
            if item.finish_reason is not None:
                return
    finally:
        submission.cancel()  # no-op once finished
