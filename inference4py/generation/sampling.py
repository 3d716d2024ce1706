"""Token choice from processed scores: greedy argmax or sampling.

:func:`make_sampler` returns a callable ``(scores, rng) -> token ids`` that takes
the scores *after* :func:`~inference4py.generation.processors.make_logits_processors`
and warps them itself.  The distribution it draws from is the one transformers'
warpers define (temperature, then top-k, top-p, min-p: the same kept tokens and the
same probabilities), computed over candidate tokens by
:class:`~inference4py.generation.warping.Warping` (the warping maths, in one module);
the draw is one uniform number per row against float64 cumulative probabilities,
vectorised over the batch.  A batch of one with top-k (the usual streaming case)
takes a path over the 1-D row that does the same arithmetic on the same arrays
with fewer numpy calls: the same tokens for the same random numbers.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from inference4py.errors import InferenceError
from inference4py.generation.config import GenerationConfig
from inference4py.generation.warping import Warping

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
    return _WarpedSampler(Warping.of(config))


class _WarpedSampler:
    """Draws from :class:`~inference4py.generation.warping.Warping`'s candidates, one uniform number a row."""

    __slots__ = ("warping", "_one_row")

    def __init__(self, warping: Warping) -> None:
        self.warping = warping
        self._one_row = warping.top_k > 0  # a batch of one with top-k takes the 1-D path

    def __repr__(self) -> str:
        w = self.warping
        return (
            f"Sampler(temperature={w.temperature}, top_k={w.top_k}, top_p={w.top_p}, "
            f"min_p={w.min_p}, min_tokens_to_keep={w.min_tokens_to_keep})"
        )

    def __call__(self, scores: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        if scores.shape[0] == 1 and self._one_row:
            found = self.warping.top_k_row(scores[0])
            if found is not None:
                return np.array([_draw_row(*found, rng)], dtype=np.int64)
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
        """:meth:`Warping.warp <inference4py.generation.warping.Warping.warp>`: the candidates this sampler draws from."""
        return self.warping.warp(scores)


def _draw_row(ids: np.ndarray, vals: np.ndarray, rng: np.random.Generator) -> int:
    """:func:`_draw` on one row of candidates sorted ascending (``Warping.top_k_row``'s): the same token."""
    weights = vals.astype(np.float64)
    weights -= weights[-1]  # the maximum
    np.exp(weights, out=weights)
    cumulative = weights.cumsum()  # finite, non-decreasing: searchsorted counts the entries <= target
    total = cumulative[-1]
    target = min(rng.random() * total, math.nextafter(total, 0.0))  # the number random(1) draws
    return int(ids[cumulative.searchsorted(target, side="right")])


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
