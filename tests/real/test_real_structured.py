"""Structured output and tool calling on real checkpoints (issue 15), in the ``pytest -m real`` tier.

SmolLM2-135M-Instruct samples at temperature 1.0 under a nested JSON schema, and every output must
parse and validate. Qwen2.5-Coder-0.5B-Instruct carries Qwen2.5's real chat template, with tool
support: with ``tool_choice="required"`` its call must validate against the function's parameters,
and with ``"auto"`` a question that needs the tool is answered with a parsed call.
"""

from __future__ import annotations

import json

import pytest

from inference4py import OnnxTextGenerator
from tests.real.conftest import REAL, not_built, read_json

pytestmark = pytest.mark.real
pytest.importorskip("llguidance")
jsonschema = pytest.importorskip("jsonschema")

SCHEMA = {
    "type": "object",
    "properties": {
        "user": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 24},
                "age": {"type": "integer", "minimum": 0, "maximum": 120},
                "email": {"type": "string", "format": "email", "maxLength": 40},
            },
            "required": ["name", "age", "email"],
            "additionalProperties": False,
        },
        "tags": {"type": "array", "items": {"enum": ["new", "vip", "churned"]}, "maxItems": 3},
    },
    "required": ["user", "tags"],
    "additionalProperties": False,
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "The city name"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city"],
            },
        },
    }
]


def folder(model: str, layout: str):
    manifest = read_json(REAL / "manifest.json")
    if manifest is None or model not in manifest["models"]:
        not_built(f"manifest entry for {model}", only=model)
    path = REAL / manifest["models"][model]["layouts"][layout]["folder"]
    if not path.is_dir():
        not_built(f"folder {path.name}", only=model)
    return path


@pytest.mark.parametrize("layout", ["fused", "genai-int4"])
def test_smollm2_samples_valid_records(layout):
    messages = [{"role": "user", "content": "Give me a user record for a customer database."}]
    with OnnxTextGenerator.builder().model_path(folder("smollm2", layout)).build() as gen:
        for seed in range(5):
            r = gen.generate(
                messages, json_schema=SCHEMA, do_sample=True, temperature=1.0, seed=seed, max_new_tokens=160
            )
            assert r.finish_reason == "eos", r.text
            jsonschema.validate(json.loads(r.text), SCHEMA)


def test_qwen_tool_calls_validate():
    messages = [{"role": "user", "content": "What's the weather like in Paris right now?"}]
    with OnnxTextGenerator.builder().model_path(folder("qwen2.5-coder", "genai-int4")).build() as gen:
        for seed in range(3):
            r = gen.generate(
                messages, tools=TOOLS, tool_choice="required", do_sample=True, seed=seed, max_new_tokens=80
            )
            assert r.finish_reason == "tool_calls", r.text
            for call in r.tool_calls:
                assert call.name == "get_weather"
                jsonschema.validate(call.arguments, TOOLS[0]["function"]["parameters"])
        r = gen.generate(messages, tools=TOOLS, max_new_tokens=80)  # "auto", greedy: the model chooses to call
        assert r.finish_reason == "tool_calls", r.text
        assert r.tool_calls[0].arguments.get("city") == "Paris"
        follow_up = [
            *messages,
            {"role": "assistant", "content": r.text, "tool_calls": [c.to_openai() for c in r.tool_calls]},
            {"role": "tool", "tool_call_id": r.tool_calls[0].id, "content": '{"temperature": 18, "sky": "sunny"}'},
        ]
        answer = gen.generate(follow_up, tools=TOOLS, max_new_tokens=60)
        assert answer.finish_reason in ("eos", "length") and "18" in answer.text
