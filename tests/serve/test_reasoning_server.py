"""A reasoning model over the server: reasoning_content apart from the answer, streamed and not, or inline on request."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")

from inference4py import OnnxTextGenerator  # noqa: E402
from inference4py.serve import create_app  # noqa: E402
from tests.conftest import scripted, thinking_copy  # noqa: E402
from tests.serve.support import running  # noqa: E402

SCRIPT = "<think>\nThe user asks about Paris.\n</think>\n\nParis is in France."
ASK = [{"role": "user", "content": "Where is Paris?"}]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = thinking_copy(tmp_path_factory.mktemp("thinking"), opened=False)
    plain = OnnxTextGenerator.builder().model_path(folder).build()
    model = OnnxTextGenerator.builder().model_path(folder).logits_processor(scripted(plain.tokenizer, SCRIPT)).build()
    with running(create_app({"thinker": model})) as url:
        yield url


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server}/v1", api_key="none", max_retries=0, timeout=60)


def test_reasoning_content_is_apart_from_the_answer(client):
    message = client.chat.completions.create(model="thinker", messages=ASK, max_tokens=80).choices[0].message
    assert message.content == "Paris is in France."
    assert message.model_extra["reasoning_content"] == "\nThe user asks about Paris.\n"


def test_streamed_reasoning_comes_first_and_apart(client):
    reasoning, content, order = "", "", []
    for event in client.chat.completions.create(model="thinker", messages=ASK, max_tokens=80, stream=True):
        delta = event.choices[0].delta if event.choices else None
        if delta is None:
            continue
        piece = (delta.model_extra or {}).get("reasoning_content")
        if piece:
            reasoning += piece
            order.append("r")
        if delta.content:
            content += delta.content
            order.append("c")
    assert (reasoning, content) == ("\nThe user asks about Paris.\n", "Paris is in France.")
    assert order == sorted(order, reverse=True)  # every reasoning piece before the answer's


def test_inline_on_request(client):
    r = client.chat.completions.create(
        model="thinker", messages=ASK, max_tokens=80, extra_body={"reasoning_format": "none"}
    )
    assert r.choices[0].message.content == SCRIPT
    assert "reasoning_content" not in (r.choices[0].message.model_extra or {})


THOUGHT, ANSWER = "\nThe user asks about Paris.\n", "Paris is in France."


def test_messages_give_a_thinking_block_streamed_and_not(server):
    anthropic = pytest.importorskip("anthropic")
    client = anthropic.Anthropic(base_url=server, api_key="none", max_retries=0)
    m = client.messages.create(model="thinker", max_tokens=80, messages=ASK)
    assert [(b.type, getattr(b, "thinking", None) or getattr(b, "text", None)) for b in m.content] == [
        ("thinking", THOUGHT),
        ("text", ANSWER),
    ]
    with client.messages.stream(model="thinker", max_tokens=80, messages=ASK) as stream:
        final = stream.get_final_message()
    assert [b.model_dump() for b in final.content] == [b.model_dump() for b in m.content]


def test_responses_give_a_reasoning_item_streamed_and_not(client):
    r = client.responses.create(model="thinker", input=ASK, max_output_tokens=80)
    assert [item.type for item in r.output] == ["reasoning", "message"]
    assert r.output[0].content[0].text == THOUGHT and r.output_text == ANSWER
    with client.responses.stream(model="thinker", input=ASK, max_output_tokens=80) as stream:
        final = stream.get_final_response()
    assert final.output_text == ANSWER and final.output[0].content[0].text == THOUGHT


def test_thinking_switched_off_in_each_api(server, client):
    """reasoning_effort / reasoning.effort / thinking reach the template as enable_thinking (as Qwen3's reads it)."""
    anthropic = pytest.importorskip("anthropic")

    def chat(**kw):
        return client.chat.completions.create(model="thinker", messages=ASK, max_tokens=80, **kw).usage.prompt_tokens

    on, off = chat(), chat(reasoning_effort="none")
    assert off > on  # the template wrote an empty <think></think> block: thinking is off
    assert chat(reasoning_effort="high") == on
    resp = client.responses.create(model="thinker", input=ASK, max_output_tokens=80, reasoning={"effort": "minimal"})
    assert resp.usage.input_tokens == off
    claude = anthropic.Anthropic(base_url=server, api_key="none", max_retries=0)
    m = claude.messages.create(model="thinker", max_tokens=80, messages=ASK, thinking={"type": "disabled"})
    assert m.usage.input_tokens == off
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="thinker", messages=ASK, max_tokens=8, reasoning_effort="extreme")
