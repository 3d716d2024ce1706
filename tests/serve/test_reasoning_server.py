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
def client(tmp_path_factory):
    folder = thinking_copy(tmp_path_factory.mktemp("thinking"), opened=False)
    plain = OnnxTextGenerator.builder().model_path(folder).build()
    model = OnnxTextGenerator.builder().model_path(folder).logits_processor(scripted(plain.tokenizer, SCRIPT)).build()
    with running(create_app({"thinker": model})) as url:
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=60)


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
