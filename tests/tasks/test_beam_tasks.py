"""Beam search and multiple return sequences end to end, against transformers' generate().

references/beam.json holds transformers 4.57 beam search outputs on the decoder
(gpt2, qwen2, llama) and encoder-decoder (t5, bart, marian) fixtures over a grid
of num_beams / length_penalty / early_stopping / num_return_sequences, with the
default EOS and with an EOS override that beams hit mid-way.  The ids must be
equal, in the same order; ``sequences_scores`` within 1e-4.
"""

from __future__ import annotations

import numpy as np
import pytest

from inference4py import BartSummarizer, FlanT5TextGenerator, MarianTranslator, OnnxTextGenerator
from inference4py.errors import ConfigurationError
from tests.conftest import FIXTURES, load_reference

REF = load_reference("beam")["models"]
S2S = load_reference("seq2seq")["models"]
TASKS = {"t5": FlanT5TextGenerator, "bart": BartSummarizer, "marian": MarianTranslator}

_tasks: dict[str, object] = {}


def task(name: str, folder: str | None = None):
    folder = folder or REF[name]["folder"]
    if folder not in _tasks:
        cls = OnnxTextGenerator if name in ("gpt2", "qwen2", "llama") else TASKS[name.split("-")[0]]
        _tasks[folder] = cls.builder().model_path(FIXTURES / folder).build()
    return _tasks[folder]


def _overrides(settings: dict) -> dict:
    out = dict(settings, do_sample=False)
    if "eos_token_id" in out:
        out["eos_token_id"] = tuple(out["eos_token_id"])
    return out


def _cases():
    for name, model in REF.items():
        for case in model["cases"]:
            yield pytest.param(name, case, id=f"{name}-{case['name']}")


def _source(name: str, case: dict):
    return case["prompt_ids"] if REF[name]["kind"] == "decoder" else case["input"]


@pytest.mark.parametrize("name,case", list(_cases()))
def test_beam_search_matches_transformers(name, case):
    result = task(name).generate(_source(name, case), **_overrides(case["settings"]))
    assert [list(c.token_ids) for c in result.candidates] == case["output_ids"]
    assert [c.score for c in result.candidates] == pytest.approx(case["sequences_scores"], abs=1e-4)
    best = result.candidates[0]
    assert list(result.token_ids) == case["output_ids"][0]
    assert (result.text, result.finish_reason) == (best.text, best.finish_reason)
    assert result.generated_tokens == len(result.token_ids)
    eos = case["settings"].get("eos_token_id") or task(name).generation_config.eos_token_id
    for cand in result.candidates:
        hit = bool(cand.token_ids) and cand.token_ids[-1] in eos
        assert cand.finish_reason == ("eos" if hit else "length")


def test_decoder_text_prompt_equals_token_ids():
    case = REF["gpt2"]["cases"][0]
    gen = task("gpt2")
    assert gen.encode_prompt(case["prompt"]) == case["prompt_ids"]
    result = gen.generate(case["prompt"], **_overrides(case["settings"]))
    assert [list(c.token_ids) for c in result.candidates] == case["output_ids"]


# ---------------------------------------------------------------------------------- bart-cnn-like defaults
CNN = S2S["bart-cnn-like"]


def cnn() -> BartSummarizer:
    return task("bart", CNN["folder"])


@pytest.mark.parametrize("case", [c for c in CNN["cases"] if "sequences" not in c], ids=lambda c: c["name"])
def test_bart_cnn_folder_defaults_give_transformers_summary(case):
    # generation_config.json: num_beams 4, length_penalty 2, no_repeat_ngram_size 3, min/max_length,
    # early_stopping True, forced BOS/EOS: all taken from the folder.
    out = BartSummarizer.builder().model_path(FIXTURES / CNN["folder"]).build().summarize(case["input"])
    assert list(out.token_ids) == case["generated_ids"]
    assert str(out) == case["text"]
    assert len(out.candidates) == 1


def test_bart_cnn_four_return_sequences_with_scores():
    case = next(c for c in CNN["cases"] if "sequences" in c)
    out = cnn().summarize(case["input"], num_return_sequences=4)
    assert [list(c.token_ids) for c in out.candidates] == [s[1:] for s in case["sequences"]]
    assert [c.score for c in out.candidates] == pytest.approx(case["sequences_scores"], abs=1e-4)
    assert [c.text for c in out.candidates] == case["texts"]
    assert str(out) == case["texts"][0]


# ---------------------------------------------------------------------------------- engine use
def test_decoder_beams_prefill_once_and_step_all_beams_together():
    gen = task("gpt2")
    case = REF["gpt2"]["cases"][0]
    calls: list[tuple[str, tuple[int, ...]]] = []
    original = gen._runtime.new_state

    def spy_state(*args, **kwargs):
        state = original(*args, **kwargs)
        prefill, step, reorder = state.prefill, state.step, state.reorder
        state.prefill = lambda ids, mask=None: (calls.append(("prefill", np.shape(ids))), prefill(ids, mask))[1]
        state.step = lambda tokens: (calls.append(("step", np.shape(tokens))), step(tokens))[1]
        state.reorder = lambda idx: (calls.append(("reorder", np.shape(idx))), reorder(idx))[1]
        return state

    gen._runtime.new_state = spy_state
    try:
        result = gen.generate(case["prompt_ids"], **_overrides(case["settings"]))
    finally:
        del gen._runtime.new_state
    k = case["settings"]["num_beams"]
    assert calls[0] == ("prefill", (1, len(case["prompt_ids"])))
    assert calls[1] == ("reorder", (k,))
    steps = [shape for kind, shape in calls if kind == "step"]
    assert steps and all(shape == (k,) for shape in steps)
    # no forward pass after the last token: one prefill + one step per generated position but the last
    longest = max(len(c.token_ids) for c in result.candidates)
    assert len(steps) <= longest - 1
    assert calls[-1][0] == "step"


def test_seq2seq_beams_encode_once_and_expand_the_source():
    t = task("t5")
    case = REF["t5"]["cases"][0]
    runtime = t._runtime
    before = runtime.encoder_runs
    expanded: list[list[int]] = []
    states = []
    original = runtime.new_state

    def spy_state(*args, **kwargs):
        state = original(*args, **kwargs)
        real = state.expand_source
        state.expand_source = lambda idx: (expanded.append(list(idx)), real(idx))[1]
        states.append(state)
        return state

    runtime.new_state = spy_state
    try:
        t.generate(case["input"], **_overrides(case["settings"]))
    finally:
        del runtime.new_state
    k = case["settings"]["num_beams"]
    assert runtime.encoder_runs == before + 1
    assert expanded == [[0] * k]
    assert states[0].cross_computations == 1 and states[0].batch == k


def test_beam_search_runs_several_prompts_as_one_batch():
    # beam_search itself takes [batch, n] rows (left-padded for decoder-only): batch x beams rows per pass.
    from inference4py.generation.beam import beam_search
    from inference4py.generation.config import GenerationConfig
    from inference4py.generation.processors import make_logits_processors

    gen = task("gpt2")
    first = next(c for c in REF["gpt2"]["cases"] if c["name"].startswith("ascii-default-eos-b4-lp1.0-esfalse"))
    second = next(c for c in REF["gpt2"]["cases"] if c["name"].startswith("code-default-eos-b4-lp1.0-esfalse"))
    config = GenerationConfig(**first["settings"], eos_token_id=(1000,))
    short = second["prompt_ids"][3:]  # a shorter prompt: left padding
    n = len(first["prompt_ids"])
    ids = np.full((2, n), 1000, dtype=np.int64)
    mask = np.zeros((2, n), dtype=np.int64)
    ids[0], mask[0] = first["prompt_ids"], 1
    ids[1, n - len(short) :], mask[1, n - len(short) :] = short, 1
    batched = beam_search(
        gen._runtime.new_state(2),
        ids,
        config,
        attention_mask=mask,
        processors=make_logits_processors(config, prompt_length=n),
    )
    alone = beam_search(
        gen._runtime.new_state(1), [short], config, processors=make_logits_processors(config, prompt_length=len(short))
    )
    assert [list(h.token_ids) for h in batched[0]] == first["output_ids"]
    assert [h.token_ids for h in batched[1]] == [h.token_ids for h in alone[0]]
    assert [h.score for h in batched[1]] == pytest.approx([h.score for h in alone[0]], abs=1e-4)


# ---------------------------------------------------------------------------------- streaming, stops
def test_streaming_beams_yields_the_best_sequence():
    case = next(c for c in REF["marian"]["cases"] if c["settings"]["num_beams"] == 4)
    t = task("marian")
    overrides = _overrides(case["settings"])
    result = t.generate(case["input"], **overrides)
    pieces: list[str] = []
    again = t.generate(case["input"], on_token=pieces.append, **overrides)
    assert "".join(pieces) == again.text == result.text
    assert "".join(t.stream(case["input"], **overrides)) == result.text
    chunks = list(t.stream_chunks(case["input"], **overrides))
    assert [c.token_id for c in chunks if c.token_id is not None] == list(result.token_ids)
    assert chunks[-1].finish_reason == result.finish_reason


def test_stop_sequence_cuts_every_beam_text():
    gen = task("gpt2")
    case = next(c for c in REF["gpt2"]["cases"] if "eos" not in c["name"] and c["settings"]["num_beams"] == 4)
    full = gen.generate(case["prompt_ids"], **_overrides(case["settings"]))
    best = full.candidates[0].text
    stop = best[len(best) // 2 : len(best) // 2 + 3]
    assert stop.strip()
    cut = gen.generate(case["prompt_ids"], stop_sequences=(stop,), **_overrides(case["settings"]))
    assert cut.text == best[: best.index(stop)]
    assert cut.finish_reason == "stop"
    for before, after in zip(full.candidates, cut.candidates):
        if stop in before.text:
            assert after.text == before.text[: before.text.index(stop)] and after.finish_reason == "stop"
            assert after.token_ids == before.token_ids[: len(after.token_ids)]
        else:
            assert after == before
        assert after.score == before.score


# ---------------------------------------------------------------------------------- sampling
def test_several_samples_are_seeded_and_stop_on_their_own_eos():
    gen = task("gpt2")
    case = REF["gpt2"]["cases"][0]
    eos = next(c for c in REF["gpt2"]["cases"] if "eos" in c["name"] and "default" not in c["name"])
    overrides = dict(
        do_sample=True,
        top_k=0,
        num_return_sequences=5,
        max_new_tokens=16,
        seed=11,
        eos_token_id=tuple(eos["settings"]["eos_token_id"]),
    )
    result = gen.generate(case["prompt_ids"], **overrides)
    assert len(result.candidates) == 5
    assert result.token_ids == result.candidates[0].token_ids and result.text == result.candidates[0].text
    assert len({c.token_ids for c in result.candidates}) > 1
    for cand in result.candidates:
        assert cand.score is None
        assert 1 <= len(cand.token_ids) <= 16
        ends = [i for i, t in enumerate(cand.token_ids) if t in overrides["eos_token_id"]]
        assert ends in ([], [len(cand.token_ids) - 1])
        assert cand.finish_reason == ("eos" if ends else "length")
    again = gen.generate(case["prompt_ids"], **overrides)
    assert again.candidates == result.candidates
    other = gen.generate(case["prompt_ids"], **{**overrides, "seed": 12})
    assert other.candidates != result.candidates


def test_seq2seq_samples():
    t = task("bart")
    case = REF["bart"]["cases"][0]
    result = t.generate(case["input"], do_sample=True, top_k=0, num_return_sequences=3, max_new_tokens=8, seed=0)
    assert len(result.candidates) == 3
    assert all(1 <= len(c.token_ids) <= 8 for c in result.candidates)
    assert all(c.token_ids[0] == 0 for c in result.candidates)  # forced BOS applies to every sample


# ---------------------------------------------------------------------------------- invalid settings
def test_invalid_combinations_name_the_fix():
    gen = task("gpt2")
    ids = REF["gpt2"]["cases"][0]["prompt_ids"]
    with pytest.raises(ConfigurationError, match="Raise num_beams, or set do_sample=True"):
        gen.generate(ids, num_beams=2, num_return_sequences=3, max_new_tokens=4)
    with pytest.raises(ConfigurationError, match="num_beams must be an integer >= 1"):
        gen.generate(ids, num_beams=0, max_new_tokens=4)
    with pytest.raises(ConfigurationError, match="num_return_sequences=3 is larger than num_beams=2"):
        gen.generate(ids, num_beams=2, num_return_sequences=3, do_sample=True, max_new_tokens=4)
    with pytest.raises(ConfigurationError, match="num_beams"):
        BartSummarizer.builder().model_path(FIXTURES / CNN["folder"]).num_beams(0)
