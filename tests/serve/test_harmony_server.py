"""gpt-oss's Harmony turns over the server, with the official clients: reasoning, answer and tool calls apart.

A tiny random gpt-oss GGUF model whose vocabulary is laid out as gpt-oss's (tests/harmony.py) writes a
scripted Harmony completion (a random model writes no Harmony by itself), as tests/serve/test_reasoning_server.py
has a random Qwen write a ``<think>`` block. Each API shapes the same split its own way: chat completions'
``reasoning_content`` and ``tool_calls``, Anthropic's ``thinking`` and ``tool_use`` blocks, the Responses
API's ``reasoning`` and ``function_call`` items, streamed and not. The conversation sent back (an earlier
call with its reasoning and its result) renders with the Harmony template.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("gguf")
pytest.importorskip("onnx")
openai = pytest.importorskip("openai")

from inference4py.serve import create_app  # noqa: E402
from tests.harmony import scripted_gpt_oss  # noqa: E402
from tests.serve.support import running  # noqa: E402

THOUGHT = "User asks weather. Need to call tool."
CALL = (
    f"<|channel|>analysis<|message|>{THOUGHT}<|end|>"
    '<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}'
    "<|call|>"
)
ANSWER = (
    "<|channel|>analysis<|message|>The tool said 21 degrees.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>It is 21 °C in Paris.<|return|>"
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    model = scripted_gpt_oss(tmp_path_factory.mktemp("gpt-oss"))

    with running(create_app({"caller": model(CALL), "answerer": model(ANSWER)})) as url:
        yield url


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server}/v1", api_key="none", max_retries=0, timeout=60)


def _streamed(client, **kwargs):
    """A chat stream folded as OpenAI's client code does: content, reasoning, calls by index, finish."""
    content, reasoning, calls, finish = "", "", {}, None
    for event in client.chat.completions.create(stream=True, **kwargs):
        if not event.choices:
            continue
        choice = event.choices[0]
        content += choice.delta.content or ""
        reasoning += (choice.delta.model_extra or {}).get("reasoning_content") or ""
        for piece in choice.delta.tool_calls or []:
            call = calls.setdefault(piece.index, {"id": None, "name": None, "arguments": ""})
            if piece.id:
                call["id"], call["name"] = piece.id, piece.function.name
            call["arguments"] += piece.function.arguments or ""
        finish = choice.finish_reason or finish
    return content, reasoning, [calls[i] for i in sorted(calls)], finish


def test_a_call_with_its_reasoning_streamed_and_not(client):
    r = client.chat.completions.create(model="caller", messages=ASK, tools=TOOLS, max_tokens=100)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    assert choice.message.model_extra["reasoning_content"] == THOUGHT
    (call,) = choice.message.tool_calls
    assert (call.function.name, json.loads(call.function.arguments)) == ("get_weather", {"city": "Paris"})
    content, reasoning, calls, finish = _streamed(client, model="caller", messages=ASK, tools=TOOLS, max_tokens=100)
    assert (content, reasoning, finish) == ("", THOUGHT, "tool_calls")
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [("get_weather", {"city": "Paris"})]


def test_an_answer_with_its_reasoning_streamed_and_not(client):
    r = client.chat.completions.create(model="answerer", messages=ASK, max_tokens=100)
    message = r.choices[0].message
    assert (message.content, message.model_extra["reasoning_content"]) == (
        "It is 21 °C in Paris.",
        "The tool said 21 degrees.",
    )
    assert r.choices[0].finish_reason == "stop"
    streamed = _streamed(client, model="answerer", messages=ASK, max_tokens=100)
    assert streamed == ("It is 21 °C in Paris.", "The tool said 21 degrees.", [], "stop")
    inline = client.chat.completions.create(
        model="answerer", messages=ASK, max_tokens=100, extra_body={"reasoning_format": "none"}
    )
    text = inline.choices[0].message.content
    assert text == "<|channel|>analysis<|message|>The tool said 21 degrees.<|end|>It is 21 °C in Paris."


def test_a_call_cut_by_the_budget_says_length(client):
    whole = client.chat.completions.create(model="caller", messages=ASK, tools=TOOLS, max_tokens=100)
    budget = whole.usage.completion_tokens - 3  # cut inside the call's arguments
    r = client.chat.completions.create(model="caller", messages=ASK, tools=TOOLS, max_tokens=budget)
    choice = r.choices[0]
    assert choice.finish_reason == "length" and not choice.message.tool_calls
    assert "<|" not in (choice.message.content or "") and choice.message.model_extra["reasoning_content"] == THOUGHT
    content, reasoning, calls, finish = _streamed(client, model="caller", messages=ASK, tools=TOOLS, max_tokens=budget)
    assert (content, reasoning, finish) == ("", THOUGHT, "length")
    assert [c["name"] for c in calls] == ["get_weather"]  # begun, its arguments cut: no complete JSON
    with pytest.raises(ValueError):
        json.loads(calls[0]["arguments"])


def test_messages_give_thinking_and_tool_use_blocks(server):
    anthropic = pytest.importorskip("anthropic")
    claude = anthropic.Anthropic(base_url=server, api_key="none", max_retries=0)
    tools = [{"name": "get_weather", "input_schema": TOOLS[0]["function"]["parameters"]}]
    m = claude.messages.create(model="caller", max_tokens=100, messages=ASK, tools=tools)
    assert [b.type for b in m.content] == ["thinking", "tool_use"] and m.stop_reason == "tool_use"
    assert m.content[0].thinking == THOUGHT and (m.content[1].name, m.content[1].input) == (
        "get_weather",
        {"city": "Paris"},
    )
    with claude.messages.stream(model="caller", max_tokens=100, messages=ASK, tools=tools) as stream:
        final = stream.get_final_message()
    assert [(b.type, getattr(b, "thinking", None), getattr(b, "input", None)) for b in final.content] == [
        ("thinking", THOUGHT, None),
        ("tool_use", None, {"city": "Paris"}),
    ]


def test_responses_give_reasoning_and_function_call_items(client):
    r = client.responses.create(model="caller", input=ASK, tools=[{"type": "function", **TOOLS[0]["function"]}])
    assert [item.type for item in r.output] == ["reasoning", "function_call"]
    assert r.output[0].content[0].text == THOUGHT
    assert (r.output[1].name, json.loads(r.output[1].arguments)) == ("get_weather", {"city": "Paris"})
    answer = client.responses.create(model="answerer", input=ASK, max_output_tokens=100)
    assert [item.type for item in answer.output] == ["reasoning", "message"]
    assert answer.output_text == "It is 21 °C in Paris."
    with client.responses.stream(model="answerer", input=ASK, max_output_tokens=100) as stream:
        final = stream.get_final_response()
    assert (
        final.output_text == "It is 21 °C in Paris." and final.output[0].content[0].text == "The tool said 21 degrees."
    )


def test_the_conversation_sent_back_renders(client):
    """The call, its reasoning and its result sent back: the template writes the reasoning on the analysis
    channel (as ``thinking``) and the result as the function's message; reasoning_effort reaches it."""
    first = client.chat.completions.create(model="caller", messages=ASK, tools=TOOLS, max_tokens=100).choices[0]
    call = first.message.tool_calls[0]
    turn = {
        "role": "assistant",
        "content": None,
        "tool_calls": [call.model_dump()],
        "reasoning_content": first.message.model_extra["reasoning_content"],
    }
    result = {"role": "tool", "tool_call_id": call.id, "content": '{"temperature": 21}'}
    conversation = [*ASK, turn, result]

    def prompt_tokens(messages, **kwargs) -> int:
        r = client.chat.completions.create(model="answerer", messages=messages, tools=TOOLS, max_tokens=100, **kwargs)
        assert r.choices[0].message.content == "It is 21 °C in Paris."
        return r.usage.prompt_tokens

    without_reasoning = [*ASK, {k: v for k, v in turn.items() if k != "reasoning_content"}, result]
    assert prompt_tokens(conversation) > prompt_tokens(without_reasoning) > prompt_tokens(ASK)
    # the template reads reasoning_effort ("Reasoning: high" for "Reasoning: medium": one token more or less)
    assert prompt_tokens(ASK, reasoning_effort="high") != prompt_tokens(ASK)


def test_responses_output_sent_back_renders_its_reasoning(client):
    """The Responses form of the same conversation (the call's output items sent back, or stored, then its
    result) renders as chat completions' does: the call's reasoning written back on the analysis channel."""
    tools = [{"type": "function", **TOOLS[0]["function"]}]
    first = client.responses.create(model="caller", input=ASK, tools=tools, max_output_tokens=100)
    call = first.output[1]
    result = {"type": "function_call_output", "call_id": call.call_id, "output": '{"temperature": 21}'}

    def input_tokens(items, **kwargs) -> int:
        r = client.responses.create(model="answerer", input=items, tools=tools, max_output_tokens=100, **kwargs)
        assert r.output_text == "It is 21 °C in Paris."
        return r.usage.input_tokens

    chat_call = {"id": call.call_id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
    turn = {"role": "assistant", "content": None, "tool_calls": [chat_call], "reasoning_content": THOUGHT}
    chat_result = {"role": "tool", "tool_call_id": call.call_id, "content": '{"temperature": 21}'}
    chat = client.chat.completions.create(model="answerer", messages=[*ASK, turn, chat_result], tools=TOOLS)
    sent_back = input_tokens([*ASK, *first.output, result])
    assert sent_back == chat.usage.prompt_tokens > input_tokens([*ASK, first.output[1], result])
    assert input_tokens([result], previous_response_id=first.id) == sent_back  # the stored turn keeps it too
