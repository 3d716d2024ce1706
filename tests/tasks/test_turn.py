"""TurnSplitter: streamed answer text, reasoning and tool calls agree with the final parse, however the text is cut."""

from __future__ import annotations

import json
import random

import pytest

from inference4py.tasks.tools import parse_tool_calls
from inference4py.tasks.turn import CallArguments, CallEnd, CallStart, ReasoningDelta, TextDelta, TurnSplitter

OUTPUTS = {
    "hermes": [
        'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_time", "arguments": "{\\"timezone\\": \\"UTC\\"}"}\n</tool_call>',
        '<tool_call>\n{"name": "f", "arguments": {}}\n',  # unclosed last block
        '<tool_call>\n{"name": "f", "arguments": {"x": 1}\n</tool_call>',  # a brace short: text
        '<tool_call>\n{"arguments": {"x": 1}, "name": "f"}\n</tool_call>\n',  # the name after the arguments
        '{"name": "get_weather", "arguments": {"city": "Paris"}}',  # a bare call
        '```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```',  # a fenced one
        "```python\nprint(1)\n```",
        "```json\n[1, 2]\n```",
        '\n{"name": "f", "arguments": {"q": "a \\"quoted\\" }"}}\n',
        '{"city": "Paris"}',
        'Hi {"name": "f", "arguments": {}}',
        "Paris is sunny. <tool_ is no call",
        "<tool_call>",
        "",
    ],
    "llama3_json": [
        '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}<|eom_id|>',
        'Sure.\n{"name": "get_weather", "parameters": {"city": "Paris"}}; {"name": "get_time", "parameters": {"timezone": "UTC"}}',
        '{"city": "Paris"}',
        'The JSON is {"name": "x", "parameters": {}}',
    ],
    "mistral": [
        'Checking.[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}, '
        '{"name": "get_time", "arguments": {"timezone": "UTC"}}]</s>',
        '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS]{"timezone": "UTC"}',
        "[TOOL_CALLS] [1, 2]",
    ],
    "mistral_args": ['[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS]{"timezone": "UTC"}'],
}
CASES = [(family, text) for family, texts in OUTPUTS.items() for text in texts]


def _split(splitter: TurnSplitter, text: str, step: int) -> list:
    events = []
    for i in range(0, len(text), step):
        events += splitter.feed(text[i : i + step])
    return events + splitter.close()


@pytest.mark.parametrize("family,text", CASES)
@pytest.mark.parametrize("step", [1, 2, 7, 10_000])
def test_streamed_calls_equal_the_final_parse(family, text, step):
    events = _split(TurnSplitter(family, rng=random.Random(0)), text, step)
    _, parsed = parse_tool_calls(text, family)
    ends = [e.call for e in events if isinstance(e, CallEnd)]
    assert [(c.name, c.arguments) for c in ends] == [(c.name, c.arguments) for c in parsed]
    # (a call whose name was sent and that then broke, possible in unconstrained output only, has a
    # start and no end; under the tool grammar a started call always ends unless the budget cuts it)
    starts = [e for e in events if isinstance(e, CallStart)][: len(ends)]
    assert [(s.index, s.name) for s in starts] == [(i, c.name) for i, c in enumerate(ends)]
    assert [s.id for s in starts] == [c.id for c in ends]
    for i, call in enumerate(ends):  # the argument pieces join to the call's arguments
        joined = "".join(e.text for e in events if isinstance(e, CallArguments) and e.index == i)
        assert json.loads(joined) == call.arguments
    if not parsed:  # no call: every character is answer text
        assert "".join(e.text for e in events if isinstance(e, TextDelta)) == text
    else:  # the answer is the text around the calls, as the final parse gives it
        content = "".join(e.text for e in events if isinstance(e, TextDelta))
        assert content.strip() == parse_tool_calls(text, family)[0]


def test_answer_text_streams_as_it_is_written():
    splitter = TurnSplitter("hermes")
    assert splitter.feed("The weather ") == [TextDelta("The weather ")]
    assert splitter.feed("is fine <tool") == [TextDelta("is fine ")]  # "<tool" may open a call: held
    assert splitter.feed("box>") == [TextDelta("<toolbox>")]


def test_arguments_stream_in_pieces_before_the_call_ends():
    splitter = TurnSplitter("hermes")
    events = splitter.feed('<tool_call>\n{"name": "get_weather", "arguments": {"ci')
    assert [type(e) for e in events] == [CallStart, CallArguments]
    assert events[1].text == '{"ci' and splitter.open_call
    events = splitter.feed('ty": "Paris"}}\n</tool_call>')
    assert [type(e) for e in events] == [CallArguments, CallEnd] and not splitter.open_call


def test_no_family_means_text_only():
    text = '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>'
    assert _split(TurnSplitter(None), text, 3) == [TextDelta(text[i : i + 3]) for i in range(0, len(text), 3)]


@pytest.mark.parametrize("step", [1, 3, 100])
def test_reasoning_is_told_apart_from_the_answer(step):
    text = "<think>\nThe user wants Paris.\n</think>\n\nParis is sunny."
    events = _split(TurnSplitter(None, reasoning=("<think>", "</think>")), text, step)
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    answer = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert reasoning == "\nThe user wants Paris.\n" and answer == "Paris is sunny."


def test_reasoning_opened_by_the_prompt_then_a_call():
    text = 'Call the tool.</think>\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>'
    events = _split(TurnSplitter("hermes", reasoning=("<think>", "</think>"), in_reasoning=True), text, 4)
    assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)) == "Call the tool."
    assert [e.call.name for e in events if isinstance(e, CallEnd)] == ["f"]
    assert not [e for e in events if isinstance(e, TextDelta)]
