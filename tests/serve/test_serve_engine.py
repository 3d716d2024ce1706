"""The engine under the server, through a real socket: continuous batching, the prefix cache, load and limits.

Every answer is compared with the library called directly on the same model, alone.
"""

from __future__ import annotations

import concurrent.futures
import json
import threading
import time

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")

from inference4py import OnnxTextGenerator  # noqa: E402
from inference4py.engine.prompt_tiles import exact_rows, longest_exact_split  # noqa: E402
from inference4py.serve import ServerSettings, create_app  # noqa: E402
from tests.conftest import FIXTURES  # noqa: E402
from tests.serve.support import metrics, request, running  # noqa: E402

MODELS = FIXTURES / "models"
SERVED = ["qwen2", "genai-llama", "genai-llama-int4"]  # a growing cache, a genai folder, an int4 folder
PROMPTS = [
    "hello",
    "the quick brown fox jumps over the lazy dog " * 2,
    "a b c d e f",
    "Once upon a time",
    "one two three four five six seven eight nine ten",
    "x",
    "what is the capital of France? The capital is",
    "tokens " * 7,
]
MAX_TOKENS = [5, 17, 9, 30, 3, 25, 12, 20]


def _pace(ids, scores):  # 3 ms a token: fixture models are so fast that requests would never overlap
    time.sleep(0.003)
    return scores


@pytest.fixture(scope="module")
def base():
    paced = {
        name: OnnxTextGenerator.builder().model_path(MODELS / name).logits_processor(_pace).build() for name in SERVED
    }
    with running(create_app(paced, ServerSettings(max_concurrent=8))) as url:
        yield url


@pytest.fixture(scope="module")
def library():
    return {name: OnnxTextGenerator.builder().model_path(MODELS / name).build() for name in SERVED}


def _fresh(name: str) -> OnnxTextGenerator:
    """A model for a server of its own (a server closes its models when it stops)."""
    return OnnxTextGenerator.builder().model_path(MODELS / name).build()


def _client(base: str, key: str = "none") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0, timeout=60)


def _streamed(client, model, prompt, max_tokens, arrived: threading.Event) -> tuple[str, str]:
    text, reason = [], None
    for chunk in client.completions.create(
        model=model, prompt=prompt, max_tokens=max_tokens, temperature=0, stream=True
    ):
        arrived.set()
        if chunk.choices:
            text.append(chunk.choices[0].text)
            reason = chunk.choices[0].finish_reason or reason
    arrived.set()
    return "".join(text), reason


@pytest.mark.parametrize("model", SERVED)
def test_eight_staggered_greedy_requests_each_equal_the_library_alone(base, library, model):
    alone = [library[model].generate(p, max_new_tokens=n, do_sample=False) for p, n in zip(PROMPTS, MAX_TOKENS)]
    before = metrics(base)
    client = _client(base)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        futures = []
        for prompt, n in zip(PROMPTS, MAX_TOKENS):
            arrived = threading.Event()
            futures.append(pool.submit(_streamed, client, model, prompt, n, arrived))
            assert arrived.wait(30)  # the next request arrives while this one decodes
        answers = [f.result() for f in futures]
    after = metrics(base)
    assert [a for a, _ in answers] == [r.text for r in alone]
    assert [r for _, r in answers] == [{"eos": "stop"}.get(r.finish_reason, r.finish_reason) for r in alone]
    steps = (
        after[f'inference4py_decode_steps_total{{model="{model}"}}']
        - before[f'inference4py_decode_steps_total{{model="{model}"}}']
    )
    rows = (
        after[f'inference4py_decode_step_rows_total{{model="{model}"}}']
        - before[f'inference4py_decode_step_rows_total{{model="{model}"}}']
    )
    assert rows > steps, "the requests never shared a decode step"


def test_sixty_four_requests_against_four_rows_all_complete(library):
    app = create_app({"qwen2": _fresh("qwen2")}, ServerSettings(max_concurrent=4))
    with running(app) as url:
        client = _client(url)
        want = {p: library["qwen2"].generate(p, max_new_tokens=8, do_sample=False).text for p in PROMPTS}

        def ask(i: int) -> bool:
            prompt = PROMPTS[i % len(PROMPTS)]
            r = client.completions.create(model="qwen2", prompt=prompt, max_tokens=8, temperature=0)
            return r.choices[0].text == want[prompt]

        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            assert all(pool.map(ask, range(64)))
        m = metrics(url)
        assert m['inference4py_requests_completed_total{model="qwen2"}'] == 64
        assert m['inference4py_requests_running{model="qwen2"}'] == 0
        assert m['inference4py_requests_waiting{model="qwen2"}'] == 0
        assert m['inference4py_rejected_total{model="qwen2"}'] == 0


@pytest.mark.parametrize("model", ["qwen2", "genai-llama"])
def test_the_second_turn_prefills_only_its_new_tokens_and_answers_as_without_the_cache(library, model):
    turn1 = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say something"}]
    gen = library[model]
    with (
        running(create_app({model: _fresh(model)})) as cached,
        running(create_app({model: _fresh(model)}, ServerSettings(prefix_cache_mb=0))) as plain,
    ):
        first = _client(cached).chat.completions.create(model=model, messages=turn1, max_tokens=10, temperature=0)
        answer = first.choices[0].message.content
        turn2 = [*turn1, {"role": "assistant", "content": answer}, {"role": "user", "content": "More"}]
        before = metrics(cached)
        second = _client(cached).chat.completions.create(model=model, messages=turn2, max_tokens=10, temperature=0)
        after = metrics(cached)
        reference = _client(plain).chat.completions.create(model=model, messages=turn2, max_tokens=10, temperature=0)
    key = f'{{model="{model}"}}'
    prefilled = after[f"inference4py_prefill_tokens_total{key}"] - before[f"inference4py_prefill_tokens_total{key}"]
    reused = after[f"inference4py_prefix_cache_reused_tokens_total{key}"]
    assert (
        after[f"inference4py_prefix_cache_hits_total{key}"] == before[f"inference4py_prefix_cache_hits_total{key}"] + 1
    )
    assert (
        prefilled + (reused - before[f"inference4py_prefix_cache_reused_tokens_total{key}"])
        == second.usage.prompt_tokens
    )
    turn1_prompt, tile = len(gen.encode_prompt(turn1)), gen._runtime.prompt_tile  # the answer is prefilled again
    prompt2 = second.usage.prompt_tokens
    assert prefilled == prompt2 - longest_exact_split(exact_rows(turn1_prompt, 0, tile), prompt2, tile)
    assert second.choices[0].message.content == reference.choices[0].message.content
    assert second.choices[0].message.content == gen.generate(turn2, max_new_tokens=10, do_sample=False).text


def test_n_choices_stream_side_by_side_and_equal_the_unstreamed_ones(base):
    client = _client(base)
    body = {"model": "qwen2", "prompt": "Once", "max_tokens": 8, "temperature": 1.0, "seed": 5, "n": 3}
    whole = client.completions.create(**body)
    texts = ["", "", ""]
    for chunk in client.completions.create(**body, stream=True):
        for choice in chunk.choices:
            texts[choice.index] += choice.text
    assert texts == [c.text for c in whole.choices]
    assert len(set(texts)) > 1  # seeds 5, 6, 7: different samples


def test_the_api_key_guards_every_route_but_health_and_the_page(library):
    with running(create_app({"qwen2": _fresh("qwen2")}, ServerSettings(api_key="sk-test"))) as url:
        status, _, body = request(url, "/v1/models")
        assert (
            status == 401 and body["error"]["code"] == "invalid_api_key" and "Authorization" in body["error"]["message"]
        )
        status, _, body = request(url, "/v1/models", headers={"Authorization": "Bearer wrong"})
        assert status == 401 and "Incorrect API key" in body["error"]["message"]
        assert request(url, "/health")[0] == 200
        assert request(url, "/")[0] == 200
        with pytest.raises(openai.AuthenticationError):
            _client(url, "wrong").models.list()
        r = _client(url, "sk-test").completions.create(model="qwen2", prompt="Hi", max_tokens=3, temperature=0)
        assert r.choices[0].text == library["qwen2"].generate("Hi", max_new_tokens=3, do_sample=False).text


def test_cors_headers_only_for_the_origins_given(library):
    preflight = {"Origin": "http://app.example", "Access-Control-Request-Method": "POST"}
    with running(create_app({"qwen2": _fresh("qwen2")}, ServerSettings(cors_origins=["http://app.example"]))) as url:
        status, headers, _ = request(url, "/v1/chat/completions", headers=preflight, method="OPTIONS")
        assert status == 200 and headers.get("access-control-allow-origin") == "http://app.example"
        _, headers, _ = request(url, "/v1/models", headers={"Origin": "http://evil.example"})
        assert "access-control-allow-origin" not in {k.lower() for k in headers}
    with running(create_app({"qwen2": _fresh("qwen2")})) as url:
        _, headers, _ = request(url, "/v1/models", headers={"Origin": "http://app.example"})
        assert "access-control-allow-origin" not in {k.lower() for k in headers}


def test_an_oversized_body_is_a_413_and_the_server_keeps_serving(library):
    with running(create_app({"qwen2": _fresh("qwen2")}, ServerSettings(max_body_mb=0.001))) as url:  # about 1 KB
        big = json.dumps({"model": "qwen2", "prompt": "x" * 5000, "max_tokens": 2})
        status, _, body = request(url, "/v1/completions", big)
        assert status == 413 and "--max-body-mb" in body["error"]["message"]
        chunked = iter([big[:3000].encode(), big[3000:].encode()])  # no Content-Length: read up to the limit
        status, _, body = request(url, "/v1/completions", chunked, headers={"Transfer-Encoding": "chunked"})
        assert status == 413 and body["error"]["code"] == "request_too_large"
        small = json.dumps({"model": "qwen2", "prompt": "Hi", "max_tokens": 2, "temperature": 0})
        assert request(url, "/v1/completions", small)[0] == 200


def test_a_request_past_the_timeout_is_a_408_and_counted(library):
    with running(create_app({"qwen2": _fresh("qwen2")}, ServerSettings(timeout=1e-4))) as url:
        status, _, body = request(
            url, "/v1/completions", json.dumps({"model": "qwen2", "prompt": "hello", "max_tokens": 100})
        )
        assert status == 408 and body["error"]["code"] == "request_timeout" and "time limit" in body["error"]["message"]
        assert metrics(url)['inference4py_requests_timed_out_total{model="qwen2"}'] == 1
        assert request(url, "/health")[0] == 200


def test_latency_histograms_count_every_token(base):
    before = metrics(base)
    r = _client(base).completions.create(model="qwen2", prompt="hello", max_tokens=6, temperature=0)
    after = metrics(base)
    ttft = 'inference4py_time_to_first_token_seconds_count{model="qwen2"}'
    itl = 'inference4py_inter_token_latency_seconds_count{model="qwen2"}'
    assert after[ttft] == before[ttft] + 1
    assert after[itl] == before[itl] + r.usage.completion_tokens - 1


def test_rss_stays_flat_over_five_hundred_requests(library):
    psutil = pytest.importorskip("psutil")
    process = psutil.Process()
    with running(create_app({"qwen2": _fresh("qwen2")}, ServerSettings(max_concurrent=4))) as url:
        client = _client(url)

        def ask(i: int) -> None:
            client.completions.create(model="qwen2", prompt=PROMPTS[i % 8] + str(i % 50), max_tokens=4, temperature=0)

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            list(pool.map(ask, range(100)))  # warm-up: arenas, caches and the prefix cache fill
            warm = process.memory_info().rss
            list(pool.map(ask, range(100, 600)))
        grown = process.memory_info().rss - warm
        assert metrics(url)['inference4py_requests_completed_total{model="qwen2"}'] == 600
    assert grown < 40 << 20, f"RSS grew by {grown >> 20} MB over 500 requests"


def test_an_encoder_decoder_model_is_served_through_completions():
    from inference4py.serve import load_models
    from inference4py.tasks.seq2seq_base import Seq2SeqTask

    t5 = Seq2SeqTask.builder().model_path(MODELS / "t5").build()
    want = t5.generate("translate English to German: The house is wonderful.", max_new_tokens=12, do_sample=False)
    with running(create_app(load_models([str(MODELS / "t5"), str(MODELS / "whisper"), str(MODELS / "qwen2")]))) as url:
        client = _client(url)
        body = {"model": "t5", "prompt": "translate English to German: The house is wonderful.", "max_tokens": 12}
        r = client.completions.create(**body, temperature=0)
        assert r.choices[0].text == want.text and r.usage.prompt_tokens == want.prompt_tokens
        streamed = "".join(c.choices[0].text for c in client.completions.create(**body, temperature=0, stream=True))
        assert streamed == want.text
        status, _, error = request(
            url, "/v1/chat/completions", json.dumps({"model": "t5", "messages": [{"role": "user", "content": "Hi"}]})
        )
        assert status == 400 and "/v1/completions" in error["error"]["message"] and "qwen2" in error["error"]["message"]
        status, _, error = request(url, "/v1/completions", json.dumps({"model": "whisper", "prompt": "Hi"}))
        assert status == 400 and "/v1/audio/transcriptions" in error["error"]["message"]
        status, _, error = request(url, "/v1/completions", json.dumps({"model": "t5", "prompt": ""}))
        assert status == 400 and "empty" in error["error"]["message"]
        assert request(url, "/health")[0] == 200
