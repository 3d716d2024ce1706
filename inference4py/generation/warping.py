"""The warping maths of sampling: temperature, then top-k, top-p and min-p, in transformers' order.

One module holds every form of it, each computing the same kept tokens and scores:

* :class:`Temperature`, :class:`TopK`, :class:`TopP`, :class:`MinP` (made by
  :func:`make_logits_warpers`): processors over the whole vocabulary, the numpy twins of
  transformers' warpers (beam sampling runs them; the tests hold them to transformers' outputs);
* :class:`Warping`: the same warp over candidate tokens only (``warp``: a batch, top-k with
  ``np.argpartition`` and top-p without a full sort; ``top_k_row``: one row with top-k, in
  fewer numpy calls).  The sampler of sampling.py draws from it; speculative decoding reads the
  distribution from it.

Every filter keeps at least ``min_tokens_to_keep`` tokens (:func:`min_tokens_to_keep`).
"""

from __future__ import annotations

import math

import numpy as np

from inference4py.generation.config import GenerationConfig
from inference4py.generation.processors import LogitsProcessor, _Repr

__all__ = [
    "MinP",
    "Temperature",
    "TopK",
    "TopP",
    "Warping",
    "make_logits_warpers",
    "min_tokens_to_keep",
]

_NEG_INF = np.float32(-np.inf)


# ---------------------------------------------------------------------------------- the whole vocabulary
def _softmax32(scores: np.ndarray) -> np.ndarray:
    """Row softmax in float32, computed the way torch does (max-shifted)."""
    shifted = scores - scores.max(axis=1, keepdims=True)
    e = np.exp(shifted)
    return e / e.sum(axis=1, keepdims=True)


class Temperature(_Repr):
    """Divide the scores by ``temperature``."""

    __slots__ = ("temperature",)

    def __init__(self, temperature: float) -> None:
        self.temperature = float(temperature)

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        # A float32 division, bit-identical to torch's (checked by the fixtures).
        np.divide(scores, np.float32(self.temperature), out=scores)
        return scores


class TopK(_Repr):
    """Keep the ``top_k`` highest scores (and every score tied with the k-th)."""

    __slots__ = ("top_k",)

    def __init__(self, top_k: int, min_tokens_to_keep: int = 1) -> None:
        self.top_k = max(int(top_k), int(min_tokens_to_keep))

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        vocab = scores.shape[1]
        k = min(self.top_k, vocab)
        kth = np.partition(scores, vocab - k, axis=1)[:, vocab - k : vocab - k + 1]  # [batch, 1]
        scores[scores < kth] = _NEG_INF
        return scores


def _top_p_remove_sorted(
    sorted_asc: np.ndarray,
    top_p: float,
    min_tokens_to_keep: int,
    *,
    probs: np.ndarray | None = None,
    offset: np.ndarray | None = None,
) -> np.ndarray:
    """Top-p removal mask over scores sorted ascending (transformers' rule).

    A token is removed when the cumulative probability up to and including it,
    in ascending order, is <= 1 - top_p; the last ``min_tokens_to_keep`` are kept.
    The cumulative sum accumulates in float64 and is rounded to float32 like
    torch's CPU ``cumsum``.  ``probs`` are the float32 probabilities of the
    sorted scores (computed when None); ``offset`` [batch] is the probability
    mass of lower tokens left out of ``sorted_asc``.
    """
    if probs is None:
        probs = _softmax32(sorted_asc)
    cumulative = np.cumsum(probs, axis=1, dtype=np.float64)
    if offset is not None:
        cumulative += offset[:, None]
    cumulative = cumulative.astype(np.float32)
    remove = cumulative <= np.float32(1.0 - top_p)
    remove[:, sorted_asc.shape[1] - min_tokens_to_keep :] = False
    return remove


def _sort_ascending(scores: np.ndarray) -> np.ndarray:
    """Indices sorting each row ascending; equal scores: higher token id first.

    Seen from the top this is "descending, lowest id first", the tie order of
    ``torch.argmax`` / ``torch.topk``.  (torch.sort itself is not stable on CPU,
    so transformers' tie order is an accident of its sort; ties exactly at the
    top-p boundary are the only place where this choice shows.)
    """
    return np.argsort(-scores, axis=1, kind="stable")[:, ::-1]


class TopP(_Repr):
    """Nucleus sampling: keep the most likely tokens whose probabilities sum to ``top_p``."""

    __slots__ = ("top_p", "min_tokens_to_keep")

    def __init__(self, top_p: float, min_tokens_to_keep: int = 1) -> None:
        self.top_p = float(top_p)
        self.min_tokens_to_keep = int(min_tokens_to_keep)

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        order = _sort_ascending(scores)
        remove_sorted = _top_p_remove_sorted(
            np.take_along_axis(scores, order, axis=1), self.top_p, self.min_tokens_to_keep
        )
        remove = np.empty_like(remove_sorted)
        np.put_along_axis(remove, order, remove_sorted, axis=1)
        scores[remove] = _NEG_INF
        return scores


class MinP(_Repr):
    """Drop tokens whose probability is below ``min_p`` times the top probability."""

    __slots__ = ("min_p", "min_tokens_to_keep")

    def __init__(self, min_p: float, min_tokens_to_keep: int = 1) -> None:
        self.min_p = float(min_p)
        self.min_tokens_to_keep = int(min_tokens_to_keep)

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        remove = _min_p_remove(scores, self.min_p)
        if self.min_tokens_to_keep > 1:
            top = np.argsort(-scores, axis=1, kind="stable")[:, : self.min_tokens_to_keep]
            np.put_along_axis(remove, top, False, axis=1)
        scores[remove] = _NEG_INF
        return scores


def _min_p_remove(scores: np.ndarray, min_p: float) -> np.ndarray:
    """Min-p removal mask (float32, as transformers); the top token is never removed."""
    probs = _softmax32(scores)
    threshold = probs.max(axis=1, keepdims=True) * np.float32(min_p)
    return probs < threshold


def min_tokens_to_keep(config: GenerationConfig) -> int:
    """Tokens every warper keeps: 1, or ``len(eos) + 1`` (2 without EOS) in beam search.

    Beam search must keep a non-EOS continuation per beam; transformers derives
    this in ``GenerationMixin._get_logits_processor``.
    """
    if config.num_beams > 1:
        return len(config.eos_token_id) + 1 if config.eos_token_id else 2
    return 1


def make_logits_warpers(config: GenerationConfig) -> list[LogitsProcessor]:
    """The warpers transformers applies after the processors when sampling.

    Order: temperature, top-k, top-p, min-p; each masks with -inf.  Empty when
    ``config.sampling`` is false.  :func:`~inference4py.generation.sampling.make_sampler`
    computes the same distribution faster; these are for beam sampling and tests.
    """
    if not config.sampling:
        return []
    keep = min_tokens_to_keep(config)
    warpers: list[LogitsProcessor] = []
    if config.temperature != 1.0:
        warpers.append(Temperature(config.temperature))
    if config.top_k != 0:
        warpers.append(TopK(config.top_k, keep))
    if config.top_p < 1.0:
        warpers.append(TopP(config.top_p, keep))
    if config.min_p > 0.0:  # min_p == 0 removes nothing
        warpers.append(MinP(config.min_p, keep))
    return warpers


# ---------------------------------------------------------------------------------- candidates only
class Warping:
    """The warp of one sampling config over candidate tokens (the sampler's; see the module doc)."""

    __slots__ = ("temperature", "top_k", "top_p", "min_p", "min_tokens_to_keep")

    def __init__(self, *, temperature: float, top_k: int, top_p: float, min_p: float, min_tokens_to_keep: int) -> None:
        self.temperature = temperature
        self.min_tokens_to_keep = min_tokens_to_keep
        self.top_k = max(top_k, min_tokens_to_keep) if top_k > 0 else 0
        self.top_p = top_p
        self.min_p = min_p

    @classmethod
    def of(cls, config: GenerationConfig) -> Warping:
        """The warp ``config`` samples with."""
        return cls(
            temperature=float(config.temperature),
            top_k=int(config.top_k),
            top_p=float(config.top_p),
            min_p=float(config.min_p),
            min_tokens_to_keep=min_tokens_to_keep(config),
        )

    def __repr__(self) -> str:
        return (
            f"Warping(temperature={self.temperature}, top_k={self.top_k}, top_p={self.top_p}, "
            f"min_p={self.min_p}, min_tokens_to_keep={self.min_tokens_to_keep})"
        )

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

    def top_k_row(self, row: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """:meth:`warp` of one row with top-k on, on the 1-D row: ``(ids [K], scores [K])`` ascending.

        The candidates are every token scoring >= the k-th score (ties at the cut
        included, as in :func:`_top_k_candidates`), found with a partition of the
        scores and a comparison (cheaper than ``np.argpartition``).  From there
        every array holds the values the batch path computes, in the same order
        (float32 sums depend on positions), so the token is the one the batch path
        draws from the same generator (sampling.py); tests/generation/test_sampling.py checks it.
        The filters are the batch path's own (:func:`_top_p_remove_sorted`,
        :func:`_min_p_remove`) on the row as a batch of one.  Returns None for a row the batch path must take: NaN scores (the batch
        path ranks NaN highest, a comparison never does), no finite score, or k >= vocab.
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
        if self.top_p < 1.0:
            vals[_top_p_remove_sorted(vals[None, :], self.top_p, keep)[0]] = _NEG_INF
        if self.min_p > 0.0:
            remove = _min_p_remove(vals[None, :], self.min_p)[0]
            remove[width - keep :] = False
            vals[remove] = _NEG_INF
        return ids, vals


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
