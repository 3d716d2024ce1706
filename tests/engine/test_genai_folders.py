"""onnxruntime-genai folders on the native loop: genai_config.json translated, same ids as genai.

The folders (GroupQueryAttention graphs, no position_ids input, symbolic head size, sizes only in
genai_config.json) are built by tools/fixtures/genai.py; references/genai.json holds transformers'
ids checked against onnxruntime-genai for fp32, and onnxruntime-genai's own ids for int4.
"""

from __future__ import annotations

import pytest

from inference4py import OnnxTextGenerator
from inference4py.engine.pipeline import load_pipeline
from tests.conftest import FIXTURES, load_reference

REF = load_reference("genai")["models"]
TEXT = [name for name, m in REF.items() if any(c.get("kind") in ("text", "chat") for c in m["cases"])]
_generators: dict[str, OnnxTextGenerator] = {}


def generator(name: str) -> OnnxTextGenerator:
    if name not in _generators:
        _generators[name] = OnnxTextGenerator.builder().model_path(FIXTURES / REF[name]["folder"]).build()
    return _generators[name]


def _cases(*, plain_only: bool = False):
    for name in TEXT:
        for case in REF[name]["cases"]:
            if case.get("kind") not in ("text", "chat"):
                continue
            if plain_only and set(case["settings"]) != {"do_sample"}:
                continue
            yield pytest.param(name, case, id=f"{name}-{case['name']}")


def _overrides(case: dict) -> dict:
    return {
        "max_new_tokens": case["max_new_tokens"],
        "do_sample": False,
        **{k: v for k, v in case["settings"].items() if k != "do_sample"},
    }


def test_fp32_and_int4_folders_are_covered():
    precisions = {REF[name]["precision"] for name in TEXT}
    assert {"fp32", "int4"} <= precisions


@pytest.mark.parametrize("name", TEXT)
def test_the_spec_comes_from_genai_config(name):
    spec = load_pipeline(FIXTURES / REF[name]["folder"])
    assert spec.source == "genai_config.json"
    assert spec.state.position_ids.strategy == "none"
    runtime = generator(name)._runtime
    assert not runtime.first.has_positions
    assert runtime.layout.head_dim == spec.state.kv_cache.head_size  # symbolic in the graph
    assert runtime.max_positions == spec.context_length


@pytest.mark.parametrize("name,case", list(_cases()))
def test_native_loop_reproduces_the_reference_ids(name, case):
    gen = generator(name)
    prompt = case["messages"] if case["kind"] == "chat" else case["prompt"]
    assert gen.encode_prompt(prompt) == case["prompt_ids"]
    got = list(gen.generate(prompt, **_overrides(case)).token_ids)
    n = case.get("stable_prefix", len(case["output_ids"]))
    assert got[:n] == case["output_ids"][:n]
    if n == len(case["output_ids"]):
        assert got == case["output_ids"]


@pytest.mark.parametrize("name,case", list(_cases(plain_only=True))[::3])
def test_same_ids_as_onnxruntime_genai_on_the_same_folder(name, case):
    og = pytest.importorskip("onnxruntime_genai")
    model = og.Model(str(FIXTURES / REF[name]["folder"]))
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(case["prompt_ids"]) + case["max_new_tokens"], do_sample=False)
    native = generator(name).generate(list(case["prompt_ids"]), max_new_tokens=case["max_new_tokens"], do_sample=False)
    generator_ = og.Generator(model, params)
    generator_.append_tokens(case["prompt_ids"])
    ids: list[int] = []
    while not generator_.is_done():
        generator_.generate_next_token()
        ids.append(int(generator_.get_next_tokens()[0]))
    assert list(native.token_ids) == ids
