"""Tool calls over the real server with the official openai client: streamed equals non-streamed, calls stop.

The fixture is a random-weight Qwen2 with Qwen2.5's real chat template (Hermes ``<tool_call>`` format).
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")

from inference4py.serve import create_app, load_models  # noqa: E402
from tests.conftest import long_context_copy  # noqa: E402
from tests.serve.support import running  # noqa: E402

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 12}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "parameters": {
                "type": "object",
                "properties": {"timezone": {"type": "string", "maxLength": 12}},
                "additionalProperties": False,
            },
        },
    },
]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    qwen = long_context_copy(tmp_path_factory.mktemp("tools"))
    with running(create_app(load_models([str(qwen)]))) as url:
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=60)


def _streamed(client, **kwargs):
    """The stream folded the way OpenAI's own client code does: content, calls by index, finish."""
    content, calls, finish, first = "", {}, None, None
    for event in client.chat.completions.create(stream=True, **kwargs):
        if not event.choices:
            continue
        choice = event.choices[0]
        first = first or choice.delta
        content += choice.delta.content or ""
        for piece in choice.delta.tool_calls or []:
            call = calls.setdefault(piece.index, {"id": None, "name": None, "arguments": ""})
            if piece.id:
                assert call["id"] is None, "a call's id is sent once, with its name"
                call["id"], call["name"] = piece.id, piece.function.name
            call["arguments"] += piece.function.arguments or ""
        finish = choice.finish_reason or finish
    assert first.role == "assistant" and first.content is None
    return content, [calls[i] for i in sorted(calls)], finish


@pytest.mark.parametrize(
    "choice,parallel",
    [
        ("required", False),
        ({"type": "function", "function": {"name": "get_time"}}, False),
        ("required", True),
        ("auto", True),
    ],
)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_streamed_tool_calls_equal_non_streamed(client, choice, parallel, seed):
    kwargs = dict(
        model="qwen2",
        messages=ASK,
        tools=TOOLS,
        tool_choice=choice,
        parallel_tool_calls=parallel,
        temperature=1.0,
        seed=seed,
        max_tokens=100,
    )
    whole = client.chat.completions.create(**kwargs).choices[0]
    content, calls, finish = _streamed(client, **kwargs)
    wanted = whole.message.tool_calls or []
    if finish == "length":  # a call the budget cut streamed its start; the whole answer keeps it as text
        calls = [c for c in calls if _parses(c["arguments"])]
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [
        (c.function.name, json.loads(c.function.arguments)) for c in wanted
    ]
    assert finish == whole.finish_reason
    if not wanted and finish != "length":
        assert content == (whole.message.content or "")
    if choice != "auto" and not parallel:  # exactly one call, then the turn ends
        assert whole.finish_reason == "tool_calls" and len(wanted) == 1
        if isinstance(choice, dict):
            assert wanted[0].function.name == "get_time"
    if whole.finish_reason == "tool_calls":
        assert wanted and whole.message.content is None
    if choice == "auto":  # text, or calls that parse: never a call left as content
        assert wanted or (whole.message.content and "<tool_call>" not in whole.message.content)


def _parses(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def test_tool_choice_none_answers_in_text(client):
    r = client.chat.completions.create(model="qwen2", messages=ASK, tools=TOOLS, tool_choice="none", max_tokens=8)
    assert r.choices[0].message.tool_calls is None and r.choices[0].finish_reason in ("stop", "length")
