"""Log-probabilities, presence/frequency penalties and logit bias (issue 15).

Log-probabilities come from the raw distribution, as OpenAI and vLLM report them. The references
(references/logprobs.json) are log_softmax of transformers' ``generate(output_logits=True)`` on the
same weights. The penalties and the bias are checked against a plain-Python reference on scripted
logits, written here from OpenAI's definition.
"""

from __future__ import annotations

import numpy as np
import pytest

from inference4py import OnnxTextGenerator
from inference4py.errors import ConfigurationError
from inference4py.generation.config import GenerationConfig
from inference4py.generation.processors import LogitBias, PresenceFrequencyPenalty, make_logits_processors
from tests.conftest import FIXTURES, load_reference

REF = load_reference("logprobs")["models"]
_models: dict[str, OnnxTextGenerator] = {}


def model(kind: str) -> OnnxTextGenerator:
    if kind not in _models:
        _models[kind] = OnnxTextGenerator.builder().model_path(FIXTURES / REF[kind]["folder"]).build()
    return _models[kind]


def cases():
    for kind, entry in REF.items():
        for case in entry["cases"]:
            yield pytest.param(kind, case, id=f"{kind}-{case['name']}")


@pytest.mark.parametrize("kind,case", list(cases()))
def test_logprobs_equal_transformers_raw_log_softmax(kind, case):
    settings = {k: v for k, v in case["settings"].items() if k != "do_sample"}
    result = model(kind).generate(
        case["prompt_ids"], max_new_tokens=case["max_new_tokens"], logprobs=True, top_logprobs=5, **settings
    )
    assert list(result.token_ids) == case["output_ids"]
    assert result.logprobs is not None and len(result.logprobs) == len(case["output_ids"])
    got = [t.logprob for t in result.logprobs]
    assert got == pytest.approx(case["logprobs"], abs=1e-4)
    for entry, want_top in zip(result.logprobs, case["top_logprobs"]):
        assert [t.token_id for t in entry.top_logprobs] == [i for i, _ in want_top]
        assert [t.logprob for t in entry.top_logprobs] == pytest.approx([v for _, v in want_top], abs=1e-4)
        assert entry.token == model(kind).tokenizer.decode([entry.token_id], skip_special_tokens=False)


def test_the_repetition_penalty_changes_the_tokens_not_the_reported_distribution():
    plain, penalised = REF["llama"]["cases"][0], REF["llama"]["cases"][2]
    assert penalised["settings"]["repetition_penalty"] == 1.3
    assert plain["output_ids"] != penalised["output_ids"]
    assert plain["logprobs"][0] == pytest.approx(penalised["logprobs"][0])  # same first step, raw logits


def test_streaming_and_batches_carry_the_same_logprobs():
    gen = model("qwen2")
    prompts = ["The old house stood at the end", "Hi"]
    alone = [gen.generate(p, max_new_tokens=6, logprobs=True) for p in prompts]
    batch = gen.generate_batch(prompts, max_new_tokens=6, logprobs=True)
    for a, b in zip(alone, batch):
        assert b.token_ids == a.token_ids
        assert [t.logprob for t in b.logprobs] == pytest.approx([t.logprob for t in a.logprobs], abs=1e-5)
    chunks = list(gen.stream_chunks(prompts[0], max_new_tokens=6, logprobs=True))
    streamed = [c.logprob for c in chunks if c.logprob is not None]
    assert [t.token_id for t in streamed] == list(alone[0].token_ids)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sampling_reports_the_raw_probability_of_the_drawn_token(seed):
    """Temperature, top-k and penalties shape the draw, not the reported distribution."""
    gen = model("gpt2")
    prompt = gen.encode_prompt("The old house")
    options = {"do_sample": True, "temperature": 0.5, "top_k": 5, "presence_penalty": 1.0, "seed": seed}
    result = gen.generate(prompt, max_new_tokens=4, logprobs=True, **options)
    state = gen._runtime.new_state(1)
    logits = state.prefill(np.array([prompt]))
    for i, entry in enumerate(result.logprobs):
        raw = logits[0].astype(np.float64)
        expected = raw - raw.max() - np.log(np.exp(raw - raw.max()).sum())
        assert entry.logprob == pytest.approx(expected[entry.token_id], abs=1e-6), i
        logits = state.step(np.array([entry.token_id]))


def test_without_logprobs_nothing_is_computed():
    result = model("gpt2").generate("Hi", max_new_tokens=3)
    assert result.logprobs is None


@pytest.mark.parametrize(
    "options,message",
    [
        ({"top_logprobs": 21}, "top_logprobs"),
        ({"top_logprobs": -1}, "top_logprobs"),
        ({"presence_penalty": 2.5}, "presence_penalty"),
        ({"frequency_penalty": -3}, "frequency_penalty"),
        ({"logit_bias": {5: 101}}, "logit_bias"),
        ({"logit_bias": {"x": 1}}, "logit_bias"),
        ({"logit_bias": {-1: 1}}, "logit_bias"),
        ({"logprobs": True, "num_beams": 2}, "candidates"),
    ],
)
def test_bad_options_fail_before_any_token(options, message):
    with pytest.raises(ConfigurationError, match=message):
        model("gpt2").generate("Hi", max_new_tokens=3, **options)


# ---------------------------------------------------------------------------- penalties on scripted logits
def reference_penalties(ids, prompt_length, logits, presence, frequency, bias):
    """OpenAI's definition, one token at a time."""
    out = logits.astype(np.float64).copy()
    for row in range(out.shape[0]):
        counts: dict[int, int] = {}
        for token in ids[row][prompt_length:]:
            counts[int(token)] = counts.get(int(token), 0) + 1
        for token, count in counts.items():
            out[row, token] -= frequency * count + presence
        for token, value in bias.items():
            out[row, token] += value
    return out


@pytest.mark.parametrize("presence,frequency", [(0.5, 0.3), (-1.0, 0.0), (0.0, 2.0), (1.5, -0.7)])
def test_presence_frequency_and_bias_match_the_reference(presence, frequency):
    rng = np.random.default_rng(7)
    vocab, prompt_length = 40, 5
    ids = rng.integers(0, vocab, size=(3, prompt_length + 12))
    logits = rng.normal(size=(3, vocab)).astype(np.float32)
    bias = {3: -100.0, 17: 4.5, 39: 0.25}
    config = GenerationConfig(presence_penalty=presence, frequency_penalty=frequency, logit_bias=bias)
    processors = make_logits_processors(config, prompt_length=prompt_length)
    assert [type(p) for p in processors] == [PresenceFrequencyPenalty, LogitBias]
    scores = logits.copy()
    for proc in processors:
        scores = proc(ids, scores)
    want = reference_penalties(ids, prompt_length, logits, presence, frequency, bias)
    np.testing.assert_allclose(scores, want, atol=1e-5)


def test_the_prompt_does_not_count_and_bias_past_the_vocabulary_is_ignored():
    ids = np.array([[4, 4, 4, 1]])
    scores = PresenceFrequencyPenalty(1.0, 1.0, prompt_length=3)(ids, np.zeros((1, 6), np.float32))
    assert scores.tolist() == [[0, -2, 0, 0, 0, 0]]
    scores = LogitBias([(2, 1.0), (99, 5.0)])(ids, np.zeros((1, 6), np.float32))
    assert scores.tolist() == [[0, 0, 1, 0, 0, 0]]


def test_logit_bias_steers_greedy_decoding_end_to_end():
    gen = model("qwen2")
    plain = gen.generate("The old house", max_new_tokens=4)
    banned = plain.token_ids[0]
    steered = gen.generate("The old house", max_new_tokens=4, logit_bias={banned: -100})
    assert steered.token_ids[0] != banned
    forced = gen.generate("The old house", max_new_tokens=3, logit_bias={7: 100})
    assert list(forced.token_ids) == [7, 7, 7]
    fresh = gen.generate("The old house", max_new_tokens=12, frequency_penalty=2.0)
    counts = np.bincount(np.asarray(fresh.token_ids))
    assert counts.max() <= np.bincount(np.asarray(gen.generate("The old house", max_new_tokens=12).token_ids)).max()


@pytest.mark.parametrize("kind,case", list(cases()))
def test_prompt_logprobs_equal_transformers_forward_pass(kind, case):
    """OpenAI's echo: each prompt token scored by the position before it; the first has no score."""
    result = model(kind).generate(case["prompt_ids"], max_new_tokens=2, prompt_logprobs=True)
    assert result.prompt_logprobs is not None and len(result.prompt_logprobs) == len(case["prompt_ids"])
    assert result.prompt_logprobs[0] is None and case["prompt_logprobs"][0] is None
    assert [t.token_id for t in result.prompt_logprobs[1:]] == case["prompt_ids"][1:]
    got = [t.logprob for t in result.prompt_logprobs[1:]]
    assert got == pytest.approx(case["prompt_logprobs"][1:], abs=1e-4)
    assert result.logprobs is not None and len(result.logprobs) == result.generated_tokens  # implied


def test_prompt_logprobs_on_a_shared_buffer_graph_match_a_step_by_step_run():
    gen = OnnxTextGenerator.builder().model_path(FIXTURES / "models" / "genai-llama").build()
    prompt = gen.encode_prompt("The old house stood at the end of the road")
    result = gen.generate(prompt, max_new_tokens=1, prompt_logprobs=True)
    state = gen._runtime.new_state(1)
    logits = state.prefill(np.array([prompt[:1]]))
    for i in range(1, len(prompt)):
        raw = logits[0].astype(np.float64)
        expected = raw - raw.max() - np.log(np.exp(raw - raw.max()).sum())
        assert result.prompt_logprobs[i].logprob == pytest.approx(expected[prompt[i]], abs=1e-4), i
        logits = state.step(np.array([prompt[i]]))


def test_generate_batch_reports_each_rows_prompt_logprobs_as_alone():
    gen = model("gpt2")
    batch = gen.generate_batch(["Hi", "Hello there"], max_new_tokens=2, prompt_logprobs=True)
    for prompt, result in zip(["Hi", "Hello there"], batch):
        alone = gen.generate(prompt, max_new_tokens=2, prompt_logprobs=True)
        assert result.prompt_logprobs is not None and len(result.prompt_logprobs) == alone.prompt_tokens
        assert [e and e.token for e in result.prompt_logprobs] == [e and e.token for e in alone.prompt_logprobs]
        for a, b in zip(result.prompt_logprobs[1:], alone.prompt_logprobs[1:]):
            assert a is not None and b is not None and a.logprob == pytest.approx(b.logprob, abs=1e-5)


def test_prompt_logprobs_are_refused_where_they_cannot_be_given():
    from inference4py import BartSummarizer

    bart = BartSummarizer.builder().model_path(FIXTURES / "models" / "bart").build()
    with bart, pytest.raises(ConfigurationError, match="decoder-only"):
        bart.generate("The committee met.", max_new_tokens=2, prompt_logprobs=True)


def test_any_integer_is_a_seed_and_other_seeds_are_refused():
    gen = model("gpt2")
    a = gen.generate("Hi", max_new_tokens=5, do_sample=True, seed=-5).token_ids
    assert a == gen.generate("Hi", max_new_tokens=5, do_sample=True, seed=-5).token_ids  # reproducible
    assert gen.generate("Hi", max_new_tokens=5, do_sample=True, seed=2**70).token_ids  # no overflow
    with pytest.raises(ConfigurationError, match="seed"):
        gen.generate("Hi", max_new_tokens=2, do_sample=True, seed=1.5)
