"""A fixed batch of rows through one forward pass per step, each row choosing with its own chooser.

The encoder-decoder tasks' ``generate_batch`` runs here: the encoder inputs are right-padded
(:func:`right_pad`), every row starts from the same decoder prompt, and each step's logits
``[batch, vocab]`` are handed row by row to that row's
:class:`~inference4py.generation.search.TokenChooser` — the same processors, sampler, seed and
finish rule a call of its own uses, so a row gives what it gives alone (a seeded sampled row
included).  A finished row is fed the pad id until every row is done.  Whisper's batched windows
run the same loop (:func:`step_rows`) after a prefill of their own, with a hook per row that
collects its word alignment.  Decoder-only batches run
on the continuous-batching scheduler instead (``OnnxTextGenerator.generate_batch``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

from inference4py.errors import ConfigurationError
from inference4py.generation.generate import collect, stream_generate
from inference4py.generation.search import StepModel, TokenChooser

if TYPE_CHECKING:
    from inference4py.generation.config import GenerationConfig
    from inference4py.generation.result import GenerationResult
    from inference4py.tokenization import Tokenizer

__all__ = ["RowHook", "check_batchable", "right_pad", "row_results", "run_rows", "step_rows"]


def right_pad(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, mask)`` ``[batch, max_len]`` with the padding on the right (encoder inputs)."""
    width = max(len(r) for r in rows)
    ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
    return ids, mask


class RowHook(Protocol):
    """What a caller of :func:`step_rows` sees of one row as it is decoded (Whisper: its word alignment)."""

    def observe(self, logits: np.ndarray) -> None:
        """The row's raw logits ``[vocab]``, before its processors change them in place."""

    def chosen(self, token: int) -> None:
        """A token the row goes on from (it is fed back to the model); the row's last token is not."""

    def stepped(self, model: StepModel, row: int) -> None:
        """After the step that fed the row's token (``model``'s outputs of that step)."""


def run_rows(model: StepModel, choosers: Sequence[TokenChooser], *, pad_id: int) -> None:
    """Generate every row of a fresh ``model`` state until each row's chooser is finished.

    The choosers' prompts must all have the same length (they are fed as one ``[batch, n]``
    prefill); the chosen tokens stay in the choosers (:meth:`TokenChooser.new_ids`).
    """
    if len({c.prompt_length for c in choosers}) != 1:
        raise ConfigurationError("run_rows feeds one prompt width: give every row a prompt of the same length.")
    prompt = np.concatenate([c.prompt for c in choosers], axis=0)  # [batch, n]
    step_rows(model, choosers, model.prefill(prompt), pad_id=pad_id)


def step_rows(
    model: StepModel,
    choosers: Sequence[TokenChooser],
    logits: np.ndarray,
    *,
    pad_id: int,
    hooks: Sequence[RowHook | None] = (),
) -> None:
    """From the rows' first ``logits`` ``[batch, vocab]`` (the prompt fed), a token per row per step.

    Each row chooses with its own chooser until it is finished; a finished row is fed ``pad_id``.
    ``hooks`` (one per row, or None) see each row's raw logits, the tokens fed back, and each step.
    """
    hooks = list(hooks) or [None] * len(choosers)
    tokens = np.full(len(choosers), pad_id, dtype=np.int64)
    while True:
        fed: list[int] = []
        for row, chooser in enumerate(choosers):
            if chooser.finished:
                tokens[row] = pad_id
                continue
            hook = hooks[row]
            scores = logits[row : row + 1]  # [1, vocab]: the processors change it in place
            if hook is not None:
                hook.observe(scores[0])
            tokens[row] = token = chooser.choose(scores)
            if not chooser.finished:
                fed.append(row)
                if hook is not None:
                    hook.chosen(token)
        if not fed:
            return
        logits = model.step(tokens)
        for row in fed:
            hook = hooks[row]
            if hook is not None:
                hook.stepped(model, row)


def row_results(
    choosers: Sequence[TokenChooser],
    tokenizer: Tokenizer,
    config: GenerationConfig,
    *,
    prompt_tokens: Sequence[int],
    started: float,
) -> list[GenerationResult]:
    """One result per row, its tokens read as a call of its own streams them (stop strings cut alike)."""
    results = []
    for chooser, n in zip(choosers, prompt_tokens):
        chunks = stream_generate(iter(chooser.new_ids()), tokenizer, config, recorder=chooser.recorder)
        results.append(collect(chunks, prompt_tokens=n, started=started))
    return results


def check_batchable(config: GenerationConfig) -> None:
    """A fixed batch runs greedy search or sampling, one sequence per row, without the prompt's log-probabilities."""
    if config.num_beams > 1 or config.num_return_sequences > 1:
        raise ConfigurationError(
            "generate_batch runs greedy or sampling with one sequence per input; for beam search or several "
            "sequences call generate() per input."
        )
    if config.prompt_logprobs:
        raise ConfigurationError("prompt_logprobs is reported by generate() and stream_chunks(): call them per prompt.")
