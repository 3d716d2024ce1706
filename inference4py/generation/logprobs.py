"""Token log-probabilities, as OpenAI and vLLM report them.

A token's log-probability is read from the model's raw distribution: the
log-softmax of the logits *before* any processor, temperature or penalty.  A
recorder is handed to the step loop.  It takes each step's raw logits before the
processors run (they may change the scores in place), and the chosen token once
it is known.  The ``top_logprobs`` alternatives come from the same distribution,
most likely first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from inference4py.generation.config import MAX_TOP_LOGPROBS

if TYPE_CHECKING:
    from inference4py.tokenization import Tokenizer

__all__ = ["MAX_TOP_LOGPROBS", "LogprobRecorder", "TokenLogprob", "TopLogprob", "log_softmax_row"]


@dataclass(frozen=True)
class TopLogprob:
    """One alternative at a step: the token's text, its id and its log-probability."""

    token: str
    token_id: int
    logprob: float


@dataclass(frozen=True)
class TokenLogprob:
    """The log-probability of one generated token.

    Attributes:
        token: The token's own text (decoded alone, special tokens kept).
        token_id: The generated id.
        logprob: ``log p(token)`` under the raw distribution (natural log).
        top_logprobs: The ``top_logprobs`` most likely tokens at that step, most likely first.
    """

    token: str
    token_id: int
    logprob: float
    top_logprobs: tuple[TopLogprob, ...] = field(default=())


def log_softmax_row(logits: np.ndarray) -> np.ndarray:
    """``log_softmax`` of one row of logits, computed in float64 (``[vocab]`` -> ``[vocab]``)."""
    x = np.asarray(logits, dtype=np.float64)
    top = x.max()
    shifted = x - top
    return shifted - np.log(np.exp(shifted).sum())


class LogprobRecorder:
    """Collects one :class:`TokenLogprob` per generated token of one sequence.

    ``observe(logits)`` is called with the step's raw ``[1, vocab]`` logits before
    the processors run; ``choose(token)`` with the token picked from them.
    ``items[i]`` is the entry of the i-th generated token.

    Args:
        tokenizer: Decodes each token (and each alternative) on its own.
        top_logprobs: Alternatives to keep per step, 0 to 20.
    """

    def __init__(self, tokenizer: Tokenizer, top_logprobs: int = 0) -> None:
        self._tokenizer = tokenizer
        self._top = int(top_logprobs)
        self._row: np.ndarray | None = None
        self._texts: dict[int, str] = {}
        self.items: list[TokenLogprob] = []
        self.prompt_items: list[TokenLogprob | None] | None = None

    def observe(self, logits: np.ndarray) -> None:
        self._row = log_softmax_row(np.asarray(logits).reshape(-1))

    def choose(self, token: int) -> TokenLogprob:
        row = self._row
        if row is None:
            raise RuntimeError("LogprobRecorder.choose() before observe()")
        entry = self._entry(row, token)
        self.items.append(entry)
        self._row = None
        return entry

    def _entry(self, row: np.ndarray, token: int) -> TokenLogprob:
        """``token``'s entry in one step's log-softmax ``row``, with the step's likeliest alternatives."""
        top: tuple[TopLogprob, ...] = ()
        if self._top:
            k = min(self._top, row.shape[0])
            best = np.argpartition(-row, k - 1)[:k]
            best = best[np.argsort(-row[best], kind="stable")]
            top = tuple(TopLogprob(self._text(int(i)), int(i), float(row[i])) for i in best)
        return TokenLogprob(self._text(token), int(token), float(row[token]), top)

    def record_prompt(self, prompt_ids: Sequence[int], logits: np.ndarray) -> None:
        """Log-probabilities of the prompt's own tokens from the prefill's ``[n, vocab]`` logits.

        Token i > 0 is scored by the distribution at position i - 1; the first token has no
        context, so its entry is None (as in OpenAI's ``echo``).
        """
        entries: list[TokenLogprob | None] = [None]
        for i in range(1, len(prompt_ids)):
            entries.append(self._entry(log_softmax_row(logits[i - 1]), int(prompt_ids[i])))
        self.prompt_items = entries

    def _text(self, token: int) -> str:
        text = self._texts.get(token)
        if text is None:
            text = self._tokenizer.decode([token], skip_special_tokens=False)
            self._texts[token] = text
        return text
