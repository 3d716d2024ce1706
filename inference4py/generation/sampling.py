"""Token choice from processed scores: greedy argmax or sampling.

:func:`make_sampler` returns a callable ``(scores, rng) -> token ids`` that takes
the scores *after* :func:`~inference4py.generation.processors.make_logits_processors`
and applies the sampling warpers itself.  The distribution it draws from is the
one transformers' warpers define (temperature, then top-k, top-p, min-p: the
same kept tokens and the same probabilities), computed with less work: top-k
selects candidates with ``np.argpartition`` and every later step works on those
k candidates only; the draw is one uniform number per row against float64
cumulative probabilities, vectorised over the batch.  A batch of one with top-k
(the usual streaming case) takes a path over the 1-D row that does the same
arithmetic on the same arrays with fewer numpy calls: the same tokens for the
same random numbers.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from inference4py.errors import InferenceError
from inference4py.generation.config import GenerationConfig
from inference4py.generation.processors import (
    _min_p_remove,
    _softmax32,
    _sort_ascending,
    _top_p_remove_sorted,
    min_tokens_to_keep,
)

__all__ = ["Sampler", "choose_token", "choose_tokens", "make_sampler", "make_rng", "greedy", "nan_logits_error"]

Sampler = Callable[[np.ndarray, np.random.Generator], np.ndarray]
"""``(scores float32 [batch, vocab], rng) -> token ids int64 [batch]``."""

_NEG_INF = np.float32(-np.inf)


def make_rng(seed: int | None) -> np.random.Generator:
    """A numpy random generator; ``None`` seeds it from the OS.

    Any integer is a seed: a negative one (OpenAI and vLLM accept them) is taken modulo 2**64,
    since numpy takes non-negative seeds only.
    """
    return np.random.default_rng(None if seed is None else seed % (1 << 64))


def greedy(scores: np.ndarray, rng: np.random.Generator | None = None) -> np.ndarray:
    """Argmax of each row; ties go to the lowest token id, like ``torch.argmax``."""
    return scores.argmax(axis=-1).astype(np.int64, copy=False)


def nan_logits_error(step: int | None = None) -> InferenceError:
    """The error for NaN scores: a broken or overflowing graph, never a token to pick."""
    where = f" at generated token {step + 1}" if step is not None else ""
    return InferenceError(
        f"The model produced NaN logits{where}, so no token can be chosen. The ONNX graph overflows or is "
        "corrupt: with an fp16 or quantized model, try its fp32 variant; otherwise re-export or re-download it."
    )


def choose_token(sampler: Sampler, scores: np.ndarray, rng: np.random.Generator, *, step: int | None = None) -> int:
    """The one place a token is drawn: ``sampler`` on processed ``scores`` ``[1, vocab]``; NaN scores are refused.

    ``step`` (tokens generated before this one) only names the position in the error.
    """
    token = int(sampler(scores, rng)[0])
    if scores[0, token] != scores[0, token]:  # NaN: argmax and the samplers pick NaN scores first
        raise nan_logits_error(step)
    return token


def choose_tokens(sampler: Sampler, scores: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """:func:`choose_token` for rows that share one sampler call: ``scores`` ``[rows, vocab]`` -> ids ``[rows]``.

    One vectorised draw for every row (one uniform number per row, in row order); NaN scores are refused.
    """
    tokens = np.asarray(sampler(scores, rng), dtype=np.int64)
    picked = scores[np.arange(tokens.shape[0]), tokens]
    if np.isnan(picked).any():  # argmax and the samplers pick NaN scores first
        raise nan_logits_error()
    return tokens


def make_sampler(config: GenerationConfig) -> Sampler:
    """The token chooser for ``config``: greedy, or sampling with its warpers.

    Greedy when ``do_sample`` is false or ``temperature`` is 0.  Otherwise the
    sampler applies temperature, top-k, top-p and min-p (in transformers' order,
    with transformers' ``min_tokens_to_keep``) and draws one token per row.

    Args:
        config: Generation settings, already validated.

    Returns:
        ``sampler(scores, rng) -> int64 [batch]`` taking float32 ``[batch, vocab]``
        scores processed by the logits processors.  ``scores`` is not modified.

    Example:
        >>> sampler = make_sampler(GenerationConfig(do_sample=True, top_k=50, seed=0))
        >>> sampler(np.zeros((2, 100), np.float32), make_rng(0)).shape
        (2,)
    """
    if not config.sampling:
        return greedy
    return _WarpedSampler(
        temperature=float(config.temperature),
        top_k=int(config.top_k),
        top_p=float(config.top_p),
        min_p=float(config.min_p),
        min_tokens_to_keep=min_tokens_to_keep(config),
    )


class _WarpedSampler:
    __slots__ = ("temperature", "top_k", "top_p", "min_p", "min_tokens_to_keep", "_top_p_cut")

    def __init__(self, *, temperature: float, top_k: int, top_p: float, min_p: float, min_tokens_to_keep: int) -> None:
        self.temperature = temperature
        self.min_tokens_to_keep = min_tokens_to_keep
        self.top_k = max(top_k, min_tokens_to_keep) if top_k > 0 else 0
        self.top_p = top_p
        self.min_p = min_p
        self._top_p_cut = np.float32(1.0 - top_p)  # top-p removes cumulative probabilities <= this

    def __repr__(self) -> str:
        return (
            f"Sampler(temperature={self.temperature}, top_k={self.top_k}, top_p={self.top_p}, "
            f"min_p={self.min_p}, min_tokens_to_keep={self.min_tokens_to_keep})"
        )

    def __call__(self, scores: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        if scores.shape[0] == 1 and self.top_k:
            token = self._sample_top_k_row(scores[0], rng)
            if token is not None:
                return np.array([token], dtype=np.int64)
        try:
            idx, vals = self.warp(scores)
            pos = _draw(vals, rng)
        except ValueError:
            if np.isnan(scores).any():
                raise nan_logits_error() from None
            raise
        if idx is None:
            return pos
        return idx[np.arange(pos.shape[0]), pos]

    def warp(self, scores: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
        """Warped scores of the candidate tokens: ``(ids [batch, K] or None, scores [batch, K])``.

        Scattering ``scores`` to ``ids`` over a -inf row gives what
        ``make_logits_warpers`` returns; ``ids`` None means all tokens, in order.
        """
        s = np.asarray(scores, dtype=np.float32)
        if self.temperature != 1.0:
            s = s / np.float32(self.temperature)  # float32 like transformers; new array
        vocab = s.shape[1]
        keep = self.min_tokens_to_keep

        idx: np.ndarray | None = None  # token id of each column of ``vals``; None = identity
        ascending = False  # whether each row of ``vals`` is sorted ascending
        probs: np.ndarray | None = None  # float32 probabilities of ``vals`` over the whole vocabulary
        rest: np.ndarray | None = None  # [batch] probability mass of tokens left out of ``vals``
        if 0 < self.top_k < vocab:
            idx, vals = _top_k_candidates(s, self.top_k)
        elif self.top_p < 1.0:
            found = _nucleus_candidates(s, self.top_p)
            if found is None:
                idx = _sort_ascending(s)
                vals = np.take_along_axis(s, idx, axis=1)
                ascending = True
            else:
                idx, vals, probs, rest = found
        else:
            vals = s
        if idx is not None and not ascending:
            # Ascending by score, equal scores with the higher id first (see _sort_ascending).
            order = np.lexsort((-idx, vals), axis=-1)
            idx = np.take_along_axis(idx, order, axis=1)
            vals = np.take_along_axis(vals, order, axis=1)
            if probs is not None:
                probs = np.take_along_axis(probs, order, axis=1)
            ascending = True

        if self.top_p < 1.0:
            remove = _top_p_remove_sorted(vals, self.top_p, keep, probs=probs, offset=rest)
            vals = np.where(remove, _NEG_INF, vals)
        if self.min_p > 0.0:
            remove = _min_p_remove(vals, self.min_p)
            if keep > 1:
                if ascending:
                    remove[:, vals.shape[1] - keep :] = False
                else:
                    top = np.argpartition(-vals, keep - 1, axis=1)[:, :keep]
                    np.put_along_axis(remove, top, False, axis=1)
            vals = np.where(remove, _NEG_INF, vals)
        return idx, vals

    def _sample_top_k_row(self, row: np.ndarray, rng: np.random.Generator) -> int | None:
        """One token from one row with top-k on: :meth:`warp` then :func:`_draw`, on a 1-D row.

        The candidates are every token scoring >= the k-th score (ties at the cut
        included, as in :func:`_top_k_candidates`), found with a partition of the
        scores and a comparison (cheaper than ``np.argpartition``).  From there
        every array holds the values the batch path computes, in the same order
        (float32 sums depend on positions), so the token is the one the batch path
        draws from the same generator; tests/generation/test_sampling.py checks it.
        Shortcuts that keep the values: candidates sorted ascending have their
        maximum last, and top-p's cumulative sums only grow, so top-p removes a
        prefix.  Returns None, drawing nothing, for a row with NaN scores (the
        batch path ranks NaN highest, a comparison never does) or no finite score.
        """
        s = np.asarray(row, dtype=np.float32)
        if self.temperature != 1.0:
            s = s / np.float32(self.temperature)
        vocab = s.shape[0]
        k = self.top_k
        if k >= vocab:
            return None
        # (ndarray methods rather than np.* functions: no Python wrapper per call)
        top = s.copy()
        top.partition(vocab - k)
        top = top[vocab - k :]  # top[0] is the k-th score
        highest = top.max()
        if math.isnan(highest) or highest == _NEG_INF:  # nothing finite to draw
            return None
        ids = (s >= top[0]).nonzero()[0][::-1]  # ids descending
        vals = s[ids]
        # Ascending by score, equal scores with the higher id first (the batch path's lexsort).
        order = vals.argsort(kind="stable")
        ids = ids[order]
        vals = vals[order]  # [width], a new array: changed in place below
        width = vals.shape[0]
        keep = self.min_tokens_to_keep
        if self.top_p < 1.0:  # _top_p_remove_sorted on one row
            e = np.exp(vals - highest)
            probs = e / e.sum()
            cumulative32 = probs.cumsum(dtype=np.float64).astype(np.float32)
            removed = int(cumulative32.searchsorted(self._top_p_cut, side="right"))
            vals[: min(removed, width - keep)] = _NEG_INF
        if self.min_p > 0.0:
            remove = _min_p_remove(vals[None, :], self.min_p)[0]
            remove[width - keep :] = False
            vals[remove] = _NEG_INF
        # _draw on one row
        weights = vals.astype(np.float64)
        weights -= weights[-1]  # the maximum
        np.exp(weights, out=weights)
        cumulative = weights.cumsum()  # finite, non-decreasing: searchsorted counts the entries <= target
        total = cumulative[-1]
        target = min(rng.random() * total, math.nextafter(total, 0.0))  # the number random(1) draws
        return int(ids[cumulative.searchsorted(target, side="right")])


def _top_k_candidates(s: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Columns holding every score >= the k-th largest of its row.

    transformers keeps all tokens tied with the k-th score, so a row may keep
    more than k; then every row gets the widest count and the surplus columns
    of the other rows are masked with -inf.

    Returns:
        ``(ids int64 [batch, K], scores float32 [batch, K])`` in no particular order.
    """
    batch, vocab = s.shape
    part = np.argpartition(s, vocab - k, axis=1)
    rows = np.arange(batch)
    kth = s[rows, part[:, vocab - k]][:, None]  # [batch, 1]
    width = int((s >= kth).sum(axis=1).max())
    if width > k:
        part = np.argpartition(s, vocab - width, axis=1)
    ids = part[:, vocab - width :]
    vals = np.take_along_axis(s, ids, axis=1)
    if width > k:
        vals = np.where(vals < kth, _NEG_INF, vals)
    return ids.astype(np.int64, copy=False), vals


def _nucleus_candidates(s: np.ndarray, top_p: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """The top tokens of each row that contain its whole top-p nucleus, without a full sort.

    Tokens outside a candidate set whose left-out mass is <= 1 - top_p have an
    ascending cumulative probability <= 1 - top_p, so transformers removes them
    all; only the candidates need sorting.  The set grows 4x until that holds,
    or None is returned when it would exceed a quarter of the vocabulary.

    Returns:
        ``(ids, scores, probs, rest)``: candidate ids and scores [batch, K] (surplus
        columns -inf, as in :func:`_top_k_candidates`), their float32 probabilities
        over the whole vocabulary, and the left-out mass [batch] (float64).
    """
    batch, vocab = s.shape
    limit = (1.0 - top_p) - 1e-6  # margin for the rounding of the left-out mass
    m = 256
    probs_all: np.ndarray | None = None
    while m * 4 <= vocab:
        if probs_all is None:
            probs_all = _softmax32(s)
            total = probs_all.sum(axis=1, dtype=np.float64)
        ids, vals = _top_k_candidates(s, m)
        probs = np.take_along_axis(probs_all, ids, axis=1)
        probs[np.isneginf(vals)] = 0.0  # surplus columns belong to the left-out mass
        rest = total - probs.sum(axis=1, dtype=np.float64)
        if (rest <= limit).all():
            return ids, vals, probs, rest
        m *= 4
    return None


def _draw(vals: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One draw per row from softmax(vals) with one uniform number per row.

    Cumulative probabilities are in float64; a column with probability 0 (score
    -inf) can never be chosen.
    """
    weights = vals.astype(np.float64)
    weights -= weights.max(axis=1, keepdims=True)
    np.exp(weights, out=weights)
    cumulative = np.cumsum(weights, axis=1)  # [batch, n]
    total = cumulative[:, -1]
    # u in [0, 1); keep the target strictly below the total so it falls on a
    # column with positive weight even when u * total rounds up.
    target = np.minimum(rng.random(vals.shape[0]) * total, np.nextafter(total, 0.0))
    return (cumulative <= target[:, None]).sum(axis=1).astype(np.int64)
