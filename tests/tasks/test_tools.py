"""Tool calling: rendering against transformers, per-family parsers, constraint grammars, bad input.

The references (tests/fixtures/references/tool_calls.json) are Qwen2.5's real
chat template rendered by transformers' ``apply_chat_template(tools=...)``.
"""

from __future__ import annotations

import copy
import json
import random

import pytest

from inference4py.errors import InvalidInputError, UnsupportedModelError
from inference4py.tasks.tools import (
    TOOL_FAMILIES,
    ToolCall,
    ToolChoice,
    detect_tool_family,
    messages_for_template,
    parse_hermes_tool_calls,
    parse_llama3_tool_calls,
    parse_mistral_tool_calls,
    parse_tool_calls,
    prepare_tools,
    template_supports_tools,
    tool_call_constraint,
    validate_tool_choice,
    validate_tools,
)
from inference4py.tokenization import load_tokenizer
from tests.conftest import MODELS, load_reference

REF = load_reference("tool_calls")
CASES = {case["name"]: case for case in REF["cases"]}
TOOLS = CASES["two-tools"]["tools"]  # get_weather(city, unit?), get_time(timezone)


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(MODELS / "qwen2")


def _rng():
    return random.Random(0)


# ---------------------------------------------------------------------------
# Rendering: equal to transformers
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", [n for n in CASES if n != "round-trip-string-arguments"])
def test_rendering_matches_transformers(tok, name):
    case = CASES[name]
    messages = messages_for_template(case["messages"])
    text = tok.apply_chat_template(messages, tools=validate_tools(case["tools"]))
    assert text == case["text"]
    assert tok.encode(text, add_special_tokens=False) == case["ids"]


def test_string_arguments_render_as_the_model_wrote_them(tok):
    # OpenAI sends arguments as a JSON string; transformers would encode it twice (recorded),
    # messages_for_template() gives the template a dict, as the model wrote the call.
    case = CASES["round-trip-string-arguments"]
    assert '"arguments": "{\\"city\\"' in case["text"]  # transformers' double encoding
    text = tok.apply_chat_template(messages_for_template(case["messages"]), tools=case["tools"])
    assert text == CASES["round-trip"]["text"]


def test_parsed_calls_render_back(tok):
    # generate -> parse -> assistant message (OpenAI wire form) + tool result -> next prompt
    generated = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>'
    request = prepare_tools(CASES["round-trip"]["tools"], "auto", tok.chat_template)
    content, calls = request.parse(generated, rng=_rng())
    assert content == ""
    assert [(c.name, c.arguments) for c in calls] == [("get_weather", {"city": "Paris", "unit": "celsius"})]
    messages = [
        CASES["round-trip"]["messages"][0],
        {"role": "assistant", "content": content or None, "tool_calls": [c.to_openai() for c in calls]},
        {
            "role": "tool",
            "tool_call_id": calls[0].id,
            "content": [{"type": "text", "text": '{"temperature": 21, '}, {"type": "text", "text": '"sky": "clear"}'}],
        },
    ]
    text = tok.apply_chat_template(messages_for_template(messages), tools=request.tools)
    assert text == CASES["round-trip"]["text"]
    # ToolCall objects and bare {"name", "arguments"} calls are accepted as well
    for tool_calls in (calls, [{"id": "x", "name": "get_weather", "arguments": calls[0].arguments}]):
        messages[1] = {"role": "assistant", "content": None, "tool_calls": tool_calls}
        assert tok.apply_chat_template(messages_for_template(messages), tools=request.tools) == text


def test_messages_for_template_does_not_modify_its_input():
    messages = CASES["round-trip-string-arguments"]["messages"]
    before = copy.deepcopy(messages)
    out = messages_for_template(messages)
    assert messages == before
    assert out[1]["tool_calls"][0] == {
        "id": "call_0",
        "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}},
    }
    tool = messages_for_template([{"role": "tool", "content": {"ok": True}}])
    assert tool == [{"role": "tool", "content": '{"ok": true}'}]


def test_messages_for_template_rejects_bad_arguments():
    bad = [{"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}]}]
    with pytest.raises(InvalidInputError, match="arguments must be a JSON object"):
        messages_for_template(bad)
    with pytest.raises(InvalidInputError, match="function name"):
        messages_for_template([{"role": "assistant", "tool_calls": [{"function": {"arguments": {}}}]}])


# ---------------------------------------------------------------------------
# Template support and families
# ---------------------------------------------------------------------------

LLAMA3_SNIPPET = (
    "{%- if tools %}{{- '<|start_header_id|>user<|end_header_id|>\\n\\n' }}"
    '{{- \'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.\' }}'
    "{%- for t in tools %}{{ t | tojson }}{% endfor %}{%- endif %}"
)
MISTRAL_SNIPPET = (
    '{%- if tools %}[AVAILABLE_TOOLS] {{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}{{ "[TOOL_CALLS] [" }}'
)
MISTRAL_ARGS_SNIPPET = "{%- if tools %}{{ tools | tojson }}{% endif %}{{ '[TOOL_CALLS]' + name + '[ARGS]' }}"


def test_template_support_is_read_from_the_template(tok):
    assert template_supports_tools(tok.chat_template)
    plain = "{% for m in messages %}<tools>{{ m['content'] }}</tools>{% endfor %}"  # the word, not the variable
    assert not template_supports_tools(plain)
    with pytest.raises(UnsupportedModelError, match="no tool support"):
        prepare_tools(TOOLS, "auto", plain)
    with pytest.raises(UnsupportedModelError, match="no chat template"):
        prepare_tools(TOOLS, "auto", None)
    with pytest.raises(UnsupportedModelError, match="cannot parse"):
        prepare_tools(TOOLS, "auto", "{% for t in tools %}{{ t | tojson }}{% endfor %}")


@pytest.mark.parametrize(
    "template,family",
    [
        (None, "hermes"),  # the qwen2 fixture's real Qwen2.5 template
        (LLAMA3_SNIPPET, "llama3_json"),
        (MISTRAL_SNIPPET, "mistral"),
        (MISTRAL_ARGS_SNIPPET, "mistral_args"),
    ],
)
def test_family_is_detected_by_template_marker(tok, template, family):
    template = template or tok.chat_template
    assert detect_tool_family(template) == family
    assert prepare_tools(TOOLS, "auto", template).family == family


# ---------------------------------------------------------------------------
# Parsers: scripted outputs
# ---------------------------------------------------------------------------


def test_hermes_calls():
    text = (
        "Let me check.\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n<tool_call>\n'
        '{"name": "get_time", "arguments": "{\\"timezone\\": \\"Europe/Paris\\"}"}\n</tool_call>'
    )
    content, calls = parse_hermes_tool_calls(text, rng=_rng())
    assert content == "Let me check."
    assert [(c.name, c.arguments) for c in calls] == [
        ("get_weather", {"city": "Paris"}),
        ("get_time", {"timezone": "Europe/Paris"}),
    ]
    assert all(c.id.startswith("call_") and len(c.id) == 29 for c in calls)
    assert len({c.id for c in calls}) == 2
    assert parse_hermes_tool_calls(text, rng=_rng()) == (content, calls)  # reproducible ids


def test_hermes_unclosed_last_call_and_malformed_block():
    content, calls = parse_hermes_tool_calls('<tool_call>\n{"name": "f", "arguments": {}}\n', rng=_rng())
    assert (content, [c.name for c in calls]) == ("", ["f"])
    bad = '<tool_call>\n{"name": "f", "arguments": {"x": 1}\n</tool_call>'  # a brace short
    assert parse_hermes_tool_calls(bad) == (bad, [])
    mixed = bad + '\n<tool_call>\n{"name": "g", "arguments": {}}\n</tool_call>'
    content, calls = parse_hermes_tool_calls(mixed, rng=_rng())
    assert content == bad and [c.name for c in calls] == ["g"]
    not_a_call = '<tool_call>\n{"arguments": {}}\n</tool_call>'
    assert parse_hermes_tool_calls(not_a_call) == (not_a_call, [])
    assert parse_hermes_tool_calls("Paris is sunny.") == ("Paris is sunny.", [])


def test_llama3_calls():
    content, calls = parse_llama3_tool_calls(
        '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}<|eom_id|>', rng=_rng()
    )
    assert content == "" and [(c.name, c.arguments) for c in calls] == [("get_weather", {"city": "Paris"})]
    text = 'Sure.\n{"name": "get_weather", "parameters": {"city": "Paris"}}; {"name": "get_time", "parameters": {"timezone": "UTC"}}'
    content, calls = parse_llama3_tool_calls(text, rng=_rng())
    assert content == "Sure." and [c.name for c in calls] == ["get_weather", "get_time"]
    for plain in (
        '{"name": "get_weather", "parameters": {"city": "Paris"',  # cut off
        'The JSON is {"name": "x", "parameters": {}}',  # not at a line start
        '{"city": "Paris"}',  # JSON, but no call
        '{"name": "f", "parameters": {}} and more text',
    ):
        assert parse_llama3_tool_calls(plain) == (plain, [])


def test_mistral_calls():
    text = 'Checking.[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "get_time", "arguments": {"timezone": "UTC"}}]</s>'
    content, calls = parse_mistral_tool_calls(text, rng=_rng())
    assert content == "Checking."
    assert [(c.name, c.arguments) for c in calls] == [
        ("get_weather", {"city": "Paris"}),
        ("get_time", {"timezone": "UTC"}),
    ]
    assert all(len(c.id) == 9 and c.id.isalnum() for c in calls)  # Mistral's templates require it
    # the control token skipped at decoding: the list form is still recognised
    assert [c.name for c in parse_mistral_tool_calls(text.split("[TOOL_CALLS]")[1], rng=_rng())[1]] == [
        "get_weather",
        "get_time",
    ]
    args_form = '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS]{"timezone": "UTC"}'
    content, calls = parse_mistral_tool_calls(args_form, rng=_rng())
    assert content == "" and [(c.name, c.arguments) for c in calls] == [
        ("get_weather", {"city": "Paris"}),
        ("get_time", {"timezone": "UTC"}),
    ]
    for bad in ('[TOOL_CALLS] [{"name": "f", "arguments": {]', '[TOOL_CALLS]f[ARGS]{"a": ', "[TOOL_CALLS] [1, 2]"):
        assert parse_mistral_tool_calls(bad) == (bad, [])


@pytest.mark.parametrize("family", TOOL_FAMILIES)
def test_parse_tool_calls_dispatches_and_never_raises_on_output(family):
    for garbage in ("", "<tool_call>", "[TOOL_CALLS]", "<|python_tag|>{", "{{{{", "\x00\ufffd", "[TOOL_CALLS][ARGS]"):
        content, calls = parse_tool_calls(garbage, family)
        assert (content, calls) == (garbage, [])


def test_tool_call_is_frozen_and_has_openai_form():
    call = ToolCall(id="call_1", name="f", arguments={"a": 1})
    with pytest.raises(AttributeError):
        call.name = "g"  # type: ignore[misc]
    assert call.to_openai() == {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}


def test_tool_choice_none_parses_nothing(tok):
    text = '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'
    assert prepare_tools(TOOLS, "none", tok.chat_template).parse(text) == (text, [])
    assert len(prepare_tools(TOOLS, "auto", tok.chat_template).parse(text)[1]) == 1


# ---------------------------------------------------------------------------
# Constraints: the grammars compile, admit valid calls, refuse invalid ones
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lltok():
    llguidance = pytest.importorskip("llguidance")
    return llguidance.LLTokenizer((MODELS / "qwen2" / "tokenizer.json").read_text(encoding="utf-8"))


def _accepts(lltok, grammar: str, text: str) -> bool:
    import llguidance

    matcher = llguidance.LLMatcher(lltok, llguidance.LLMatcher.grammar_from_lark(grammar))
    assert not matcher.is_error(), matcher.get_error()
    ok = matcher.consume_tokens(lltok.tokenize_str(text, parse_special=True))
    return bool(ok) and not matcher.is_error() and matcher.is_accepting()


def test_no_constraint_for_none():
    assert tool_call_constraint(TOOLS, "none", "hermes") is None


WEATHER = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def test_auto_admits_text_or_well_formed_calls_and_a_bare_call_is_a_call(lltok):
    auto = tool_call_constraint(TOOLS, "auto", "hermes")
    assert _accepts(lltok, auto, "It is sunny in Paris.")
    assert _accepts(lltok, auto, "Let me look.\n" + WEATHER)
    assert _accepts(lltok, auto, WEATHER + "\n")
    bare = '{"name": "get_weather", "arguments": {"city": "Paris"}}'  # small Qwen models drop the block
    assert _accepts(lltok, auto, bare)
    assert [c.name for c in parse_hermes_tool_calls(bare)[1]] == ["get_weather"]
    assert not _accepts(lltok, auto, '{"city": "Paris"}')  # JSON that is no call cannot pass for an answer
    assert not _accepts(lltok, auto, WEATHER.replace('"city"', '"town"'))  # a call is checked once it starts
    assert not _accepts(lltok, auto, WEATHER + " and then some text")
    mistral = tool_call_constraint(TOOLS, "auto", "mistral")
    assert _accepts(lltok, mistral, 'Ok [TOOL_CALLS] [{"name": "get_time", "arguments": {"timezone": "UTC"}}]')
    assert not _accepts(lltok, mistral, '[{"name": "get_time", "arguments": {"timezone": "UTC"}}]')


def test_a_turn_of_calls_ends_after_its_calls(lltok):
    # a model writes a newline before its end token: that may not start another call by force
    required = tool_call_constraint(TOOLS, "required", "hermes")
    assert _accepts(lltok, required, WEATHER + "\n")
    assert not _accepts(lltok, required, WEATHER + "\n\n\n\n\n")
    single = tool_call_constraint(TOOLS, "required", "hermes", parallel_tool_calls=False)
    assert _accepts(lltok, single, WEATHER + "\n") and not _accepts(lltok, single, WEATHER + "\n" + WEATHER)


@pytest.mark.parametrize("family", TOOL_FAMILIES)
def test_constraint_grammars_compile(lltok, family):
    import llguidance

    for choice in ("required", {"type": "function", "function": {"name": "get_time"}}):
        grammar = tool_call_constraint(TOOLS, choice, family)
        assert grammar is not None
        message = llguidance.LLMatcher.validate_grammar(llguidance.LLMatcher.grammar_from_lark(grammar), lltok)
        assert message == "", message


def test_hermes_constraint_admits_only_valid_calls(lltok):
    weather = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>'
    time_ = '<tool_call>\n{"name": "get_time", "arguments": {"timezone": "UTC"}}\n</tool_call>'
    required = tool_call_constraint(TOOLS, "required", "hermes")
    assert _accepts(lltok, required, weather)
    assert _accepts(lltok, required, weather + "\n" + time_)
    assert not _accepts(
        lltok, tool_call_constraint(TOOLS, "required", "hermes", parallel_tool_calls=False), weather + "\n" + time_
    )
    assert not _accepts(lltok, required, weather.replace("celsius", "kelvin"))  # enum
    assert not _accepts(lltok, required, weather.replace('"city": "Paris", ', ""))  # required property
    assert not _accepts(lltok, required, weather.replace("get_weather", "get_wether"))  # unknown function
    assert not _accepts(lltok, required, "It is sunny.")
    named = tool_call_constraint(TOOLS, {"type": "function", "function": {"name": "get_time"}}, "hermes")
    assert _accepts(lltok, named, time_) and not _accepts(lltok, named, weather)
    # what the constraint admits, the parser reads back
    content, calls = parse_hermes_tool_calls(weather + "\n" + time_, rng=_rng())
    assert content == "" and [c.name for c in calls] == ["get_weather", "get_time"]


def test_constraint_takes_a_marker_as_its_token_or_spelled(lltok):
    # <|im_end|> stands in for a one-token marker: allowed as the token id, and spelled in pieces too
    # (a model exported with another tokenizer file writes "<" "tool" "_call" ">")
    ids = {"[TOOL_CALLS]": 1002}
    grammar = tool_call_constraint(TOOLS, "required", "mistral", token_to_id=ids.get)
    assert grammar.startswith('start: (<[1002]> | "[TOOL_CALLS]")')
    assert _accepts(lltok, grammar, '<|im_end|> [{"name": "get_time", "arguments": {"timezone": "UTC"}}]')
    assert _accepts(lltok, grammar, '[TOOL_CALLS] [{"name": "get_time", "arguments": {"timezone": "UTC"}}]')
    auto = tool_call_constraint(TOOLS, "auto", "mistral", token_to_id=ids.get)
    assert _accepts(lltok, auto, 'Sure.<|im_end|> [{"name": "get_time", "arguments": {"timezone": "UTC"}}]')
    assert _accepts(lltok, auto, 'Sure.[TOOL_CALLS] [{"name": "get_time", "arguments": {"timezone": "UTC"}}]')


def test_other_family_constraints_admit_their_format(lltok):
    llama = tool_call_constraint(TOOLS, "required", "llama3_json")
    assert _accepts(lltok, llama, '{"name": "get_time", "parameters": {"timezone": "UTC"}}')
    assert not _accepts(lltok, llama, '{"name": "get_time", "arguments": {"timezone": "UTC"}}')
    mistral = tool_call_constraint(TOOLS, "required", "mistral")
    assert _accepts(lltok, mistral, '[TOOL_CALLS] [{"name": "get_time", "arguments": {"timezone": "UTC"}}]')
    args = tool_call_constraint(TOOLS, "required", "mistral_args")
    assert _accepts(lltok, args, '[TOOL_CALLS]get_time[ARGS]{"timezone": "UTC"}')
    assert not _accepts(lltok, args, '[TOOL_CALLS]get_time[ARGS]{"zone": "UTC"}')


# ---------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tools,match",
    [
        ({"type": "function"}, "must be a list"),
        (["get_weather"], r"tools\[0\] must be a dict"),
        ([{"type": "function", "function": {"description": "no name"}}], "no function name"),
        ([{"type": "function", "function": {"name": ""}}], "no function name"),
        ([{"type": "retrieval"}], "only function tools"),
        ([{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}], "must be .*'object'"),
        ([{"type": "function", "function": {"name": "f", "parameters": "city: str"}}], "JSON schema object"),
        ([{"name": "f"}, {"type": "function", "function": {"name": "f"}}], "two functions named 'f'"),
    ],
)
def test_bad_tools(tools, match):
    with pytest.raises(InvalidInputError, match=match):
        validate_tools(tools)
    with pytest.raises(ValueError):  # callers may catch the stdlib type
        prepare_tools(tools, "auto", "{{ tools }}<tool_call>")


@pytest.mark.parametrize(
    "choice,match",
    [
        ("always", "must be 'none', 'auto', 'required'"),
        ("get_time", "To force function 'get_time'"),
        ({"type": "function", "function": {"name": "get_date"}}, "'get_date', which is not among the tools"),
        ({"type": "function"}, "named tool_choice looks like"),
        (3, "got int"),
    ],
)
def test_bad_tool_choice(choice, match):
    with pytest.raises(InvalidInputError, match=match):
        validate_tool_choice(choice, TOOLS)


def test_tool_choice_forms():
    assert validate_tool_choice(None, TOOLS) == ToolChoice("auto")
    assert validate_tool_choice(None, []) == ToolChoice("none")
    assert validate_tool_choice("required", TOOLS) == ToolChoice("required")
    assert validate_tool_choice({"type": "function", "function": {"name": "get_time"}}, TOOLS) == ToolChoice(
        "required", "get_time"
    )
    assert validate_tool_choice({"type": "function", "name": "get_time"}, TOOLS) == ToolChoice("required", "get_time")
    with pytest.raises(InvalidInputError, match="needs tools"):
        validate_tool_choice("required", [])
    with pytest.raises(InvalidInputError, match="Unknown tool-call family"):
        tool_call_constraint(TOOLS, "required", "qwen")


def test_bare_function_tools_are_passed_through(tok):
    bare = [t["function"] for t in TOOLS]
    assert validate_tools(bare) == bare
    assert json.dumps(bare[0]) in tok.apply_chat_template([{"role": "user", "content": "hi"}], tools=bare)
