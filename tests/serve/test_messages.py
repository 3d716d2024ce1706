"""Anthropic's Messages API over the real server, with the official anthropic client.

The fixture is a random-weight Qwen2 with Qwen2.5's real chat template (Hermes ``<tool_call>`` format)
and a 1024-token context (its tool prompt is ~400 tokens). Its text is gibberish: the tests check
equalities (with the library's own answer, streamed with non-streamed) and properties, never outputs.
"""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
anthropic = pytest.importorskip("anthropic")
jsonschema = pytest.importorskip("jsonschema")

from inference4py import OnnxTextGenerator  # noqa: E402
from inference4py.generation.result import GenerationChunk  # noqa: E402
from inference4py.serve import ServerSettings, create_app, load_models  # noqa: E402
from inference4py.serve.messages import _message_events  # noqa: E402
from inference4py.tasks.turn import TurnSplitter  # noqa: E402
from tests.conftest import long_context_copy  # noqa: E402
from tests.serve.support import request, running  # noqa: E402

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 12}},
    "required": ["city"],
    "additionalProperties": False,
}
TIME = {
    "type": "object",
    "properties": {"timezone": {"type": "string", "maxLength": 12}},
    "additionalProperties": False,
}
TOOLS = [
    {"name": "get_weather", "description": "The weather in a city.", "input_schema": WEATHER},
    {"name": "get_time", "input_schema": TIME},
]
OPENAI_TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_weather", "description": "The weather in a city.", "parameters": WEATHER},
    },
    {"type": "function", "function": {"name": "get_time", "parameters": TIME}},
]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
GREEDY = {"temperature": 0}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return long_context_copy(tmp_path_factory.mktemp("messages"))


@pytest.fixture(scope="module")
def url(folder):
    with running(create_app(load_models([str(folder)]))) as base:
        yield base


@pytest.fixture(scope="module")
def client(url):
    return anthropic.Anthropic(base_url=url, api_key="x", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def generator(folder):
    with OnnxTextGenerator.builder().model_path(folder).build() as gen:
        yield gen


def _blocks(message):
    """Content blocks as plain data, tool ids left out (streamed and non-streamed calls draw their own)."""
    out = []
    for block in message.content:
        data = block.model_dump(exclude_none=True)
        data.pop("id", None)
        data.pop("parsed_output", None)
        out.append(data)
    return out


# ------------------------------------------------------------------------------- text
def test_text_round_trip_equals_the_library_greedy_answer(client, generator):
    message = client.messages.create(
        model="qwen2",
        max_tokens=24,
        system=[{"type": "text", "text": "You are "}, {"type": "text", "text": "brief."}],
        messages=[
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": [{"type": "text", "text": "Hello."}]},
            {"role": "user", "content": [{"type": "text", "text": "Name a "}, {"type": "text", "text": "colour."}]},
        ],
        extra_body=GREEDY,
    )
    expected = generator.generate(
        [
            {"role": "system", "content": "You are brief."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": "Name a colour."},
        ],
        max_new_tokens=24,
        temperature=0,
    )
    assert message.type == "message" and message.role == "assistant" and message.model == "qwen2"
    assert message.id.startswith("msg_")
    assert [b.type for b in message.content] == (["text"] if expected.text else [])
    assert "".join(b.text for b in message.content) == expected.text
    reasons = {"eos": "end_turn", "length": "max_tokens"}
    assert message.stop_reason == reasons[expected.finish_reason] and message.stop_sequence is None
    assert message.usage.input_tokens == expected.prompt_tokens
    assert message.usage.output_tokens == expected.generated_tokens


def test_fields_the_server_does_not_act_on_are_accepted_and_logged(client, caplog):
    with caplog.at_level(logging.WARNING, logger="inference4py.serve"):
        message = client.messages.create(
            model="qwen2",
            max_tokens=4,
            messages=ASK,
            metadata={"user_id": "u-1"},
            service_tier="auto",
            thinking={"type": "enabled", "budget_tokens": 1024},
            extra_body={**GREEDY, "context_management": {"edits": []}},
        )
    assert message.usage.output_tokens == 4 and message.stop_reason == "max_tokens"
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert "context_management" in logged and "metadata" in logged and "thinking" in logged


# ------------------------------------------------------------------------------- streaming
def _sse_events(url, body):
    """The raw stream as (event name, data) pairs."""
    status, _, text = request(url, "/v1/messages", json.dumps({**body, "stream": True}))
    assert status == 200
    events = []
    for record in text.strip().split("\n\n"):
        name_line, data_line = record.split("\n")
        assert name_line.startswith("event: ") and data_line.startswith("data: ")
        events.append((name_line[len("event: ") :], json.loads(data_line[len("data: ") :])))
    return events


def _check_order(events):
    """message_start, then each block's start, deltas and stop in turn, then message_delta and message_stop."""
    names = [name for name, _ in events if name != "ping"]
    assert all(name == data["type"] for name, data in events)
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    index, open_block = -1, False
    for name, data in events[1:-2]:
        if name == "content_block_start":
            assert not open_block and data["index"] == index + 1
            index, open_block = data["index"], True
        elif name == "content_block_delta":
            assert open_block and data["index"] == index
        elif name == "content_block_stop":
            assert open_block and data["index"] == index
            open_block = False
    assert not open_block


@pytest.mark.parametrize("max_tokens", [1, 30])
def test_streamed_text_equals_non_streamed(client, url, max_tokens):
    kwargs = dict(model="qwen2", max_tokens=max_tokens, messages=ASK, extra_body=GREEDY)
    whole = client.messages.create(**kwargs)
    with client.messages.stream(**kwargs) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "".join(b.text for b in whole.content if b.type == "text")
    assert _blocks(final) == _blocks(whole)
    assert (final.stop_reason, final.stop_sequence) == (whole.stop_reason, whole.stop_sequence)
    assert final.usage.input_tokens == whole.usage.input_tokens
    assert final.usage.output_tokens == whole.usage.output_tokens

    raw = list(client.messages.create(stream=True, **kwargs))
    assert raw[0].type == "message_start" and raw[0].message.usage.input_tokens == whole.usage.input_tokens
    deltas = "".join(e.delta.text for e in raw if e.type == "content_block_delta")
    assert deltas == text
    assert raw[-2].type == "message_delta" and raw[-2].delta.stop_reason == whole.stop_reason
    assert raw[-2].usage.output_tokens == whole.usage.output_tokens and raw[-1].type == "message_stop"

    events = _sse_events(url, {"model": "qwen2", "max_tokens": max_tokens, "messages": ASK, **GREEDY})
    _check_order(events)


class _Replayed:
    """A started request that replays chunks (and then fails, when told to): the stream's side of a ChunkStream."""

    def __init__(self, pieces, splitter, finish="eos", fail=None):
        self.prompt_tokens, self.generated = 3, len(pieces)
        self._pieces, self._splitter, self._finish, self._fail = pieces, splitter, finish, fail

    def splitter(self):
        return self._splitter

    async def __aiter__(self):
        for i, piece in enumerate(self._pieces):
            last = i == len(self._pieces) - 1 and self._fail is None
            yield GenerationChunk(piece, i, self._finish if last else None)
        if self._fail is not None:
            raise self._fail

    async def aclose(self):
        pass


def _replay(stream):
    async def run():
        return [event async for event in _message_events("m", stream)]

    return asyncio.run(run())


def test_reasoning_text_and_calls_stream_as_blocks_the_client_reads():
    from anthropic.lib.streaming._messages import accumulate_event

    pieces = [
        "<thi",
        "nk>hm, ",
        "ok</think>Hel",
        "lo ",
        '<tool_call>\n{"name": "f", "argu',
        'ments": {"x": 1, ',
        '"y": "z"}}\n</tool_call>',
    ]
    splitter = TurnSplitter("hermes", reasoning=("<think>", "</think>"))
    events = _replay(_Replayed(pieces, splitter))
    _check_order(events)
    snapshot, buffers = None, {}
    for _, data in events:
        if data["type"] != "ping":
            snapshot = accumulate_event(event=data, current_snapshot=snapshot, json_bufs=buffers)
    assert [b.type for b in snapshot.content] == ["thinking", "text", "tool_use"]
    assert snapshot.content[0].thinking == "hm, ok" and snapshot.content[1].text == "Hello "
    assert (snapshot.content[2].name, snapshot.content[2].input) == ("f", {"x": 1, "y": "z"})
    assert snapshot.stop_reason == "tool_use" and snapshot.usage.output_tokens == len(pieces)


def test_a_failure_after_the_first_event_ends_the_stream_with_an_error_event():
    events = _replay(_Replayed(["Hel"], TurnSplitter(None), fail=RuntimeError("the model went away")))
    assert [name for name, _ in events] == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "error",
    ]
    assert events[-1][1] == {"type": "error", "error": {"type": "api_error", "message": "the model went away"}}


# ------------------------------------------------------------------------------- tools
@pytest.mark.parametrize(
    "choice",
    [
        {"type": "any", "disable_parallel_tool_use": True},
        {"type": "tool", "name": "get_time", "disable_parallel_tool_use": True},
    ],
)
@pytest.mark.parametrize("seed", [0, 1])
def test_a_required_call_is_one_valid_tool_use_streamed_as_non_streamed(client, url, choice, seed):
    kwargs = dict(
        model="qwen2",
        max_tokens=100,
        messages=ASK,
        tools=TOOLS,
        tool_choice=choice,
        extra_body={"temperature": 1.0, "seed": seed},
    )
    whole = client.messages.create(**kwargs)
    calls = [b for b in whole.content if b.type == "tool_use"]
    assert whole.stop_reason == "tool_use" and len(calls) == 1
    schema = {t["name"]: t["input_schema"] for t in TOOLS}[calls[0].name]
    jsonschema.validate(calls[0].input, schema)
    if choice["type"] == "tool":
        assert calls[0].name == "get_time"

    with client.messages.stream(**kwargs) as stream:
        pieces = [e.partial_json for e in stream if e.type == "input_json"]
        final = stream.get_final_message()
    streamed = [b for b in final.content if b.type == "tool_use"]
    assert [(b.name, b.input) for b in streamed] == [(calls[0].name, calls[0].input)]
    assert json.loads("".join(pieces)) == calls[0].input
    assert final.stop_reason == "tool_use"
    body = {"model": "qwen2", "max_tokens": 100, "messages": ASK, "tools": TOOLS, "tool_choice": choice}
    _check_order(_sse_events(url, {**body, "temperature": 1.0, "seed": seed}))


def test_a_tool_result_fed_back_continues_the_conversation(client, generator):
    first = client.messages.create(
        model="qwen2",
        max_tokens=100,
        messages=ASK,
        tools=TOOLS,
        tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
        extra_body=GREEDY,
    )
    (call,) = [b for b in first.content if b.type == "tool_use"]
    conversation = [
        *ASK,
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": call.id, "content": [{"type": "text", "text": "18 C, sunny"}]},
                {"type": "text", "text": "And tomorrow?"},
            ],
        },
    ]
    second = client.messages.create(model="qwen2", max_tokens=40, messages=conversation, tools=TOOLS, extra_body=GREEDY)
    text = "".join(b.text for b in first.content if b.type == "text")
    expected = generator.generate(
        [
            *ASK,
            {
                "role": "assistant",
                "content": text,
                "tool_calls": [
                    {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.input}}
                ],
            },
            {"role": "tool", "tool_call_id": call.id, "content": "18 C, sunny"},
            {"role": "user", "content": "And tomorrow?"},
        ],
        max_new_tokens=40,
        temperature=0,
        tools=OPENAI_TOOLS,
        tool_choice="auto",
    )
    assert second.usage.input_tokens == expected.prompt_tokens
    assert "".join(b.text for b in second.content if b.type == "text") == expected.text
    assert [(b.name, b.input) for b in second.content if b.type == "tool_use"] == [
        (c.name, c.arguments) for c in expected.tool_calls
    ]
    counted = client.messages.count_tokens(model="qwen2", messages=conversation, tools=TOOLS)
    assert counted.input_tokens == second.usage.input_tokens


def test_output_config_format_gives_json_of_the_schema(client):
    schema = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"],
        "additionalProperties": False,
    }
    message = client.messages.create(
        model="qwen2",
        max_tokens=40,
        messages=[{"role": "user", "content": "Is it ok?"}],
        output_config={"format": {"type": "json_schema", "schema": schema}},
        extra_body=GREEDY,
    )
    assert message.stop_reason == "end_turn"
    jsonschema.validate(json.loads(message.content[0].text), schema)


# ------------------------------------------------------------------------------- stop sequences
def test_stop_sequences_name_the_one_that_stopped(client):
    kwargs = dict(model="qwen2", max_tokens=24, messages=ASK, extra_body=GREEDY)
    full = client.messages.create(**kwargs).content[0].text
    stop = full[5:11]
    assert stop and full.index(stop) == 5
    kwargs["stop_sequences"] = ["never written, surely", stop]
    message = client.messages.create(**kwargs)
    assert message.stop_reason == "stop_sequence" and message.stop_sequence == stop
    assert message.content[0].text == full[:5]
    with client.messages.stream(**kwargs) as stream:
        final = stream.get_final_message()
    assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", stop)
    assert _blocks(final) == _blocks(message)


# ------------------------------------------------------------------------------- count_tokens
@pytest.mark.parametrize("tools", [None, TOOLS])
def test_count_tokens_equals_the_input_tokens_of_the_answer(client, tools):
    extra = {"tools": tools, "tool_choice": {"type": "auto"}} if tools else {}
    kwargs = dict(model="qwen2", system="Be brief.", messages=ASK, **extra)
    counted = client.messages.count_tokens(**kwargs)
    message = client.messages.create(max_tokens=4, extra_body=GREEDY, **kwargs)
    assert counted.input_tokens == message.usage.input_tokens > 0


# ------------------------------------------------------------------------------- errors
def _user(*blocks):
    return [{"role": "user", "content": list(blocks)}]


CALL = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
BAD = [
    ("malformed block", {"messages": _user({"type": "text"})}, "messages.0.content.0.text"),
    ("block not an object", {"messages": _user("Hi")}, "messages.0.content.0"),
    ("unknown block type", {"messages": _user({"type": "video", "url": "x"})}, "'video'"),
    ("empty messages", {"messages": []}, "messages"),
    ("empty content", {"messages": [{"role": "user", "content": ""}]}, "empty"),
    (
        "tool_result without tool_use",
        {"messages": _user({"type": "tool_result", "tool_use_id": "toolu_9", "content": "x"})},
        "toolu_9",
    ),
    (
        "tool_result answering another id",
        {
            "messages": [
                *ASK,
                {"role": "assistant", "content": [CALL]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_2", "content": "x"}]},
            ],
            "tools": TOOLS,
        },
        "toolu_1",
    ),
    ("tool_choice naming no tool", {"tools": TOOLS, "tool_choice": {"type": "tool", "name": "nope"}}, "'nope'"),
    ("tool_choice any without tools", {"tool_choice": {"type": "any"}}, "needs tools"),
    ("server tool", {"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "server tools"),
    (
        "image to a text model",
        {"messages": _user({"type": "image", "source": {"type": "url", "url": "http://x/y.png"}})},
        "text-only",
    ),
    ("last turn from the assistant", {"messages": [*ASK, {"role": "assistant", "content": "It is"}]}, "prefill"),
    ("temperature above 1", {"extra_body": {"temperature": 1.5}}, "temperature"),
    ("system role in messages", {"messages": [{"role": "system", "content": "x"}]}, "role"),
    ("missing max_tokens", {"max_tokens": anthropic.omit}, "max_tokens"),
]


@pytest.mark.parametrize("case,changes,said", BAD, ids=[b[0] for b in BAD])
def test_bad_requests_get_anthropic_errors(client, case, changes, said):
    kwargs = {"model": "qwen2", "max_tokens": 8, "messages": ASK, **changes}
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(**kwargs)
    assert caught.value.status_code == 400
    body = caught.value.body
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert said in body["error"]["message"]
    assert client.messages.create(model="qwen2", max_tokens=2, messages=ASK).usage.output_tokens == 2  # alive


def test_count_tokens_refuses_as_messages_does(client):
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.count_tokens(model="qwen2", messages=_user({"type": "video"}))
    assert caught.value.body["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.NotFoundError):
        client.messages.count_tokens(model="nope", messages=ASK)


def test_an_unknown_model_is_a_not_found_error(client):
    with pytest.raises(anthropic.NotFoundError) as caught:
        client.messages.create(model="claude-nope", max_tokens=8, messages=ASK)
    assert caught.value.status_code == 404
    assert caught.value.body["error"]["type"] == "not_found_error" and "qwen2" in caught.value.body["error"]["message"]


def test_a_wrong_api_key_is_an_authentication_error(folder):
    with running(create_app(load_models([str(folder)]), ServerSettings(api_key="k"))) as base:
        wrong = anthropic.Anthropic(base_url=base, api_key="x", max_retries=0, timeout=60)
        with pytest.raises(anthropic.AuthenticationError) as caught:
            wrong.messages.create(model="qwen2", max_tokens=2, messages=ASK)
        assert caught.value.status_code == 401
        assert caught.value.body["type"] == "error" and caught.value.body["error"]["type"] == "authentication_error"
        right = anthropic.Anthropic(base_url=base, api_key="k", max_retries=0, timeout=60)
        assert right.messages.create(model="qwen2", max_tokens=2, messages=ASK).usage.output_tokens == 2
