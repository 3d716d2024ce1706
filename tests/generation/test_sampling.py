"""Samplers: greedy, reproducibility, and the sampled distribution against transformers' warpers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from inference4py.generation.config import GenerationConfig
from inference4py.generation.processors import apply_processors
from inference4py.generation.sampling import greedy, make_rng, make_sampler
from inference4py.generation.warping import make_logits_warpers

REFERENCES = Path(__file__).resolve().parents[1] / "fixtures" / "references"
META = json.loads((REFERENCES / "processors.json").read_text(encoding="utf-8"))
with np.load(REFERENCES / "processors.npz") as _npz:
    ARRAYS = {k: _npz[k] for k in _npz.files}
LOGITS = ARRAYS["logits"]
INPUT_IDS = ARRAYS["input_ids"]
N = 20_000


def _softmax64(scores: np.ndarray) -> np.ndarray:
    s = scores.astype(np.float64)
    e = np.exp(s - s.max())
    return e / e.sum()


class _GridRng:
    """Stand-in for np.random.Generator: ``random(n)`` returns (i + 0.5) / n.

    With one row per grid point, the count of each token is its probability
    times n, up to 1: an exact, noise-free picture of the sampled distribution.
    """

    def random(self, size: int) -> np.ndarray:
        return (np.arange(size) + 0.5) / size


def _counts(sampler, row: np.ndarray, rng, n: int = N) -> np.ndarray:
    tokens = sampler(np.tile(row, (n, 1)), rng)
    assert tokens.dtype == np.int64 and tokens.shape == (n,)
    return np.bincount(tokens, minlength=row.shape[0])


def _fits(counts: np.ndarray, probs: np.ndarray, n: int) -> bool:
    """Empirical frequencies within 5 sigma of ``probs``; impossible tokens never drawn."""
    freq = counts / n
    if counts[probs == 0].any():
        return False
    bound = 5.0 * np.sqrt(probs * (1.0 - probs) / n) + 2.0 / n
    return bool((np.abs(freq - probs) <= bound).all())


# ----------------------------------------------------------------------------- greedy
def test_greedy_is_argmax_with_first_index_on_ties():
    scores = np.array([[0.0, 3.0, 3.0, 1.0], [-np.inf, -1.0, -1.0, -2.0], [5.0, 5.0, 5.0, 5.0]], np.float32)
    sampler = make_sampler(GenerationConfig())
    out = sampler(scores, make_rng(0))
    assert out.dtype == np.int64 and out.tolist() == [1, 1, 0]
    assert sampler is greedy


@pytest.mark.parametrize(
    "cfg", [GenerationConfig(top_k=3), GenerationConfig(do_sample=True, temperature=0.0, top_p=0.5)]
)
def test_without_sampling_the_sampler_is_greedy(cfg):
    out = make_sampler(cfg)(LOGITS, make_rng(1))
    assert out.tolist() == [10, int(np.argmax(LOGITS[1])), 42]  # row 0: 10, 50, 120 tie -> 10


# ----------------------------------------------------------------------------- reproducibility
SAMPLING = GenerationConfig(do_sample=True, temperature=1.3, top_k=50, top_p=0.95)


def test_same_seed_same_tokens_and_different_seeds_differ():
    scores = np.tile(LOGITS[1], (64, 1))
    sampler = make_sampler(SAMPLING)
    a = sampler(scores, make_rng(123))
    b = sampler(scores, make_rng(123))
    c = sampler(scores, make_rng(124))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    # A sequence of calls on one generator is reproducible too.
    r1, r2 = make_rng(7), make_rng(7)
    assert [sampler(scores, r1).tolist() for _ in range(3)] == [sampler(scores, r2).tolist() for _ in range(3)]


def test_sampler_does_not_modify_its_input():
    scores = LOGITS.copy()
    make_sampler(GenerationConfig(do_sample=True, temperature=0.5, top_k=5, top_p=0.5, min_p=0.2))(scores, make_rng(0))
    np.testing.assert_array_equal(scores, LOGITS)


# ----------------------------------------------------------------------------- distributions
def _sampling_cases():
    for case in META["sampling"]:
        for row in range(LOGITS.shape[0]):
            if row not in case["ambiguous_rows"]:
                yield pytest.param(case, row, id=f"{case['name']}-row{row}")


@pytest.mark.parametrize("case, row", list(_sampling_cases()))
def test_exact_distribution_matches_transformers_warpers(case, row):
    """Stratified draws: every token's count is n * p(token) +- 1, where p is the
    softmax of transformers' warped scores; removed tokens are never drawn."""
    cfg = GenerationConfig(do_sample=True, **{"top_k": 0, **case["config"]})
    probs = _softmax64(ARRAYS[f"sampling/{case['name']}"][row])
    counts = _counts(make_sampler(cfg), LOGITS[row], _GridRng())
    assert counts[probs == 0].sum() == 0
    assert np.abs(counts - probs * N).max() <= 1.0 + 1e-6 * N
    assert (counts[probs * N >= 1.0] > 0).all()  # every kept token of visible mass is drawn


@pytest.mark.parametrize(
    "name, row",
    [
        ("temperature_1.3", 1),
        ("top_k_5", 0),
        ("top_k_1_ties", 0),
        ("top_p_0.9", 1),
        ("min_p_0.05", 0),
        ("top_k_50_top_p_0.9_min_p_0.05", 1),
        ("top_k_11_ties", 0),
    ],
)
def test_random_draws_match_transformers_distribution(name, row):
    case = next(c for c in META["sampling"] if c["name"] == name)
    cfg = GenerationConfig(do_sample=True, seed=0, **{"top_k": 0, **case["config"]})
    probs = _softmax64(ARRAYS[f"sampling/{name}"][row])
    counts = _counts(make_sampler(cfg), LOGITS[row], make_rng(2024))
    assert _fits(counts, probs, N)


def test_the_statistical_check_rejects_near_miss_distributions():
    """The bound of _fits is tight enough to catch an ignored temperature and a
    nucleus one token too large or too small."""
    row = LOGITS[1]
    cfg = GenerationConfig(do_sample=True, temperature=1.3, top_p=0.9, top_k=0)
    counts = _counts(make_sampler(cfg), row, make_rng(5))
    scaled = row / np.float32(1.3)
    warped = apply_processors(make_logits_warpers(cfg), INPUT_IDS[1:2], row[None].copy())[0]
    kept = np.isfinite(warped)
    assert _fits(counts, _softmax64(warped), N)

    wrong_temperature = np.where(kept, row, -np.inf)
    assert not _fits(counts, _softmax64(wrong_temperature), N)

    order = np.argsort(-scaled, kind="stable")
    n_kept = int(kept.sum())
    for size in (n_kept - 1, n_kept + 1):
        other = np.full_like(scaled, -np.inf)
        other[order[:size]] = scaled[order[:size]]
        assert not _fits(counts, _softmax64(other), N), size


@pytest.mark.parametrize(
    "options",
    [
        {"temperature": 0.7},
        {"top_k": 7},
        {"top_k": 1},
        {"top_p": 0.8},
        {"top_p": 0.3, "temperature": 2.0},
        {"min_p": 0.1},
        {"min_p": 0.5, "temperature": 0.6},
        {"top_k": 20, "top_p": 0.7, "min_p": 0.02, "temperature": 1.5},
        {"top_k": 3, "top_p": 0.2, "num_beams": 2},
        {"top_k": 4, "min_p": 0.9, "num_beams": 3, "eos_token_id": [1, 2]},
        {"top_p": 0.05, "min_p": 0.9, "num_beams": 2},
        {"min_p": 0.9, "num_beams": 4, "eos_token_id": [0, 1, 2]},
    ],
)
def test_fast_sampler_equals_reference_warpers_on_random_logits(options):
    """make_sampler's shortcuts (argpartition, candidate-only top-p/min-p) give the
    distribution of the full-vocabulary warpers, including min_tokens_to_keep."""
    cfg = GenerationConfig(do_sample=True, **{"top_k": 0, **options})
    rng = np.random.default_rng(99)
    for _ in range(3):
        row = (rng.normal(0, 3, 500) + rng.gumbel(size=500)).astype(np.float32)
        row[rng.choice(500, 20, replace=False)] = -np.inf
        warped = apply_processors(make_logits_warpers(cfg), np.zeros((1, 1), np.int64), row[None].copy())[0]
        probs = _softmax64(warped)
        counts = _counts(make_sampler(cfg), row, _GridRng(), n=10_000)
        assert counts[probs == 0].sum() == 0
        assert np.abs(counts - probs * 10_000).max() <= 1.01


def test_top_k_keeps_every_token_tied_with_the_kth():
    scores = np.array([[1.0, 3.0, 2.0, 2.0, 2.0, 0.0]], np.float32)
    counts = _counts(make_sampler(GenerationConfig(do_sample=True, top_k=2)), scores[0], _GridRng(), n=3000)
    assert set(np.flatnonzero(counts)) == {1, 2, 3, 4}


def test_batch_rows_are_sampled_independently():
    scores = np.full((4, 6), -np.inf, np.float32)
    for r, tok in enumerate([5, 0, 3, 1]):
        scores[r, tok] = 0.0
    out = make_sampler(GenerationConfig(do_sample=True, top_k=3, top_p=0.9))(scores, make_rng(0))
    assert out.tolist() == [5, 0, 3, 1]


def _scatter(idx, vals, vocab):
    if idx is None:
        return vals
    full = np.full((vals.shape[0], vocab), -np.inf, np.float32)
    np.put_along_axis(full, idx, vals, axis=1)
    return full


@pytest.mark.parametrize(
    "options",
    [
        {"top_p": 0.9},  # candidate set grows 256 -> 1024 -> 4096 (+ ties)
        {"top_p": 0.5, "temperature": 0.8},
        {"top_p": 0.99},  # nucleus too wide: full sort
        {"top_p": 0.999999},
        {"top_p": 0.7, "min_p": 0.01},
        {"top_p": 0.3, "num_beams": 2, "eos_token_id": [3]},
        {"top_k": 40, "top_p": 0.8, "min_p": 0.05, "temperature": 1.2},
        {"top_k": 1},
        {"min_p": 0.2, "num_beams": 3},
    ],
)
def test_sampler_candidates_equal_reference_warpers_on_a_large_vocabulary(options):
    """The fast paths (top-k candidates, nucleus candidates without a full sort)
    keep exactly the tokens the full-vocabulary warpers keep, with equal scores."""
    cfg = GenerationConfig(do_sample=True, **{"top_k": 0, **options})
    rng = np.random.default_rng(3)
    vocab = 50_000
    scores = (rng.normal(0, 2.5, (4, vocab)) + rng.gumbel(size=(4, vocab))).astype(np.float32)
    scores[0, :20] = scores[0].max() + 0.5  # a row with a wide tie at the top
    scores[1] = np.round(scores[1] * 4) / 4  # many ties everywhere
    scores[2, rng.choice(vocab, 1000, replace=False)] = -np.inf
    scores[3] *= 3.0  # peaked
    expected = apply_processors(make_logits_warpers(cfg), np.zeros((4, 1), np.int64), scores.copy())
    sampler = make_sampler(cfg)
    got = _scatter(*sampler.warp(scores), vocab)
    np.testing.assert_array_equal(got, expected)
    tokens = sampler(scores, make_rng(0))
    assert np.isfinite(expected[np.arange(4), tokens]).all()


# ----------------------------------------------------------------------------- batch of one
@pytest.mark.parametrize(
    "options",
    [
        {"top_k": 50, "top_p": 0.9, "temperature": 0.8},  # the benchmark's setting
        {"top_k": 1},
        {"top_k": 5, "temperature": 1.7},
        {"top_k": 20, "top_p": 0.5},
        {"top_k": 40, "top_p": 0.05, "min_p": 0.1},
        {"top_k": 8, "min_p": 0.3, "temperature": 0.6},
        {"top_k": 6, "top_p": 0.3, "min_p": 0.5, "num_beams": 2, "eos_token_id": [0, 1]},
    ],
)
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # the all -inf rows
def test_a_single_row_draws_the_tokens_of_the_batch_path(options, monkeypatch):
    """A batch of one with top-k takes a 1-D path (no ``warp``); it must draw, number for
    number, the tokens the batch path draws: ties anywhere (also at the k-th score),
    -inf scores, fewer finite scores than k, rows smaller than k."""
    from inference4py.generation import sampling

    sampler = make_sampler(GenerationConfig(do_sample=True, **options))
    warp = sampling._WarpedSampler.warp
    warped_rows = []

    def counting_warp(self, scores):
        warped_rows.append(scores.shape[0])
        return warp(self, scores)

    monkeypatch.setattr(sampling._WarpedSampler, "warp", counting_warp)
    data = np.random.default_rng(11)
    batch_rows = 0  # rows no longer than top_k (top-k keeps everything) or all -inf: the batch path runs
    for trial in range(400):
        vocab = int(data.integers(2, 3000))
        row = data.normal(0, data.uniform(0.2, 5.0), vocab).astype(np.float32)
        if trial % 3 == 0:
            row = np.round(row * 2) / 2  # many ties
        if trial % 4 == 1:
            row[data.random(vocab) < data.uniform(0.0, 1.0)] = -np.inf
        if trial % 11 == 2:
            row[:] = 1.5  # one tie over the whole row
        if trial % 37 == 3:
            row[:] = -np.inf  # nothing finite: the batch path's (degenerate) draw
        seed = int(data.integers(1 << 30))
        single, batch = make_rng(seed), make_rng(seed)
        draws = [int(sampler(row[None, :], single)[0]) for _ in range(3)]
        assert draws == sampler(np.stack([row, row, row]), batch).tolist(), trial
        assert single.random() == batch.random()  # both used the same random numbers
        batch_rows += 3 * (vocab <= options["top_k"] or not np.isfinite(row).any())
    assert warped_rows.count(1) == batch_rows  # every other single row took the 1-D path
