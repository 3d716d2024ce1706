"""``POST /v1/embeddings``, for real: uvicorn on 127.0.0.1 and a free port, driven by the `openai` client.

Every answer is compared with OnnxEmbedder built directly on the same folder (and with
sentence-transformers' encode() through the fixture's references). Bad requests must get OpenAI
error objects with the right status and parameter, and the server must keep answering.
"""

from __future__ import annotations

import base64
import json

import numpy as np
import openai
import pytest

from inference4py import OnnxEmbedder, OnnxTextGenerator
from inference4py.serve import create_app, load_models
from tests.conftest import MODELS, load_reference
from tests.serve.support import metrics, request, running

FOLDER = MODELS / "sentence-bert"
QWEN = MODELS / "qwen2"
REF = load_reference("embedding")
TEXTS: list[str] = REF["texts"]


@pytest.fixture(scope="module")
def direct():
    with OnnxEmbedder.builder().model_path(FOLDER).build() as model:
        yield model


@pytest.fixture(scope="module")
def server():
    models = load_models([str(FOLDER), str(QWEN)])
    assert isinstance(models["sentence-bert"], OnnxEmbedder)  # detected from the folder
    assert isinstance(models["qwen2"], OnnxTextGenerator)
    with running(create_app(models)) as url:
        yield url


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server}/v1", api_key="none", max_retries=0, timeout=60)


def _vectors(response) -> np.ndarray:
    assert [d.index for d in response.data] == list(range(len(response.data)))
    return np.asarray([d.embedding for d in response.data], dtype=np.float32)


def test_float_vectors_equal_the_library_and_encode(client, direct):
    response = client.embeddings.create(model="sentence-bert", input=TEXTS, encoding_format="float")
    assert response.object == "list" and response.model == "sentence-bert"
    assert all(d.object == "embedding" for d in response.data)
    vectors = _vectors(response)
    np.testing.assert_array_equal(vectors, direct.embed(TEXTS))
    expected = np.asarray(REF["variants"]["mean_normalize"]["embeddings"], dtype=np.float32)
    np.testing.assert_allclose(vectors, expected, atol=1e-5, rtol=0)
    tokens = sum(len(ids) for ids in direct.tokenize(TEXTS))
    assert response.usage.prompt_tokens == response.usage.total_tokens == tokens


def test_base64_is_the_same_float32_bytes(client, server, direct):
    # the openai client asks for base64 when no format is given, and decodes it
    default = client.embeddings.create(model="sentence-bert", input=TEXTS)
    np.testing.assert_array_equal(_vectors(default), direct.embed(TEXTS))
    status, _, body = request(
        server,
        "/v1/embeddings",
        json.dumps({"model": "sentence-bert", "input": TEXTS[:2], "encoding_format": "base64"}),
    )
    assert status == 200
    encoded = [item["embedding"] for item in body["data"]]
    assert all(isinstance(e, str) for e in encoded)
    decoded = np.stack([np.frombuffer(base64.b64decode(e), dtype="<f4") for e in encoded])
    np.testing.assert_array_equal(decoded, direct.embed(TEXTS[:2]))


def test_a_single_string_input(client, direct):
    response = client.embeddings.create(model="sentence-bert", input=TEXTS[3], encoding_format="float")
    assert len(response.data) == 1
    np.testing.assert_array_equal(_vectors(response)[0], direct.embed(TEXTS[3]))
    assert response.usage.prompt_tokens == len(direct.tokenize([TEXTS[3]])[0])


def test_dimensions_truncates_and_renormalizes(client, direct):
    response = client.embeddings.create(model="sentence-bert", input=TEXTS, dimensions=8, encoding_format="float")
    vectors = _vectors(response)
    assert vectors.shape == (len(TEXTS), 8)
    np.testing.assert_array_equal(vectors, direct.embed(TEXTS, dimensions=8))
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)


def test_models_lists_the_embedder(client):
    assert {m.id for m in client.models.list()} == {"sentence-bert", "qwen2"}


@pytest.mark.parametrize(
    ("body", "param", "needle"),
    [
        ({"input": []}, "input", "input is an empty list"),
        ({"input": ""}, "input", "input is an empty string"),
        ({"input": ["ok", ""]}, "input", "input[1] is an empty string"),
        ({"input": [101, 102]}, "input", "input as token ids is not supported"),
        ({"input": [[101, 102]]}, "input", "input as token ids is not supported"),
        ({"input": "hi", "dimensions": 64}, "dimensions", "dimensions=64 is more than this model's 32"),
        ({"input": "hi", "dimensions": 0}, "dimensions", "greater than or equal to 1"),
        ({"input": "hi", "encoding_format": "int8"}, "encoding_format", "encoding_format"),
        ({"input": {"text": "hi"}}, "input", "input"),
        ({}, "input", "input"),
    ],
)
def test_bad_requests_get_openai_errors(server, body, param, needle):
    status, _, payload = request(server, "/v1/embeddings", json.dumps({"model": "sentence-bert", **body}))
    assert status == 400
    error = payload["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert needle in error["message"]


def test_the_openai_client_sees_a_bad_request(client):
    with pytest.raises(openai.BadRequestError) as info:
        client.embeddings.create(model="sentence-bert", input=[])
    assert info.value.status_code == 400 and "empty list" in str(info.value)


def test_model_errors(server):
    status, _, payload = request(server, "/v1/embeddings", json.dumps({"model": "absent", "input": "hi"}))
    assert status == 404 and payload["error"]["type"] == "not_found_error"
    assert "Served models: sentence-bert, qwen2" in payload["error"]["message"]
    status, _, payload = request(server, "/v1/embeddings", json.dumps({"model": "qwen2", "input": "hi"}))
    assert status == 400 and payload["error"]["param"] == "model"
    assert (
        "'qwen2' is not an embedding model. Embedding models served here: sentence-bert." in payload["error"]["message"]
    )
    chat = {"model": "sentence-bert", "messages": [{"role": "user", "content": "hi"}]}
    status, _, payload = request(server, "/v1/chat/completions", json.dumps(chat))
    assert status == 400 and "is an embedding model: send its input to /v1/embeddings" in payload["error"]["message"]
    status, _, payload = request(server, "/v1/completions", json.dumps({"model": "sentence-bert", "prompt": "hi"}))
    assert status == 400 and payload["error"]["param"] == "model"


def test_the_server_keeps_answering_and_counts_tokens(client, server, direct):
    before = metrics(server)
    request(server, "/v1/embeddings", json.dumps({"model": "sentence-bert", "input": []}))
    response = client.embeddings.create(model="sentence-bert", input=TEXTS[:3], encoding_format="float")
    np.testing.assert_array_equal(_vectors(response), direct.embed(TEXTS[:3]))
    after = metrics(server)
    key = next(k for k in after if k.startswith("inference4py_prompt_tokens_total") and "sentence-bert" in k)
    assert after[key] - before.get(key, 0) == response.usage.prompt_tokens


def test_no_embedder_served_says_how_to_serve_one(tmp_path):
    with running(create_app(load_models([str(QWEN)]))) as url:
        status, _, payload = request(url, "/v1/embeddings", json.dumps({"model": "qwen2", "input": "hi"}))
    assert status == 400 and "No embedding model is served" in payload["error"]["message"]


def test_an_unknown_field_name_is_ignored_with_a_warning(server, caplog):
    import logging

    with caplog.at_level(logging.WARNING, logger="inference4py.serve"):
        status, _, payload = request(
            server, "/v1/embeddings", json.dumps({"model": "sentence-bert", "input": "hi", "truncate": True})
        )
    assert status == 200 and len(payload["data"]) == 1
    assert any("truncate" in m for m in caplog.messages)
