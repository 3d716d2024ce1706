"""Continuous batching: one scheduler thread owns a decoder and runs every request on it at once.

Each iteration the scheduler

1. drops the requests whose caller went away or whose time ran out;
2. prefills waiting requests while there is room (``max_rows`` rows, a KV budget), one prompt at a
   time, each alone in a state of its own (from the prefix cache when its prompt starts with a held
   sequence); a finished prompt joins the batch as a row and chooses its first token;
3. runs one batched decode step over every row and lets each row choose its next token with its
   own processors, sampler and seed (:class:`~inference4py.generation.search.TokenChooser`);
4. retires the rows that finished (EOS, max_new_tokens, a stop string), keeping their KV in the
   prefix cache.

While rows decode, step 2 prefills only about ``step_seconds`` worth of prompt tokens
(:class:`~inference4py.generation.prompt_stage.PrefillBudget`, measured on the pieces as they
run): a long prompt runs a piece per iteration, between the running rows' decode steps, so a
running stream's gap between two tokens stays about one step and one piece, however long the
prompt.  Pieces end at whole query tiles, so the prompt's logits and cache are those of one run
(:mod:`~inference4py.engine.prompt_pass`).  With no row decoding, pieces are ``prefill_chunk``
tokens (memory, not latency, bounds them).

Some kernels compute a one-row product differently from a several-row one: onnxruntime's
MatMulNBits (int4 weights) quantizes activations with another kernel for a single row, and the
logits differ in the last bits, which is enough to change a greedy token now and then.  On such
graphs the scheduler never steps one row alone: a lone request is accompanied by a *ballast* row
(a finished row kept, or a copy of the request's own cache) whose logits are thrown away, so a
request gives the same tokens alone as in any batch.  ``batch_invariant`` turns it off or forces it.

A row's tokens become text on the scheduler thread too, through the same
:func:`~inference4py.generation.generate.stream_generate` a call of its own uses, and each
:class:`~inference4py.generation.result.GenerationChunk` is handed to the request's ``deliver``
callback.  A stop string therefore frees the row at once.  Callers never touch the model: they
submit, receive chunks, and may cancel.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from inference4py.engine.decoder import DecoderRuntime
from inference4py.engine.graph_io import has_op
from inference4py.engine.heap import trim_heap
from inference4py.engine.prompt_pass import PromptPass
from inference4py.engine.prompt_tiles import exact_rows
from inference4py.engine.rows import RowBatch
from inference4py.errors import GeneratorClosedError, InferenceError, QueueFullError, RequestTimeoutError
from inference4py.generation.config import GenerationConfig
from inference4py.generation.generate import stream_generate
from inference4py.generation.memory import MemoryBudget
from inference4py.generation.prefix_cache import PrefixCache
from inference4py.generation.prompt_stage import PrefillBudget, PromptStage
from inference4py.generation.result import GenerationChunk
from inference4py.generation.search import TokenChooser

if TYPE_CHECKING:
    from inference4py.tokenization import Tokenizer

__all__ = ["Deliver", "Scheduler", "SchedulerStats", "Ticket"]

_log = logging.getLogger("inference4py.scheduler")

Deliver = Callable[[GenerationChunk | BaseException], None]
"""Receives a request's chunks (the last has a finish_reason) or, instead of the rest, one exception."""


class _Mailbox:
    """The token iterator ``stream_generate`` reads: the scheduler puts one token before each ``next``."""

    def __init__(self) -> None:
        self._tokens: collections.deque[int] = collections.deque()
        self._closed = False

    def put(self, token: int) -> None:
        self._tokens.append(token)

    def close(self) -> None:
        self._closed = True

    def __iter__(self) -> Iterator[int]:
        return self

    def __next__(self) -> int:
        if self._tokens:
            return self._tokens.popleft()
        if self._closed:
            raise StopIteration
        raise RuntimeError("stream_generate asked for a token the scheduler has not chosen yet")


@dataclass(eq=False)
class Ticket:
    """A submitted request: the caller's handle on it.

    ``cancel()`` stops it (a queued request never starts, a running one leaves the batch before the
    next step); ``cached_tokens`` counts the prompt tokens taken from the prefix cache.
    """

    prompt: list[int]
    chooser: TokenChooser
    deliver: Deliver
    reserve: int
    all_logits: bool
    deadline: float | None
    submitted: float = field(default_factory=time.perf_counter)
    cached_tokens: int = 0
    cancelled: bool = False
    held_bytes: int = 0  # KV bytes reserved in the server's memory budget while it runs
    _chunks: Iterator[GenerationChunk] | None = None
    _mailbox: _Mailbox = field(default_factory=_Mailbox)
    _wake: Callable[[], None] | None = None

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt)

    def cancel(self) -> None:
        self.cancelled = True
        if self._wake is not None:
            self._wake()


@dataclass
class SchedulerStats:
    """Counters since the scheduler started (read them any time; they are plain numbers)."""

    submitted: int = 0
    rejected: int = 0  # queue full
    completed: int = 0  # finished with a finish_reason
    cancelled: int = 0
    timed_out: int = 0
    failed: int = 0
    prompt_tokens: int = 0  # prompt tokens of admitted requests
    prefilled_tokens: int = 0  # of those, the ones actually run through the model
    generated_tokens: int = 0
    steps: int = 0  # batched decode steps
    step_rows: int = 0  # rows summed over the steps (step_rows / steps: the mean batch)


class Scheduler:
    """Runs the requests of one decoder with continuous batching.

    Args:
        runtime: The loaded decoder (its sessions are used by this scheduler's thread only).
        tokenizer: Decodes each row's tokens into text chunks.
        max_rows: Sequences decoded together at most; more wait.
        max_waiting: Requests that may wait; one more raises :class:`QueueFullError`.
        kv_budget: Positions (prompt + max_new_tokens, summed over rows) the batch may reserve;
            a request that does not fit waits (alone, any request runs). None: no limit.
        prefix_cache_bytes: Memory for the prefix cache; 0 turns it off.
        timeout: Seconds a request may take from submission; None: no limit.
        batch_invariant: Step at least two rows, so a request's tokens never depend on whether it
            ran alone (see the module's docstring).  None: when the graph has a kernel whose
            rounding depends on the row count (MatMulNBits).
        name: For the thread's name and the log.
        step_seconds: How long the prompt pieces of one iteration may take while other requests
            decode (a running stream's gap between tokens is about this and one decode step).
    """

    def __init__(
        self,
        runtime: DecoderRuntime,
        tokenizer: Tokenizer,
        *,
        max_rows: int = 8,
        max_waiting: int = 256,
        kv_budget: int | None = None,
        prefix_cache_bytes: int = 256 << 20,
        timeout: float | None = None,
        batch_invariant: bool | None = None,
        name: str = "model",
        memory: MemoryBudget | None = None,
        step_seconds: float = 0.5,
    ) -> None:
        self.runtime = runtime
        self.tokenizer = tokenizer
        self.max_rows = max(1, int(max_rows))
        self.max_waiting = max(0, int(max_waiting))
        self.kv_budget = kv_budget
        self.timeout = timeout
        self.name = name
        self.memory = memory
        self.position_bytes = runtime.layout.position_bytes  # KV bytes of one position of one sequence
        self.cache = PrefixCache(prefix_cache_bytes, tile=runtime.prompt_tile, memory=memory)
        self.stats = SchedulerStats()
        self._starved = False  # the head of the queue waits for memory another model holds
        self._trim_due = False  # a request left: the C heap is trimmed at the end of the iteration
        # set when the budget gets memory back: an Event, a leaf lock, because the budget calls it from
        # whichever thread releases (another model's scheduler, which may hold its own locks)
        self._room = threading.Event()
        if not RowBatch.mixes_lengths(runtime) and self.max_rows > 1:
            _log.info("%s takes no position ids: its requests are decoded one at a time", name)
            self.max_rows = 1
        sensitive = row_count_sensitive(runtime) if batch_invariant is None else batch_invariant
        self.ballast = sensitive and self.max_rows >= 2
        self._batch = self._new_batch()
        self._slots: list[Ticket | None] = []  # aligned with the batch's rows; None: the ballast row
        self._waiting: collections.deque[Ticket] = collections.deque()
        # the request being prefilled, and the prompt tokens an iteration may prefill while rows decode
        self._stage: PromptStage[Ticket] = PromptStage(
            PrefillBudget(step_seconds, tile=runtime.prompt_tile, most=runtime.prefill_chunk), runtime.prefill_chunk
        )
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=f"inference4py-scheduler-{name}", daemon=True)
        self._thread.start()
        if memory is not None:
            memory.listen(self._room.set)

    # ------------------------------------------------------------------ callers' side
    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def running(self) -> int:
        """Requests past the queue: decoding, or being prefilled."""
        return len(self._rows) + (self._stage.current is not None)

    @property
    def kv_usage(self) -> float:
        """How full the KV cache is, 0 to 1: positions the running requests reserve (prompt and
        max_new_tokens) over what the batch may hold (the KV budget, else every row at the context)."""
        capacity = self.kv_budget or self.max_rows * (self.runtime.max_positions or 0)
        if not capacity:
            return 0.0
        return min(1.0, self._reserved() / capacity)

    @property
    def _rows(self) -> list[Ticket]:
        """The requests in the batch (the ballast row left out)."""
        return [t for t in self._slots if t is not None]

    def _new_batch(self) -> RowBatch:
        return RowBatch(self.runtime, self.max_rows + (1 if self.ballast else 0))

    def submit(
        self,
        prompt: Sequence[int],
        config: GenerationConfig,
        chooser: TokenChooser,
        deliver: Deliver,
        *,
        all_logits: bool = False,
        timeout: float | None = None,
    ) -> Ticket:
        """Queue a request; its chunks go to ``deliver`` from the scheduler's thread.

        ``chooser`` picks its tokens (a fresh one per request); ``all_logits`` records the prompt's
        log-probabilities in the chooser's recorder (the prompt is then prefilled in full).

        Raises:
            QueueFullError: ``max_waiting`` requests wait already.
            GeneratorClosedError: the scheduler was closed.
        """
        limit = timeout if timeout is not None else self.timeout
        reserve = len(prompt) + config.max_new_tokens  # positions it may reach
        if self.memory is not None:
            self.memory.check(
                f"This request ({len(prompt)} prompt tokens + {config.max_new_tokens} new tokens)",
                reserve * self.position_bytes,
            )
        ticket = Ticket(
            prompt=[int(t) for t in prompt],
            chooser=chooser,
            deliver=deliver,
            reserve=reserve,
            all_logits=all_logits,
            deadline=time.perf_counter() + limit if limit else None,
        )
        ticket._chunks = stream_generate(ticket._mailbox, self.tokenizer, config, recorder=chooser.recorder)
        ticket._wake = self._wake
        with self._cond:
            if self._closed:
                raise GeneratorClosedError(f"The scheduler of {self.name!r} is closed; load the model again.")
            if len(self._waiting) >= self.max_waiting:
                self.stats.rejected += 1
                raise QueueFullError(
                    f"{len(self._waiting)} requests already wait for {self.name!r}; retry shortly "
                    "(or raise the queue limit)."
                )
            self.stats.submitted += 1
            self._waiting.append(ticket)
            self._cond.notify()
        return ticket

    def close(self) -> None:
        """Stop the thread; waiting and running requests get a :class:`GeneratorClosedError`."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join()
        if self.memory is not None:
            self.memory.forget(self._room.set)
            self.cache.clear()  # its bytes go back to the budget

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify()

    # ------------------------------------------------------------------ the scheduler's thread
    def _loop(self) -> None:
        while True:
            with self._cond:
                while not (self._waiting or self._rows or self._stage.current or self._closed):
                    self._cond.wait()
                starved = self._starved and not self._rows and not self._stage.current
                self._starved = False
                if self._closed:
                    break
            if starved:
                # the next request waits for memory another model holds: until some is given back (the
                # budget sets _room), or a moment passes (deadlines and cancellations are checked)
                self._room.wait(0.2)
                self._room.clear()
            try:
                self._drop_stopped()
                self._prefill()
                if self._rows:
                    self._step()
                if self._trim_due:  # after a long request, or once idle (engine/heap.py)
                    self._trim_due = False
                    trim_heap()
            except Exception as exc:  # a failed engine call fails its rows, never the thread
                _log.exception("the batch of %s failed", self.name)
                self._fail_all(InferenceError(f"Generation failed: {exc}. The model's other requests go on."))
        closed = GeneratorClosedError(f"The scheduler of {self.name!r} was closed while this request ran.")
        self._fail_all(closed)
        for ticket in self._waiting:
            ticket.deliver(closed)
        self._waiting.clear()

    def _drop_stopped(self) -> None:
        """Forget cancelled and timed-out requests: waiting, being prefilled, or decoding."""
        now = time.perf_counter()
        with self._cond:
            self._waiting = collections.deque(t for t in self._waiting if not self._stopped(t, now))
        prompt = self._stage.current
        if prompt is not None and self._stopped(prompt[0], now):
            self._free_memory(prompt[0])
            self._stage.current = None
        self._retire(
            [i for i, t in enumerate(self._slots) if t is not None and self._stopped(t, now)], keep_cache=False
        )

    def _stopped(self, ticket: Ticket, now: float) -> bool:
        """Whether the request was cancelled or ran past its deadline (counted; a late one is told so)."""
        if ticket.cancelled:
            self.stats.cancelled += 1
            return True
        if ticket.deadline is None or now <= ticket.deadline:
            return False
        self.stats.timed_out += 1
        ticket.deliver(
            RequestTimeoutError(
                f"The request ran past its time limit ({self.timeout} s) and was stopped; ask for fewer tokens "
                "or raise the limit."
            )
        )
        return True

    def _prefill(self) -> None:
        """Admit waiting requests and prefill their prompts (:class:`PromptStage`): with rows decoding,
        about ``step_seconds`` worth of prompt tokens; a finished prompt joins the batch."""
        for ticket, done in self._stage.run(bool(self._rows), self._next_prompt):
            if isinstance(done, PromptPass):
                self._start(ticket, done)
            else:
                self._fail(ticket, done)

    def _next_prompt(self) -> tuple[Ticket, PromptPass] | None:
        """The next request that may start now, off the queue, with its prompt pass (from the prefix cache
        when it holds a start of the prompt)."""
        while len(self._rows) < self.max_rows:
            with self._cond:
                if not self._waiting:
                    return None
                ticket = self._waiting[0]
                if self._rows and not self._fits(ticket):
                    return None
                if not ticket.cancelled and not self._hold_memory(ticket):
                    self._starved = True
                    return None
                self._waiting.popleft()
            if ticket.cancelled:
                self.stats.cancelled += 1
                continue
            prefix = None if ticket.all_logits else self.cache.lookup(ticket.prompt)  # two tokens left at least
            try:
                pending = self._batch.begin(
                    np.asarray(ticket.prompt, dtype=np.int64),
                    reserve=ticket.reserve,
                    prefix=prefix,
                    all_logits=ticket.all_logits,
                )
            except Exception as exc:
                self._fail(ticket, exc)
                continue
            ticket.cached_tokens = prefix.length if prefix is not None else 0
            return ticket, pending
        return None

    def _hold_memory(self, ticket: Ticket) -> bool:
        """Reserve the request's KV bytes in the server's memory budget (the prefix cache gives room first)."""
        if self.memory is None:
            return True
        need = ticket.reserve * self.position_bytes
        if not self.memory.reserve(need):
            self.cache.shrink(need - self.memory.free)
            if not self.memory.reserve(need):
                return False
        ticket.held_bytes = need
        return True

    def _free_memory(self, ticket: Ticket) -> None:
        if self.memory is not None and ticket.held_bytes:
            self.memory.release(ticket.held_bytes)
            ticket.held_bytes = 0

    def _fits(self, ticket: Ticket) -> bool:
        if self.kv_budget is None:
            return True
        return self._reserved() + ticket.reserve <= self.kv_budget

    def _reserved(self) -> int:
        """Positions the running requests reserve (read from other threads too: ``_rows`` is a fresh list)."""
        prompt = self._stage.current
        return sum(t.reserve for t in self._rows) + (prompt[0].reserve if prompt is not None else 0)

    def _start(self, ticket: Ticket, pending: PromptPass) -> None:
        """Take the prefilled prompt as a new row and choose its first token."""
        try:
            last, everything = self._batch.join(pending)
            if everything is not None and ticket.chooser.recorder is not None:
                ticket.chooser.recorder.record_prompt(ticket.prompt, everything[0])
        except Exception as exc:
            self._fail(ticket, exc)
            return
        self.stats.prompt_tokens += len(ticket.prompt)
        self.stats.prefilled_tokens += len(ticket.prompt) - ticket.cached_tokens
        self._slots.append(ticket)
        last_item = self._advance(ticket, last)
        if last_item is not None:
            self._retire([len(self._slots) - 1], keep_cache=True)
            ticket.deliver(last_item)

    def _fail(self, ticket: Ticket, error: BaseException) -> None:
        """A request that could not start fails alone."""
        self.stats.failed += 1
        self._free_memory(ticket)
        ticket.deliver(error)

    def _step(self) -> None:
        if self.ballast:
            self._slots = _balanced(self._batch, self._slots)
        rows = self._rows
        lead = rows[0].chooser.last_token
        tokens = np.fromiter(
            (lead if t is None else t.chooser.last_token for t in self._slots), dtype=np.int64, count=len(self._slots)
        )
        logits = self._batch.step(tokens)  # [slots, vocab]
        self.stats.steps += 1
        self.stats.step_rows += len(rows)
        ending: list[tuple[int, GenerationChunk | BaseException]] = []
        for i, ticket in enumerate(self._slots):
            if ticket is None:
                continue
            item = self._advance(ticket, logits[i : i + 1])
            if item is not None:
                ending.append((i, item))
        tickets = [self._slots[i] for i, _ in ending]
        self._retire([i for i, _ in ending], keep_cache=True)
        for ticket, (_, item) in zip(tickets, ending):  # after retiring: a caller that sees the end sees a free row
            assert ticket is not None
            ticket.deliver(item)

    def _advance(self, ticket: Ticket, logits: np.ndarray) -> GenerationChunk | BaseException | None:
        """Choose the row's next token and deliver its chunk; the request's last item (not delivered) when it is over."""
        assert ticket._chunks is not None
        try:
            token = ticket.chooser.choose(logits)
            self.stats.generated_tokens += 1
            ticket._mailbox.put(token)
            chunk = next(ticket._chunks)
            if chunk.finish_reason is None and ticket.chooser.finished:  # max_new_tokens: the stream's tail
                ticket.deliver(chunk)
                ticket._mailbox.close()
                chunk = next(ticket._chunks)
        except Exception as exc:  # a processor or the detokenizer failed: this request only
            self.stats.failed += 1
            return exc
        if chunk.finish_reason is not None:
            self.stats.completed += 1
            return chunk
        ticket.deliver(chunk)
        return None  # a cancelled row leaves before the next step (_drop_stopped)

    def _retire(self, rows: list[int], *, keep_cache: bool) -> None:
        if not rows:
            return
        for i in rows:
            ticket = self._slots[i]
            assert ticket is not None
            self._free_memory(ticket)  # first: the room it held may keep its cache
            if keep_cache and self.cache.enabled:  # the prompt's positions: decode steps computed the answer's
                exact = exact_rows(len(ticket.prompt), ticket.cached_tokens, self.runtime.prompt_tile)
                self.cache.store(ticket.prompt, self._batch.row_cache(i, exact))
            chunks = ticket._chunks
            if chunks is not None and hasattr(chunks, "close"):
                chunks.close()
        gone = set(rows)
        left = [i for i, t in enumerate(self._slots) if t is not None and i not in gone]
        spare = [i for i, t in enumerate(self._slots) if t is None]
        if not left:  # no request left: no ballast either
            rows = rows + spare
        elif self.ballast and len(left) == 1 and not spare:
            # the lone request left keeps a finished row as its ballast (no copy needed)
            self._slots[rows[0]] = None
            rows = rows[1:]
        order = self._batch.retire(rows)
        long = any(len(t.prompt) > self.runtime.prefill_chunk for t in (self._slots[i] for i in gone) if t is not None)
        self._slots = [self._slots[i] for i in order]
        # what the pieces and the rows held goes back to the system once the iteration's chunks are delivered
        self._trim_due = self._trim_due or long or not self._slots

    def _fail_all(self, error: BaseException) -> None:
        prompt, self._stage.current = self._stage.current, None
        for ticket in self._rows + ([prompt[0]] if prompt is not None else []):
            self._fail(ticket, error)
        self._slots = []
        self._batch = self._new_batch()


def _balanced(batch: RowBatch, slots: list[Ticket | None]) -> list[Ticket | None]:
    """Ballast mode: the slots with exactly one ballast row (None) beside a lone request, none beside several
    (or none); ``batch``'s rows follow."""
    real = [i for i, t in enumerate(slots) if t is not None]
    spare = [i for i, t in enumerate(slots) if t is None]
    if len(real) != 1:
        return [slots[i] for i in batch.retire(spare)] if spare else slots
    if spare:  # one is all it takes
        return [slots[i] for i in batch.retire(spare[1:])] if len(spare) > 1 else slots
    # a copy of the request's own cache: its last token is prefilled again (a one-row product whose
    # logits are thrown away), then both rows step together
    ticket = slots[real[0]]
    assert ticket is not None
    held = batch.row_length(real[0])
    cache = batch.row_cache(real[0])
    ids = np.asarray(ticket.chooser.sequence()[:held], dtype=np.int64)
    batch.admit(ids, reserve=ticket.reserve, prefix=cache.cut(held - 1))
    return [*slots, None]


def row_count_sensitive(runtime: DecoderRuntime) -> bool:
    """Whether the decoder has a kernel that rounds a one-row product differently (MatMulNBits)."""
    paths = {runtime.spec.path("decoder")}
    if runtime.spec.has("decoder_with_past"):
        paths.add(runtime.spec.path("decoder_with_past"))
    return any(has_op(p, b"MatMulNBits") for p in paths)
