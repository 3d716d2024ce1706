"""Logits processors and warpers against transformers' outputs (tests/fixtures/references/processors.*)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from inference4py.errors import ConfigurationError
from inference4py.generation.config import GenerationConfig
from inference4py.generation.processors import (
    ForcedBOSToken,
    ForcedEOSToken,
    MinNewTokens,
    NoBadWords,
    NoRepeatNGram,
    RepetitionPenalty,
    SuppressTokens,
    SuppressTokensAtBegin,
    apply_processors,
    log_softmax,
    make_logits_processors,
)
from inference4py.generation.warping import MinP, Temperature, TopK, TopP, make_logits_warpers, min_tokens_to_keep

REFERENCES = Path(__file__).resolve().parents[1] / "fixtures" / "references"
META = json.loads((REFERENCES / "processors.json").read_text(encoding="utf-8"))
with np.load(REFERENCES / "processors.npz") as _npz:
    ARRAYS = {k: _npz[k] for k in _npz.files}
LOGITS = ARRAYS["logits"]
INPUT_IDS = ARRAYS["input_ids"]

# transformers class -> ours.  MinLengthLogitsProcessor is absent on our side:
# generate() adds it with min_length = prompt + min_new_tokens next to
# MinNewTokensLengthLogitsProcessor, and both mask the same steps.
HF_NAMES = {
    "RepetitionPenaltyLogitsProcessor": "RepetitionPenalty",
    "NoRepeatNGramLogitsProcessor": "NoRepeatNGram",
    "NoBadWordsLogitsProcessor": "NoBadWords",
    "MinLengthLogitsProcessor": None,
    "MinNewTokensLengthLogitsProcessor": "MinNewTokens",
    "ForcedBOSTokenLogitsProcessor": "ForcedBOSToken",
    "ForcedEOSTokenLogitsProcessor": "ForcedEOSToken",
    "SuppressTokensLogitsProcessor": "SuppressTokens",
    "SuppressTokensAtBeginLogitsProcessor": "SuppressTokensAtBegin",
    "TemperatureLogitsWarper": "Temperature",
    "TopKLogitsWarper": "TopK",
    "TopPLogitsWarper": "TopP",
    "MinPLogitsWarper": "MinP",
}


def _ours(kind: str, p: dict):
    if kind == "repetition_penalty":
        return RepetitionPenalty(p["penalty"])
    if kind == "no_repeat_ngram":
        return NoRepeatNGram(p["ngram_size"])
    if kind == "bad_words":
        return NoBadWords(p["bad_words_ids"], p["eos_token_id"])
    if kind == "min_new_tokens":
        return MinNewTokens(p["prompt_length"], p["min_new_tokens"], p["eos_token_id"])
    if kind == "min_length":  # a total length is min_new_tokens after an empty prompt
        return MinNewTokens(0, p["min_length"], p["eos_token_id"])
    if kind == "forced_bos":
        return ForcedBOSToken(p["bos_token_id"])
    if kind == "forced_eos":
        return ForcedEOSToken(p["max_length"], p["eos_token_id"])
    if kind == "suppress_tokens":
        return SuppressTokens(p["suppress_tokens"])
    if kind == "begin_suppress":
        return SuppressTokensAtBegin(p["begin_suppress_tokens"], p["begin_index"])
    if kind == "temperature":
        return Temperature(p["temperature"])
    if kind == "top_k":
        return TopK(p["top_k"], p["min_tokens_to_keep"])
    if kind == "top_p":
        return TopP(p["top_p"], p["min_tokens_to_keep"])
    if kind == "min_p":
        return MinP(p["min_p"], p["min_tokens_to_keep"])
    raise AssertionError(kind)


def assert_same_scores(ours: np.ndarray, ref: np.ndarray, ambiguous_rows=()) -> None:
    """Equal scores (-inf included).  In ``ambiguous_rows`` transformers' kept set
    among tokens of equal score depends on torch.sort's unstable order, so there
    only the multiset of kept scores must match."""
    assert ours.dtype == np.float32 and ours.shape == ref.shape
    for r in range(ref.shape[0]):
        if r in ambiguous_rows:
            np.testing.assert_array_equal(np.sort(ours[r][np.isfinite(ours[r])]), np.sort(ref[r][np.isfinite(ref[r])]))
        else:
            np.testing.assert_allclose(ours[r], ref[r], rtol=0, atol=1e-6, err_msg=f"row {r}")
            np.testing.assert_array_equal(np.isneginf(ours[r]), np.isneginf(ref[r]), err_msg=f"row {r}")


@pytest.mark.parametrize("case", META["single"], ids=lambda c: c["name"])
def test_single_processor_matches_transformers(case):
    proc = _ours(case["kind"], case["params"])
    out = proc(INPUT_IDS[:, : case["cur_len"]].copy(), LOGITS.copy())
    assert_same_scores(out, ARRAYS[f"single/{case['name']}"], case["ambiguous_rows"])


def test_every_processor_kind_has_reference_cases():
    kinds = {c["kind"] for c in META["single"]}
    assert kinds == {
        "repetition_penalty",
        "no_repeat_ngram",
        "bad_words",
        "min_new_tokens",
        "min_length",
        "forced_bos",
        "forced_eos",
        "suppress_tokens",
        "begin_suppress",
        "temperature",
        "top_k",
        "top_p",
        "min_p",
    }
    # The fixture must actually exercise the processors: most cases change something.
    changed = [c["name"] for c in META["single"] if not np.array_equal(ARRAYS[f"single/{c['name']}"], LOGITS)]
    assert len(changed) >= len(META["single"]) - 10


def _generation_config(case) -> GenerationConfig:
    return GenerationConfig(**case["config"])


@pytest.mark.parametrize("case", META["combined"], ids=lambda c: c["name"])
def test_combined_list_order_matches_generate(case):
    cfg = _generation_config(case)
    procs = make_logits_processors(cfg, prompt_length=case["prompt_length"]) + make_logits_warpers(cfg)
    expected = [HF_NAMES[n] for n in case["processors"] if HF_NAMES[n] is not None]
    assert [type(p).__name__ for p in procs] == expected


@pytest.mark.parametrize(
    "case, cur_len",
    [(c, s) for c in META["combined"] for s in c["steps"]],
    ids=lambda v: v["name"] if isinstance(v, dict) else str(v),
)
def test_combined_list_output_matches_generate(case, cur_len):
    cfg = _generation_config(case)
    procs = make_logits_processors(cfg, prompt_length=case["prompt_length"]) + make_logits_warpers(cfg)
    out = apply_processors(procs, INPUT_IDS[:, :cur_len].copy(), LOGITS.copy())
    assert_same_scores(out, ARRAYS[f"combined/{case['name']}/{cur_len}"], case["ambiguous_rows"][str(cur_len)])


def test_log_softmax_matches_torch_and_is_stable():
    out = log_softmax(LOGITS)
    ref = ARRAYS["log_softmax"]
    assert out.dtype == np.float32
    np.testing.assert_array_equal(np.isneginf(out), np.isneginf(ref))
    finite = np.isfinite(ref)
    np.testing.assert_allclose(out[finite], ref[finite], rtol=0, atol=1e-6)
    big = log_softmax(np.array([[1e30, 0.0, -1e30], [88.0, 89.0, -np.inf]], dtype=np.float32))
    assert np.isfinite(big[0, 0]) and big[0, 0] == 0.0
    np.testing.assert_allclose(np.exp(big[1]).sum(), 1.0, rtol=1e-6)
    assert np.isneginf(big[1, 2])


# ------------------------------------------------------------------------- factories
def test_defaults_give_no_processors_and_no_warpers():
    cfg = GenerationConfig()
    assert make_logits_processors(cfg, prompt_length=7) == []
    assert make_logits_warpers(cfg) == []


def test_warpers_only_when_sampling():
    assert make_logits_warpers(GenerationConfig(top_k=5, top_p=0.5, temperature=0.7)) == []
    assert make_logits_warpers(GenerationConfig(do_sample=True, temperature=0.0, top_k=5)) == []
    names = [
        type(w).__name__
        for w in make_logits_warpers(GenerationConfig(do_sample=True, temperature=0.7, top_k=5, top_p=0.5, min_p=0.1))
    ]
    assert names == ["Temperature", "TopK", "TopP", "MinP"]
    # Defaults follow transformers: top_k=50 is active, top_p=1.0, min_p=0 and temperature=1 are not.
    assert [type(w).__name__ for w in make_logits_warpers(GenerationConfig(do_sample=True))] == ["TopK"]
    assert make_logits_warpers(GenerationConfig(do_sample=True, top_k=0)) == []


def test_extra_processors_go_last():
    def mine(ids, scores):
        return scores

    cfg = GenerationConfig(repetition_penalty=1.2, suppress_tokens=[3])
    procs = make_logits_processors(cfg, prompt_length=4, extra=[mine])
    assert [type(p).__name__ for p in procs[:2]] == ["RepetitionPenalty", "SuppressTokens"]
    assert procs[-1] is mine


def test_min_new_tokens_needs_eos():
    assert make_logits_processors(GenerationConfig(min_new_tokens=3), prompt_length=4) == []
    (proc,) = make_logits_processors(GenerationConfig(min_new_tokens=3, eos_token_id=[2, 5]), prompt_length=4)
    assert (proc.prompt_length, proc.min_new_tokens, proc.eos_token_id) == (4, 3, (2, 5))


def test_min_tokens_to_keep_follows_transformers():
    assert min_tokens_to_keep(GenerationConfig(do_sample=True)) == 1
    assert min_tokens_to_keep(GenerationConfig(do_sample=True, num_beams=4)) == 2
    assert min_tokens_to_keep(GenerationConfig(do_sample=True, num_beams=4, eos_token_id=[1, 2])) == 3
    (top_k,) = make_logits_warpers(GenerationConfig(do_sample=True, num_beams=2, top_k=1))
    assert top_k.top_k == 2


@pytest.mark.parametrize("prompt_length, forced_bos, expected", [(1, None, 1), (1, 4, 2), (5, 4, 5), (5, None, 5)])
def test_begin_suppress_index(prompt_length, forced_bos, expected):
    cfg = GenerationConfig(begin_suppress_tokens=[7], forced_bos_token_id=forced_bos)
    proc = make_logits_processors(cfg, prompt_length=prompt_length)[-1]
    assert isinstance(proc, SuppressTokensAtBegin) and proc.begin_index == expected


def test_forced_eos_fires_on_the_last_position():
    cfg = GenerationConfig(forced_eos_token_id=3, max_new_tokens=4)
    (proc,) = make_logits_processors(cfg, prompt_length=6)
    scores = np.zeros((1, 10), np.float32)
    assert np.isfinite(proc(np.zeros((1, 8), np.int64), scores.copy())).all()
    forced = proc(np.zeros((1, 9), np.int64), scores.copy())
    assert np.flatnonzero(np.isfinite(forced)).tolist() == [3]


def test_bad_words_out_of_vocabulary_raise_a_configuration_error():
    proc = NoBadWords([[3], [4, 500]])
    with pytest.raises(ConfigurationError, match="500"):
        proc(np.zeros((1, 3), np.int64), np.zeros((1, 100), np.float32))


def test_bad_words_that_are_only_eos_are_dropped():
    assert make_logits_processors(GenerationConfig(bad_words_ids=[[2]], eos_token_id=2), prompt_length=3) == []
    (proc,) = make_logits_processors(GenerationConfig(bad_words_ids=[[2], [9]], eos_token_id=2), prompt_length=3)
    assert proc.bad_words_ids == ((9,),)


def test_no_repeat_ngram_bans_only_continuations_of_the_current_suffix():
    ids = np.array([[4, 5, 6, 4, 5, 7, 4, 5]], dtype=np.int64)
    out = NoRepeatNGram(3)(ids, np.zeros((1, 10), np.float32))
    assert np.flatnonzero(np.isneginf(out[0])).tolist() == [6, 7]
