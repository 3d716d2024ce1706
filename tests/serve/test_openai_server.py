"""The OpenAI-compatible server, for real: uvicorn on 127.0.0.1 and a free port, driven by the `openai` client.

Every answer is checked against what the library gives for the same request, called directly. Bad
requests must get OpenAI error objects with the right status, and the server must keep answering.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest

pytest.importorskip("fastapi")
uvicorn = pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")

from inference4py import OnnxTextGenerator  # noqa: E402
from inference4py.serve import ServerSettings, create_app, load_models, served_name  # noqa: E402
from tests.conftest import FIXTURES  # noqa: E402
from tests.serve.support import metrics, request, running  # noqa: E402

QWEN = FIXTURES / "models" / "qwen2"
GPT2 = FIXTURES / "models" / "gpt2"


@pytest.fixture(scope="module")
def server():
    with running(create_app(load_models([str(QWEN), str(GPT2)]))) as url:
        yield url


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server}/v1", api_key="none", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def qwen():
    return OnnxTextGenerator.builder().model_path(QWEN).build()


def _post(server: str, path: str, body: bytes | str) -> tuple[int, dict]:
    status, _, payload = request(server, path, body)
    return status, payload


def test_models_are_listed_under_their_folder_names(client):
    assert sorted(m.id for m in client.models.list().data) == ["gpt2", "qwen2"]
    assert served_name("org/some-model") == "some-model"


def test_chat_equals_the_library(client, qwen):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
    r = client.chat.completions.create(model="qwen2", messages=messages, max_tokens=12, temperature=0)
    want = qwen.generate(messages, max_new_tokens=12, do_sample=False)
    assert r.object == "chat.completion" and r.model == "qwen2"
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content == want.text
    assert r.choices[0].finish_reason == ("length" if want.finish_reason == "length" else "stop")
    assert r.usage.prompt_tokens == want.prompt_tokens
    assert r.usage.completion_tokens == want.generated_tokens


def test_streamed_deltas_concatenate_to_the_whole_answer(client):
    messages = [{"role": "user", "content": "Tell me something"}]
    whole = client.chat.completions.create(model="qwen2", messages=messages, max_tokens=16, temperature=0)
    chunks = list(
        client.chat.completions.create(
            model="qwen2",
            messages=messages,
            max_tokens=16,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finished = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finished == [whole.choices[0].finish_reason]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_completions_stop_strings_and_n_with_a_seed(client):
    gpt2 = OnnxTextGenerator.builder().model_path(GPT2).build()
    plain = gpt2.generate("The old house", max_new_tokens=10, do_sample=False)
    r = client.completions.create(model="gpt2", prompt="The old house", max_tokens=10, temperature=0)
    assert r.object == "text_completion" and r.choices[0].text == plain.text
    stop = plain.text[3:6]
    r = client.completions.create(model="gpt2", prompt="The old house", max_tokens=10, temperature=0, stop=[stop])
    assert r.choices[0].text == plain.text[: plain.text.find(stop)] and r.choices[0].finish_reason == "stop"
    a = client.completions.create(model="gpt2", prompt="Once", max_tokens=8, temperature=1.0, seed=7, n=3)
    b = client.completions.create(model="gpt2", prompt="Once", max_tokens=8, temperature=1.0, seed=7, n=3)
    assert [c.text for c in a.choices] == [c.text for c in b.choices]
    assert [c.index for c in a.choices] == [0, 1, 2]
    assert a.choices[0].text == gpt2.generate("Once", max_new_tokens=8, do_sample=True, temperature=1.0, seed=7).text


def test_logprobs_and_structured_output_come_through(client):
    pytest.importorskip("llguidance")
    r = client.chat.completions.create(
        model="qwen2",
        messages=[{"role": "user", "content": "A number"}],
        max_tokens=5,
        temperature=0,
        logprobs=True,
        top_logprobs=2,
    )
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens and all(len(t.top_logprobs) == 2 for t in content)
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer"}},
        "required": ["n"],
        "additionalProperties": False,
    }
    r = client.chat.completions.create(
        model="qwen2",
        messages=[{"role": "user", "content": "A number"}],
        max_tokens=30,
        response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": schema}},
    )
    assert isinstance(json.loads(r.choices[0].message.content)["n"], int)


@pytest.mark.parametrize(
    "body,status,needle",
    [
        ("{not json", 400, "not valid JSON"),
        (json.dumps({"model": "qwen2"}), 400, "messages"),
        (json.dumps({"model": "nope", "messages": [{"role": "user", "content": "Hi"}]}), 404, "nope"),
        (
            json.dumps({"model": "qwen2", "messages": [{"role": "user", "content": "Hi"}], "temperature": 5}),
            400,
            "temperature",
        ),
        (
            json.dumps({"model": "qwen2", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 0}),
            400,
            "max_tokens",
        ),
        (json.dumps({"model": "qwen2", "messages": [{"role": "bot", "content": "Hi"}]}), 400, "role"),
        # a bad value is a 400 (an unknown field name is not: tests/serve/test_conformance.py)
        (
            json.dumps({"model": "qwen2", "messages": [{"role": "user", "content": "Hi"}], "stream": "yes"}),
            400,
            "stream",
        ),
        (json.dumps({"model": "qwen2", "messages": [{"role": "user", "content": "Hi " * 400}]}), 400, "context"),
    ],
)
def test_bad_requests_get_openai_errors_and_the_server_keeps_serving(server, client, body, status, needle):
    code, payload = _post(server, "/v1/chat/completions", body)
    assert code == status
    assert set(payload["error"]) == {"message", "type", "param", "code"}
    assert needle in payload["error"]["message"]
    assert "Traceback" not in payload["error"]["message"]
    assert client.chat.completions.create(model="qwen2", messages=[{"role": "user", "content": "ok"}], max_tokens=2)


def test_malformed_json_names_no_field(server):
    code, payload = _post(server, "/v1/chat/completions", '{"model": "qwen2", "messages": [{"role": "user"')
    assert code == 400 and payload["error"]["param"] is None  # pydantic locates it at a character offset


def test_the_openai_client_raises_its_own_errors(client):
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="absent", messages=[{"role": "user", "content": "Hi"}])
    with pytest.raises(openai.BadRequestError, match="context"):
        client.chat.completions.create(model="qwen2", messages=[{"role": "user", "content": "Hi " * 400}], stream=True)


def test_health(server):
    with urllib.request.urlopen(f"{server}/health", timeout=10) as response:
        assert json.loads(response.read()) == {"status": "ok"}


@pytest.mark.parametrize(
    "path,body,status,needle",
    [
        ("/v1/chat/completions", "[]", 400, "JSON object"),
        ("/v1/completions", "", 400, "JSON object"),
        (
            "/v1/chat/completions",
            json.dumps({"model": "qwen2", "messages": [{"role": "user", "content": "Hi"}], "stop": ["a", 3]}),
            400,
            "stop",
        ),
    ],
)
def test_body_shape_errors_name_the_field(server, path, body, status, needle):
    code, payload = _post(server, path, body)
    assert code == status and needle in payload["error"]["message"]


def test_unknown_routes_answer_with_an_openai_error(server):
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(f"{server}/v1/nothing", timeout=10)
    payload = json.loads(info.value.read())
    assert info.value.code == 404 and payload["error"]["type"] == "not_found_error"


def test_a_negative_seed_samples_reproducibly(client):
    messages = [{"role": "user", "content": "Hi"}]
    a = client.chat.completions.create(model="qwen2", messages=messages, max_tokens=6, temperature=1.0, seed=-5)
    b = client.chat.completions.create(model="qwen2", messages=messages, max_tokens=6, temperature=1.0, seed=-5)
    assert a.choices[0].message.content == b.choices[0].message.content


def test_metrics_count_requests_and_tokens(server, client):
    before = metrics(server)
    r = client.chat.completions.create(model="qwen2", messages=[{"role": "user", "content": "Hi"}], max_tokens=4)
    after = metrics(server)
    key = 'inference4py_requests_total{model="qwen2"}'
    assert after[key] == before[key] + 1
    tokens = 'inference4py_generation_tokens_total{model="qwen2"}'
    assert after[tokens] == before[tokens] + r.usage.completion_tokens
    assert after['inference4py_requests_running{model="qwen2"}'] == 0


def test_a_dropped_stream_frees_the_model():
    import http.client

    def slow(ids, scores):  # 20 ms a token: the client can leave mid-stream
        time.sleep(0.02)
        return scores

    gen = OnnxTextGenerator.builder().model_path(GPT2).logits_processor(slow).build()
    with running(create_app({"slow": gen})) as base:
        port = int(base.rsplit(":", 1)[1])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        body = {"model": "slow", "prompt": "Hi", "max_tokens": 100, "stream": True}
        conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        response = conn.getresponse()
        assert response.status == 200
        response.fp.readline()  # the first event arrived: the request is running
        response.close()  # the client goes away mid-stream
        conn.close()
        deadline = time.time() + 20
        while time.time() < deadline:
            m = metrics(base)
            if (
                m['inference4py_requests_cancelled_total{model="slow"}'] == 1
                and not m['inference4py_requests_running{model="slow"}']
            ):
                break
            time.sleep(0.1)
        m = metrics(base)
        assert m['inference4py_requests_cancelled_total{model="slow"}'] == 1
        assert m['inference4py_requests_running{model="slow"}'] == 0
        assert m['inference4py_generation_tokens_total{model="slow"}'] < 100  # stopped early
        ok = openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0).completions.create(
            model="slow", prompt="Hi", max_tokens=3
        )
        assert ok.choices[0].finish_reason in ("length", "stop")


def test_a_full_queue_answers_503_with_retry_after_and_nothing_else_fails():
    """Overloaded, not the client's fault: 503 + Retry-After in each API's shape (OpenAI's, Anthropic's)."""
    import concurrent.futures

    with running(create_app(load_models([str(QWEN)]), ServerSettings(max_queue=2, max_concurrent=1))) as base:
        chat = json.dumps({"model": "qwen2", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 40})
        messages = json.dumps({"model": "qwen2", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 40})
        routes = [("/v1/chat/completions", chat), ("/v1/messages", messages)] * 6
        with concurrent.futures.ThreadPoolExecutor(12) as pool:
            answers = list(pool.map(lambda r: (r[0], *request(base, r[0], r[1])), routes))
        codes = sorted(status for _, status, _, _ in answers)
        assert set(codes) <= {200, 503} and 200 in codes and 503 in codes
        for path, status, headers, payload in answers:
            if status == 503:
                assert {k.lower(): v for k, v in headers.items()}["retry-after"] == "1"
                if path == "/v1/messages":
                    assert payload["type"] == "error" and payload["error"]["type"] == "overloaded_error"
                else:
                    assert payload["error"]["type"] == "server_error" and payload["error"]["code"] == "queue_full"
        m = metrics(base)
        assert m['inference4py_rejected_total{model="qwen2"}'] == codes.count(503)
        assert m['inference4py_requests_waiting{model="qwen2"}'] == 0


def test_a_ten_megabyte_prompt_is_refused_by_its_length(server, client):
    """Refused by counting characters (no tokenizing: it would hold a core for seconds), as OpenAI's 400."""
    body = json.dumps({"model": "qwen2", "messages": [{"role": "user", "content": "word " * 2_000_000}]})
    status, payload = _post(server, "/v1/chat/completions", body)
    assert status == 400 and payload["error"]["code"] == "context_length_exceeded"
    assert "characters" in payload["error"]["message"]
    assert client.chat.completions.create(model="qwen2", messages=[{"role": "user", "content": "ok"}], max_tokens=2)
