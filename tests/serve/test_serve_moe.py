"""Mixture-of-experts and latent-attention GGUF models through every server path (issue 47).

Three tiny random GGUF fixtures, served by a real server (uvicorn on 127.0.0.1) as the CLI serves a file:
Qwen3-MoE (8 experts, top-2 renormalised; tests/gguf/test_moe.py), DeepSeek-V2 (latent attention with
its experts and shared expert, in the growing-cache layout; tests/gguf/test_mla.py) and GraniteMoe's
Q8_0 copy (its experts' blocks in place, activations rounded to 8 bits; tests/gguf/test_granite.py).  Each is converted
once, as ``serve --model x.gguf`` converts it (the compiled operators where they are built), with a small
chat template given at start (the files carry none).  On each:

* OpenAI chat/completions, Anthropic messages and OpenAI Responses, streamed and not, answer with the
  text and token count of ``OnnxTextGenerator.generate`` on the same file;
* requests sent together share decode steps (the metrics say so) and each answers as it does alone;
* a JSON-schema response format (each API's own form) gives JSON valid under the schema, the library's
  own constrained answer.

Their text is gibberish (random weights): the tests check equalities and properties, never outputs.
"""

from __future__ import annotations

import concurrent.futures
import json
import threading

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("gguf")
pytest.importorskip("onnx")
openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")
jsonschema = pytest.importorskip("jsonschema")

from inference4py import OnnxTextGenerator  # noqa: E402
from inference4py.serve import ServerSettings, create_app, load_models  # noqa: E402
from tests.conftest import FIXTURES  # noqa: E402
from tests.serve.support import metrics, running  # noqa: E402

FILES = {
    "qwen3moe": "moe-qwen3moe-F32.gguf",
    "deepseek2": "mla-deepseek2-F32.gguf",
    "granitemoe": "moe-granitemoe-Q8_0.gguf",  # Q8_0 experts, activations rounded per row as llama.cpp's
}
TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
NEW = 16  # the fixtures' context is 128 positions
ASKS = (
    [{"role": "user", "content": "The old house stood at the end of the road"}],
    [{"role": "user", "content": "def greet(name):"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Once upon a time"}],
)
SCHEMA = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}, "color": {"enum": ["red", "green", "blue"]}},
    "required": ["ok", "color"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module", params=list(FILES))
def served(request, tmp_path_factory):
    """(served name, the library's generator on the file, base URL of a server holding the file)."""
    name = request.param
    path = FIXTURES / "gguf" / FILES[name]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("INFERENCE4PY_CACHE", str(tmp_path_factory.mktemp(f"cache-{name}")))
        library = OnnxTextGenerator.builder().model_path(path).chat_template(TEMPLATE).build()
        models = load_models([str(path)], [name], chat_template=lambda served: TEMPLATE)
        with running(create_app(models, ServerSettings(max_concurrent=4))) as url:
            yield name, library, url


def _alone(library: OnnxTextGenerator, messages, **extra):
    return library.generate(messages, max_new_tokens=NEW, do_sample=False, **extra)


def _openai(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=60)


def _anthropic(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="none", max_retries=0, timeout=60)


def _chat(url: str, name: str, messages, stream: bool = False) -> tuple[str, int]:
    client = _openai(url)
    if not stream:
        r = client.chat.completions.create(model=name, messages=messages, max_tokens=NEW, temperature=0)
        return r.choices[0].message.content or "", r.usage.completion_tokens
    chunks = list(
        client.chat.completions.create(
            model=name,
            messages=messages,
            max_tokens=NEW,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return text, chunks[-1].usage.completion_tokens


def _messages(url: str, name: str, messages, stream: bool = False) -> tuple[str, int]:
    system = " ".join(m["content"] for m in messages if m["role"] == "system")
    kwargs = {
        "model": name,
        "max_tokens": NEW,
        "messages": [m for m in messages if m["role"] != "system"],
        "extra_body": {"temperature": 0},
        **({"system": system} if system else {}),
    }
    client = _anthropic(url)
    if not stream:
        message = client.messages.create(**kwargs)
        return "".join(b.text for b in message.content if b.type == "text"), message.usage.output_tokens
    with client.messages.stream(**kwargs) as events:
        text = "".join(events.text_stream)
        final = events.get_final_message()
    return text, final.usage.output_tokens


def _responses(url: str, name: str, messages, stream: bool = False) -> tuple[str, int]:
    client = _openai(url)
    kwargs = {"model": name, "input": messages, "max_output_tokens": NEW, "temperature": 0}
    if not stream:
        r = client.responses.create(**kwargs)
        return r.output_text, r.usage.output_tokens
    events = list(client.responses.create(**kwargs, stream=True))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert events[-1].type in ("response.completed", "response.incomplete")  # incomplete: max_output_tokens
    return text, events[-1].response.usage.output_tokens


def _json_chat(url: str, name: str, messages, stream: bool = False) -> tuple[str, int]:
    """chat/completions with SCHEMA as its response_format (``FORMAT``)."""
    client = _openai(url)
    kwargs = {"model": name, "messages": messages, "max_tokens": 40, "temperature": 0, "response_format": FORMAT}
    if not stream:
        r = client.chat.completions.create(**kwargs)
        return r.choices[0].message.content or "", r.usage.completion_tokens
    chunks = list(client.chat.completions.create(**kwargs, stream=True, stream_options={"include_usage": True}))
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices), chunks[-1].usage.completion_tokens


APIS = {"chat": _chat, "messages": _messages, "responses": _responses}
FORMAT = {"type": "json_schema", "json_schema": {"name": "thing", "schema": SCHEMA}}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("api", list(APIS))
def test_each_api_answers_as_the_library(served, api, stream):
    name, library, url = served
    for messages in ASKS[:2]:
        want = _alone(library, messages)
        assert APIS[api](url, name, messages, stream) == (want.text, want.generated_tokens), messages


def test_requests_sent_together_share_steps_and_each_answers_as_alone(served):
    """Nine requests of the three APIs and a streamed JSON-schema one, sent at once on four rows."""
    pytest.importorskip("llguidance")
    name, library, url = served
    wanted = [(r.text, r.generated_tokens) for r in (_alone(library, m) for m in ASKS)]
    structured = library.generate(ASKS[1], max_new_tokens=40, do_sample=False, response_format=FORMAT)
    jobs = [(api, messages) for api in APIS for messages in ASKS] + [("json", ASKS[1])]
    start = threading.Barrier(len(jobs))

    def ask(job):
        api, messages = job
        start.wait()
        return (APIS | {"json": _json_chat})[api](url, name, messages, stream=api in ("messages", "json"))

    key = f'{{model="{name}"}}'
    before = metrics(url)
    with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
        got = list(pool.map(ask, jobs))
    after = metrics(url)
    assert got[:-1] == [wanted[ASKS.index(messages)] for _, messages in jobs[:-1]]
    assert got[-1] == (structured.text, structured.generated_tokens)
    steps = after[f"inference4py_decode_steps_total{key}"] - before[f"inference4py_decode_steps_total{key}"]
    rows = after[f"inference4py_decode_step_rows_total{key}"] - before[f"inference4py_decode_step_rows_total{key}"]
    assert rows > steps, "the requests never shared a decode step"


def test_a_json_schema_format_gives_json_of_the_schema_in_each_api(served):
    pytest.importorskip("llguidance")
    name, library, url = served
    ask = ASKS[0]
    want = library.generate(ask, max_new_tokens=40, do_sample=False, response_format=FORMAT).text
    jsonschema.validate(json.loads(want), SCHEMA)
    chat = _openai(url).chat.completions.create(
        model=name, messages=ask, max_tokens=40, temperature=0, response_format=FORMAT
    )
    message = _anthropic(url).messages.create(
        model=name,
        max_tokens=40,
        messages=ask,
        output_config={"format": {"type": "json_schema", "schema": SCHEMA}},
        extra_body={"temperature": 0},
    )
    response = _openai(url).responses.create(
        model=name,
        input=ask,
        max_output_tokens=40,
        temperature=0,
        text={"format": {"type": "json_schema", "name": "thing", "schema": SCHEMA, "strict": True}},
    )
    streamed = _json_chat(url, name, ask, stream=True)[0]
    answers = [chat.choices[0].message.content, message.content[0].text, response.output_text, streamed]
    assert answers == [want] * 4
