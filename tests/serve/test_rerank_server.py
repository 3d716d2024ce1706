"""``POST /v1/rerank``, for real: uvicorn on 127.0.0.1 and a free port, driven with httpx.

Answers are compared with OnnxReranker built directly on the same folder and with transformers'
logits (the fixture's references); the shape is llama-server's (``model``, ``object``, ``usage``,
``results`` of ``index`` and ``relevance_score``). Bad requests get the API's 400 error object while
the server goes on answering, and rerank requests are answered while a chat streams on another model.
"""

from __future__ import annotations

import asyncio
import json
import threading

import httpx
import numpy as np
import pytest

from inference4py import OnnxReranker
from inference4py.serve import create_app, load_models
from inference4py.serve.rerank import RerankBatcher
from tests.conftest import MODELS, load_reference
from tests.serve.support import running

FOLDER = MODELS / "cross-encoder"
QWEN = MODELS / "qwen2"
REF = load_reference("reranker")
QUERY, DOCS = REF["queries"][0], REF["documents"]


@pytest.fixture(scope="module")
def direct():
    with OnnxReranker.builder().model_path(FOLDER).build() as model:
        yield model


@pytest.fixture(scope="module")
def server():
    models = load_models([str(FOLDER), str(QWEN)])
    assert isinstance(models["cross-encoder"], OnnxReranker)  # detected from the folder
    with running(create_app(models)) as url:
        yield url


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server, timeout=60) as client:
        yield client


def _order(scores: list[float]) -> list[int]:
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))


def test_answers_llama_servers_shape_with_transformers_scores(http):
    response = http.post("/v1/rerank", json={"model": "cross-encoder", "query": QUERY, "documents": DOCS})
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"model", "object", "usage", "results"}
    assert body["model"] == "cross-encoder" and body["object"] == "list"
    assert all(set(r) == {"index", "relevance_score"} for r in body["results"])
    assert [r["index"] for r in body["results"]] == _order(REF["scores"][0])
    by_index = {r["index"]: r["relevance_score"] for r in body["results"]}
    np.testing.assert_allclose([by_index[i] for i in range(len(DOCS))], REF["scores"][0], atol=1e-5, rtol=0)
    tokens = sum(len(ids) for ids in REF["input_ids"][QUERY])
    assert body["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens}


def test_top_n_return_documents_and_the_aliases(http, direct):
    query = REF["queries"][2]
    expected = direct.rerank(query, DOCS, top_n=3)
    for path in ("/v1/rerank", "/rerank", "/v2/rerank"):
        body = http.post(path, json={"query": query, "documents": DOCS, "top_n": 3, "return_documents": True}).json()
        assert [r["index"] for r in body["results"]] == [r.index for r in expected]
        assert [r["relevance_score"] for r in body["results"]] == [r.score for r in expected]
        assert [r["document"] for r in body["results"]] == [{"text": DOCS[r.index]} for r in expected]
    many = http.post("/v1/rerank", json={"query": query, "documents": DOCS[:2], "top_n": 10}).json()
    assert len(many["results"]) == 2


def test_documents_as_objects_with_text(http):
    docs = [{"text": doc} for doc in DOCS]
    body = http.post("/v1/rerank", json={"model": "cross-encoder", "query": QUERY, "documents": docs}).json()
    assert [r["index"] for r in body["results"]] == _order(REF["scores"][0])


def test_models_lists_the_reranker(http):
    cards = {card["id"]: card for card in http.get("/v1/models").json()["data"]}
    assert cards["cross-encoder"]["capabilities"] == ["rerank"]
    assert "rerank" not in cards["qwen2"]["capabilities"]


@pytest.mark.parametrize(
    "body,param,words",
    [
        ({"query": "q", "documents": []}, "documents", "empty list"),
        ({"query": "q", "documents": "one string"}, "documents", "valid list"),
        ({"query": "q", "documents": ["ok", 3]}, "documents.1", ""),
        ({"query": 3, "documents": ["ok"]}, "query", "valid string"),
        ({"documents": ["ok"]}, "query", "Field required"),
        ({"query": "", "documents": ["ok"]}, "query", "empty string"),
        ({"query": "q", "documents": ["ok"], "top_n": 0}, "top_n", "greater than or equal to 1"),
        ({"query": "q", "documents": ["ok"], "top_n": "2"}, "top_n", ""),
        ({"model": "qwen2", "query": "q", "documents": ["ok"]}, "model", "not a reranker"),
    ],
)
def test_bad_requests_get_the_400_error_object(http, body, param, words):
    response = http.post("/v1/rerank", json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert words in error["message"]
    assert http.post("/v1/rerank", json={"query": QUERY, "documents": DOCS[:1]}).status_code == 200


def test_a_chat_to_the_reranker_is_sent_to_rerank(http):
    response = http.post(
        "/v1/chat/completions", json={"model": "cross-encoder", "messages": [{"role": "user", "content": "hi"}]}
    )
    assert response.status_code == 400 and "/v1/rerank" in response.json()["error"]["message"]


def test_eight_concurrent_reranks_while_a_chat_streams(server, http, direct):
    chat = {
        "model": "qwen2",
        "messages": [{"role": "user", "content": "Hello"}],
        "max_tokens": 64,
        "temperature": 0,
        "ignore_eos": True,
    }
    alone = http.post("/v1/chat/completions", json=chat).json()["choices"][0]["message"]["content"]
    expected = {q: direct.rerank(q, DOCS) for q in REF["queries"]}
    streamed: list[str] = []
    first_piece, reranked = threading.Event(), threading.Event()

    def stream_chat() -> None:
        with (
            httpx.Client(base_url=server, timeout=60) as client,
            client.stream("POST", "/v1/chat/completions", json={**chat, "stream": True}) as response,
        ):
            for line in response.iter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    delta = json.loads(line[len("data: ") :])["choices"][0]["delta"]
                    streamed.append(delta.get("content") or "")
                    if not first_piece.is_set():
                        first_piece.set()
                        reranked.wait(60)  # the chat's response stays open until the reranks are answered

    async def reranks() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=server, timeout=60) as client:
            queries = [REF["queries"][i % len(REF["queries"])] for i in range(8)]
            sent = [client.post("/v1/rerank", json={"query": q, "documents": DOCS}) for q in queries]
            return list(await asyncio.gather(*sent))

    chatting = threading.Thread(target=stream_chat)
    chatting.start()
    assert first_piece.wait(60)
    responses = asyncio.run(reranks())
    read_meanwhile = len(streamed)
    reranked.set()
    chatting.join(60)
    assert read_meanwhile == 1 and len(streamed) > 1  # the reranks were answered while the chat streamed
    for i, response in enumerate(responses):
        results = response.json()["results"]
        want = expected[REF["queries"][i % len(REF["queries"])]]
        assert [r["index"] for r in results] == [r.index for r in want]
        np.testing.assert_allclose([r["relevance_score"] for r in results], [r.score for r in want], atol=1e-6)
    assert "".join(streamed) == alone


def test_requests_that_wait_are_scored_together_in_one_run(direct):
    """The batcher: one run goes; the seven requests that arrive meanwhile make the next run, together."""

    class GatedWorker:
        model = direct

        def __init__(self) -> None:
            self.gate = asyncio.Event()

        async def run(self, job):
            await self.gate.wait()
            return job()

    async def scenario() -> tuple[RerankBatcher, list[tuple[np.ndarray, int]]]:
        worker = GatedWorker()
        batcher = RerankBatcher(worker)  # type: ignore[arg-type]
        queries = [REF["queries"][i % len(REF["queries"])] for i in range(8)]
        tasks = [asyncio.ensure_future(batcher.score(queries[0], DOCS))]
        await asyncio.sleep(0.01)  # the first run has started with one request, and waits at the gate
        tasks += [asyncio.ensure_future(batcher.score(q, DOCS)) for q in queries[1:]]
        await asyncio.sleep(0.01)  # the seven others wait for the next run
        worker.gate.set()
        return batcher, list(await asyncio.gather(*tasks))

    batcher, results = asyncio.run(scenario())
    assert (batcher.runs, batcher.largest) == (2, 7)
    for i, (scores, tokens) in enumerate(results):
        q = i % len(REF["queries"])
        np.testing.assert_allclose(scores, REF["scores"][q], atol=1e-5, rtol=0)
        assert tokens == sum(len(ids) for ids in REF["input_ids"][REF["queries"][q]])


def test_an_unknown_model_is_a_404(http):
    response = http.post("/v1/rerank", json={"model": "nope", "query": "q", "documents": ["d"]})
    assert response.status_code == 404 and response.json()["error"]["param"] == "model"
