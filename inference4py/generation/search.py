"""Token selection loops over a step model: greedy and sampling (beam search: see beam.py).

``generate_step`` is the lowest tier of generation: it feeds the prompt, then
yields one token id per step until EOS or ``max_new_tokens``.  It never runs a
forward pass whose logits would not be used.  Stop strings are not its
business: the caller stops iterating (see :mod:`inference4py.generation.generate`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

import numpy as np

from inference4py.errors import ConfigurationError
from inference4py.generation.config import GenerationConfig
from inference4py.generation.logprobs import LogprobRecorder
from inference4py.generation.processors import LogitsProcessor
from inference4py.generation.sampling import Sampler, nan_logits_error

__all__ = ["StepModel", "TokenChooser", "generate_step", "prefill_scoring_prompt"]


class StepModel(Protocol):
    """What the loop needs from the engine (DecoderState, Seq2SeqState)."""

    def prefill(self, input_ids: np.ndarray, attention_mask: np.ndarray | None = None) -> np.ndarray: ...

    def step(self, tokens: np.ndarray) -> np.ndarray: ...


class TokenChooser:
    """Picks one sequence's tokens from its logits: the processors, the sampler and the stop rule.

    The per-row half of the loop, apart from the model: :func:`generate_step` feeds it one
    sequence's logits, and the continuous-batching scheduler feeds it one row of a batch.  Either
    way a sequence goes through the same code, so a row of a batch picks what it picks alone.

    Args:
        prompt_ids: The tokens before the first generated one.
        config: max_new_tokens and eos ids are read from it.
        processors: logits processors, applied in order to ``(ids, scores)``.
        sampler: picks the next token from the processed scores.
        rng: random generator handed to the sampler.
        recorder: with logprobs on, sees each step's raw logits before the processors and the chosen token.
    """

    def __init__(
        self,
        prompt_ids: Sequence[int],
        config: GenerationConfig,
        *,
        processors: Sequence[LogitsProcessor],
        sampler: Sampler,
        rng: np.random.Generator,
        recorder: LogprobRecorder | None = None,
    ) -> None:
        n = len(prompt_ids)
        self.prompt_length = n
        self.max_new = config.max_new_tokens
        # One buffer for the whole sequence: processors see a view, nothing grows per step.
        self._ids = np.empty((1, n + self.max_new), dtype=np.int64)  # [1, prompt + new]
        self._ids[0, :n] = prompt_ids
        self._eos = frozenset(config.eos_token_id)
        self._processors = tuple(processors)
        self.sampler = sampler
        self.rng = rng
        self.recorder = recorder
        self.generated = 0
        self.finished = False  # after an EOS token or max_new_tokens

    @property
    def last_token(self) -> int:
        """The token chosen last (the prompt's last token before any)."""
        return int(self._ids[0, self.prompt_length + self.generated - 1])

    @property
    def prompt(self) -> np.ndarray:
        """The prompt's ids, ``[1, n]`` (a view)."""
        return self._ids[:, : self.prompt_length]

    @property
    def ids(self) -> np.ndarray:
        """The prompt and every token chosen so far, ``[prompt + generated]`` (a view: read only)."""
        return self._ids[0, : self.prompt_length + self.generated]

    def sequence(self) -> list[int]:
        """The prompt and every token chosen so far."""
        return self._ids[0, : self.prompt_length + self.generated].tolist()

    def choose(self, logits: np.ndarray) -> int:
        """The next token from ``logits`` ``[1, vocab]`` (processed in place: pass a copy to keep them)."""
        scores = self.scores(logits)
        token = int(self.sampler(scores, self.rng)[0])
        if scores[0, token] != scores[0, token]:  # NaN: argmax and the samplers pick NaN scores first
            raise nan_logits_error(self.generated)
        return self.append(token)

    def scores(self, logits: np.ndarray) -> np.ndarray:
        """The next token's scores: ``logits`` ``[1, vocab]`` through the processors (in place).

        The processors see the sequence so far.  With logprobs on, the recorder observes the raw
        logits first, so each call must be followed by :meth:`append` of the token taken from them
        (speculative decoding verifies a drafted token this way instead of sampling one).
        """
        cur = self.prompt_length + self.generated
        scores = logits
        if self.recorder is not None:
            self.recorder.observe(logits)  # raw: the processors may change scores in place
        if self._processors:
            seen = self._ids[:, :cur]
            for proc in self._processors:
                scores = proc(seen, scores)
        return scores

    def append(self, token: int) -> int:
        """Add ``token`` as the next one of the sequence (see :meth:`scores`); returns it."""
        self._ids[0, self.prompt_length + self.generated] = token
        if self.recorder is not None:
            self.recorder.choose(token)
        self.generated += 1
        self.finished = token in self._eos or self.generated >= self.max_new
        return token


def generate_step(
    model: StepModel,
    prompt_ids: Sequence[int],
    config: GenerationConfig,
    *,
    processors: Sequence[LogitsProcessor],
    sampler: Sampler,
    rng: np.random.Generator,
    recorder: LogprobRecorder | None = None,
) -> Iterator[int]:
    """Yield generated token ids one at a time (batch of one) from a fresh ``model`` (its cache empty).

    ``prompt_ids`` are fed first (decoder-only: the prompt; encoder-decoder: the decoder start
    tokens); the other arguments are :class:`TokenChooser`'s.
    """
    from inference4py.generation.generate import run_chooser

    chooser = TokenChooser(prompt_ids, config, processors=processors, sampler=sampler, rng=rng, recorder=recorder)
    return run_chooser(model, chooser, config)


def prefill_scoring_prompt(model: StepModel, prompt: np.ndarray, recorder: LogprobRecorder) -> np.ndarray:
    """Prefill ``prompt`` ``[1, n]`` keeping every position's logits, and record the prompt's log-probabilities."""
    if not hasattr(model, "keep_prefill_logits"):
        raise ConfigurationError(
            "prompt_logprobs scores the prompt's own tokens, which only a decoder-only model predicts: "
            "drop prompt_logprobs for this task."
        )
    model.keep_prefill_logits = True
    logits = model.prefill(prompt)  # [1, vocab]
    n = prompt.shape[1]
    everything = getattr(model, "prefill_logits", None)  # [1, n, vocab]
    if everything is None or everything.shape[1] != n:
        raise ConfigurationError("This graph returns only the last position's logits: prompt_logprobs needs all.")
    recorder.record_prompt(prompt[0].tolist(), everything[0])
    return logits
