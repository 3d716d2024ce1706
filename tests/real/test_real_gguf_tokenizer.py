"""Real GGUF vocabularies (SmolLM2: gpt2/"smollm", Qwen2.5-Coder: gpt2/"qwen2", Gemma 3: llama/"default").

The GGUF files are the ones ``tools/build_real.py`` extracts into ``<real>/gguf/``; the references
(tests/fixtures/gguf/tokenizer-real-references.json, from ``tools/fixtures/gguf_tokenizers.py
--real``) are each model's ``<name>-hf`` tokenizer, checked there against llama.cpp's semantics,
on the same varied corpus as the fixtures.  No transformers here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from inference4py.gguf.reader import GGUFFile
from inference4py.gguf.tokenizer import generation_defaults, tokenizer_files
from inference4py.tokenization import Tokenizer, load_tokenizer
from tests.real.conftest import REAL, not_built

pytestmark = pytest.mark.real

REFS_PATH = Path(__file__).parent.parent / "fixtures" / "gguf" / "tokenizer-real-references.json"
REFS = json.loads(REFS_PATH.read_text(encoding="utf-8"))
CORPUS: list[str] = REFS["corpus"]
EOS = {  # the stop tokens tools/real/llm.py gives each model, all in the converted generation defaults
    "smollm2.gguf": ["<|im_end|>"],
    "qwen2.5-coder.gguf": ["<|im_end|>", "<|endoftext|>"],
    "gemma3.gguf": ["<eos>", "<end_of_turn>"],
}


@pytest.fixture(scope="module", params=sorted(REFS["files"]))
def converted(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Tokenizer, Any]:
    name = request.param
    path = REAL / "gguf" / name
    if not path.is_file():
        not_built(f"gguf/{name}", name.removesuffix(".gguf"))
    meta = GGUFFile(path).metadata
    folder = tmp_path_factory.mktemp(name.removesuffix(".gguf"))
    for filename, content in tokenizer_files(meta).items():
        (folder / filename).write_text(json.dumps(content, ensure_ascii=False), encoding="utf-8")
    return name, load_tokenizer(folder), meta


def test_ids_and_decodes_equal_references(converted: tuple[str, Tokenizer, Any]) -> None:
    name, tok, _meta = converted
    bad = []
    for text, case in zip(CORPUS, REFS["files"][name]["cases"]):
        got = {
            "ids": tok.encode(text),
            "ids_plain": tok.encode(text, add_special_tokens=False),
            "decode": tok.decode(case["ids"]),
            "decode_special": tok.decode(case["ids"], skip_special_tokens=False),
        }
        bad += [(text, key) for key, value in got.items() if value != case[key]]
    assert not bad, f"{name}: {len(bad)} differences, first {bad[:5]}"


def test_chat_template(converted: tuple[str, Tokenizer, Any]) -> None:
    name, tok, meta = converted
    chat = REFS["files"][name]["chat"]
    if meta.get("tokenizer.chat_template") is None:  # Gemma 3 270M (pretrained) carries none
        assert tok.chat_template is None
        assert tok.encode(chat["text"], add_special_tokens=False) == chat["ids"]
        return
    text = tok.apply_chat_template(chat["messages"], add_generation_prompt=True)
    assert text == chat["text"]
    assert tok.encode(text, add_special_tokens=False) == chat["ids"]


def test_generation_defaults(converted: tuple[str, Tokenizer, Any]) -> None:
    name, tok, meta = converted
    defaults = generation_defaults(meta)
    for text in EOS[name]:
        assert tok.token_to_id(text) in defaults["eos_token_id"]
    assert defaults["eos_token_id"][0] == tok.eos_token_id
    assert defaults["pad_token_id"] == tok.pad_token_id
