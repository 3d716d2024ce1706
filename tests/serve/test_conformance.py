"""What clients of OpenAI, vLLM and llama-server send, over the real server: honoured, ignored with a warning, or refused.

- A field name the server does not know is ignored and logged once, never a 400.
- vLLM's and llama.cpp's fields the library can do are honoured (each checked against the library).
- An OpenAI field whose answer a text model cannot give is a 400 naming it, as is a bad value:
  values are strict (a string where a boolean or a number belongs is refused, not coerced).
- Message content that is null, of an unknown part type, or an image for a text-only model is a
  400 naming ``messages[i].content``.
Every refusal is OpenAI's error object with its status, and the server keeps answering.
"""

from __future__ import annotations

import json
import logging

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")

from inference4py import OnnxTextGenerator  # noqa: E402
from inference4py.errors import ConfigurationError  # noqa: E402
from inference4py.serve import ServerSettings, create_app  # noqa: E402
from tests.conftest import FIXTURES, long_context_copy  # noqa: E402
from tests.serve.support import metrics, request, running  # noqa: E402

QWEN = FIXTURES / "models" / "qwen2"
GPT2 = FIXTURES / "models" / "gpt2"
# a template with a variable of its own, as Qwen3's enable_thinking
TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if greeting is defined %}{{ greeting }}\n{% endif %}<|im_start|>assistant\n"
)
HI = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def gpt2() -> OnnxTextGenerator:
    return OnnxTextGenerator.builder().model_path(GPT2).build()


@pytest.fixture(scope="module")
def templated() -> OnnxTextGenerator:
    return OnnxTextGenerator.builder().model_path(QWEN).chat_template(TEMPLATE).build()


@pytest.fixture(scope="module")
def server():
    models = {
        "qwen2": OnnxTextGenerator.builder().model_path(QWEN).build(),
        "gpt2": OnnxTextGenerator.builder().model_path(GPT2).build(),
        "templated": OnnxTextGenerator.builder().model_path(QWEN).chat_template(TEMPLATE).build(),
    }
    with running(create_app(models)) as url:
        yield url


def _chat(server: str, **fields) -> tuple[int, dict]:
    body = {"model": "qwen2", "messages": HI, "max_tokens": 4, "temperature": 0, **fields}
    status, _, payload = request(server, "/v1/chat/completions", json.dumps(body))
    return status, payload


def _completion(server: str, **fields) -> tuple[int, dict]:
    body = {"model": "gpt2", "prompt": "The old house", "max_tokens": 4, "temperature": 0, **fields}
    status, _, payload = request(server, "/v1/completions", json.dumps(body))
    return status, payload


def _refused(status: int, payload: dict, param: str, needle: str = "") -> None:
    assert status == 400, payload
    assert set(payload["error"]) == {"message", "type", "param", "code"}
    assert payload["error"]["type"] == "invalid_request_error"
    assert payload["error"]["param"] == param, payload
    assert needle in payload["error"]["message"]


def _alive(server: str) -> None:
    status, payload = _chat(server)
    assert status == 200 and payload["choices"][0]["message"]["content"] is not None


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "inference4py.serve" and r.levelno == logging.WARNING]


# ------------------------------------------------------------------------------- ignored, with a warning
def test_an_unknown_field_is_ignored_and_logged_once(server, caplog):
    caplog.set_level(logging.WARNING, logger="inference4py.serve")
    plain = _chat(server)[1]["choices"][0]["message"]["content"]
    for value in (1, "two"):
        status, payload = _chat(server, wat_unknown=value, store=False, metadata={"k": "v"})
        assert status == 200 and payload["choices"][0]["message"]["content"] == plain
    status, payload = _completion(server, wat_unknown=3)
    assert status == 200
    logged = _warnings(caplog)
    assert len([m for m in logged if "'wat_unknown'" in m]) == 1  # once per field name, whatever the route
    assert len([m for m in logged if "'store'" in m]) == 1 and len([m for m in logged if "'metadata'" in m]) == 1


def test_other_servers_fields_it_cannot_honour_are_ignored_with_a_warning(server, caplog):
    caplog.set_level(logging.WARNING, logger="inference4py.serve")
    plain = _chat(server)[1]["choices"][0]["message"]["content"]
    # values that ask for what the server does anyway: no warning
    quiet = {"cache_prompt": True, "skip_special_tokens": True, "include_stop_str_in_output": False, "id_slot": -1}
    status, payload = _chat(server, **quiet)
    assert status == 200 and payload["choices"][0]["message"]["content"] == plain
    assert not _warnings(caplog)
    asking = {
        "id_slot": 2,
        "n_probs": 3,
        "samplers": ["top_k", "temperature"],
        "skip_special_tokens": False,
        "include_stop_str_in_output": True,
    }
    status, payload = _chat(server, **asking)
    assert status == 200 and payload["choices"][0]["message"]["content"] == plain
    logged = _warnings(caplog)
    assert all(any(f"'{name}'" in m for m in logged) for name in asking), logged


# ------------------------------------------------------------------------------- honoured
def test_n_predict_is_max_tokens_when_that_is_absent(server, gpt2):
    want = gpt2.generate("The old house", max_new_tokens=3, do_sample=False)
    body = {"model": "gpt2", "prompt": "The old house", "temperature": 0, "n_predict": 3}
    status, _, payload = request(server, "/v1/completions", json.dumps(body))
    assert status == 200 and payload["choices"][0]["text"] == want.text
    assert payload["usage"]["completion_tokens"] == want.generated_tokens
    status, payload = _completion(server, max_tokens=2, n_predict=5)  # max_tokens wins
    assert status == 200 and payload["usage"]["completion_tokens"] <= 2
    status, payload = _chat(server, max_tokens=None, max_completion_tokens=2, n_predict=5)
    assert status == 200 and payload["usage"]["completion_tokens"] <= 2
    _refused(*_completion(server, max_tokens=None, n_predict=0), "n_predict", "-1")
    status, payload = _completion(server, max_tokens=None, n_predict=-1)  # llama.cpp's "no limit"
    assert status == 200


def test_vllm_sampling_fields_equal_the_library(server, gpt2):
    sampled = {"temperature": 0.9, "seed": 11, "max_tokens": 6}
    want = gpt2.generate("The old house", max_new_tokens=6, do_sample=True, temperature=0.9, seed=11, top_k=3)
    assert _completion(server, **sampled, top_k=3)[1]["choices"][0]["text"] == want.text
    off = gpt2.generate("The old house", max_new_tokens=6, do_sample=True, temperature=0.9, seed=11, top_k=0)
    assert _completion(server, **sampled, top_k=-1)[1]["choices"][0]["text"] == off.text  # vLLM's -1: off
    want = gpt2.generate("The old house", max_new_tokens=6, do_sample=True, temperature=0.9, seed=11, min_p=0.2)
    assert _completion(server, **sampled, min_p=0.2)[1]["choices"][0]["text"] == want.text
    want = gpt2.generate("The old house", max_new_tokens=6, do_sample=False, repetition_penalty=1.5)
    assert _completion(server, max_tokens=6, repetition_penalty=1.5)[1]["choices"][0]["text"] == want.text


def test_ignore_eos_generates_past_the_end_token(server, gpt2):
    eos = gpt2.generation_config.eos_token_id[0]
    forced = {"logit_bias": {str(eos): 100}, "max_tokens": 5}  # the end token is always the likeliest
    status, payload = _completion(server, **forced)
    assert status == 200 and payload["choices"][0]["finish_reason"] == "stop"
    assert payload["usage"]["completion_tokens"] <= 1
    status, payload = _completion(server, **forced, ignore_eos=True)
    assert status == 200 and payload["choices"][0]["finish_reason"] == "length"
    assert payload["usage"]["completion_tokens"] == 5
    schema = {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "integer"}}}
    _refused(*_chat(server, ignore_eos=True, response_format=schema), "ignore_eos", "end token")


def test_chat_template_kwargs_reach_the_template(server, templated):
    plain = _chat(server, model="templated")[1]
    status, payload = _chat(server, model="templated", chat_template_kwargs={"greeting": "Hello to you, dear friend"})
    assert status == 200
    want = templated.generate(
        HI, max_new_tokens=4, do_sample=False, chat_template_kwargs={"greeting": "Hello to you, dear friend"}
    )
    assert payload["usage"]["prompt_tokens"] == want.prompt_tokens > plain["usage"]["prompt_tokens"]
    assert payload["choices"][0]["message"]["content"] == want.text
    _refused(*_chat(server, chat_template_kwargs={"messages": []}), None, "chat_template_kwargs cannot set messages")
    _refused(*_chat(server, chat_template_kwargs=["greeting"]), "chat_template_kwargs")
    _alive(server)


# ------------------------------------------------------------------------------- refused: OpenAI fields we cannot honour
@pytest.mark.parametrize(
    "route,fields,param",
    [
        ("completions", {"echo": True}, "echo"),
        ("completions", {"suffix": " and then"}, "suffix"),
        ("completions", {"best_of": 3}, "best_of"),
        ("chat", {"functions": [{"name": "f", "parameters": {"type": "object"}}]}, "functions"),
        ("chat", {"function_call": "auto"}, "function_call"),
        ("chat", {"modalities": ["text", "audio"]}, "modalities"),
        ("chat", {"audio": {"voice": "alloy", "format": "wav"}}, "audio"),
    ],
)
def test_openai_fields_it_cannot_honour_are_400s(server, route, fields, param):
    _refused(*(_chat if route == "chat" else _completion)(server, **fields), param)
    _alive(server)


def test_openai_fields_that_ask_for_what_is_done_pass(server):
    assert _completion(server, echo=False, suffix=None, best_of=1)[0] == 200
    assert _completion(server, n=2, best_of=2, seed=1, temperature=0.8)[0] == 200
    assert _chat(server, modalities=["text"])[0] == 200


# ------------------------------------------------------------------------------- refused: bad values
@pytest.mark.parametrize(
    "fields,param",
    [
        ({"stream": "yes"}, "stream"),
        ({"stream": 1}, "stream"),
        ({"logprobs": "true"}, "logprobs"),
        ({"max_tokens": "10"}, "max_tokens"),
        ({"max_tokens": 10.0}, "max_tokens"),
        ({"temperature": "0.5"}, "temperature"),
        ({"n": "2"}, "n"),
        ({"seed": True}, "seed"),
        ({"top_k": "5"}, "top_k"),
        ({"top_k": -2}, "top_k"),
        ({"ignore_eos": "true"}, "ignore_eos"),
        ({"n_predict": "8"}, "n_predict"),
        ({"stream": True, "stream_options": {"include_usage": "yes"}}, "stream_options.include_usage"),
        ({"parallel_tool_calls": "false"}, "parallel_tool_calls"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages.0.content"),
    ],
)
def test_a_bad_value_is_a_400_naming_the_field(server, fields, param):
    status, payload = _chat(server, **fields)
    _refused(status, payload, param, param)
    _alive(server)


def test_a_bad_value_on_completions_too(server):
    _refused(*_completion(server, echo="no"), "echo")
    _refused(*_completion(server, logprobs=True), "logprobs")  # an int there: a bool is not one
    _refused(*_completion(server, prompt=[1, "2"]), "prompt")


# ------------------------------------------------------------------------------- refused: message content
@pytest.mark.parametrize(
    "messages,param,needle",
    [
        ([{"role": "user", "content": None}], "messages[0].content", "null"),
        ([{"role": "user"}], "messages[0].content", "null"),
        ([{"role": "system", "content": None}, *HI], "messages[0].content", "null"),
        ([*HI, {"role": "assistant", "content": None}, *HI], "messages[1].content", "tool_calls"),
        ([*HI, {"role": "tool", "tool_call_id": "c1", "content": None}], "messages[1].content", "null"),
        ([{"role": "user", "content": [{"type": "video", "url": "x"}]}], "messages[0].content[0].type", "video"),
        ([{"role": "user", "content": [{"text": "Hi"}]}], "messages[0].content[0].type", "None"),
        ([{"role": "user", "content": [{"type": "text"}]}], "messages[0].content[0].text", "string"),
        (
            [{"role": "user", "content": [{"type": "refusal", "refusal": "no"}]}],
            "messages[0].content[0].type",
            "refusal",
        ),
        (
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is this?"},
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                    ],
                }
            ],
            "messages[0].content[1]",
            "text-only",
        ),
        (
            [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}]}],
            "messages[0].content[0]",
            "text-only",
        ),
    ],
)
def test_message_content_it_cannot_read_is_a_400_naming_it(server, client, messages, param, needle):
    _refused(*_chat(server, messages=messages), param, needle)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="qwen2", messages=messages, max_tokens=2)
    _alive(server)


def test_text_parts_read_as_their_string(server):
    parts = [{"type": "text", "text": "H"}, {"type": "text", "text": "i"}]
    by_parts = _chat(server, messages=[{"role": "user", "content": parts}])[1]
    by_string = _chat(server, messages=HI)[1]
    assert by_parts["choices"] == by_string["choices"] and by_parts["usage"] == by_string["usage"]
    refusal = [*HI, {"role": "assistant", "content": [{"type": "refusal", "refusal": "No."}]}, *HI]
    assert _chat(server, messages=refusal)[0] == 200  # an assistant's refusal part is its text


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server}/v1", api_key="none", max_retries=0, timeout=60)


# ------------------------------------------------------------------------------- tools: none, and a call's null content
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


@pytest.fixture(scope="module")
def tools_server(tmp_path_factory):
    folder = long_context_copy(tmp_path_factory.mktemp("conform"))
    library = OnnxTextGenerator.builder().model_path(folder).build()
    with running(create_app({"qwen2": OnnxTextGenerator.builder().model_path(folder).build()})) as url:
        yield url, library


def test_tool_choice_none_answers_in_text(tools_server):
    url, library = tools_server
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=60)
    r = client.chat.completions.create(
        model="qwen2", messages=ask, tools=TOOLS, tool_choice="none", max_tokens=8, temperature=0
    )
    want = library.generate(ask, tools=TOOLS, tool_choice="none", max_new_tokens=8, do_sample=False)
    assert r.choices[0].message.tool_calls is None and r.choices[0].message.content == want.text
    streamed = client.chat.completions.create(
        model="qwen2", messages=ask, tools=TOOLS, tool_choice="none", max_tokens=8, temperature=0, stream=True
    )
    events = [e for e in streamed if e.choices]
    assert "".join(e.choices[0].delta.content or "" for e in events) == want.text
    assert not any(e.choices[0].delta.tool_calls for e in events)


def test_an_assistant_turn_with_tool_calls_may_have_null_content(tools_server):
    url, _ = tools_server
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    messages = [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 24 C"},
    ]
    body = {"model": "qwen2", "messages": messages, "tools": TOOLS, "max_tokens": 4, "temperature": 0}
    status, _, payload = request(url, "/v1/chat/completions", json.dumps(body))
    assert status == 200, payload


# ------------------------------------------------------------------------------- CORS
PREFLIGHT = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization, content-type"}


def _lower(headers: dict[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


def _fresh() -> OnnxTextGenerator:
    return OnnxTextGenerator.builder().model_path(QWEN).build()  # an app closes its models when it stops


def test_cors_preflight_and_simple_requests_for_a_named_origin():
    settings = ServerSettings(cors_origins=["http://localhost:3000"], api_key="sk-test")
    with running(create_app({"qwen2": _fresh()}, settings)) as url:
        origin = {"Origin": "http://localhost:3000"}
        status, headers, _ = request(url, "/v1/chat/completions", headers={**origin, **PREFLIGHT}, method="OPTIONS")
        headers = _lower(headers)
        assert status == 200  # a preflight carries no key, and needs none
        assert headers["access-control-allow-origin"] == "http://localhost:3000"
        assert "authorization" in headers["access-control-allow-headers"].lower()
        assert "POST" in headers["access-control-allow-methods"]
        assert "access-control-allow-credentials" not in headers

        body = json.dumps({"model": "qwen2", "messages": HI, "max_tokens": 2})
        auth = {"Authorization": "Bearer sk-test"}
        status, headers, _ = request(url, "/v1/chat/completions", body, headers={**origin, **auth})
        assert status == 200 and _lower(headers)["access-control-allow-origin"] == "http://localhost:3000"
        status, headers, payload = request(url, "/v1/chat/completions", body, headers=origin)  # no key
        assert status == 401 and payload["error"]["type"] == "authentication_error"
        assert _lower(headers)["access-control-allow-origin"] == "http://localhost:3000"  # the page can read why

        other = {"Origin": "http://elsewhere.example"}
        status, headers, _ = request(url, "/v1/chat/completions", headers={**other, **PREFLIGHT}, method="OPTIONS")
        assert status == 200 and "access-control-allow-origin" not in _lower(headers)  # the browser refuses
        _, headers, _ = request(url, "/health", headers=other)
        assert "access-control-allow-origin" not in _lower(headers)


LOCAL = ["http://localhost", "http://localhost:5173", "http://127.0.0.1", "http://127.0.0.1:3000", "http://[::1]:8080"]
ELSEWHERE = ["http://evil.example", "http://localhost.evil.example", "http://notlocalhost", "https://127.0.0.1.nip.io"]


def test_by_default_only_pages_on_this_machine_may_call_the_server(caplog):
    with running(create_app({"qwen2": _fresh()})) as url:
        for origin in LOCAL:
            status, headers, _ = request(
                url, "/v1/chat/completions", headers={"Origin": origin, **PREFLIGHT}, method="OPTIONS"
            )
            headers = _lower(headers)
            assert status == 200 and headers["access-control-allow-origin"] == origin, origin
            assert headers["access-control-allow-methods"] == "GET, POST, DELETE, OPTIONS"
        body = json.dumps({"model": "qwen2", "messages": HI, "max_tokens": 2})
        status, headers, _ = request(url, "/v1/chat/completions", body, headers={"Origin": "http://localhost:5173"})
        assert status == 200 and _lower(headers)["access-control-allow-origin"] == "http://localhost:5173"
        status, _, _ = request(url, "/v1/chat/completions", body, headers={"Origin": url})  # its own page
        assert status == 200
        before = metrics(url)
        for origin in ELSEWHERE:
            status, headers, _ = request(
                url, "/v1/chat/completions", headers={"Origin": origin, **PREFLIGHT}, method="OPTIONS"
            )
            assert status == 200 and "access-control-allow-origin" not in _lower(headers), origin
            # a request a browser sends without a preflight (a form post) never reaches the model
            status, headers, payload = request(
                url, "/v1/chat/completions", body, headers={"Origin": origin, "Content-Type": "text/plain"}
            )
            assert status == 403 and payload["error"]["type"] == "permission_error", origin
            assert f"--cors-origin {origin}" in payload["error"]["message"]
        assert metrics(url) == before  # nothing ran
    assert any("--cors-origin http://evil.example" in r.getMessage() for r in caplog.records)


def test_named_origins_are_allowed_beside_the_local_ones():
    with running(create_app({"qwen2": _fresh()}, ServerSettings(cors_origins=["https://app.example"]))) as url:
        for origin, allowed in (
            ("https://app.example", True),
            ("http://localhost:3000", True),
            ("https://other.example", False),
        ):
            _, headers, _ = request(url, "/v1/models", headers={"Origin": origin}, method="GET")
            assert (_lower(headers).get("access-control-allow-origin") == origin) is allowed, origin


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded"])
def test_a_json_body_without_its_content_type_is_told_to_send_the_header(content_type):
    import http.client
    from urllib.parse import urlsplit

    with running(create_app({"qwen2": _fresh()})) as url:
        body = json.dumps({"model": "qwen2", "messages": HI, "max_tokens": 2})
        connection = http.client.HTTPConnection(urlsplit(url).netloc, timeout=30)
        connection.request("POST", "/v1/chat/completions", body, {"Content-Type": content_type} if content_type else {})
        answer = connection.getresponse()
        payload = json.loads(answer.read())
        connection.close()
        assert answer.status == 400 and payload["error"]["param"] == "Content-Type"
        assert "'Content-Type: application/json'" in payload["error"]["message"]
        assert (repr(content_type) if content_type else "none was sent") in payload["error"]["message"]
        status, _, payload = request(url, "/v1/chat/completions", "[1, 2]")  # JSON, but not an object: as before
        assert status == 400 and "must be a JSON object" in payload["error"]["message"]


def test_cors_any_origin_is_a_star_without_credentials():
    with running(create_app({"qwen2": _fresh()}, ServerSettings(cors_origins=["*"]))) as url:
        origin = {"Origin": "http://anything.example:8080"}
        status, headers, _ = request(url, "/v1/chat/completions", headers={**origin, **PREFLIGHT}, method="OPTIONS")
        headers = _lower(headers)
        assert status == 200 and headers["access-control-allow-origin"] == "*"
        assert "authorization" in headers["access-control-allow-headers"].lower()  # * would not cover it: named
        assert "access-control-allow-credentials" not in headers  # "*" with credentials is refused by browsers
        status, headers, _ = request(url, "/v1/models", headers=origin)
        assert status == 200 and _lower(headers)["access-control-allow-origin"] == "*"


@pytest.mark.parametrize("origin", ["http://localhost:3000/", "localhost:3000", "http://host/app", ""])
def test_an_origin_that_browsers_never_send_is_refused_at_start(origin):
    with pytest.raises(ConfigurationError, match="not an origin"):
        ServerSettings(cors_origins=[origin])
    assert ServerSettings(cors_origins="http://localhost:3000").cors_origins == ("http://localhost:3000",)


def test_models_say_what_they_answer_so_the_chat_page_lists_only_chat_models():
    from inference4py.serve import load_models

    models = load_models([str(QWEN), str(FIXTURES / "models" / "whisper"), str(FIXTURES / "models" / "sentence-bert")])
    with running(create_app(models)) as url:
        status, _, payload = request(url, "/v1/models")
        page = request(url, "/")[2]
    assert status == 200
    assert {m["id"]: m["capabilities"] for m in payload["data"]} == {
        "qwen2": ["chat", "completion"],
        "whisper": ["transcription"],
        "sentence-bert": ["embedding"],
    }
    assert 'm.capabilities.includes("chat")' in page  # the picker's filter (driven in a browser: test_chat_page.py)


def test_a_request_without_model_goes_to_the_only_chat_model():
    from inference4py.serve import load_models

    body = json.dumps({"messages": HI, "max_tokens": 3, "temperature": 0})
    with running(create_app({"qwen2": _fresh()})) as url:
        status, _, payload = request(url, "/v1/chat/completions", body)
        named = request(url, "/v1/chat/completions", json.dumps({"model": "qwen2", **json.loads(body)}))[2]
    assert status == 200 and payload["model"] == "qwen2"
    assert payload["choices"][0]["message"] == named["choices"][0]["message"]
    with running(create_app(load_models([str(QWEN), str(FIXTURES / "models" / "llama")]))) as url:
        status, _, payload = request(url, "/v1/chat/completions", body)
    assert status == 400 and payload["error"]["param"] == "model"
    assert "qwen2, llama" in payload["error"]["message"] or "llama, qwen2" in payload["error"]["message"]
