"""Tests for inference4py.tokenization.

Tokenizers are trained from scratch in the session (small vocabularies, so
multi-byte characters really split across tokens) and saved in the layouts a
model folder can have.  transformers is never imported here: its ids for the
committed fixture folders come from tests/fixtures/references/tokenizers.json.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from inference4py.errors import (
    ConfigurationError,
    InvalidInputError,
    ModelFilesMissingError,
    ModelLoadError,
    ModelNotFoundError,
)
from inference4py.tokenization import Tokenizer, load_tokenizer, render_chat_template

FIXTURES = Path(__file__).parent / "fixtures"

TRICKY = [
    "Hello world",
    "  leading spaces and  double  spaces",
    "trailing space ",
    "你好，世界！这是一个测试。",
    "日本語のテキストとカタカナ",
    "한국어 문장입니다",
    "emoji 😀🎉 and family 👨‍👩‍👧‍👦 and flags 🇫🇷🇯🇵",
    "👩🏽‍💻 coder",
    "Crème brûlée, naïve café, Ångström, Straße",
    "def f(x):\n\tif x:\n\t\treturn x  # tab\n    else:\n        return None\n",
    "line1\nline2\n\nline4\r\n",
    "mixed: 价格 is €12.50 — ok? «quotes» ‘single’",
    "Don't stop , it 's ok . I 'm here ! We 've they 're",
    "a ' b can n't",
    "    indented",
    "\n\n\n",
    "Ελληνικά και русский текст",
    "math: ∑ x² ≤ ∞",
    "x",
]

_CORPUS_BASE = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello world! This is a small corpus for a tiny tokenizer.",
    "Machine translation turns English sentences into French ones.",
    "def main():\n    print('hello')\n    return 0\n",
    "for i in range(10):\n\tif i % 2:\n\t\tcontinue\n",
    "Don't worry, it's fine. I'm sure we're done; they've left.",
    "Numbers like 3.14, 42 and 1,000 appear too.",
    "Café, naïve, résumé and Straße are European words.",
    "中文 日本語 한국어 are here only rarely.",
    "Emoji 😀 show up once.",
]


_CORPUS_MORE = [
    "Beautiful is better than ugly, and explicit is better than implicit.",
    "Simple is better than complex; complex is better than complicated.",
    "Readability counts. Special cases aren't special enough to break the rules.",
    "Errors should never pass silently, unless explicitly silenced.",
    "In the face of ambiguity, refuse the temptation to guess.",
    "Now is better than never, although never is often better than right now.",
    "If the implementation is hard to explain, it's a bad idea.",
    "Namespaces are one honking great idea -- let's do more of those!",
    "Weather today: sunny, 23 degrees; tomorrow: rain (maybe).",
    "She said \"yes\" and he replied 'no', then they laughed.",
    "Upper CASE, lower case, MiXeD case and snake_case_names.",
    '<html><body class="main">Hello & goodbye</body></html>',
    "email: someone@example.com, url: https://example.org/path?q=1",
    "Quantities: 12kg, 3.5m, 100%, $20, #hashtag, @mention.",
]


def corpus() -> list[str]:
    return (_CORPUS_BASE + _CORPUS_MORE) * 20


# --------------------------------------------------------------------------- #
# builders (also used by tests/generation/test_streaming.py)
# --------------------------------------------------------------------------- #


def build_byte_level_bpe(folder: Path, *, config: dict | None = None, vocab_merges_only: bool = False) -> Path:
    """A GPT-2 style byte-level BPE; tokenizer.json, or vocab.json + merges.txt."""
    from tokenizers import Tokenizer as Backend
    from tokenizers import decoders, models, pre_tokenizers, processors, trainers

    folder.mkdir(parents=True, exist_ok=True)
    backend = Backend(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(corpus(), trainer=trainer)
    if vocab_merges_only:
        backend.model.save(str(folder))
    else:
        backend.save(str(folder / "tokenizer.json"))
    cfg = {
        "tokenizer_class": "GPT2Tokenizer",
        "bos_token": "<|endoftext|>",
        "eos_token": "<|endoftext|>",
        "unk_token": "<|endoftext|>",
        "model_max_length": 1024,
    }
    cfg.update(config or {})
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg), encoding="utf-8")
    return folder


def build_metaspace_bpe(folder: Path, *, config: dict | None = None) -> Path:
    """A Llama style BPE (Metaspace, byte fallback), as TinyLlama's tokenizer.json."""
    from tokenizers import Tokenizer as Backend
    from tokenizers import models, pre_tokenizers, trainers

    folder.mkdir(parents=True, exist_ok=True)
    backend = Backend(models.BPE(unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"], limit_alphabet=70, show_progress=False
    )
    backend.train_from_iterator(corpus(), trainer=trainer)
    spec = json.loads(backend.to_str())
    # Byte-fallback tokens <0x00>..<0xFF> right after the specials, like Llama.
    old = spec["model"]["vocab"]
    specials = ["<unk>", "<s>", "</s>"]
    vocab = {tok: i for i, tok in enumerate(specials)}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for tok, _ in sorted(old.items(), key=lambda kv: kv[1]):
        if tok not in vocab:
            vocab[tok] = len(vocab)
    spec["model"]["vocab"] = vocab
    spec["model"]["byte_fallback"] = True
    spec["model"]["fuse_unk"] = True
    for added in spec["added_tokens"]:
        added["id"] = vocab[added["content"]]
    spec["normalizer"] = {
        "type": "Sequence",
        "normalizers": [
            {"type": "Prepend", "prepend": "\u2581"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
        ],
    }
    spec["pre_tokenizer"] = None
    spec["decoder"] = {
        "type": "Sequence",
        "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0},
        ],
    }
    spec["post_processor"] = None
    (folder / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    cfg = {
        "tokenizer_class": "LlamaTokenizer",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "add_bos_token": True,
        "add_eos_token": False,
        "legacy": False,
        "chat_template": (
            "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
            "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
        ),
    }
    cfg.update(config or {})
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg), encoding="utf-8")
    return folder


def train_spm(path_prefix: Path, *, model_type: str = "unigram", vocab_size: int = 200, **extra) -> Path:
    import sentencepiece as spm

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus()),
        model_writer=model,
        vocab_size=vocab_size,
        model_type=model_type,
        minloglevel=2,
        hard_vocab_limit=False,
        **extra,
    )
    path_prefix.write_bytes(model.getvalue())
    return path_prefix


def build_t5_spm(folder: Path) -> Path:
    """A T5 style folder with only spiece.model (pad=0, eos=1, unk=2)."""
    folder.mkdir(parents=True, exist_ok=True)
    train_spm(
        folder / "spiece.model",
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        pad_piece="<pad>",
        eos_piece="</s>",
        unk_piece="<unk>",
    )
    (folder / "config.json").write_text(json.dumps({"model_type": "t5"}), encoding="utf-8")
    return folder


def build_marian(folder: Path) -> Path:
    """A Marian folder: source.spm, target.spm and a shared vocab.json."""
    import sentencepiece as spm

    folder.mkdir(parents=True, exist_ok=True)
    train_spm(folder / "source.spm", vocab_size=180)
    train_spm(folder / "target.spm", vocab_size=190, byte_fallback=False)
    vocab = {"</s>": 0, "<unk>": 1}
    for name in ("source.spm", "target.spm"):
        sp = spm.SentencePieceProcessor(model_file=str(folder / name))
        for i in range(sp.get_piece_size()):
            piece = sp.id_to_piece(i)
            if piece not in vocab and not sp.is_control(i) and not sp.is_unknown(i):
                vocab[piece] = len(vocab)
    vocab["<pad>"] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"source_lang": "en", "target_lang": "fr", "model_max_length": 512}), encoding="utf-8"
    )
    return folder


def with_config(src: Path, dst: Path, **changes) -> Path:
    """A copy of folder ``src`` whose tokenizer_config.json has ``changes``."""
    import shutil

    shutil.copytree(src, dst)
    path = dst / "tokenizer_config.json"
    cfg = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    cfg.update(changes)
    path.write_text(json.dumps(cfg), encoding="utf-8")
    return dst


@pytest.fixture(scope="session")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tokenizers")
    return {
        "byte_level": build_byte_level_bpe(root / "byte_level"),
        "vocab_merges": build_byte_level_bpe(root / "vocab_merges", vocab_merges_only=True),
        "metaspace": build_metaspace_bpe(root / "metaspace"),
        "t5_spm": build_t5_spm(root / "t5_spm"),
        "marian": build_marian(root / "marian"),
    }


# --------------------------------------------------------------------------- #
# loading
# --------------------------------------------------------------------------- #


def test_byte_level_round_trip(folders):
    tok = load_tokenizer(folders["byte_level"])
    assert isinstance(tok, Tokenizer)
    for text in TRICKY:
        ids = tok.encode(text)
        assert tok.decode(ids) == text
    assert tok.encode("") == []
    assert tok.eos_token_id == tok.token_to_id("<|endoftext|>")
    assert tok.eos_token_ids == (tok.eos_token_id,)
    assert tok.all_special_ids == frozenset({tok.eos_token_id})
    assert tok.model_max_length == 1024
    assert tok.id_to_token(tok.eos_token_id) == "<|endoftext|>"
    assert tok.id_to_token(10**6) is None
    assert tok.token_to_id("no such token") is None


def test_vocab_merges_equals_tokenizer_json(folders):
    full = load_tokenizer(folders["byte_level"])
    bare = load_tokenizer(folders["vocab_merges"])
    # same training run, same merges -> same ids
    for text in TRICKY:
        assert bare.encode(text) == full.encode(text)
        assert bare.decode(bare.encode(text)) == text
    eot = bare.token_to_id("<|endoftext|>")
    assert bare.eos_token_id == eot
    assert bare.decode(bare.encode("a<|endoftext|>b")) == "ab"
    assert bare.decode(bare.encode("a<|endoftext|>b"), skip_special_tokens=False) == "a<|endoftext|>b"
    assert bare.encode("a<|endoftext|>b").count(eot) == 1


def test_vocab_merges_with_bos(tmp_path):
    folder = build_byte_level_bpe(tmp_path / "bos", vocab_merges_only=True, config={"add_bos_token": True})
    tok = load_tokenizer(folder)
    ids = tok.encode("hi")
    assert ids[0] == tok.bos_token_id
    assert tok.encode("hi", add_special_tokens=False) == ids[1:]


def test_metaspace_bos_and_flags(folders, tmp_path):
    tok = load_tokenizer(folders["metaspace"])
    ids = tok.encode("Hello world")
    assert ids[0] == tok.bos_token_id == 1
    assert tok.encode("Hello world", add_special_tokens=False) == ids[1:]
    assert tok.decode(ids) == "Hello world"
    assert tok.decode(ids, skip_special_tokens=False) == "<s> Hello world"
    assert tok.encode("") == [1]
    for text in TRICKY:
        assert tok.decode(tok.encode(text)) == text, text
    # add_eos_token in the config rebuilds the post-processor, as LlamaTokenizerFast does
    both = load_tokenizer(with_config(folders["metaspace"], tmp_path / "eos", add_eos_token=True))
    assert both.encode("Hi")[0] == 1 and both.encode("Hi")[-1] == 2
    none = load_tokenizer(with_config(folders["metaspace"], tmp_path / "nobos", add_bos_token=False))
    assert none.encode("Hi") == tok.encode("Hi", add_special_tokens=False)


def test_byte_fallback_splits_multibyte(folders):
    tok = load_tokenizer(folders["metaspace"])
    pieces = [tok.id_to_token(i) for i in tok.encode("你好", add_special_tokens=False)]
    assert any(p.startswith("<0x") for p in pieces)


def test_clean_up_tokenization_spaces(folders, tmp_path):
    plain = load_tokenizer(folders["byte_level"])
    clean = load_tokenizer(with_config(folders["byte_level"], tmp_path / "b", clean_up_tokenization_spaces=True))
    text = "Hello , world . I 'm fine !"
    assert plain.decode(plain.encode(text)) == text
    assert clean.decode(clean.encode(text)) == "Hello, world. I'm fine!"


def test_added_tokens_decoder_and_special_map(tmp_path):
    folder = build_byte_level_bpe(
        tmp_path / "added",
        config={
            "added_tokens_decoder": {
                "0": {
                    "content": "<|endoftext|>",
                    "lstrip": False,
                    "rstrip": False,
                    "normalized": False,
                    "single_word": False,
                    "special": True,
                },
                "400": {
                    "content": "<|im_start|>",
                    "lstrip": False,
                    "rstrip": False,
                    "normalized": False,
                    "single_word": False,
                    "special": True,
                },
                "401": {
                    "content": "<tool>",
                    "lstrip": False,
                    "rstrip": False,
                    "normalized": False,
                    "single_word": False,
                    "special": False,
                },
            },
            "additional_special_tokens": ["<|im_start|>"],
        },
    )
    tok = load_tokenizer(folder)
    ids = tok.encode("<|im_start|>user<tool>")
    assert ids[0] == 400 and 401 in ids
    assert tok.decode(ids) == "user<tool>"  # special skipped, plain added token kept
    assert 400 in tok.all_special_ids
    assert tok.vocab_size == 402


def test_legacy_special_tokens_map(tmp_path):
    folder = build_byte_level_bpe(tmp_path / "legacy", config={"tokenizer_class": "PreTrainedTokenizerFast"})
    cfg = json.loads((folder / "tokenizer_config.json").read_text())
    del cfg["eos_token"]
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg))
    (folder / "special_tokens_map.json").write_text(json.dumps({"eos_token": "<|endoftext|>", "pad_token": "<pad>"}))
    tok = load_tokenizer(folder)
    assert tok.eos_token == "<|endoftext|>"
    assert tok.pad_token_id == 400  # new special token appended after the vocabulary
    assert tok.decode([tok.pad_token_id, *tok.encode("x")]) == "x"


def test_t5_spiece_only(folders):
    tok = load_tokenizer(folders["t5_spm"])
    ids = tok.encode("Hello world")
    assert ids[-1] == tok.eos_token_id == 1
    assert tok.pad_token_id == 0 and tok.unk_token_id == 2
    assert tok.decode(ids) == "Hello world"
    assert tok.encode("") == [1]
    assert tok.token_to_id("<extra_id_0>") == tok.vocab_size - 1
    # eos is not doubled when the text already ends with it
    assert tok.encode("Hello</s>") == tok.encode("Hello")
    assert tok.decode(tok.encode("Hello world"), skip_special_tokens=False) == "Hello world</s>"


def test_marian(folders):
    tok = load_tokenizer(folders["marian"])
    ids = tok.encode("Hello world")
    assert ids[-1] == tok.eos_token_id == 0
    assert tok.pad_token_id == tok.vocab_size - 1
    assert tok.decode(ids) == "Hello world"
    assert tok.encode("") == [0]


def test_encode_batch(folders):
    tok = load_tokenizer(folders["metaspace"])
    assert tok.encode_batch(["a b", "", "你"]) == [tok.encode("a b"), tok.encode(""), tok.encode("你")]
    spm = load_tokenizer(folders["t5_spm"])
    assert spm.encode_batch(["a b", "c"]) == [spm.encode("a b"), spm.encode("c")]


def test_encode_rejects_non_text(folders):
    tok = load_tokenizer(folders["byte_level"])
    with pytest.raises(InvalidInputError):
        tok.encode(None)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- #
# errors
# --------------------------------------------------------------------------- #


def test_missing_folder(tmp_path):
    with pytest.raises(ModelNotFoundError):
        load_tokenizer(tmp_path / "nope")


def test_missing_files(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelFilesMissingError) as info:
        load_tokenizer(tmp_path)
    assert "tokenizer.json" in str(info.value)
    assert isinstance(info.value, FileNotFoundError)
    assert info.value.missing


def test_missing_merges(tmp_path):
    (tmp_path / "vocab.json").write_text("{}")
    with pytest.raises(ModelFilesMissingError) as info:
        load_tokenizer(tmp_path)
    assert "merges.txt" in info.value.missing


@pytest.mark.parametrize("name", ["tokenizer.json", "tokenizer_config.json"])
def test_corrupt_json(folders, tmp_path, name):
    import shutil

    folder = tmp_path / "corrupt"
    shutil.copytree(folders["byte_level"], folder)
    (folder / name).write_text("{not json", encoding="utf-8")
    with pytest.raises(ModelLoadError):
        load_tokenizer(folder)


def test_corrupt_tokenizer_structure(tmp_path):
    (tmp_path / "tokenizer.json").write_text('{"model": {"type": "Nope"}}')
    with pytest.raises(ModelLoadError):
        load_tokenizer(tmp_path)


def test_corrupt_sentencepiece(tmp_path):
    (tmp_path / "spiece.model").write_bytes(b"not a model")
    with pytest.raises(ModelLoadError):
        load_tokenizer(tmp_path)


# --------------------------------------------------------------------------- #
# chat templates
# --------------------------------------------------------------------------- #


def test_chat_template_from_config(folders):
    tok = load_tokenizer(folders["metaspace"])
    out = tok.apply_chat_template([{"role": "user", "content": "Hi"}])
    assert out == "<|user|>\nHi</s>\n<|assistant|>\n"
    out = tok.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=False)
    assert out == "<|user|>\nHi</s>\n"


def test_chat_template_file_and_named_list(folders, tmp_path):
    import shutil

    folder = tmp_path / "named"
    shutil.copytree(folders["byte_level"], folder)
    cfg = json.loads((folder / "tokenizer_config.json").read_text())
    cfg["chat_template"] = [
        {"name": "default", "template": "D{{ messages[0].content }}"},
        {"name": "tool_use", "template": "T{{ tools | length }}"},
    ]
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg))
    tok = load_tokenizer(folder)
    msgs = [{"role": "user", "content": "x"}]
    assert tok.chat_template == "D{{ messages[0].content }}"
    assert tok.apply_chat_template(msgs) == "Dx"
    assert tok.apply_chat_template(msgs, tools=[{"type": "function", "function": {"name": "f"}}]) == "T1"
    assert tok.apply_chat_template(msgs, template="tool_use", tools=[]) == "T0"
    # chat_template.jinja beside the config wins
    (folder / "chat_template.jinja").write_text("J{{ bos_token }}{{ messages[0]['content'] }}")
    assert load_tokenizer(folder).apply_chat_template(msgs) == "J<|endoftext|>x"


def test_chat_template_features():
    template = (
        "{%- for m in messages -%}\n"
        "  {{ m.role }}: {{ m.content | tojson }}\n"
        "{% endfor -%}\n"
        "{% if tools %}{{ tools | tojson(indent=2) }}{% endif %}"
        "{% generation %}G{% endgeneration %}{{ extra_var }}"
    )
    out = render_chat_template(
        template,
        [{"role": "user", "content": "héllo <b> ü"}],
        tools=[{"name": "f"}],
        extra_var="!",
    )
    assert out == 'user: "héllo <b> ü"\n[\n  {\n    "name": "f"\n  }\n]G!'
    with pytest.raises(InvalidInputError, match="nope"):
        render_chat_template("{{ raise_exception('nope') }}", [{"role": "user", "content": "x"}])
    year = render_chat_template("{{ strftime_now('%Y') }}", [{"role": "user", "content": "x"}])
    assert year.isdigit()
    with pytest.raises(ConfigurationError):
        render_chat_template("{% if %}", [{"role": "user", "content": "x"}])


@pytest.mark.parametrize(
    "messages",
    [[], "hello", [{"content": "x"}], [{"role": "user"}], [{"role": "user", "content": 3}], ["x"]],
)
def test_chat_messages_validated(folders, messages):
    tok = load_tokenizer(folders["metaspace"])
    with pytest.raises(InvalidInputError):
        tok.apply_chat_template(messages)


def test_no_chat_template(folders):
    tok = load_tokenizer(folders["byte_level"])
    assert tok.chat_template is None
    with pytest.raises(InvalidInputError, match="chat_template"):
        tok.apply_chat_template([{"role": "user", "content": "Hi"}])
    assert tok.apply_chat_template([{"role": "user", "content": "Hi"}], template="{{ messages[0].content }}") == "Hi"


def test_sandboxed():
    with pytest.raises(InvalidInputError):
        render_chat_template(
            "{{ messages.__class__.__mro__ }}{{ ''.__class__.__subclasses__() }}", [{"role": "user", "content": "x"}]
        )


# --------------------------------------------------------------------------- #
# transformers' reference ids for the committed fixture folders
# (produced by tools/build_fixtures.py with transformers 4.57)
# --------------------------------------------------------------------------- #

_REFERENCES = FIXTURES / "references"


def _load_reference(name):
    path = _REFERENCES / name
    # The references are committed: a missing file is a failure, not a skip.
    return json.loads(path.read_text(encoding="utf-8"))


def _decoder_reference_cases():
    data = _load_reference("tokenizers.json")
    return [pytest.param(name, entry, id=name) for name, entry in data["tokenizers"].items()]


def _seq2seq_reference_cases():
    data = _load_reference("marian_tokenizer.json")
    return [
        pytest.param(folder, entry, id=folder.split("/")[-1])
        for entry in data["tokenizers"].values()
        for folder in entry["folders"]
    ]


@pytest.mark.parametrize("name,entry", _decoder_reference_cases())
def test_matches_transformers_reference(name, entry):
    tok = load_tokenizer(FIXTURES / entry["folder"])
    for attr in ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id"):
        assert getattr(tok, attr) == entry[attr], attr
    assert tok.all_special_ids == frozenset(entry["all_special_ids"])
    assert tok.vocab_size == entry["vocab_size"]
    assert tok.clean_up_tokenization_spaces == entry["clean_up_tokenization_spaces"]
    assert entry["cases"]
    for case in entry["cases"]:
        text = case["text"]
        assert tok.encode(text) == case["ids"], text
        assert tok.encode(text, add_special_tokens=False) == case["ids_no_special"], text
        assert [tok.id_to_token(i) for i in case["ids_no_special"]] == case["tokens"], text
        assert tok.decode(case["ids"]) == case["decoded"], text
        assert tok.decode(case["ids"], skip_special_tokens=False) == case["decoded_with_special"], text
        # and the streaming detokenizer reproduces the same text
        from inference4py.generation.streaming import IncrementalDetokenizer

        detok = IncrementalDetokenizer(tok)
        pieces = [detok.add(i) for i in case["ids"]] + [detok.finish()]
        assert "".join(pieces) == case["decoded"], text


@pytest.mark.parametrize("folder,entry", _seq2seq_reference_cases())
def test_matches_transformers_seq2seq_reference(folder, entry):
    tok = load_tokenizer(FIXTURES / folder)
    assert entry["cases"]
    for case in entry["cases"]:
        text = case["text"]
        assert tok.encode(text) == case["input_ids"], text
        # Marian decodes with the target model; "decoded" is of the target ids
        ids = case.get("target_ids", case["input_ids"])
        assert tok.decode(ids) == case["decoded"], text


def _generation_reference_cases():
    data = _load_reference("decoder.json")
    return [
        pytest.param(model["folder"], case, id=f"{name}-{case['name']}")
        for name, model in data["models"].items()
        for case in model["cases"]
    ]


@pytest.mark.parametrize("folder,case", _generation_reference_cases())
def test_prompts_and_outputs_of_generation_references(folder, case):
    """Prompt ids (chat-templated or plain) and generated text as transformers made them."""
    from inference4py.generation.streaming import IncrementalDetokenizer

    tok = load_tokenizer(FIXTURES / folder)
    if case["kind"] == "chat":
        rendered = tok.apply_chat_template(case["messages"])
        assert rendered == case["rendered"]
        assert tok.encode(rendered, add_special_tokens=False) == case["prompt_ids"]
    else:
        assert tok.encode(case["prompt"]) == case["prompt_ids"]
    assert tok.decode(case["output_ids"]) == case["text"]
    detok = IncrementalDetokenizer(tok)
    pieces = [detok.add(i) for i in case["output_ids"]] + [detok.finish()]
    assert "".join(pieces) == case["text"]


def test_long_texts_encode_to_the_same_ids_without_holding_the_interpreter(folders):
    """Past 8192 characters FastTokenizer encodes through tokenizers' batch call, which releases the
    interpreter lock (a server's other threads run meanwhile): the ids must be the one-text call's."""
    import threading
    import time

    for name in ("byte_level", "metaspace"):
        tok = load_tokenizer(folders[name])
        for text in TRICKY:
            long = (text + " ") * (9000 // len(text) + 1)
            assert len(long) > 8192
            assert tok.encode(long) == tok.backend.encode(long, add_special_tokens=True).ids
            assert tok.encode(long, add_special_tokens=False) == tok.backend.encode(long, add_special_tokens=False).ids
    tok = load_tokenizer(folders["byte_level"])
    big = "hello world, this is text. " * 40_000  # ~1 MB: long enough that a held lock shows
    ticks = []
    done = threading.Event()

    def tick():
        while not done.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    thread = threading.Thread(target=tick)
    thread.start()
    before = len(ticks)
    tok.encode(big)
    during = len(ticks) - before
    done.set()
    thread.join()
    assert during > 5, "another thread could not run while a long text was encoded"


def test_max_token_chars_bounds_every_token(folders):
    for name in ("byte_level", "metaspace", "t5_spm"):
        tok = load_tokenizer(folders[name])
        most = tok.max_token_chars
        for text in TRICKY:
            for token_id in tok.encode(text, add_special_tokens=False):
                assert len(tok.decode([token_id], skip_special_tokens=False)) <= most
