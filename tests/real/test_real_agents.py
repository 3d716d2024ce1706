"""Agents on the real Qwen2.5-Coder-0.5B-Instruct GGUF over the real server (issue 32), ``pytest -m real``.

The file as people hold it (``gguf/qwen2.5-coder.gguf``, Q4_K_M) served by ``create_app`` and driven by
the official openai client: a forced call is one call that ends the turn, ``auto`` answers a weather
question with a call, and the streamed calls equal the non-streamed ones.
"""

from __future__ import annotations

import json

import pytest

from tests.real.conftest import REAL, not_built

pytestmark = pytest.mark.real
pytest.importorskip("llguidance")
pytest.importorskip("gguf")
openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"],
        },
    },
}
ASK = [{"role": "user", "content": "What's the weather in Paris?"}]


@pytest.fixture(scope="module")
def client():
    from inference4py.serve import create_app, load_models
    from tests.serve.support import running

    source = REAL / "gguf" / "qwen2.5-coder.gguf"
    if not source.is_file():
        not_built(f"gguf/{source.name}", only="qwen2.5-coder")
    with running(create_app(load_models([str(source)]))) as url:
        c = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=300)
        yield c, c.models.list().data[0].id


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_a_forced_call_is_one_call_that_ends_the_turn(client, choice):
    c, name = client
    r = c.chat.completions.create(model=name, messages=ASK, tools=[WEATHER], tool_choice=choice, max_tokens=120)
    choice0 = r.choices[0]
    assert choice0.finish_reason == "tool_calls" and len(choice0.message.tool_calls) == 1
    call = choice0.message.tool_calls[0]
    arguments = json.loads(call.function.arguments)
    jsonschema.validate(arguments, WEATHER["function"]["parameters"])
    assert call.function.name == "get_weather" and arguments["city"] == "Paris"
    assert r.usage.completion_tokens < 40  # it stopped after the call, far inside the budget


def test_auto_answers_a_weather_question_with_a_call_streamed_as_whole(client):
    c, name = client
    whole = c.chat.completions.create(model=name, messages=ASK, tools=[WEATHER], max_tokens=120).choices[0]
    assert whole.finish_reason == "tool_calls" and whole.message.content is None
    calls: dict[int, dict[str, str]] = {}
    finish = None
    for event in c.chat.completions.create(model=name, messages=ASK, tools=[WEATHER], max_tokens=120, stream=True):
        for piece in event.choices[0].delta.tool_calls or [] if event.choices else []:
            entry = calls.setdefault(piece.index, {"name": "", "arguments": ""})
            entry["name"] += piece.function.name or ""
            entry["arguments"] += piece.function.arguments or ""
        if event.choices and event.choices[0].finish_reason:
            finish = event.choices[0].finish_reason
    assert finish == "tool_calls"
    assert [(v["name"], json.loads(v["arguments"])) for v in calls.values()] == [
        (t.function.name, json.loads(t.function.arguments)) for t in whole.message.tool_calls
    ]
    assert json.loads(whole.message.tool_calls[0].function.arguments)["city"] == "Paris"
