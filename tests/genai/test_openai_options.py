"""OpenAI's sampling options on the genai facade: penalties and logit bias run as Python processors.

onnxruntime-genai has no presence/frequency penalty, no logit_bias and no log-probabilities
(issue 15). The penalties and the bias run in Python over genai's logits and give the native
loop's ids. Log-probabilities are refused with a pointer to the native loop.
"""

from __future__ import annotations

import pytest

from tests.genai.conftest import folder, require_genai

genai = require_genai()

from inference4py import OnnxTextGenerator  # noqa: E402
from inference4py.errors import ConfigurationError  # noqa: E402
from inference4py_genai import TextGenerator  # noqa: E402

OPTIONS = [
    {"logit_bias": {7: 100}},
    {"logit_bias": {1027: -100, 994: -100}},
    {"presence_penalty": -2.0, "frequency_penalty": -2.0},  # rewards repeats: greedy starts looping
    {"presence_penalty": -1.0, "logit_bias": {411: -5.0}},
]


@pytest.fixture(scope="module")
def pair():
    path = folder("genai-llama")
    return TextGenerator.builder().model_path(path).build(), OnnxTextGenerator.builder().model_path(path).build()


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: "-".join(o))
def test_genai_applies_them_as_the_native_loop_does(pair, options):
    ours, native = pair
    plain = native.generate("The old house", max_new_tokens=10).token_ids
    got = ours.generate("The old house", max_new_tokens=10, **options).token_ids
    assert got == native.generate("The old house", max_new_tokens=10, **options).token_ids
    assert got != plain  # the option had work to do


@pytest.mark.parametrize("options", [{"logprobs": True}, {"top_logprobs": 3}, {"prompt_logprobs": True}])
def test_logprobs_are_refused_with_the_fix(pair, options):
    with pytest.raises(ConfigurationError, match="OnnxTextGenerator"):
        pair[0].generate("Hi", max_new_tokens=2, **options)


@pytest.mark.parametrize("options", [{"tools": []}, {"tools": [], "tool_choice": "auto"}])
def test_tool_calling_is_refused_with_the_fix(pair, options):
    with pytest.raises(ConfigurationError, match="OnnxTextGenerator"):
        pair[0].generate("Hi", max_new_tokens=2, **options)


SCHEMA = {
    "type": "object",
    "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99}, "ok": {"type": "boolean"}},
    "required": ["n", "ok"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("name", ["genai-qwen2", "genai-llama"])
def test_constraints_run_as_genai_guidance(name):
    """genai's own llguidance integration (GeneratorParams.set_guidance) gets the same options."""
    import json
    import re

    jsonschema = pytest.importorskip("jsonschema")
    with TextGenerator.builder().model_path(folder(name)).build() as gen:
        for seed in range(4):
            options = {"do_sample": True, "temperature": 1.0, "seed": seed, "max_new_tokens": 40}
            jsonschema.validate(json.loads(gen.generate("A record:", json_schema=SCHEMA, **options).text), SCHEMA)
            assert re.fullmatch("[0-9]{3}-[a-z]{2}", gen.generate("Code:", regex="[0-9]{3}-[a-z]{2}", **options).text)
            assert gen.generate("Colour:", choices=["red", "green"], **options).text in {"red", "green"}
        with pytest.raises(ConfigurationError, match="regex"):
            gen.generate("Code:", regex="(unclosed")
