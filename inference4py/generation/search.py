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

__all__ = ["StepModel", "generate_step"]


class StepModel(Protocol):
    """What the loop needs from the engine (DecoderState, Seq2SeqState)."""

    def prefill(self, input_ids: np.ndarray, attention_mask: np.ndarray | None = None) -> np.ndarray: ...

    def step(self, tokens: np.ndarray) -> np.ndarray: ...


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
    """Yield generated token ids one at a time (batch of one).

    Args:
        model: a fresh step model (its cache is empty).
        prompt_ids: the tokens fed first (decoder-only: the prompt; encoder-decoder:
            the decoder start tokens).
        config: max_new_tokens and eos ids are read from it.
        processors: logits processors, applied in order to ``(ids, scores)``.
        sampler: picks the next token from the processed scores.
        rng: random generator handed to the sampler.
        recorder: with logprobs on, sees each step's raw logits before the processors and the chosen token.
    """
    n = len(prompt_ids)
    max_new = config.max_new_tokens
    # One buffer for the whole sequence: processors see a view, nothing grows per step.
    ids = np.empty((1, n + max_new), dtype=np.int64)  # [1, prompt + new]
    ids[0, :n] = prompt_ids
    eos = frozenset(config.eos_token_id)
    processors = tuple(processors)
    prompt_scores = recorder is not None and config.prompt_logprobs
    if prompt_scores:
        if not hasattr(model, "keep_prefill_logits"):
            raise ConfigurationError(
                "prompt_logprobs scores the prompt's own tokens, which only a decoder-only model predicts: "
                "drop prompt_logprobs for this task."
            )
        model.keep_prefill_logits = True
    logits = model.prefill(ids[:, :n])  # [1, vocab]
    if prompt_scores and recorder is not None:
        everything = getattr(model, "prefill_logits", None)  # [1, n, vocab]
        if everything is None or everything.shape[1] != n:
            raise ConfigurationError("This graph returns only the last position's logits: prompt_logprobs needs all.")
        recorder.record_prompt(prompt_ids, everything[0])
    step_input = np.empty((1,), dtype=np.int64)
    for i in range(max_new):
        cur = n + i
        scores = logits
        if recorder is not None:
            recorder.observe(logits)  # raw: the processors may change scores in place
        if processors:
            seen = ids[:, :cur]
            for proc in processors:
                scores = proc(seen, scores)
        token = int(sampler(scores, rng)[0])
        if scores[0, token] != scores[0, token]:  # NaN: argmax and the samplers pick NaN scores first
            raise nan_logits_error(i)
        ids[0, cur] = token
        if recorder is not None:
            recorder.choose(token)
        yield token
        if token in eos or i + 1 == max_new:
            return
        step_input[0] = token
        logits = model.step(step_input)
