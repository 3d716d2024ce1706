"""generate_batch: row by row equal to generate() on each prompt alone."""

from __future__ import annotations

import pytest

from inference4py import BartSummarizer, MarianTranslator, OnnxTextGenerator
from tests.conftest import MODELS, load_reference

DEC = load_reference("decoder")["models"]
S2S = load_reference("seq2seq")["models"]


@pytest.mark.parametrize("name", ["gpt2", "llama", "qwen2"])
def test_decoder_batch_equals_single_runs(name):
    cases = [c for c in DEC[name]["cases"] if c["kind"] == "text" and c["prompt"]][:6]
    with OnnxTextGenerator.builder().model_path(MODELS / name).build() as gen:
        prompts = [c["prompt"] for c in cases]
        # an EOS override that ends one row after 4 tokens, long before the others
        eos_case = next(c for c in DEC[name]["cases"] if c["name"] == "eos-override")
        eos = eos_case["settings"]["eos_token_id"]
        eos_ids = tuple(dict.fromkeys([*gen.generation_config.eos_token_id, eos]))
        results = gen.generate_batch([*prompts, eos_case["prompt"]], max_new_tokens=20, eos_token_id=eos_ids)
        singles = [gen.generate(p, max_new_tokens=20, eos_token_id=eos_ids) for p in [*prompts, eos_case["prompt"]]]
    assert len({len(c["prompt_ids"]) for c in cases}) > 1  # prompts of different lengths
    for got, alone in zip(results, singles):
        assert got.token_ids == alone.token_ids
        assert got.text == alone.text
        assert got.finish_reason == alone.finish_reason
    assert results[-1].finish_reason == "eos" and results[-1].generated_tokens < 20
    assert max(r.generated_tokens for r in results) == 20


@pytest.mark.parametrize("name,cls", [("bart", BartSummarizer), ("marian", MarianTranslator)])
def test_seq2seq_batch_equals_single_runs(name, cls):
    cases = S2S[name]["cases"][:5]
    with cls.builder().model_path(MODELS / name).build() as task:
        inputs = [c["input"] for c in cases]
        results = task.generate_batch(inputs, max_new_tokens=20)
        for case, got in zip(cases, results):
            alone = task.generate(case["input"], max_new_tokens=20)
            assert got.token_ids == alone.token_ids
            if case["settings"].get("max_new_tokens", 20) == 20 and "eos_token_id" not in case["settings"]:
                assert list(got.token_ids) == case["generated_ids"]


def test_seq2seq_batch_row_finishing_early():
    case = next(c for c in S2S["bart"]["cases"] if "eos_token_id" in c["settings"])
    eos = case["settings"]["eos_token_id"]
    eos = tuple(eos) if isinstance(eos, list) else (eos,)
    with BartSummarizer.builder().model_path(MODELS / "bart").build() as task:
        others = [c["input"] for c in S2S["bart"]["cases"][:3]]
        results = task.generate_batch([case["input"], *others], max_new_tokens=case["max_new_tokens"], eos_token_id=eos)
        alone = [
            task.generate(s, max_new_tokens=case["max_new_tokens"], eos_token_id=eos) for s in [case["input"], *others]
        ]
    assert list(results[0].token_ids) == case["generated_ids"]
    assert [r.token_ids for r in results] == [a.token_ids for a in alone]


@pytest.mark.parametrize("name", ["gpt2", "llama", "genai-llama-int4"])
def test_a_seeded_sampled_row_equals_the_same_request_alone(name):
    """Each row of generate_batch has its own random stream: the same prompt and seed, the same tokens."""
    prompts = ["Once upon a time", "The weather", "Once upon a time", "A"]
    with OnnxTextGenerator.builder().model_path(MODELS / name).build() as gen:
        settings = {"max_new_tokens": 12, "temperature": 1.0, "top_k": 0, "seed": 7}
        batch = gen.generate_batch(prompts, **settings)
        alone = [gen.generate(p, **settings) for p in prompts]
        other_seed = gen.generate(prompts[0], **{**settings, "seed": 8})
    assert [r.token_ids for r in batch] == [r.token_ids for r in alone]
    assert batch[0].token_ids == batch[2].token_ids  # the same request twice in one batch
    assert other_seed.token_ids != alone[0].token_ids  # the seed matters: the rows really sample


@pytest.mark.parametrize("name,cls", [("bart", BartSummarizer), ("marian", MarianTranslator)])
def test_a_seeded_sampled_seq2seq_row_equals_the_same_request_alone(name, cls):
    with cls.builder().model_path(MODELS / name).build() as task:
        inputs = [c["input"] for c in S2S[name]["cases"][:3]]
        settings = {"max_new_tokens": 10, "do_sample": True, "top_k": 0, "seed": 3}
        batch = task.generate_batch(inputs, **settings)
        alone = [task.generate(i, **settings) for i in inputs]
    assert [r.token_ids for r in batch] == [r.token_ids for r in alone]
