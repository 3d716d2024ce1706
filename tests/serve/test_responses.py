"""OpenAI's Responses API over the real server, driven by the official openai client.

The fixture is a random-weight Qwen2 with Qwen2.5's chat template and a 1024-token context (its
tool prompt is ~400 tokens). Its answers are gibberish: the tests check that they equal what the
library gives for the same conversation, and that streamed equals whole, never a wording. The tests of
earlier turns' reasoning use a second server: the same model scripted to write a ``<think>`` block, under a
template that writes each assistant turn's reasoning back, its rendered prompts kept.
"""

from __future__ import annotations

import json
import logging
import time

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")

from inference4py import OnnxTextGenerator  # noqa: E402
from inference4py.errors import ConfigurationError  # noqa: E402
from inference4py.serve import ServerSettings, create_app, load_models  # noqa: E402
from inference4py.serve.response_output import TurnOutput  # noqa: E402
from inference4py.serve.response_store import ResponseStore, StoredResponse  # noqa: E402
from inference4py.tasks.turn import CallArguments, CallStart, TextDelta  # noqa: E402
from tests.conftest import long_context_copy, scripted  # noqa: E402
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
    {"type": "function", "name": "get_weather", "description": "The weather in a city.", "parameters": WEATHER},
    {"type": "function", "name": "get_time", "parameters": TIME},
]
SCHEMA = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "minimum": 0, "maximum": 99}},
    "required": ["ok", "n"],
    "additionalProperties": False,
}
JSON_FORMAT = {"format": {"type": "json_schema", "name": "thing", "schema": SCHEMA, "strict": True}}
ASK = "What is the weather in Paris?"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return long_context_copy(tmp_path_factory.mktemp("responses"))


@pytest.fixture(scope="module")
def server(folder):
    with running(create_app(load_models([str(folder)]))) as url:
        yield url


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server}/v1", api_key="none", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def qwen(folder):
    return OnnxTextGenerator.builder().model_path(folder).build()


def _without_ids(items) -> list[dict]:
    """Output items as dicts, without the ids each request draws anew."""
    out = []
    for item in items:
        d = item.model_dump(exclude_none=True)
        for key in ("id", "call_id", "parsed_arguments"):
            d.pop(key, None)
        for part in d.get("content", []):
            part.pop("parsed", None)
        out.append(d)
    return out


def _counts(usage) -> tuple[int, int, int]:
    """Token counts (the cached part of the prompt differs once the prefix cache holds it)."""
    return usage.input_tokens, usage.output_tokens, usage.total_tokens


def _events(client, **kwargs) -> list:
    return list(client.responses.create(stream=True, **kwargs))


# ------------------------------------------------------------------------------- text
def test_text_equals_the_library(client, qwen):
    r = client.responses.create(
        model="qwen2", instructions="Be brief.", input="Hi there", max_output_tokens=12, temperature=0
    )
    want = qwen.generate(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}],
        max_new_tokens=12,
        temperature=0,
    )
    assert r.object == "response" and r.id.startswith("resp_") and r.model == "qwen2"
    assert r.output_text == want.text
    [message] = r.output
    assert message.type == "message" and message.role == "assistant" and message.id.startswith("msg_")
    assert [(c.type, c.text) for c in message.content] == [("output_text", want.text)]
    assert r.status == ("incomplete" if want.finish_reason == "length" else "completed")
    assert r.usage.input_tokens == want.prompt_tokens
    assert r.usage.output_tokens == want.generated_tokens
    assert r.usage.total_tokens == want.prompt_tokens + want.generated_tokens
    assert r.usage.output_tokens_details.reasoning_tokens == 0
    assert r.instructions == "Be brief." and r.max_output_tokens == 12 and r.temperature == 0
    assert r.tools == [] and r.tool_choice == "auto" and r.error is None


def test_message_items_read_as_the_same_conversation(client):
    """Items with text parts and a developer message are the string input with instructions."""
    plain = client.responses.create(
        model="qwen2", instructions="Be brief.", input="Hi there", max_output_tokens=8, temperature=0
    )
    items = [
        {"role": "developer", "content": "Be brief."},
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "Hi "}, {"type": "input_text", "text": "there"}],
        },
    ]
    r = client.responses.create(model="qwen2", input=items, max_output_tokens=8, temperature=0)
    assert r.output_text == plain.output_text
    assert r.usage.input_tokens == plain.usage.input_tokens


def test_streamed_events_build_the_whole_response(client):
    kwargs = dict(model="qwen2", input="Tell me something", max_output_tokens=16, temperature=0)
    whole = client.responses.create(**kwargs)
    events = _events(client, **kwargs)
    kinds = [e.type for e in events]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.incomplete" if whole.status == "incomplete" else "response.completed",
    ]
    assert set(kinds[4:-4]) <= {"response.output_text.delta"}
    assert events[0].response.status == "in_progress" and events[0].response.output == []
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(deltas) == whole.output_text
    assert events[-4].text == whole.output_text
    final = events[-1].response
    assert _without_ids(final.output) == _without_ids(whole.output)
    assert _counts(final.usage) == _counts(whole.usage) and final.status == whole.status
    ids = {e.item_id for e in events if hasattr(e, "item_id")}
    assert ids == {final.output[0].id}


def test_stream_helper_gives_the_whole_response(client):
    """A JSON-schema answer ends on its own (completed), so the client's helper returns its final response."""
    kwargs = dict(model="qwen2", input="Give me a thing", text=JSON_FORMAT, max_output_tokens=60, temperature=0)
    whole = client.responses.create(**kwargs)
    assert whole.status == "completed"
    jsonschema.validate(json.loads(whole.output_text), SCHEMA)
    assert whole.text.format.type == "json_schema"
    with client.responses.stream(**kwargs) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text == whole.output_text
    assert _without_ids(final.output) == _without_ids(whole.output)
    assert _counts(final.usage) == _counts(whole.usage)


def test_parse_with_a_pydantic_format(client):
    from pydantic import BaseModel

    class Thing(BaseModel):
        ok: bool
        n: int

    r = client.responses.parse(
        model="qwen2", input="Give me a thing", text_format=Thing, max_output_tokens=60, temperature=0
    )
    assert r.status == "completed" and isinstance(r.output_parsed, Thing)


def test_json_object_format(client):
    r = client.responses.create(
        model="qwen2",
        input="JSON please",
        text={"format": {"type": "json_object"}},
        max_output_tokens=40,
        temperature=0,
    )
    if r.status == "completed":
        assert isinstance(json.loads(r.output_text), dict)
    else:
        assert r.output_text.lstrip().startswith("{")


def test_max_output_tokens_cut_is_incomplete(client):
    r = client.responses.create(model="qwen2", input="Tell me a long story", max_output_tokens=3, temperature=0)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 3 and r.output[0].status == "incomplete"
    events = _events(client, model="qwen2", input="Tell me a long story", max_output_tokens=3, temperature=0)
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.incomplete_details.reason == "max_output_tokens"
    assert events[-1].response.output_text == r.output_text


# ------------------------------------------------------------------------------- tools
def _call(response):
    calls = [o for o in response.output if o.type == "function_call"]
    assert len(calls) == 1, response.output
    return calls[0]


@pytest.mark.parametrize("choice", ["required", {"type": "function", "name": "get_time"}])
def test_forced_call_is_one_valid_function_call(client, choice):
    kwargs = dict(
        model="qwen2",
        input=ASK,
        tools=TOOLS,
        tool_choice=choice,
        parallel_tool_calls=False,
        max_output_tokens=80,
        temperature=0,
    )
    whole = client.responses.create(**kwargs)
    call = _call(whole)
    assert whole.status == "completed" and call.status == "completed"
    assert call.id.startswith("fc_") and call.call_id
    if isinstance(choice, dict):
        assert call.name == "get_time"
    schema = {t["name"]: t["parameters"] for t in TOOLS}[call.name]
    jsonschema.validate(json.loads(call.arguments), schema)
    assert whole.output_text == ""  # no message item: the turn is the call
    echoed = whole.tool_choice if isinstance(whole.tool_choice, str) else whole.tool_choice.model_dump()
    assert whole.parallel_tool_calls is False and echoed == choice

    with client.responses.stream(**kwargs) as stream:
        pieces = [e.delta for e in stream if e.type == "response.function_call_arguments.delta"]
        final = stream.get_final_response()
    assert _without_ids(final.output) == _without_ids(whole.output)
    assert "".join(pieces) == _call(final).arguments == call.arguments


@pytest.mark.parametrize("choice,parallel", [("required", True), ("auto", True), ("auto", False)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sampled_turns_stream_as_they_answer(client, choice, parallel, seed):
    """Text, calls or both, sampled with a seed: the streamed response is the whole one."""
    kwargs = dict(
        model="qwen2",
        input=ASK,
        tools=TOOLS,
        tool_choice=choice,
        parallel_tool_calls=parallel,
        max_output_tokens=60,
        temperature=1.0,
        extra_body={"seed": seed},
    )
    whole = client.responses.create(**kwargs)
    events = _events(client, **kwargs)
    final = events[-1].response
    assert _without_ids(final.output) == _without_ids(whole.output)
    assert final.status == whole.status
    added = [e.output_index for e in events if e.type == "response.output_item.added"]
    done = [e.output_index for e in events if e.type == "response.output_item.done"]
    assert added == list(range(len(final.output))) and sorted(done) == added
    for item in whole.output:
        if item.type == "function_call" and item.status == "completed":
            schema = {t["name"]: t["parameters"] for t in TOOLS}[item.name]
            jsonschema.validate(json.loads(item.arguments), schema)
    if choice == "required" and whole.status == "completed":
        assert any(item.type == "function_call" for item in whole.output)


def test_streamed_call_events_in_order(client):
    events = _events(
        client,
        model="qwen2",
        input=ASK,
        tools=TOOLS,
        tool_choice="required",
        parallel_tool_calls=False,
        max_output_tokens=80,
        temperature=0,
    )
    kinds = [e.type for e in events]
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert kinds[-3:] == [
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert set(kinds[3:-3]) == {"response.function_call_arguments.delta"}
    added, done = events[2].item, events[-2].item
    assert added.type == "function_call" and added.arguments == "" and added.status == "in_progress"
    assert (added.id, added.call_id, added.name) == (done.id, done.call_id, done.name)
    assert done.status == "completed" and events[-3].arguments == done.arguments


def test_function_output_continues_the_conversation(client, qwen):
    first = client.responses.create(
        model="qwen2",
        input=ASK,
        tools=TOOLS,
        tool_choice={"type": "function", "name": "get_weather"},
        parallel_tool_calls=False,
        max_output_tokens=80,
        temperature=0,
    )
    call = _call(first)
    result = {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 21 C"}
    chained = client.responses.create(
        model="qwen2",
        previous_response_id=first.id,
        input=[result],
        tools=TOOLS,
        max_output_tokens=10,
        temperature=0,
    )
    call_item = {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments}
    whole = client.responses.create(
        model="qwen2",
        input=[{"role": "user", "content": ASK}, call_item, result],
        tools=TOOLS,
        store=False,
        max_output_tokens=10,
        temperature=0,
    )
    assert chained.previous_response_id == first.id
    assert chained.usage.input_tokens == whole.usage.input_tokens > first.usage.input_tokens
    assert _without_ids(chained.output) == _without_ids(whole.output)
    # the library, given the same conversation in chat's form, writes the same answer
    chat_call = {"id": call.call_id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
    conversation = [
        {"role": "user", "content": ASK},
        {"role": "assistant", "content": "", "tool_calls": [chat_call]},
        {"role": "tool", "tool_call_id": call.call_id, "content": "Sunny, 21 C"},
    ]
    chat_tools = [{"type": "function", "function": {k: v for k, v in t.items() if k != "type"}} for t in TOOLS]
    want = qwen.generate(conversation, tools=chat_tools, max_new_tokens=10, temperature=0)
    assert whole.usage.input_tokens == want.prompt_tokens
    assert whole.usage.output_tokens == want.generated_tokens
    assert [(c.name, json.loads(c.arguments)) for c in whole.output if c.type == "function_call"] == [
        (c.name, c.arguments) for c in want.tool_calls or ()
    ]
    assert whole.output_text == want.text


def test_tool_choice_none_answers_in_text(client):
    r = client.responses.create(
        model="qwen2", input=ASK, tools=TOOLS, tool_choice="none", max_output_tokens=8, temperature=0
    )
    assert [o.type for o in r.output] == ["message"]


# ------------------------------------------------------------------------------- earlier turns' reasoning
# A reasoning model's template that writes each assistant turn's reasoning back (as Qwen3's does for
# the turns after the last user message, here for all), and a processor that scripts a <think> block
# and keeps each request's rendered prompt: its ids at the first step
REASONING_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m.reasoning_content %}<think>{{ m.reasoning_content }}</think>\n{% endif %}{{ m['content'] }}"
    "{% for c in m.tool_calls or [] %}<tool_call>{{ c.function.name }}</tool_call>{% endfor %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
THOUGHT = "\nThe user asks about Paris.\n"
SCRIPT = f"<think>{THOUGHT}</think>\n\nParis is in France."


@pytest.fixture(scope="module")
def thinker(tmp_path_factory):
    """The client of a server of a reasoning model, and the prompt of its last request (``_prompt``)."""
    import numpy as np

    folder = long_context_copy(tmp_path_factory.mktemp("reasoning"))
    (folder / "chat_template.jinja").write_text(REASONING_TEMPLATE)
    tokenizer = OnnxTextGenerator.builder().model_path(folder).build().tokenizer
    script = scripted(tokenizer, SCRIPT)
    prompts: list[str] = []  # cleared before a request: its first step's ids are its prompt

    def recording(input_ids, scores):
        if not prompts:
            prompts.append(tokenizer.decode([int(i) for i in np.asarray(input_ids)[0]], skip_special_tokens=False))
        return script(input_ids, scores)

    model = OnnxTextGenerator.builder().model_path(folder).logits_processor(recording).build()
    with running(create_app({"thinker": model})) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=120)
        yield client, prompts


def _prompt(thinker, **kwargs) -> str:
    """The prompt a Responses request rendered."""
    client, prompts = thinker
    prompts.clear()
    client.responses.create(model="thinker", max_output_tokens=40, **kwargs)
    return prompts[0]


def _chat_prompt(thinker, messages) -> str:
    client, prompts = thinker
    prompts.clear()
    client.chat.completions.create(model="thinker", messages=messages, max_tokens=40)
    return prompts[0]


def test_a_reasoning_item_is_its_turns_reasoning(thinker):
    """Reasoning items reach the template as the reasoning_content of the assistant turn that follows
    them (its message, or its calls), as chat completions' reasoning_content does."""
    call = {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'}
    items = [
        {"role": "user", "content": "The weather in Paris?"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "Need it."}]},
        call,
        {"type": "function_call_output", "call_id": "call_1", "output": "Sunny"},
        {
            "type": "reasoning",
            "id": "rs_2",
            "summary": [{"type": "summary_text", "text": "It is"}, {"type": "summary_text", "text": "sunny."}],
        },
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Sunny."}]},
        {"role": "user", "content": "Thanks"},
    ]
    prompt = _prompt(thinker, input=items)
    assert "<|im_start|>assistant\n<think>Need it.</think>\n<tool_call>get_weather</tool_call><|im_end|>" in prompt
    assert "<|im_start|>assistant\n<think>It is\n\nsunny.</think>\nSunny.<|im_end|>" in prompt
    chat_call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": call["arguments"]},
    }
    chat = [
        {"role": "user", "content": "The weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [chat_call], "reasoning_content": "Need it."},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"},
        {"role": "assistant", "content": "Sunny.", "reasoning_content": "It is\n\nsunny."},
        {"role": "user", "content": "Thanks"},
    ]
    assert prompt == _chat_prompt(thinker, chat)
    # content is preferred to a summary; reasoning after the turn's message is still that turn's
    both = {
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "Short."}],
        "content": [{"type": "reasoning_text", "text": "Long "}, {"type": "reasoning_text", "text": "form."}],
    }
    after = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
        both,
        {"role": "user", "content": "Bye"},
    ]
    assert "<|im_start|>assistant\n<think>Long form.</think>\nHello.<|im_end|>" in _prompt(thinker, input=after)
    # a turn of reasoning only (cut while it reasoned) has no message to carry it: left out
    alone = [{"role": "user", "content": "Hi"}, both, {"role": "user", "content": "Go on"}]
    assert "form." not in _prompt(thinker, input=alone)
    # OpenAI's own reasoning items (an empty summary, encrypted content) carry nothing readable: accepted,
    # the turn as without them
    opaque = {"type": "reasoning", "id": "rs_9", "summary": [], "encrypted_content": "gAAAA"}
    assert _prompt(thinker, input=[*after[:2], opaque, *after[3:]]) == _prompt(thinker, input=[*after[:2], *after[3:]])


def test_output_sent_back_keeps_its_reasoning(thinker):
    """The openai client's multi-turn pattern (the output appended to the next input), whole and streamed,
    and previous_response_id: the second prompt holds the first turn's reasoning."""
    client, _ = thinker
    first = client.responses.create(model="thinker", input="Where is Paris?", max_output_tokens=40)
    assert [item.type for item in first.output] == ["reasoning", "message"]
    assert first.output[0].content[0].text == THOUGHT and first.output_text == "Paris is in France."
    turn = f"<|im_start|>assistant\n<think>{THOUGHT}</think>\nParis is in France.<|im_end|>"
    context = [{"role": "user", "content": "Where is Paris?"}, *first.output, {"role": "user", "content": "And Lyon?"}]
    sent_back = _prompt(thinker, input=context)
    assert turn in sent_back
    with client.responses.stream(model="thinker", input="Where is Paris?", max_output_tokens=40) as stream:
        streamed = stream.get_final_response()
    context = [
        {"role": "user", "content": "Where is Paris?"},
        *streamed.output,
        {"role": "user", "content": "And Lyon?"},
    ]
    assert _prompt(thinker, input=context) == sent_back
    assert _prompt(thinker, previous_response_id=first.id, input="And Lyon?") == sent_back
    chained = client.responses.create(model="thinker", previous_response_id=first.id, input="And Lyon?")
    assert _prompt(thinker, previous_response_id=chained.id, input="And Nice?").count(turn) == 2


# ------------------------------------------------------------------------------- the store
def test_previous_response_continues_the_conversation(client, qwen):
    first = client.responses.create(
        model="qwen2", instructions="Be brief.", input="Hi there", max_output_tokens=8, temperature=0
    )
    second = client.responses.create(
        model="qwen2", previous_response_id=first.id, input="And then?", max_output_tokens=8, temperature=0
    )
    # instructions belong to one request (OpenAI's rule): the second turn's conversation has none
    conversation = [
        {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": first.output_text},
        {"role": "user", "content": "And then?"},
    ]
    want = qwen.generate(conversation, max_new_tokens=8, temperature=0)
    assert second.output_text == want.text
    assert second.usage.input_tokens == want.prompt_tokens


def test_stored_responses_are_retrieved_and_deleted(client):
    r = client.responses.create(model="qwen2", input="Hi", max_output_tokens=4, temperature=0, metadata={"k": "v"})
    got = client.responses.retrieve(r.id)
    assert got.model_dump() == r.model_dump() and got.metadata == {"k": "v"}
    client.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError) as info:
        client.responses.retrieve(r.id)
    assert r.id in info.value.body["message"]
    with pytest.raises(openai.NotFoundError) as info:
        client.responses.create(model="qwen2", input="Again", previous_response_id=r.id, max_output_tokens=2)
    assert info.value.body["param"] == "previous_response_id"
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(r.id)


def test_unstored_response_cannot_be_continued(client):
    r = client.responses.create(model="qwen2", input="Hi", store=False, max_output_tokens=2, temperature=0)
    with pytest.raises(openai.NotFoundError) as info:
        client.responses.create(model="qwen2", input="Again", previous_response_id=r.id, max_output_tokens=2)
    assert info.value.status_code == 404 and info.value.body["param"] == "previous_response_id"
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)


def test_streamed_response_is_stored(client):
    events = _events(client, model="qwen2", input="Hi", max_output_tokens=4, temperature=0)
    final = events[-1].response
    assert client.responses.retrieve(final.id).output_text == final.output_text


def test_store_keeps_the_most_recent():
    store = ResponseStore(2)
    for name in ("a", "b", "c"):
        store.put(name, StoredResponse({"id": name}, ()))
    assert store.get("a") is None and len(store) == 2
    store.get("b")  # b becomes the most recent: c goes next
    store.put("d", StoredResponse({"id": "d"}, ()))
    assert store.get("c") is None and store.get("b") is not None
    none = ResponseStore(0)
    none.put("x", StoredResponse({"id": "x"}, ()))
    assert len(none) == 0
    with pytest.raises(ConfigurationError):
        ServerSettings(responses_store=-1)


def test_store_size_is_a_setting(folder):
    app = create_app(load_models([str(folder)]), ServerSettings(responses_store=1))
    with running(app) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=120)
        first = client.responses.create(model="qwen2", input="Hi", max_output_tokens=2)
        second = client.responses.create(model="qwen2", input="Hi", max_output_tokens=2)
        assert client.responses.retrieve(second.id).id == second.id
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(first.id)


# ------------------------------------------------------------------------------- turn output
def test_a_call_cut_by_the_budget_ends_incomplete():
    output = TurnOutput()
    events = output.feed([TextDelta("Let me look."), CallStart(0, "call_1", "get_weather"), CallArguments(0, '{"ci')])
    events += output.close(cut=True)
    message, call = output.items
    assert message["status"] == "completed" and message["content"][0]["text"] == "Let me look."
    assert call["status"] == "incomplete" and call["arguments"] == '{"ci' and call["call_id"] == "call_1"
    assert [e["type"] for e in events].count("response.output_item.done") == 2


def test_an_empty_turn_is_an_empty_message():
    output = TurnOutput()
    events = output.close(cut=False)
    [message] = output.items
    assert message["type"] == "message" and message["content"][0]["text"] == ""
    assert [e["type"] for e in events][0] == "response.output_item.added"


# ------------------------------------------------------------------------------- errors
ORPHAN = [{"role": "user", "content": "Hi"}, {"type": "function_call_output", "call_id": "call_x", "output": "1"}]
ASKED = [{"role": "user", "content": "Hi"}]
BAD_SCHEMA = {
    "format": {"type": "json_schema", "name": "x", "schema": {"type": "object", "properties": {"a": {"type": "nope"}}}}
}


@pytest.mark.parametrize(
    "body,status,param",
    [
        ({"input": "Hi", "previous_response_id": "resp_unknown"}, 404, "previous_response_id"),
        ({"input": [{"type": "computer_call_output", "call_id": "c"}]}, 400, "input[0].type"),
        ({"input": [{"content": "no role"}]}, 400, "input[0].type"),
        ({"input": ORPHAN}, 400, "input[1].call_id"),
        (
            {"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{no"}]},
            400,
            "input[0].arguments",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            400,
            "input[0].content[0].type",
        ),
        ({"input": "Hi", "tools": [{"type": "web_search"}]}, 400, "tools[0].type"),
        ({"input": "Hi", "tools": TOOLS, "tool_choice": {"type": "function", "name": "nope"}}, 400, "tool_choice"),
        ({"input": "Hi", "tool_choice": "required"}, 400, "tool_choice"),
        ({"input": "Hi", "text": BAD_SCHEMA}, 400, None),
        ({"input": "Hi", "text": {"format": {"type": "json_schema", "name": "x"}}}, 400, "text.format.schema"),
        ({"input": "Hi", "background": True}, 400, "background"),
        ({"input": "Hi", "conversation": "conv_1"}, 400, "conversation"),
        ({"input": []}, 400, "input"),
        ({"input": "Hi", "model": "nope"}, 404, "model"),
        ({"input": "Hi", "stream": True, "previous_response_id": "resp_unknown"}, 404, "previous_response_id"),
        ({"input": [{"type": "reasoning", "summary": "I think"}, *ASKED]}, 400, "input[0].summary"),
        (
            {"input": [{"type": "reasoning", "summary": [{"type": "summary_text", "text": 1}]}]},
            400,
            "input[0].summary[0].text",
        ),
        (
            {
                "input": [
                    *ASKED,
                    {"type": "reasoning", "summary": [], "content": [{"type": "output_text", "text": "x"}]},
                ]
            },
            400,
            "input[1].content[0].type",
        ),
        ({"input": [{"type": "reasoning", "summary": [], "content": "x"}, *ASKED]}, 400, "input[0].content"),
    ],
)
def test_bad_requests_get_openai_errors(server, client, body, status, param):
    got, _, payload = request(server, "/v1/responses", json.dumps({"model": "qwen2", **body}))
    assert got == status, payload
    error = payload["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert error["type"] == ("not_found_error" if status == 404 else "invalid_request_error")
    assert error["param"] == param
    assert client.responses.create(model="qwen2", input="Still there?", max_output_tokens=2).status == "incomplete"


def test_service_fields_are_ignored_with_a_warning(client, caplog):
    with caplog.at_level(logging.WARNING, logger="inference4py.serve"):
        r = client.responses.create(
            model="qwen2",
            input="Hi",
            max_output_tokens=2,
            include=["reasoning.encrypted_content"],
            reasoning={"effort": "low"},
            truncation="auto",
            service_tier="auto",
            user="someone",
            background=False,
        )
    assert r.user == "someone" and r.background is False
    assert any("include, service_tier, truncation" in m for m in caplog.messages)


def test_an_unknown_field_name_is_no_bad_value(client, caplog):
    with caplog.at_level(logging.WARNING, logger="inference4py.serve"):
        r = client.responses.create(model="qwen2", input="Hi", max_output_tokens=2, extra_body={"frobnicate": 1})
    assert r.status == "incomplete" and any("frobnicate" in m for m in caplog.messages)


# ------------------------------------------------------------------------------- while it runs
def test_a_dropped_stream_stops_and_a_failure_is_reported(folder):
    import http.client

    from tests.serve.support import metrics

    def slow(ids, scores):  # 20 ms a token: the client can leave mid-stream
        time.sleep(0.02)
        return scores

    calls = []

    def broken(ids, scores):
        calls.append(1)
        if len(calls) > 3:
            raise RuntimeError("the processor broke")
        return scores

    models = {
        "slow": OnnxTextGenerator.builder().model_path(folder).logits_processor(slow).build(),
        "broken": OnnxTextGenerator.builder().model_path(folder).logits_processor(broken).build(),
    }
    with running(create_app(models)) as base:
        port = int(base.rsplit(":", 1)[1])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        body = {"model": "slow", "input": "Hi", "max_output_tokens": 100, "stream": True}
        conn.request("POST", "/v1/responses", json.dumps(body), {"Content-Type": "application/json"})
        response = conn.getresponse()
        assert response.status == 200 and response.getheader("content-type").startswith("text/event-stream")
        assert response.read(24) == b"event: response.created\n"  # the request is running
        response.close()  # the client goes away mid-stream
        conn.close()
        cancelled = 'inference4py_requests_cancelled_total{model="slow"}'
        running_now = 'inference4py_requests_running{model="slow"}'
        deadline = time.time() + 20
        m = metrics(base)
        while (m[cancelled] != 1 or m[running_now]) and time.time() < deadline:
            time.sleep(0.1)
            m = metrics(base)
        assert m[cancelled] == 1 and m[running_now] == 0
        assert m['inference4py_generation_tokens_total{model="slow"}'] < 100  # stopped early

        client = openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0, timeout=60)
        events = list(client.responses.create(model="broken", input="Hi", max_output_tokens=20, stream=True))
        assert events[-1].type == "response.failed"
        failed = events[-1].response
        assert failed.status == "failed" and failed.error.code == "server_error"
        assert "the processor broke" in failed.error.message
        calls.clear()  # whole, it is a 500 (on a connection of its own: the server closes it after a 500)
        status, _, payload = request(base, "/v1/responses", json.dumps({**body, "model": "broken", "stream": False}))
        assert status == 500 and payload["error"]["type"] == "server_error"
        assert client.responses.create(model="slow", input="Hi", max_output_tokens=2).status == "incomplete"
