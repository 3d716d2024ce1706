"""Beam search and multiple return sequences over a step model.

:func:`beam_search` is the numpy twin of transformers 4.57
``GenerationMixin._beam_search`` (and of its helpers ``_get_top_k_continuations``,
``_get_running_beams_for_next_iteration``, ``_update_finished_beams``,
``_check_early_stop_heuristic`` and ``_beam_search_has_unfinished_sequences``):
the same float32 arithmetic, the same ``-1e9`` masks, the same stopping rules, so
the same weights give the same token ids.  Each step:

1. ``log_softmax`` of the last logits of every running beam, then the logits
   processors applied to those log-probabilities (as transformers does), plus
   the warpers when sampling;
2. the beam's running score is added and the best ``max(2, 1 + len(eos)) * num_beams``
   continuations over all beams are kept (sampled without replacement when
   ``do_sample``);
3. a continuation that ends with EOS, or reaches ``max_new_tokens``, is finished:
   among the first ``num_beams`` continuations only, its score divided by
   ``generated_length ** length_penalty`` competes for the ``num_beams`` finished
   slots (``generated_length`` counts generated tokens, EOS included, never the
   prompt nor the decoder start token);
4. the best ``num_beams`` unfinished continuations run the next step; the KV cache
   rows follow them with one ``state.reorder(rows)`` (skipped when the rows are
   unchanged).

:func:`sample_sequences` draws ``num_return_sequences`` independent samples in
one batch.  Both start with a single prefill of the prompt that is then
expanded to one row per beam or sample; :func:`generate_sequences` picks the
right one for a config.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np

from inference4py.errors import ConfigurationError, InvalidInputError
from inference4py.generation.config import GenerationConfig
from inference4py.generation.processors import LogitsProcessor, apply_processors, log_softmax
from inference4py.generation.sampling import Sampler
from inference4py.generation.search import RowsChooser
from inference4py.generation.warping import make_logits_warpers

__all__ = [
    "Hypothesis",
    "SearchModel",
    "beam_search",
    "sample_sequences",
    "generate_sequences",
    "returns_several",
]

_NEG = np.float32(-1.0e9)  # transformers' "never choose this" offset, float32
_F32 = np.float32


@dataclass(frozen=True)
class Hypothesis:
    """One finished sequence of a search.

    Attributes:
        token_ids: Generated ids only (no prompt, no decoder start); an EOS that
            ended the sequence is included, padding is not.
        score: Beam search: transformers' ``sequences_scores`` (sum of the processed
            log-probabilities divided by ``len(token_ids) ** length_penalty``).
            ``None`` for samples.
        finish_reason: ``"eos"`` or ``"length"``.
    """

    token_ids: tuple[int, ...]
    score: float | None
    finish_reason: Literal["eos", "length"]


class SearchModel(Protocol):
    """What beam search needs from the engine: DecoderState or Seq2SeqState.

    Encoder-decoder states also have ``expand_source(rows)``, which repeats the
    encoder output (and the cross-attention cache) before decoding starts.
    """

    def prefill(self, input_ids: np.ndarray, attention_mask: np.ndarray | None = None) -> np.ndarray: ...

    def step(self, tokens: np.ndarray) -> np.ndarray: ...

    def reorder(self, indices: np.ndarray) -> None: ...


def returns_several(config: GenerationConfig) -> bool:
    """True when ``config`` needs beam search or several samples (not the one-row loop)."""
    return config.num_beams > 1 or config.num_return_sequences > 1


# ---------------------------------------------------------------------------------- start
def _as_batch(input_ids: Sequence[int] | Sequence[Sequence[int]] | np.ndarray) -> np.ndarray:
    ids = np.asarray(input_ids, dtype=np.int64)
    if ids.ndim == 1:
        ids = ids[None, :]
    if ids.ndim != 2 or ids.shape[1] == 0:
        raise InvalidInputError(f"Expected [batch, n > 0] token ids, got shape {ids.shape}.")
    return ids


def _start(model: SearchModel, input_ids: np.ndarray, attention_mask: np.ndarray | None, per_row: int) -> np.ndarray:
    """Feed the prompt once and expand the state to ``per_row`` rows per batch row.

    Decoder-only: prefill ``[batch, n]``, then ``reorder`` repeats every cache row
    (the prompt runs once, not once per beam).  Encoder-decoder: the encoder ran
    once already; ``expand_source`` repeats its rows, then the start tokens run
    on every row (they are one token: this is the first decoder step).

    Returns:
        Last-position logits ``[batch * per_row, vocab]``.
    """
    batch = input_ids.shape[0]
    rows = np.repeat(np.arange(batch, dtype=np.int64), per_row)
    expand_source = getattr(model, "expand_source", None)
    if expand_source is not None:
        if per_row > 1:
            expand_source(rows)
        return model.prefill(input_ids[rows])
    logits = model.prefill(input_ids, attention_mask)  # [batch, vocab]
    if per_row > 1:
        model.reorder(rows)
        logits = logits[rows]
    return logits


def _eos_mask(config: GenerationConfig, vocab: int) -> np.ndarray:
    mask = np.zeros(vocab, dtype=bool)
    ids = np.asarray([t for t in config.eos_token_id if 0 <= t < vocab], dtype=np.int64)
    mask[ids] = True
    return mask


def _top(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest scores of each row, sorted descending.

    Equal scores come lowest index first.  (``torch.topk`` orders ties
    arbitrarily; in beam search ties only occur between beams that carry the
    ``-1e9`` mask or ``-inf``, whose content is never returned.)
    """
    n = scores.shape[1]
    if n <= 64 or k >= n:
        return np.argsort(-scores, axis=1, kind="stable")[:, :k]
    out = np.empty((scores.shape[0], k), dtype=np.int64)
    for b, row in enumerate(scores):
        part = np.argpartition(row, n - k)[n - k :]
        kth = row[part].min()
        above = np.flatnonzero(row > kth)
        chosen = np.concatenate([above, np.flatnonzero(row == kth)[: k - above.size]])
        out[b] = chosen[np.lexsort((chosen, -row[chosen]))]
    return out


def _gumbel_order(scores: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """``k`` draws without replacement from ``softmax(scores)`` per row, in draw order.

    Adding Gumbel noise and taking the top k is a draw without replacement with
    the distribution of ``torch.multinomial(softmax(scores), k)`` (whose own
    random numbers cannot be reproduced in numpy).
    """
    noise = rng.gumbel(size=scores.shape).astype(np.float32)
    keys = np.where(np.isneginf(scores), -np.inf, scores + noise)
    return _top(keys, k)


# ---------------------------------------------------------------------------------- beam search
def beam_search(
    model: SearchModel,
    input_ids: Sequence[int] | Sequence[Sequence[int]] | np.ndarray,
    config: GenerationConfig,
    *,
    processors: Sequence[LogitsProcessor] = (),
    rng: np.random.Generator | None = None,
    attention_mask: np.ndarray | None = None,
) -> list[list[Hypothesis]]:
    """Beam search as transformers 4.57 does it; returns the best sequences of each batch row.

    All ``batch * num_beams`` rows run in one forward pass per step.

    Args:
        model: A fresh step model (empty cache).  Decoder-only: prefilled once with
            ``input_ids``, then expanded with ``reorder``.  Encoder-decoder: its
            encoder already ran on ``batch`` rows; ``expand_source`` repeats them.
        input_ids: ``[batch, n]`` (or ``[n]``): the prompt (decoder-only) or the
            decoder start ids (encoder-decoder).  ``n`` is transformers'
            ``decoder_prompt_len``: it is left out of the length penalty.
        config: num_beams, num_return_sequences, length_penalty, early_stopping,
            max_new_tokens, eos_token_id; do_sample for beam sampling.
        processors: Logits processors, applied to the log-probabilities
            (``make_logits_processors(config, prompt_length=n)``).
        rng: Random generator, needed only for beam sampling (``do_sample=True``).
        attention_mask: ``[batch, n]`` for a left-padded decoder-only batch.

    Returns:
        One list per batch row of ``num_return_sequences`` hypotheses, best first.

    Raises:
        ConfigurationError: ``num_return_sequences > num_beams``.
    """
    ids0 = _as_batch(input_ids)
    K = config.num_beams
    if config.num_return_sequences > K:
        raise ConfigurationError(
            f"num_return_sequences={config.num_return_sequences} is larger than num_beams={K}: beam search "
            f"returns at most num_beams sequences. Raise num_beams to {config.num_return_sequences} or lower "
            "num_return_sequences."
        )
    sampling = config.sampling
    if sampling and rng is None:
        raise ConfigurationError(
            "Beam sampling (do_sample=True with num_beams > 1) needs a random generator: pass rng."
        )
    warpers = make_logits_warpers(config) if sampling else []
    B, n = ids0.shape
    max_new = config.max_new_tokens
    L = n + max_new  # transformers' max_length
    lp = float(config.length_penalty)
    es = config.early_stopping
    n_eos = len(config.eos_token_id)
    M = max(2, 1 + n_eos) * K  # continuations kept per step (beams_to_keep)
    rows_b = np.arange(B)[:, None]

    # Running beams: [B, K, L] ids, double-buffered so no step allocates a sequence-sized array.
    seqs = np.zeros((B, K, L), dtype=np.int64)
    seqs[:, :, :n] = ids0[:, None, :]
    spare = np.empty_like(seqs)
    running = np.zeros((B, K), dtype=_F32)
    running[:, 1:] = _NEG  # only the first beam's continuations count at the first step
    # Finished hypotheses: [B, K] slots, kept sorted by score.
    fin_seqs = seqs.copy()
    fin_len = np.zeros((B, K), dtype=np.int64)  # generated tokens of each slot
    fin_scores = np.full((B, K), _NEG, dtype=_F32)
    is_fin = np.zeros((B, K), dtype=bool)
    improvable = np.ones((B, 1), dtype=bool)  # transformers' is_early_stop_heuristic_unsatisfied
    top_mask = np.arange(M) < K  # only the first num_beams continuations may finish

    logits = _start(model, ids0, attention_mask, K)  # [B*K, vocab]
    vocab = logits.shape[1]
    eos = _eos_mask(config, vocab)
    identity = np.arange(B * K)
    for step in range(max_new):
        cur = n + step
        flat = seqs.reshape(B * K, L)[:, :cur]
        scores = apply_processors(warpers, flat, apply_processors(processors, flat, log_softmax(logits)))  # [B*K, V]
        acc = (scores.reshape(B, K, vocab) + running[:, :, None]).reshape(B, K * vocab)

        # c. top-M continuations over all beams
        # [B, M]; rng is set whenever sampling (checked on entry)
        cand = _gumbel_order(acc, M, rng) if sampling and rng is not None else _top(acc, M)
        cand_scores = np.take_along_axis(acc, cand, axis=1)
        cand_beam = cand // vocab
        cand_tok = cand % vocab

        # d. which continuations stop (EOS, or the length limit)
        hits = eos[cand_tok] if cur + 1 < L else np.ones((B, M), dtype=bool)

        # e. the best num_beams continuations that did not stop keep running
        run_scores = cand_scores + hits.astype(_F32) * _NEG
        keep = _top(run_scores, K)  # [B, K]
        next_running = np.take_along_axis(run_scores, keep, axis=1)
        src = np.take_along_axis(cand_beam, keep, axis=1)  # beam each new running beam extends
        new_tok = np.take_along_axis(cand_tok, keep, axis=1)

        # f. finished continuations compete with the finished slots
        just = hits & top_mask[None, :]
        fin_cand = cand_scores / _F32(float(cur + 1 - n) ** lp)
        full = is_fin.all(axis=1, keepdims=True) & (es is True)
        fin_cand = fin_cand + full.astype(_F32) * _NEG
        fin_cand = fin_cand + (~improvable).astype(_F32) * _NEG
        fin_cand = fin_cand + (~just).astype(_F32) * _NEG
        merged = np.concatenate([fin_scores, fin_cand], axis=1)  # [B, K + M]
        order = _top(merged, K)
        if (order != np.arange(K)).any():
            _update_finished(
                order, merged, just, cand_beam, cand_tok, seqs, cur, n, fin_seqs, fin_len, fin_scores, is_fin
            )

        # g. new running beams, stopping rules
        beam_rows = (src + rows_b * K).reshape(-1)
        np.take(seqs.reshape(B * K, L), beam_rows, axis=0, out=spare.reshape(B * K, L))
        seqs, spare = spare, seqs
        seqs[:, :, cur] = new_tok
        running = next_running
        new_len = cur + 1
        best_len = L - n if es == "never" and lp > 0.0 else new_len - n
        best_possible = running[:, :1] / _F32(float(best_len) ** lp)
        worst = np.where(is_fin, fin_scores.min(axis=1, keepdims=True), _NEG)
        improvable &= (best_possible > worst).any(axis=1, keepdims=True)
        if not improvable.any() or (is_fin.all() and es is True) or hits.all():
            break
        if not np.array_equal(beam_rows, identity):
            model.reorder(beam_rows)
        logits = model.step(new_tok.reshape(-1))

    count = config.num_return_sequences
    out: list[list[Hypothesis]] = []
    for b in range(B):
        hyps = []
        for j in range(count):
            tokens = tuple(int(t) for t in fin_seqs[b, j, n : n + fin_len[b, j]])
            reason: Literal["eos", "length"] = "eos" if tokens and eos[tokens[-1]] else "length"
            hyps.append(Hypothesis(tokens, float(fin_scores[b, j]), reason))
        out.append(hyps)
    return out


def _update_finished(
    order: np.ndarray,
    merged: np.ndarray,
    just: np.ndarray,
    cand_beam: np.ndarray,
    cand_tok: np.ndarray,
    seqs: np.ndarray,
    cur: int,
    n: int,
    fin_seqs: np.ndarray,
    fin_len: np.ndarray,
    fin_scores: np.ndarray,
    is_fin: np.ndarray,
) -> None:
    """Rebuild the finished slots from ``order`` (indices into [old slots, continuations]), in place."""
    K = fin_scores.shape[1]
    old_seqs, old_len, old_fin = fin_seqs.copy(), fin_len.copy(), is_fin.copy()
    for b in range(order.shape[0]):
        for j, m in enumerate(order[b]):
            if m < K:
                fin_seqs[b, j] = old_seqs[b, m]
                fin_len[b, j] = old_len[b, m]
                is_fin[b, j] = old_fin[b, m]
            else:
                c = m - K
                fin_seqs[b, j, :cur] = seqs[b, cand_beam[b, c], :cur]
                fin_seqs[b, j, cur] = cand_tok[b, c]
                fin_len[b, j] = cur + 1 - n
                is_fin[b, j] = just[b, c]
    fin_scores[:] = np.take_along_axis(merged, order, axis=1)


# ---------------------------------------------------------------------------------- samples
def sample_sequences(
    model: SearchModel,
    input_ids: Sequence[int] | Sequence[Sequence[int]] | np.ndarray,
    config: GenerationConfig,
    *,
    processors: Sequence[LogitsProcessor],
    sampler: Sampler,
    rng: np.random.Generator,
    attention_mask: np.ndarray | None = None,
) -> list[list[Hypothesis]]:
    """``num_return_sequences`` samples per batch row, drawn in one batch (transformers' ``_sample``).

    The prompt is fed once and expanded to one row per sample; every row draws
    its own token (one vectorised sampler call per step) and stops at its own
    EOS.  A finished row is fed the pad id (``pad_token_id``, else the first EOS
    id) until every row is done, as in transformers.

    Returns:
        One list per batch row of ``num_return_sequences`` hypotheses in draw
        order (score ``None``).
    """
    ids0 = _as_batch(input_ids)
    R = config.num_return_sequences
    B = ids0.shape[0]
    logits = _start(model, ids0, attention_mask, R)
    pad = (
        config.pad_token_id
        if config.pad_token_id is not None
        else (config.eos_token_id[0] if config.eos_token_id else 0)
    )
    chooser = RowsChooser(
        np.repeat(ids0, R, axis=0), config, processors=processors, sampler=sampler, rng=rng, pad_id=pad
    )
    while True:
        tokens = chooser.choose(logits)
        if chooser.finished:
            break
        logits = model.step(tokens)
    eos = _eos_mask(config, logits.shape[1])
    out: list[list[Hypothesis]] = []
    for b in range(B):
        hyps = []
        for r in range(b * R, (b + 1) * R):
            tokens_r = chooser.new_ids(r)
            reason_r: Literal["eos", "length"] = "eos" if tokens_r and eos[tokens_r[-1]] else "length"
            hyps.append(Hypothesis(tokens_r, None, reason_r))
        out.append(hyps)
    return out


def generate_sequences(
    model: SearchModel,
    prompt_ids: Sequence[int],
    config: GenerationConfig,
    *,
    processors: Sequence[LogitsProcessor],
    sampler: Sampler,
    rng: np.random.Generator,
) -> list[Hypothesis]:
    """All returned sequences for one prompt: beam search when ``num_beams > 1``, else samples.

    Raises:
        ConfigurationError: ``num_return_sequences > num_beams`` in beam search.
    """
    if config.num_beams > 1:
        return beam_search(model, [list(prompt_ids)], config, processors=processors, rng=rng)[0]
    # GenerationConfig already refuses num_return_sequences > 1 for greedy search.
    return sample_sequences(model, [list(prompt_ids)], config, processors=processors, sampler=sampler, rng=rng)[0]
