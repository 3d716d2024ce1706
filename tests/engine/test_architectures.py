"""Zero code for new architectures: Phi-3, Gemma, Mistral and Qwen3 run through detection alone.

The fixtures are tiny random models exported with optimum (tools/fixtures/architectures.py);
references are transformers' greedy ids. Nothing in the runtime names these architectures.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import inference4py
from inference4py import OnnxTextGenerator
from inference4py.engine.pipeline import load_pipeline
from inference4py.errors import InvalidInputError
from tests.conftest import FIXTURES, load_reference

REF = load_reference("architectures")["models"]
_generators: dict[str, OnnxTextGenerator] = {}


def generator(name: str) -> OnnxTextGenerator:
    if name not in _generators:
        _generators[name] = OnnxTextGenerator.builder().model_path(FIXTURES / REF[name]["folder"]).build()
    return _generators[name]


def _cases(kind: str):
    for name, model in REF.items():
        for case in model["cases"]:
            if case["kind"] == kind:
                yield pytest.param(name, case, id=f"{name}-{case['name']}")


def _overrides(case: dict) -> dict:
    settings = {k: v for k, v in case["settings"].items() if k != "do_sample"}
    if "eos_token_id" in settings:
        settings["eos_token_id"] = (settings["eos_token_id"],)
    return {"max_new_tokens": case["max_new_tokens"], "do_sample": False, **settings}


def test_the_four_architectures_are_covered():
    assert {m["architecture"] for m in REF.values()} == {
        "Phi3ForCausalLM",
        "GemmaForCausalLM",
        "MistralForCausalLM",
        "Qwen3ForCausalLM",
    }
    # Gemma's export computes positions itself; the others take position_ids.
    assert {n: m["position_ids_input"] for n, m in REF.items()} == {
        "phi3": True,
        "gemma": False,
        "mistral": True,
        "qwen3": True,
    }


@pytest.mark.parametrize("name", sorted(REF))
def test_detection_alone_describes_them(name):
    spec = load_pipeline(FIXTURES / REF[name]["folder"])
    assert spec.source == "detected" and spec.preset == "autoregressive-decoder"
    assert spec.state.kv_cache.names.pairs[0] == ("past_key_values.{layer}.key", "present.{layer}.key")
    assert spec.metadata["model_type"] == name  # metadata only
    has_positions = REF[name]["position_ids_input"]
    assert generator(name)._runtime.first.has_positions is has_positions
    kv_heads = {"phi3": 4, "gemma": 1, "mistral": 2, "qwen3": 2}[name]
    assert generator(name)._runtime.layout.num_kv_heads == kv_heads


@pytest.mark.parametrize("name,case", list(_cases("text")))
def test_greedy_text_prompt_matches_transformers(name, case):
    gen = generator(name)
    if case["prompt"] == "":
        with pytest.raises(InvalidInputError, match="empty"):
            gen.generate("", **_overrides(case))
        result = gen.generate(list(case["prompt_ids"]), **_overrides(case))
    else:
        assert gen.encode_prompt(case["prompt"]) == case["prompt_ids"]
        result = gen.generate(case["prompt"], **_overrides(case))
    assert list(result.token_ids) == case["output_ids"]


@pytest.mark.parametrize("name,case", list(_cases("chat")))
def test_chat_messages_match_transformers(name, case):
    gen = generator(name)
    assert gen.encode_prompt(case["messages"]) == case["prompt_ids"]
    assert list(gen.generate(case["messages"], **_overrides(case)).token_ids) == case["output_ids"]


def test_streamed_text_equals_the_result():
    gen = generator("qwen3")
    case = next(c for c in REF["qwen3"]["cases"] if c["name"] == "emoji")
    assert (
        "".join(gen.stream(case["prompt"], **_overrides(case))) == gen.generate(case["prompt"], **_overrides(case)).text
    )


_NAMES = re.compile(r"phi-?3|gemma|mistral|qwen3", re.I)


def test_the_runtime_names_none_of_them():
    package = Path(inference4py.__file__).parent
    runtime = [*package.glob("engine/**/*.py"), *package.glob("engine/*.json"), *package.glob("generation/**/*.py")]
    assert runtime
    offenders = [str(p.relative_to(package)) for p in runtime if _NAMES.search(p.read_text(encoding="utf-8"))]
    assert offenders == []


@pytest.mark.parametrize("name", sorted(REF))
def test_the_tokenizer_is_chosen_by_the_folder_not_by_model_type(name):
    # tokenization.py keeps transformers' model_type -> tokenizer class table as a last resort for
    # folders that name no class; these folders name theirs, so the table is not consulted.
    config = json.loads((FIXTURES / REF[name]["folder"] / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config.get("tokenizer_class")
