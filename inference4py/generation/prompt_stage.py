"""The scheduler's prompt stage: how many prompt tokens one iteration prefills beside the running
rows' decode step, and which pieces run.

A running stream waits, between two of its tokens, for one decode step and for whatever prompt
pieces run in the same iteration.  So the scheduler gives each iteration a budget of prompt tokens
that the model prefills in about ``seconds``: the time per prompt token is measured on the pieces
as they run (the latest piece of a tile or more: attention grows with the prompt, so the piece just
run predicts the next one best), and the budget is that many tokens.  The pieces themselves are
whole query tiles (:func:`~inference4py.engine.prompt_tiles.next_cut` rounds the budget down to
them, and never below one tile), so a prompt's logits stay those of one run.

:class:`PromptStage` spends that budget: one prompt at a time, in arrival order, a piece per
iteration while rows decode; short prompts that fit share an iteration.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from inference4py.engine.prompt_pass import PromptPass
from inference4py.errors import ConfigurationError

__all__ = ["PrefillBudget", "PromptStage"]

T = TypeVar("T")


class PrefillBudget:
    """The prompt tokens of one iteration, from the measured prefill speed.

    Args:
        seconds: How long an iteration's prompt pieces may take while other requests decode.
        tile: The prompt pass's query tile: pieces are whole tiles, and a piece that short is
            too short to measure (its fixed costs would count as per-token time).
        most: Tokens per iteration at most (the pieces' size when nothing else runs).
    """

    def __init__(self, seconds: float, *, tile: int, most: int) -> None:
        if not seconds > 0:
            raise ConfigurationError(f"step_seconds must be a positive number of seconds, got {seconds!r}.")
        self.seconds = float(seconds)
        self.tile = max(1, int(tile))
        self.most = max(self.tile, int(most))
        self.per_token: float | None = None  # seconds per prompt token of the latest measured piece

    def tokens(self) -> int:
        """Prompt tokens an iteration may prefill while other rows decode (one tile before any measure)."""
        if self.per_token is None:
            return self.tile
        return max(1, min(self.most, int(self.seconds / self.per_token)))

    def record(self, tokens: int, seconds: float) -> None:
        """A piece of ``tokens`` prompt tokens ran in ``seconds``."""
        if tokens >= self.tile and seconds > 0:
            self.per_token = seconds / tokens


class PromptStage(Generic[T]):
    """The request being prefilled (``current``: its ticket and :class:`PromptPass`), and the budget.

    Args:
        budget: Prompt tokens per iteration while rows decode.
        chunk: Tokens per piece when no row decodes (memory bounds them, not latency).
    """

    def __init__(self, budget: PrefillBudget, chunk: int) -> None:
        self.budget = budget
        self.chunk = chunk
        self.current: tuple[T, PromptPass] | None = None

    def run(
        self, decoding: bool, take: Callable[[], tuple[T, PromptPass] | None]
    ) -> Iterator[tuple[T, PromptPass | Exception]]:
        """One iteration's pieces: ``take`` gives the next request's pass when none is under way; yields each
        request whose prompt is done (its finished pass) or failed (the exception)."""
        limit = self.budget.tokens() if decoding else self.chunk
        spent = 0
        while True:
            if self.current is None:
                self.current = take()
                if self.current is None:
                    return
            ticket, pending = self.current
            if spent and pending.next_piece(limit - spent) > limit - spent:
                return  # the next piece waits for the next iteration
            started = time.perf_counter()
            try:
                fed = pending.run(limit - spent)
            except Exception as exc:  # this request fails alone
                self.current = None
                yield ticket, exc
                continue
            self.budget.record(fed, time.perf_counter() - started)
            spent += fed
            if not pending.finished:
                return
            self.current = None
            yield ticket, pending
