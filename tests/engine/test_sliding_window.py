"""Sliding-window genai folders on the native loop (issue 13).

onnxruntime-genai's builder gives each local layer's GroupQueryAttention ``local_window_size``
and ``sliding_window_cache=1``; onnxruntime then refuses a shared KV buffer smaller than the
window, which every short prompt used to get ("KV cache capacity (36) must be at least
local_window_size (48)").  The fixtures (tools/fixtures/sliding.py) are a Gemma-3-like model
(local, local, global layers; fp32 and int4) and a Mistral-like one (every layer local) with a
window of 48: longer than the short prompts plus their new tokens, shorter than the ``long``
case, whose ids change when the window is switched off (``full_attention_ids``).
"""

from __future__ import annotations

import numpy as np
import pytest

from inference4py import OnnxTextGenerator
from inference4py.engine.pipeline import load_pipeline, resolve_description
from inference4py.errors import PipelineSpecError
from tests.conftest import FIXTURES, load_reference

REF = load_reference("sliding")
WINDOW = REF["window"]
MODELS = REF["models"]
FP32 = [name for name, m in MODELS.items() if m["precision"] == "fp32"]
_generators: dict[str, OnnxTextGenerator] = {}


def generator(name: str) -> OnnxTextGenerator:
    if name not in _generators:
        _generators[name] = OnnxTextGenerator.builder().model_path(FIXTURES / MODELS[name]["folder"]).build()
    return _generators[name]


def prompt_of(case: dict):
    return case["messages"] if case["kind"] == "chat" else case["prompt"]


def expected(case: dict) -> list[int]:
    """The robust part of a greedy reference (int4: genai's ids up to the first near-tie)."""
    return case["output_ids"][: case.get("stable_prefix", len(case["output_ids"]))]


def greedy_cases():
    for name, model in MODELS.items():
        for case in model["cases"]:
            if case["kind"] in ("text", "chat"):
                yield pytest.param(name, case, id=f"{name}-{case['name']}")


def beam_cases():
    for name in FP32:
        for case in MODELS[name]["cases"]:
            if case["kind"] == "beam":
                yield pytest.param(name, case, id=f"{name}-{case['name']}")


def test_the_fixtures_cover_both_sides_of_the_window():
    for name, model in MODELS.items():
        acts = {c["window_acts"] for c in model["cases"] if c["kind"] in ("text", "chat")}
        assert acts == {True, False}, name
        long = next(c for c in model["cases"] if c["name"] == "long")
        if "full_attention_ids" in long:  # fp32: transformers without the window gives other ids
            assert long["full_attention_ids"] != long["output_ids"]
    assert {m["precision"] for m in MODELS.values()} == {"fp32", "int4"}


@pytest.mark.parametrize("name", list(MODELS))
def test_the_window_is_read_from_the_graph_and_genai_config(name):
    spec = load_pipeline(FIXTURES / MODELS[name]["folder"])
    assert spec.state.kv_cache.sliding_window == WINDOW
    runtime = generator(name)._runtime
    assert runtime.shared_kv
    assert runtime.min_capacity == WINDOW


@pytest.mark.parametrize("name,case", list(greedy_cases()))
def test_greedy_ids_equal_the_reference(name, case):
    gen = generator(name)
    assert gen.encode_prompt(prompt_of(case)) == case["prompt_ids"]
    got = list(gen.generate(prompt_of(case), max_new_tokens=case["max_new_tokens"], do_sample=False).token_ids)
    want = expected(case)
    assert got[: len(want)] == want


@pytest.mark.parametrize("name,case", list(beam_cases()))
def test_beam_search_equals_transformers(name, case):
    gen = generator(name)
    settings = {k: v for k, v in case["settings"].items() if k != "do_sample"}
    result = gen.generate(case["prompt"], max_new_tokens=case["max_new_tokens"], do_sample=False, **settings)
    assert settings["num_beams"] == 4
    assert list(result.token_ids) == case["sequences"][0]


@pytest.mark.parametrize("name", list(MODELS))
def test_a_padded_batch_gives_every_row_its_reference(name):
    cases = [c for c in MODELS[name]["cases"] if c["kind"] == "text"]
    assert len({len(c["prompt_ids"]) for c in cases}) > 2  # rows of different lengths: padding
    n = min(c["max_new_tokens"] for c in cases)
    results = generator(name).generate_batch([c["prompt"] for c in cases], max_new_tokens=n, do_sample=False)
    for case, result in zip(cases, results):
        want = expected(case)[:n]
        assert list(result.token_ids)[: len(want)] == want, case["name"]


@pytest.mark.parametrize("name", FP32)
def test_the_step_level_generator_crosses_the_window(name):
    """Token by token through the Generator, with a rewind, past the window: the reference ids."""
    case = next(c for c in MODELS[name]["cases"] if c["name"] == "long")
    gen = generator(name)
    g = gen.generator(max_new_tokens=case["max_new_tokens"], do_sample=False)
    g.append_tokens(case["prompt_ids"])
    while not g.is_done():
        g.generate_next_token()
    first = g.sequence(0)[len(case["prompt_ids"]) :]
    assert first == case["output_ids"]
    g.rewind_to(len(case["prompt_ids"]) + 5)
    while not g.is_done():
        g.generate_next_token()
    assert g.sequence(0)[len(case["prompt_ids"]) :] == case["output_ids"]


@pytest.mark.parametrize("name", FP32)
@pytest.mark.parametrize("capacity", [None, 4, 200])
def test_any_requested_capacity_is_raised_to_the_window(name, capacity):
    case = next(c for c in MODELS[name]["cases"] if c["name"] == "ascii")
    state = generator(name)._runtime.new_state(1, capacity=capacity)
    token = int(state.prefill(np.array([case["prompt_ids"]])).argmax())
    assert state.capacity >= WINDOW
    out = [token]
    while len(out) < case["max_new_tokens"]:
        token = int(state.step(np.array([token])).argmax())
        out.append(token)
    assert out == case["output_ids"][: len(out)]


def test_same_greedy_ids_as_onnxruntime_genai():
    og = pytest.importorskip("onnxruntime_genai")
    name = "genai-gemma3"
    case = next(c for c in MODELS[name]["cases"] if c["name"] == "long")
    model = og.Model(str(FIXTURES / MODELS[name]["folder"]))
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(case["prompt_ids"]) + case["max_new_tokens"], do_sample=False)
    runner = og.Generator(model, params)
    runner.append_tokens(case["prompt_ids"])
    theirs: list[int] = []
    while not runner.is_done():
        runner.generate_next_token()
        theirs.append(int(runner.get_next_tokens()[0]))
    ours = generator(name).generate(case["prompt"], max_new_tokens=case["max_new_tokens"], do_sample=False)
    assert list(ours.token_ids) == theirs == case["output_ids"]


def test_a_bad_sliding_window_in_a_description_names_the_key():
    raw = {
        "version": 1,
        "pipeline": {"extends": "autoregressive-decoder", "state": {"kv_cache": {"sliding_window": -4}}},
    }
    with pytest.raises(PipelineSpecError, match="state.kv_cache.sliding_window"):
        resolve_description(raw, FIXTURES / MODELS["genai-gemma3"]["folder"])
