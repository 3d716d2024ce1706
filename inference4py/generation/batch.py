"""Batched generation: one forward pass per step for several prompts.

Decoder-only prompts are left-padded (the engine derives position ids from the
attention mask); every row stops on its own EOS, after which it is fed the pad
token like transformers does, and its result does not depend on other rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from inference4py.errors import ConfigurationError
from inference4py.generation.config import GenerationConfig
from inference4py.generation.logprobs import LogprobRecorder, TokenLogprob
from inference4py.generation.processors import LogitsProcessor
from inference4py.generation.sampling import Sampler
from inference4py.generation.search import StepModel

if TYPE_CHECKING:
    from inference4py.generation.result import GenerationResult
    from inference4py.tokenization import Tokenizer

__all__ = ["left_pad", "right_pad", "generate_batch_ids", "batch_results", "make_recorders", "result_from_ids"]


def left_pad(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, mask)`` ``[batch, max_len]`` with the padding on the left (decoder-only prompts)."""
    width = max(len(r) for r in rows)
    ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for i, row in enumerate(rows):
        ids[i, width - len(row) :] = row
        mask[i, width - len(row) :] = 1
    return ids, mask


def right_pad(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, mask)`` with the padding on the right (encoder inputs)."""
    width = max(len(r) for r in rows)
    ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
    return ids, mask


def generate_batch_ids(
    model: StepModel,
    input_ids: np.ndarray,
    attention_mask: np.ndarray | None,
    config: GenerationConfig,
    *,
    processors: Sequence[LogitsProcessor],
    sampler: Sampler,
    rng: np.random.Generator,
    pad_id: int,
    recorders: Sequence[LogprobRecorder] | None = None,
) -> list[list[int]]:
    """Generate for every row of ``input_ids`` ``[batch, n]``; returns each row's new ids (EOS included).

    ``recorders`` (one per row, with logprobs on) see each unfinished row's raw logits and token.
    """
    batch, n = input_ids.shape
    ids = np.empty((batch, n + config.max_new_tokens), dtype=np.int64)  # [batch, prompt + new]
    ids[:, :n] = input_ids
    eos = np.asarray(sorted(config.eos_token_id), dtype=np.int64)
    unfinished = np.ones(batch, dtype=bool)
    lengths = np.zeros(batch, dtype=np.int64)  # generated tokens per row
    rec: Sequence[LogprobRecorder] = recorders or ()
    logits = model.prefill(input_ids, attention_mask)  # [batch, vocab]
    for i in range(config.max_new_tokens):
        cur = n + i
        scores = logits
        active: list[int] = np.flatnonzero(unfinished).tolist() if rec else []
        for r in active:
            rec[r].observe(logits[r])
        for proc in processors:
            scores = proc(ids[:, :cur], scores)
        tokens = np.asarray(sampler(scores, rng), dtype=np.int64)
        tokens = np.where(unfinished, tokens, pad_id)
        for r in active:
            rec[r].choose(int(tokens[r]))
        ids[:, cur] = tokens
        lengths += unfinished
        if eos.size:
            unfinished &= ~np.isin(tokens, eos)
        if not unfinished.any() or i + 1 == config.max_new_tokens:
            break
        logits = model.step(tokens)
    return [ids[r, n : n + int(lengths[r])].tolist() for r in range(batch)]


def result_from_ids(
    token_ids: Sequence[int],
    tokenizer: Tokenizer,
    config: GenerationConfig,
    *,
    prompt_tokens: int,
    duration: float,
    time_to_first_token: float,
    logprobs: Sequence[TokenLogprob] | None = None,
) -> GenerationResult:
    """A :class:`GenerationResult` for ids generated without streaming (stop sequences cut afterwards)."""
    from inference4py.generation.result import Candidate, FinishReason, GenerationResult

    text = tokenizer.decode(list(token_ids), skip_special_tokens=True)
    reason: FinishReason = "eos" if token_ids and token_ids[-1] in config.eos_token_id else "length"
    cuts = [text.find(s) for s in config.stop_sequences if s in text]
    if cuts:
        text = text[: min(cuts)]
        reason = "stop"
    ids = tuple(int(t) for t in token_ids)
    return GenerationResult(
        text=text,
        token_ids=ids,
        prompt_tokens=prompt_tokens,
        generated_tokens=len(ids),
        finish_reason=reason,
        duration=duration,
        time_to_first_token=time_to_first_token,
        candidates=(Candidate(text, ids, None, reason),),
        logprobs=tuple(logprobs) if logprobs is not None else None,
    )


def batch_results(
    outputs: Sequence[Sequence[int]],
    prompt_lengths: Sequence[int],
    tokenizer: Tokenizer,
    config: GenerationConfig,
    *,
    elapsed: float,
    recorders: Sequence[LogprobRecorder] | None = None,
) -> list[GenerationResult]:
    """One :class:`GenerationResult` per row of a batch, in order."""
    return [
        result_from_ids(
            out,
            tokenizer,
            config,
            prompt_tokens=n,
            duration=elapsed,
            time_to_first_token=elapsed,
            logprobs=recorders[i].items if recorders is not None else None,
        )
        for i, (out, n) in enumerate(zip(outputs, prompt_lengths))
    ]


def make_recorders(rows: int, tokenizer: Tokenizer, config: GenerationConfig) -> list[LogprobRecorder] | None:
    """One logprob recorder per batch row when the config asks for logprobs, else None."""
    if not config.logprobs:
        return None
    if config.prompt_logprobs:
        raise ConfigurationError("prompt_logprobs is reported by generate() and stream_chunks(): call them per prompt.")
    return [LogprobRecorder(tokenizer, config.top_logprobs) for _ in range(rows)]
