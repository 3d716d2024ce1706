"""``POST /tokenize`` and ``/detokenize`` in llama-server's shape, over the real server, against the model's own tokenizer."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from inference4py import OnnxTextGenerator  # noqa: E402
from inference4py.serve import ServerSettings, create_app, load_models  # noqa: E402
from inference4py.tokenization import load_tokenizer  # noqa: E402
from tests.conftest import FIXTURES  # noqa: E402
from tests.serve.support import request, running  # noqa: E402

QWEN = FIXTURES / "models" / "qwen2"
LLAMA = FIXTURES / "models" / "llama"
EMBEDDER = FIXTURES / "models" / "sentence-bert"
TRICKY = [
    "Hello world",
    "  leading spaces\nand\ttabs",
    "日本語のテキスト",
    "emoji 🎉👩‍💻 mixed",
    "def f(x):\n    return x",
]


@pytest.fixture(scope="module")
def one():
    """A server with one text model (and an embedder, which is not one): ``model`` may be left out."""
    with running(create_app(load_models([str(QWEN), str(EMBEDDER)]))) as url:
        yield url


@pytest.fixture(scope="module")
def two():
    with running(create_app(load_models([str(QWEN), str(LLAMA)]))) as url:
        yield url


def _post(url: str, path: str, body: dict) -> tuple[int, dict]:
    status, _, payload = request(url, path, json.dumps(body))
    return status, payload


@pytest.mark.parametrize("text", TRICKY)
def test_tokens_are_the_models_own_and_detokenize_gives_the_text_back(one, text):
    tokenizer = load_tokenizer(QWEN)
    status, payload = _post(one, "/tokenize", {"content": text})
    assert status == 200 and payload == {"tokens": tokenizer.encode(text, add_special_tokens=False)}
    status, back = _post(one, "/detokenize", {"tokens": payload["tokens"], "model": "qwen2"})
    assert status == 200 and back == {"content": text}


@pytest.mark.parametrize("text", TRICKY)
def test_pieces_spell_the_text_and_cut_characters_come_as_bytes(one, text):
    status, payload = _post(one, "/tokenize", {"content": text, "with_pieces": True})
    assert status == 200
    ids = _post(one, "/tokenize", {"content": text})[1]["tokens"]
    assert [t["id"] for t in payload["tokens"]] == ids
    spelled = b"".join(
        t["piece"].encode("utf-8") if isinstance(t["piece"], str) else bytes(t["piece"]) for t in payload["tokens"]
    )
    assert spelled == text.encode("utf-8")
    for t in payload["tokens"]:  # a list only where the token is not whole UTF-8
        if isinstance(t["piece"], list):
            with pytest.raises(UnicodeDecodeError):
                bytes(t["piece"]).decode("utf-8")


def test_a_cut_character_is_a_list_of_bytes(one):
    pieces = _post(one, "/tokenize", {"content": "🎉", "with_pieces": True})[1]["tokens"]
    assert any(isinstance(t["piece"], list) for t in pieces), pieces  # the tiny vocabulary splits the emoji


def test_add_special_and_special_tokens_round_trip(two):
    tokenizer = load_tokenizer(LLAMA)
    assert tokenizer.bos_token_id is not None
    with_bos = _post(two, "/tokenize", {"content": "Hi", "add_special": True, "model": "llama"})[1]["tokens"]
    assert with_bos == tokenizer.encode("Hi", add_special_tokens=True) and with_bos[0] == tokenizer.bos_token_id
    assert _post(two, "/tokenize", {"content": "Hi", "model": "llama"})[1]["tokens"] == tokenizer.encode(
        "Hi", add_special_tokens=False
    )
    qwen = load_tokenizer(QWEN)
    marked = "<|im_start|>user\nHi<|im_end|>"
    ids = _post(two, "/tokenize", {"content": marked, "model": "qwen2"})[1]["tokens"]
    assert qwen.token_to_id("<|im_end|>") in ids  # special-token text is read as the special token
    assert _post(two, "/detokenize", {"tokens": ids, "model": "qwen2"})[1] == {"content": marked}


def test_the_model_is_needed_when_several_text_models_are_served(two):
    status, payload = _post(two, "/tokenize", {"content": "Hi"})
    assert status == 400 and payload["error"]["param"] == "model"
    assert "qwen2" in payload["error"]["message"] and "llama" in payload["error"]["message"]
    status, payload = _post(two, "/detokenize", {"tokens": [1, 2]})
    assert status == 400 and payload["error"]["param"] == "model"
    status, payload = _post(two, "/tokenize", {"content": "Hi", "model": "nope"})
    assert status == 404 and payload["error"]["type"] == "not_found_error"


@pytest.mark.parametrize(
    "path,body,param",
    [
        ("/detokenize", {"tokens": [1, 10**9]}, "tokens[1]"),
        ("/detokenize", {"tokens": [-1]}, "tokens[0]"),
        ("/detokenize", {"tokens": [1, "2"]}, "tokens.1"),
        ("/detokenize", {"tokens": [True]}, "tokens.0"),
        ("/detokenize", {}, "tokens"),
        ("/tokenize", {"content": 5}, "content"),
        ("/tokenize", {"content": "Hi", "with_pieces": "yes"}, "with_pieces"),
        ("/tokenize", {"content": "Hi", "add_special": 1}, "add_special"),
    ],
)
def test_bad_requests_are_openai_errors_naming_the_field(one, path, body, param):
    status, payload = _post(one, path, body)
    assert status == 400 and set(payload["error"]) == {"message", "type", "param", "code"}
    assert payload["error"]["param"] == param, payload
    assert _post(one, "/tokenize", {"content": "ok"})[0] == 200


def test_an_unknown_field_is_ignored(one):
    status, payload = _post(one, "/tokenize", {"content": "Hi", "parse_special": False, "whatever": 1})
    assert status == 200 and payload == _post(one, "/tokenize", {"content": "Hi"})[1]


def test_the_api_key_guards_them():
    model = OnnxTextGenerator.builder().model_path(QWEN).build()
    with running(create_app({"qwen2": model}, ServerSettings(api_key="sk-test"))) as url:
        assert request(url, "/tokenize", json.dumps({"content": "Hi"}))[0] == 401
        status, _, payload = request(
            url, "/tokenize", json.dumps({"content": "Hi"}), headers={"Authorization": "Bearer sk-test"}
        )
        assert status == 200 and payload["tokens"]
