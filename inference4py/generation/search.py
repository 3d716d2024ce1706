"""The step core: how one sequence chooses its tokens, and the loop that feeds it (beam search: beam.py).

Three rules live here and nowhere else:

* :func:`apply_processors` (processors.py) runs a sequence's logits processors; every path calls it;
* :func:`choose_token` (sampling.py) draws one token from processed scores and refuses NaN scores;
* :func:`sequence_finished` decides that a sequence is over (an EOS id, or ``max_new_tokens``).

:class:`TokenChooser` puts the three together for one sequence.  ``generate_step`` / ``run_chooser``
are the lowest tier of generation: feed the prompt, then yield one token id per step until the
chooser is finished, never running a forward pass whose logits would not be used.  The
continuous-batching scheduler, ``generate_batch`` and the batch runner drive the same choosers,
one per row; :class:`RowsChooser` is the same rules for rows that share one sampler call (several
samples of one prompt).  Stop strings are not this module's business: the caller stops iterating (see
:mod:`inference4py.generation.generate`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

from inference4py.errors import ConfigurationError
from inference4py.generation.config import GenerationConfig
from inference4py.generation.logprobs import LogprobRecorder
from inference4py.generation.processors import LogitsProcessor, apply_processors
from inference4py.generation.sampling import Sampler, choose_token, choose_tokens, make_rng, make_sampler

if TYPE_CHECKING:
    from inference4py.tokenization import Tokenizer

__all__ = [
    "RowsChooser",
    "StepModel",
    "TokenChooser",
    "generate_step",
    "new_chooser",
    "prefill_scoring_prompt",
    "run_chooser",
    "sequence_finished",
]


class StepModel(Protocol):
    """What the loop needs from the engine (DecoderState, Seq2SeqState)."""

    def prefill(self, input_ids: np.ndarray, attention_mask: np.ndarray | None = None) -> np.ndarray: ...

    def step(self, tokens: np.ndarray) -> np.ndarray: ...


def sequence_finished(token: int, generated: int, eos: frozenset[int], max_new_tokens: int) -> bool:
    """Whether a sequence is over after choosing ``token`` as its ``generated``-th new token."""
    return token in eos or generated >= max_new_tokens


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
        max_new_tokens: the sequence's length limit when it is not ``config``'s (a speculative draft's k).
    """

    def __init__(
        self,
        prompt_ids: Sequence[int] | np.ndarray,
        config: GenerationConfig,
        *,
        processors: Sequence[LogitsProcessor],
        sampler: Sampler,
        rng: np.random.Generator,
        recorder: LogprobRecorder | None = None,
        max_new_tokens: int | None = None,
    ) -> None:
        n = len(prompt_ids)
        self.prompt_length = n
        self.max_new = config.max_new_tokens if max_new_tokens is None else max_new_tokens
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

    def new_ids(self) -> list[int]:
        """The tokens chosen so far (the prompt left out)."""
        return self._ids[0, self.prompt_length : self.prompt_length + self.generated].tolist()

    def sequence(self) -> list[int]:
        """The prompt and every token chosen so far."""
        return self._ids[0, : self.prompt_length + self.generated].tolist()

    def choose(self, logits: np.ndarray) -> int:
        """The next token from ``logits`` ``[1, vocab]`` (processed in place: pass a copy to keep them)."""
        return self.append(choose_token(self.sampler, self.scores(logits), self.rng, step=self.generated))

    def scores(self, logits: np.ndarray) -> np.ndarray:
        """The next token's scores: ``logits`` ``[1, vocab]`` through the processors (in place).

        The processors see the sequence so far.  With logprobs on, the recorder observes the raw
        logits first, so each call must be followed by :meth:`append` of the token taken from them
        (speculative decoding verifies a drafted token this way instead of sampling one).
        """
        if self.recorder is not None:
            self.recorder.observe(logits)  # raw: the processors may change scores in place
        return apply_processors(self._processors, self._ids[:, : self.prompt_length + self.generated], logits)

    def append(self, token: int) -> int:
        """Add ``token`` as the next one of the sequence (see :meth:`scores`); returns it."""
        self._ids[0, self.prompt_length + self.generated] = token
        if self.recorder is not None:
            self.recorder.choose(token)
        self.generated += 1
        self.finished = sequence_finished(token, self.generated, self._eos, self.max_new)
        return token


class RowsChooser:
    """Picks the tokens of several rows that share their processors and one random generator.

    The rows of one prompt sampled ``num_return_sequences`` times (beam.py's ``sample_sequences``):
    each step runs the processors once over every row, draws every row's token in one sampler call
    (:func:`choose_tokens`), and ends each row with :func:`sequence_finished`.  A finished row takes
    ``pad_id`` and stays finished.

    Args:
        prompt_ids: ``[rows, n]`` the tokens before the first generated one, per row.
        config: max_new_tokens and eos ids are read from it.
        processors: logits processors over ``(ids [rows, cur], scores [rows, vocab])``.
        sampler, rng: as :class:`TokenChooser`'s, shared by the rows.
        pad_id: the token a finished row is fed.
    """

    def __init__(
        self,
        prompt_ids: np.ndarray,
        config: GenerationConfig,
        *,
        processors: Sequence[LogitsProcessor],
        sampler: Sampler,
        rng: np.random.Generator,
        pad_id: int,
    ) -> None:
        rows, n = prompt_ids.shape
        self.prompt_length = n
        self.max_new = config.max_new_tokens
        self._ids = np.empty((rows, n + self.max_new), dtype=np.int64)  # [rows, prompt + new]
        self._ids[:, :n] = prompt_ids
        self._eos = frozenset(config.eos_token_id)
        self._processors = tuple(processors)
        self._sampler = sampler
        self._rng = rng
        self._pad = pad_id
        self.steps = 0
        self.lengths = [0] * rows  # new tokens of each row, its end token included
        self.ended = [False] * rows

    @property
    def finished(self) -> bool:
        """Every row has ended."""
        return all(self.ended)

    def choose(self, logits: np.ndarray) -> np.ndarray:
        """Every row's next token from ``logits`` ``[rows, vocab]`` (processed in place); ``[rows]`` ids."""
        cur = self.prompt_length + self.steps
        scores = apply_processors(self._processors, self._ids[:, :cur], logits)
        tokens = choose_tokens(self._sampler, scores, self._rng)
        for row, token in enumerate(tokens.tolist()):
            if self.ended[row]:
                tokens[row] = self._pad
                continue
            self.lengths[row] += 1
            self.ended[row] = sequence_finished(token, self.lengths[row], self._eos, self.max_new)
        self._ids[:, cur] = tokens
        self.steps += 1
        return tokens

    def new_ids(self, row: int) -> tuple[int, ...]:
        """The tokens row ``row`` generated (its end token included)."""
        start = self.prompt_length
        return tuple(self._ids[row, start : start + self.lengths[row]].tolist())


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


def new_chooser(
    prompt_ids: Sequence[int], config: GenerationConfig, tokenizer: Tokenizer, *, processors: Sequence[LogitsProcessor]
) -> TokenChooser:
    """The token chooser of one greedy or sampled sequence: its processors, sampler, seed and log-prob recorder."""
    recorder = LogprobRecorder(tokenizer, config.top_logprobs) if config.logprobs else None
    return TokenChooser(
        prompt_ids,
        config,
        processors=processors,
        sampler=make_sampler(config),
        rng=make_rng(config.seed),
        recorder=recorder,
    )


def run_chooser(state: StepModel, chooser: TokenChooser, config: GenerationConfig) -> Iterator[int]:
    """Feed ``chooser``'s prompt to a fresh ``state`` and yield its tokens until it is finished."""
    if chooser.recorder is not None and config.prompt_logprobs:
        logits = prefill_scoring_prompt(state, chooser.prompt, chooser.recorder)
    else:
        logits = state.prefill(chooser.prompt)  # [1, vocab]
    step_input = np.empty((1,), dtype=np.int64)
    while True:
        token = chooser.choose(logits)
        yield token
        if chooser.finished:
            return
        step_input[0] = token
        logits = state.step(step_input)
