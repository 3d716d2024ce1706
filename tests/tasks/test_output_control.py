"""Structured output and tool calling through ``OnnxTextGenerator.generate`` (issue 15).

The fixtures are random models, which want to write garbage. That is the hardest case: whatever
they sample at temperature 1.0, the constrained output must parse and validate. Bounded schemas
(``maxLength``, ``maximum``) keep every output inside the token budget, so every output is
checked, not only those that happen to finish.
"""

from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("llguidance")
jsonschema = pytest.importorskip("jsonschema")

from inference4py import OnnxTextGenerator  # noqa: E402
from inference4py.errors import ConfigurationError, InvalidInputError, UnsupportedModelError  # noqa: E402
from tests.conftest import FIXTURES, long_context_copy  # noqa: E402

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 6},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 2},
        "address": {
            "type": "object",
            "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
            "required": ["zip"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "age", "address"],
    "additionalProperties": False,
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}, "days": {"type": "integer"}},
                "required": ["city"],
            },
        },
    },
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}},
]
_models: dict[str, OnnxTextGenerator] = {}


def model(kind: str) -> OnnxTextGenerator:
    if kind not in _models:
        _models[kind] = OnnxTextGenerator.builder().model_path(FIXTURES / "models" / kind).build()
    return _models[kind]


@pytest.fixture(scope="module")
def long_qwen2(tmp_path_factory):
    """The qwen2 fixture with a 1,024-token context: Qwen2.5's tool prompt alone is ~400 tokens."""
    folder = long_context_copy(tmp_path_factory.mktemp("qwen2-long"))
    return OnnxTextGenerator.builder().model_path(folder).build()


@pytest.mark.parametrize("kind", ["gpt2", "llama", "qwen2"])
def test_every_sampled_output_parses_and_validates_against_the_schema(kind):
    gen = model(kind)
    for seed in range(12):
        r = gen.generate(
            "A record:", json_schema=SCHEMA, do_sample=True, temperature=1.0, seed=seed, max_new_tokens=100
        )
        assert r.finish_reason == "eos", (seed, r.text)
        jsonschema.validate(json.loads(r.text), SCHEMA)


def test_response_format_json_schema_and_json_object_on_chat(long_qwen2):
    gen = long_qwen2
    messages = [{"role": "user", "content": "A record please"}]
    fmt = {"type": "json_schema", "json_schema": {"name": "user", "schema": SCHEMA}}
    r = gen.generate(messages, response_format=fmt, do_sample=True, seed=1, max_new_tokens=100)
    jsonschema.validate(json.loads(r.text), SCHEMA)
    r = gen.generate(messages, response_format={"type": "json_object"}, max_new_tokens=30)
    assert r.text.startswith("{")  # an object under way (a random model seldom closes it in 30 tokens)


@pytest.mark.parametrize("kind", ["gpt2", "llama", "qwen2"])
def test_regex_choices_and_grammar(kind):
    gen = model(kind)
    for seed in range(8):
        options = {"do_sample": True, "temperature": 1.0, "seed": seed, "max_new_tokens": 30}
        phone = gen.generate("Phone:", regex=r"\([0-9]{3}\) [0-9]{3}-[0-9]{4}", **options).text
        assert re.fullmatch(r"\([0-9]{3}\) [0-9]{3}-[0-9]{4}", phone)
        assert gen.generate("Colour:", choices=["red", "green", "blue"], **options).text in {"red", "green", "blue"}
        sql = gen.generate("SQL:", grammar='start: "SELECT " ("a" | "b") " FROM t" (" LIMIT " /[1-9]/)?', **options)
        assert re.fullmatch(r"SELECT [ab] FROM t( LIMIT [1-9])?", sql.text)


@pytest.mark.parametrize("kind,prompt", [("llama", "The old house"), ("qwen2", "Once upon a time")])
def test_constrained_greedy_equals_unconstrained_greedy_when_it_already_satisfies_it(kind, prompt):
    """Cases whose greedy text is whole UTF-8 in canonical tokens (random models also emit lone
    byte pieces, which no text constraint can match)."""
    gen = model(kind)
    plain = gen.generate(prompt, max_new_tokens=8)
    for options in ({"choices": [plain.text, "something else"]}, {"regex": "(?s:.*)"}):
        constrained = gen.generate(prompt, max_new_tokens=8, **options)
        assert constrained.token_ids == plain.token_ids
        assert constrained.text == plain.text


def test_a_batch_constrains_every_row():
    rows = model("llama").generate_batch(
        ["A record:", "Another one, please", "x"], json_schema=SCHEMA, do_sample=True, seed=5, max_new_tokens=100
    )
    for r in rows:
        jsonschema.validate(json.loads(r.text), SCHEMA)


def test_beam_search_keeps_the_constraint():
    r = model("qwen2").generate("Colour:", choices=["red", "green", "blue"], num_beams=3, num_return_sequences=3)
    assert {c.text for c in r.candidates} <= {"red", "green", "blue"}


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_a_required_tool_call_from_a_random_model_validates(long_qwen2, choice):
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    params = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    for seed in range(4):
        r = long_qwen2.generate(
            messages,
            tools=TOOLS,
            tool_choice=choice,
            parallel_tool_calls=False,
            do_sample=True,
            seed=seed,
            max_new_tokens=80,
        )
        assert r.finish_reason == "tool_calls", r.text  # one call, then the turn ends
        assert len(r.tool_calls) == 1 and r.text == ""
        for call in r.tool_calls:
            if isinstance(choice, dict):
                assert call.name == "get_weather"
            jsonschema.validate(call.arguments, params[call.name])
            wire = call.to_openai()
            assert json.loads(wire["function"]["arguments"]) == call.arguments


def test_a_turn_cut_inside_its_calls_says_length(long_qwen2):
    # parallel calls from a random model go on until the budget: the truth is "length"
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    cut = [
        long_qwen2.generate(messages, tools=TOOLS, tool_choice="required", do_sample=True, seed=seed, max_new_tokens=60)
        for seed in range(4)
    ]
    assert all(r.finish_reason in ("length", "tool_calls") for r in cut)
    for r in cut:
        if r.generated_tokens == 60:
            assert r.finish_reason == "length", r.text


def test_tools_are_rendered_into_the_prompt_by_the_template(long_qwen2):
    messages = [{"role": "user", "content": "Hi"}]
    with_tools = long_qwen2._prompts.encode(messages, tools=TOOLS)
    text = long_qwen2.tokenizer.decode(with_tools, skip_special_tokens=False)
    assert '"name": "get_weather"' in text and "<tools>" in text
    r = long_qwen2.generate(messages, tools=TOOLS, tool_choice="none", max_new_tokens=5)
    assert r.prompt_tokens == len(with_tools) and r.tool_calls == ()


@pytest.mark.parametrize(
    "options,error,message",
    [
        ({"json_schema": {"type": "object", "properties": {"a": {"type": "nonsense"}}}}, ConfigurationError, "schema"),
        ({"json_schema": "{not json"}, ConfigurationError, "JSON"),
        ({"regex": "(unclosed"}, ConfigurationError, "regex"),
        ({"grammar": "start: undefined_rule"}, ConfigurationError, "grammar"),
        ({"choices": []}, ConfigurationError, "choices"),
        ({"regex": "a", "choices": ["a"]}, ConfigurationError, "one output constraint"),
        ({"response_format": {"type": "xml"}}, ConfigurationError, "response_format"),
        ({"tools": [{"type": "function", "function": {"parameters": {}}}]}, InvalidInputError, "name"),
        (
            {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
            InvalidInputError,
            "nope",
        ),
        ({"tool_choice": "required"}, ConfigurationError, "tools"),
    ],
)
def test_bad_options_fail_before_any_token(long_qwen2, options, error, message):
    with pytest.raises(error, match=message):
        long_qwen2.generate([{"role": "user", "content": "Hi"}], max_new_tokens=3, **options)


def test_a_template_without_tool_support_is_refused():
    with pytest.raises(UnsupportedModelError, match="tool"):
        model("llama").generate([{"role": "user", "content": "Hi"}], tools=TOOLS, max_new_tokens=3)


@pytest.mark.parametrize(
    "task,folder", [("BartSummarizer", "bart"), ("MarianTranslator", "marian"), ("FlanT5TextGenerator", "t5")]
)
def test_seq2seq_tasks_take_the_same_constraints(task, folder):
    import inference4py

    with getattr(inference4py, task).builder().model_path(FIXTURES / "models" / folder).build() as gen:
        assert gen.generate("The committee met.", choices=["yes", "no"]).text in {"yes", "no"}
        for seed in range(4):
            text = gen.generate("The committee met.", regex="[a-z]{3,6}", do_sample=True, seed=seed).text
            assert re.fullmatch("[a-z]{3,6}", text), text
        rows = gen.generate_batch(["One.", "Two, longer input."], regex="[0-9]{2}")
        assert all(re.fullmatch("[0-9]{2}", r.text) for r in rows)
