"""GGUF vocabularies as tokenizers files: ids, decodes, chat and special tokens equal the references.

tests/fixtures/gguf/tokenizer-*.gguf are tokenizer-only GGUF files written by
tools/fixtures/gguf_tokenizers.py; tokenizer-references.json holds, per file, what the model's
original tokenizer gives on a varied corpus (code, emoji, CJK, whitespace runs, tabs, numbers,
accents, special tokens in text) and where transformers' own GGUF tokenizer differs from it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from inference4py.errors import UnsupportedModelError
from inference4py.gguf.reader import GGUFFile
from inference4py.gguf.tokenizer import SUPPORTED_PRE, generation_defaults, tokenizer_files
from inference4py.tokenization import Tokenizer, load_tokenizer

pytest.importorskip("gguf")

GGUF_DIR = Path(__file__).parent.parent / "fixtures" / "gguf"
REFS = json.loads((GGUF_DIR / "tokenizer-references.json").read_text(encoding="utf-8"))
CORPUS: list[str] = REFS["corpus"]
FILES = sorted(REFS["files"])


def write_folder(metadata: dict[str, Any], folder: Path, *, model_type: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in tokenizer_files(metadata).items():
        (folder / name).write_text(json.dumps(content, ensure_ascii=False), encoding="utf-8")
    if model_type is not None:  # the converter writes config.json beside the tokenizer files
        (folder / "config.json").write_text(json.dumps({"model_type": model_type}), encoding="utf-8")
    return folder


_METADATA: dict[str, dict[str, Any]] = {}


def metadata(name: str) -> dict[str, Any]:
    if name not in _METADATA:
        _METADATA[name] = GGUFFile(GGUF_DIR / name).metadata
    return _METADATA[name]


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Tokenizer]:
    root = tmp_path_factory.mktemp("gguf-tokenizers")
    return {name: load_tokenizer(write_folder(metadata(name), root / name)) for name in FILES}


@pytest.mark.parametrize("name", FILES)
def test_ids_equal_references(tokenizers: dict[str, Tokenizer], name: str) -> None:
    tok, ref = tokenizers[name], REFS["files"][name]
    for text, case in zip(CORPUS, ref["cases"]):
        assert tok.encode(text) == case["ids"], text
        assert tok.encode(text, add_special_tokens=False) == case["ids_plain"], text


@pytest.mark.parametrize("name", FILES)
def test_decodes_equal_references(tokenizers: dict[str, Tokenizer], name: str) -> None:
    tok, ref = tokenizers[name], REFS["files"][name]
    for text, case in zip(CORPUS, ref["cases"]):
        assert tok.decode(case["ids"]) == case["decode"], text
        assert tok.decode(case["ids"], skip_special_tokens=False) == case["decode_special"], text


@pytest.mark.parametrize("name", FILES)
def test_round_trip_of_plain_text(tokenizers: dict[str, Tokenizer], name: str) -> None:
    tok = tokenizers[name]
    for text in CORPUS:
        if "<" in text or "\r" in text:  # special tokens are skipped; llama's sentencepiece drops nothing else
            continue
        assert tok.decode(tok.encode(text)) == text


@pytest.mark.parametrize("name", FILES)
def test_chat_template(tokenizers: dict[str, Tokenizer], name: str) -> None:
    tok, chat = tokenizers[name], REFS["files"][name]["chat"]
    text = tok.apply_chat_template(chat["messages"], add_generation_prompt=True)
    assert text == chat["text"]
    assert tok.encode(text, add_special_tokens=False) == chat["ids"]


def test_transformers_gguf_agreement_is_recorded() -> None:
    # where transformers' GGUF conversion is right (it ignores tokenizer.ggml.pre and add_bos_token,
    # and makes Gemma's BPE scores a Unigram model), the references are its ids too
    agrees = {name: REFS["files"][name]["transformers_gguf"]["agrees"] for name in FILES}
    assert agrees["tokenizer-qwen2.gguf"] == len(CORPUS)
    assert agrees["tokenizer-llama.gguf"] == len(CORPUS)


def test_special_tokens_and_bos_eos(tokenizers: dict[str, Tokenizer]) -> None:
    llama = tokenizers["tokenizer-llama.gguf"]
    assert (llama.bos_token, llama.eos_token, llama.unk_token) == ("<s>", "</s>", "<unk>")
    assert llama.encode("hi")[0] == llama.bos_token_id == 1
    assert llama.encode("hi", add_special_tokens=False)[0] != 1
    qwen = tokenizers["tokenizer-qwen2.gguf"]
    assert (qwen.bos_token, qwen.eos_token, qwen.pad_token) == ("<|endoftext|>", "<|im_end|>", "<|endoftext|>")
    assert qwen.encode("<|im_start|>") == [1001]  # no BOS: tokenizer.ggml.add_bos_token is false
    gemma = tokenizers["tokenizer-gemma.gguf"]
    assert gemma.pad_token == "<pad>" and gemma.encode("x")[0] == 1
    assert gemma.decode(gemma.encode("<start_of_turn>user\n")) == "user\n"  # control tokens are special


def test_generation_defaults() -> None:
    assert generation_defaults(metadata("tokenizer-qwen2.gguf")) == {
        "bos_token_id": 1000,
        "eos_token_id": [1002, 1000],  # <|im_end|>, then <|endoftext|> (llama.cpp ends on it too)
        "pad_token_id": 1000,
    }
    assert generation_defaults(metadata("tokenizer-llama.gguf")) == {"bos_token_id": 1, "eos_token_id": [2]}
    gemma = metadata("tokenizer-gemma.gguf")
    tokens = gemma["tokenizer.ggml.tokens"]
    assert generation_defaults(gemma) == {
        "bos_token_id": 1,
        "eos_token_id": [2, tokens.index("<end_of_turn>")],
        "pad_token_id": tokens.index("<pad>"),
    }


def test_gpt_oss_harmony_end_of_message_is_not_a_stop_token() -> None:
    """<|end|> ends every harmony message (the analysis before the answer too): beside <|return|> and <|call|>
    llama.cpp does not stop on it, and neither do the generation defaults; alone it still stops."""
    meta = metadata("tokenizer-qwen2.gguf")
    tokens = [*meta["tokenizer.ggml.tokens"], "<|return|>", "<|call|>", "<|end|>"]
    types = [*meta["tokenizer.ggml.token_type"], 3, 3, 3]
    harmony = {**meta, "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": types}
    assert generation_defaults(harmony)["eos_token_id"] == [1002, 1000, 1003, 1004]
    alone = {**harmony, "tokenizer.ggml.tokens": [*tokens[:1003], "<|x|>", "<|y|>", "<|end|>"]}
    assert generation_defaults(alone)["eos_token_id"] == [1002, 1000, 1005]


def test_eot_token_id_joins_eos() -> None:
    meta = {**metadata("tokenizer-llama.gguf"), "tokenizer.ggml.eot_token_id": 0}
    assert generation_defaults(meta)["eos_token_id"] == [2, 0]


def test_tokenizer_config(tmp_path: Path) -> None:
    config = tokenizer_files(metadata("tokenizer-smollm.gguf"))["tokenizer_config.json"]
    assert config["add_bos_token"] is False and config["add_eos_token"] is False
    assert config["bos_token"] == "<|im_start|>" and config["eos_token"] == "<|im_end|>"
    assert config["clean_up_tokenization_spaces"] is False
    assert config["model_max_length"] == 128  # llama.context_length
    assert config["chat_template"].startswith("{% for message in messages %}")


def test_config_json_model_type_does_not_change_special_tokens(tmp_path: Path) -> None:
    # a llama config.json beside the files must not turn on LlamaTokenizer's BOS for a SmolLM2-style vocab
    tok = load_tokenizer(write_folder(metadata("tokenizer-smollm.gguf"), tmp_path / "m", model_type="llama"))
    ref = REFS["files"]["tokenizer-smollm.gguf"]["cases"][0]
    assert tok.encode(CORPUS[0]) == ref["ids"]


def test_digits_split_one_by_one_for_smollm(tokenizers: dict[str, Tokenizer]) -> None:
    tok = tokenizers["tokenizer-smollm.gguf"]
    assert len(tok.encode("12345")) == 5


def test_unsupported_model_names_the_supported_ones() -> None:
    meta = {**metadata("tokenizer-llama.gguf"), "tokenizer.ggml.model": "bert"}
    with pytest.raises(UnsupportedModelError, match="gpt2, llama"):
        tokenizer_files(meta)


def test_unsupported_pre_tokenizer() -> None:
    meta = {**metadata("tokenizer-qwen2.gguf"), "tokenizer.ggml.pre": "no-such-pre"}
    with pytest.raises(UnsupportedModelError, match="qwen2"):
        tokenizer_files(meta)


@pytest.mark.parametrize("pre", SUPPORTED_PRE)
def test_every_pre_tokenizer_loads(tmp_path: Path, pre: str) -> None:
    # every regex must compile in tokenizers (Oniguruma) and tokenize the corpus
    meta = {**metadata("tokenizer-qwen2.gguf"), "tokenizer.ggml.pre": pre}
    tok = load_tokenizer(write_folder(meta, tmp_path / pre))
    for text in CORPUS:
        ids = tok.encode(text, add_special_tokens=False)
        if "<|" not in text:
            assert tok.decode(ids) == text or pre == "qwen2", (pre, text)
