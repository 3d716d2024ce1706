"""Tests for inference4py.generation.streaming.

The detokenizer runs over tokenizers trained in the session (see
tests/test_tokenization.py): a byte-level BPE, a Llama style BPE with byte
fallback, a T5 style sentencepiece unigram and a Marian pair, all with small
vocabularies so multi-byte characters split across tokens.
"""

from __future__ import annotations

import pytest

from inference4py.errors import ConfigurationError, InvalidInputError
from inference4py.generation.streaming import IncrementalDetokenizer, StopSequenceMatcher
from inference4py.tokenization import load_tokenizer
from tests.test_tokenization import (
    TRICKY,
    build_byte_level_bpe,
    build_marian,
    build_metaspace_bpe,
    build_t5_spm,
    with_config,
)

CLEANUP_TEXTS = [
    "Hello , world . I 'm fine ! Are you ? Yes , it 's ok .",
    "a ' b ' c can n't won 't we 've they 're",
    "x  . y ' ' z  ,",
    "end with space ",
    "n n' 'v 'r ' ",
]


@pytest.fixture(scope="session")
def tokenizers(tmp_path_factory):
    root = tmp_path_factory.mktemp("stream_tokenizers")
    byte_level = build_byte_level_bpe(root / "byte_level")
    metaspace = build_metaspace_bpe(root / "metaspace")
    return {
        "byte_level": load_tokenizer(byte_level),
        "byte_level_cleanup": load_tokenizer(
            with_config(byte_level, root / "byte_level_cleanup", clean_up_tokenization_spaces=True)
        ),
        "metaspace": load_tokenizer(metaspace),
        "metaspace_cleanup": load_tokenizer(
            with_config(metaspace, root / "metaspace_cleanup", clean_up_tokenization_spaces=True)
        ),
        "t5_spm": load_tokenizer(build_t5_spm(root / "t5")),
        "t5_spm_cleanup": load_tokenizer(
            with_config(build_t5_spm(root / "t5c"), root / "t5_cleanup", clean_up_tokenization_spaces=True)
        ),
        "marian": load_tokenizer(build_marian(root / "marian")),
    }


def stream(tok, ids, **kwargs):
    detok = IncrementalDetokenizer(tok, **kwargs)
    pieces = [detok.add(i) for i in ids]
    pieces.append(detok.finish())
    return pieces


def check_stream(tok, ids, *, skip_special_tokens=True):
    pieces = stream(tok, ids, skip_special_tokens=skip_special_tokens)
    expected = tok.decode(ids, skip_special_tokens=skip_special_tokens)
    assert "".join(pieces) == expected
    if "\ufffd" not in expected:
        assert not any("\ufffd" in p for p in pieces), pieces
    return pieces


ALL = ["byte_level", "byte_level_cleanup", "metaspace", "metaspace_cleanup", "t5_spm", "t5_spm_cleanup", "marian"]


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("text", TRICKY + CLEANUP_TEXTS, ids=lambda t: repr(t)[:30])
def test_pieces_join_to_decode(tokenizers, name, text):
    tok = tokenizers[name]
    check_stream(tok, tok.encode(text, add_special_tokens=False))
    ids = tok.encode(text)
    check_stream(tok, ids)
    check_stream(tok, ids, skip_special_tokens=False)


@pytest.mark.parametrize("name", ALL)
def test_whole_table_as_one_sequence(tokenizers, name):
    tok = tokenizers[name]
    ids = []
    for text in TRICKY + CLEANUP_TEXTS:
        ids += tok.encode(text)  # special tokens in the middle too
    check_stream(tok, ids)
    check_stream(tok, ids, skip_special_tokens=False)


@pytest.mark.parametrize("name", ["byte_level", "metaspace"])
def test_multibyte_characters_really_split(tokenizers, name):
    """The table must exercise characters split across tokens, held back until complete."""
    tok = tokenizers[name]
    split = 0
    for text in TRICKY:
        ids = tok.encode(text, add_special_tokens=False)
        for i in range(1, len(ids) + 1):
            if "\ufffd" in tok.decode(ids[:i]) and "\ufffd" not in text:
                split += 1
        pieces = check_stream(tok, ids)
        assert "".join(pieces) == text
    assert split > 0


def test_held_back_until_complete(tokenizers):
    tok = tokenizers["byte_level"]
    ids = tok.encode("😀", add_special_tokens=False)
    assert len(ids) > 1
    detok = IncrementalDetokenizer(tok)
    assert [detok.add(i) for i in ids[:-1]] == [""] * (len(ids) - 1)
    assert detok.add(ids[-1]) == "😀"
    assert detok.finish() == ""


def test_incomplete_tail_flushed_by_finish(tokenizers):
    tok = tokenizers["byte_level"]
    ids = tok.encode("ok 😀", add_special_tokens=False)[:-1]
    pieces = stream(tok, ids)
    assert "".join(pieces) == tok.decode(ids)
    assert "\ufffd" not in "".join(pieces[:-1])


@pytest.mark.parametrize("name", ["metaspace", "t5_spm", "byte_level"])
def test_prompt_context(tokenizers, name):
    tok = tokenizers[name]
    prompt = tok.encode("Hello", add_special_tokens=False)
    gen = tok.encode("Hello world 你好", add_special_tokens=False)[len(prompt) :]
    pieces = stream(tok, gen, prompt_ids=prompt)
    context = prompt[-4:]
    expected = tok.decode(context + gen)[len(tok.decode(context)) :]
    assert "".join(pieces) == expected
    if name == "metaspace":
        assert expected.startswith(" ")  # the leading space survives with context


def test_cost_is_windowed(tokenizers):
    """Each add() decodes a window, not the whole sequence."""
    tok = tokenizers["byte_level"]
    lengths = []

    class Counting:
        clean_up_tokenization_spaces = False

        def decode(self, ids, *, skip_special_tokens=True, clean_up_tokenization_spaces=None):
            lengths.append(len(ids))
            return tok.decode(ids, skip_special_tokens=skip_special_tokens)

        def id_to_token(self, token_id):
            return tok.id_to_token(token_id)

    ids = tok.encode(" ".join(TRICKY) * 5, add_special_tokens=False)
    assert len(ids) > 500
    pieces = stream(Counting(), ids)
    assert "".join(pieces) == tok.decode(ids)
    assert max(lengths) < 20


def test_add_after_finish(tokenizers):
    detok = IncrementalDetokenizer(tokenizers["byte_level"])
    detok.add(5)
    detok.finish()
    assert detok.finish() == ""
    with pytest.raises(InvalidInputError):
        detok.add(5)


@pytest.mark.parametrize("name", ["byte_level", "metaspace"])
def test_native_decoder_gives_the_pieces_of_the_window_code(tokenizers, name, monkeypatch):
    """tokenizers' DecodeStream runs the window algorithm natively: the very same pieces,
    with held byte runs, skipped specials and prompt contexts, and when it refuses a
    token (simulated here at random: the window code takes over from that token on)."""
    import random

    from inference4py.tokenization import FastTokenizer

    tok = tokenizers[name]
    native_open = FastTokenizer._native_decode_stream
    counts = {"opened": 0, "refused": 0}

    def counting_open(self, context, *, skip_special_tokens):
        step = native_open(self, context, skip_special_tokens=skip_special_tokens)
        if step is None:
            return None
        counts["opened"] += 1

        def counted(ids):
            if refuse.random() < 0.05:
                counts["refused"] += 1
                raise ValueError("refused")
            return step(ids)

        return counted

    def pieces_of(ids, native, **kwargs):
        opener = counting_open if native else (lambda self, context, *, skip_special_tokens: None)
        with monkeypatch.context() as m:
            m.setattr(FastTokenizer, "_native_decode_stream", opener)
            return stream(tok, ids, **kwargs)

    rng, refuse = random.Random(99), random.Random(5)
    specials = sorted(tok.all_special_ids)
    texts = [tok.encode(t, add_special_tokens=False) for t in TRICKY]
    for trial in range(300):
        if trial % 2:
            ids = [
                rng.choice(specials) if specials and rng.random() < 0.1 else rng.randrange(tok.vocab_size)
                for _ in range(rng.randint(1, 25))
            ]
        else:
            ids = rng.choice(texts)
        prompt = [rng.randrange(tok.vocab_size) for _ in range(rng.choice([0, 0, 2, 5]))]
        for skip in (True, False):
            kwargs = {"skip_special_tokens": skip, "prompt_ids": prompt}
            assert pieces_of(ids, True, **kwargs) == pieces_of(ids, False, **kwargs), (prompt, ids, skip)
    assert counts["opened"] > 300 and counts["refused"] > 20  # both paths really ran


# --------------------------------------------------------------------------- #
# stop strings
# --------------------------------------------------------------------------- #


def run_matcher(stops, pieces):
    m = StopSequenceMatcher(stops)
    out = []
    stopped = False
    for p in pieces:
        safe, stopped = m.push(p)
        out.append(safe)
        if stopped:
            break
    if not stopped:
        out.append(m.flush())
    return "".join(out), stopped, m


@pytest.mark.parametrize(
    "stops,pieces,text,stopped",
    [
        (["STOP"], ["abc", "STOP", "def"], "abc", True),
        (["STOP"], ["ab", "cS", "T", "O", "Pxyz"], "abc", True),
        (["STOP"], ["S", "T", "O", "P"], "", True),
        (["STOP"], ["abcST", "OX", "yz"], "abcSTOXyz", False),
        (["STOP"], ["abcSTO"], "abcSTO", False),  # held back, then flushed at the end
        (["\nUser:"], ["Hi!\n", "Us", "er", ": more"], "Hi!", True),
        (["ab", "b"], ["xa", "b"], "x", True),  # earliest match wins
        (["cd", "b"], ["xab", "cd"], "xa", True),
        (["abc", "bcd"], ["a", "bcd"], "", True),
        (["aab"], ["a", "a", "a", "b"], "a", True),  # overlapping prefixes
        (["</s>", "###"], ["one #", "# two ##", "#"], "one ## two ", True),
        (["😀"], ["ok ", "😀 no"], "ok ", True),
        ([], ["abc", "def"], "abcdef", False),
    ],
)
def test_stop_matcher_table(stops, pieces, text, stopped):
    out, was_stopped, _ = run_matcher(stops, pieces)
    assert out == text
    assert was_stopped == stopped


def test_stop_matcher_holds_back_only_possible_prefixes():
    m = StopSequenceMatcher(["STOP"])
    assert m.push("abcS") == ("abc", False)
    assert m.push("x") == ("Sx", False)
    assert m.push("ST") == ("", False)
    assert m.flush() == "ST"


def test_stop_matcher_after_stop():
    m = StopSequenceMatcher(["x"])
    assert m.push("axb") == ("a", True)
    assert m.stopped and m.matched == "x"
    assert m.push("more") == ("", True)
    assert m.flush() == ""


@pytest.mark.parametrize("bad", [[""], [None], [3]])
def test_stop_matcher_validates(bad):
    with pytest.raises(ConfigurationError):
        StopSequenceMatcher(bad)


def test_stop_matcher_accepts_single_string():
    assert StopSequenceMatcher("END").stop_sequences == ("END",)


def test_stop_matcher_every_split():
    text = "prefix text <|end|> suffix"
    for i in range(len(text) + 1):
        for j in range(i, len(text) + 1):
            out, stopped, _ = run_matcher(["<|end|>"], [text[:i], text[i:j], text[j:]])
            assert out == "prefix text " and stopped


STOP_CASES = [
    ("Hello world, stop here please", "stop here"),
    ("The quick brown fox jumps over the lazy dog", "over the"),
    ("Please say: the answer is final, then stop", "is final"),
    ("你好，世界！这是一个测试。", "世界"),
    ("emoji 😀🎉 and family 👨‍👩‍👧‍👦 done", "👨‍👩"),
    ("def f(x):\n\tif x:\n\t\treturn x\n", "\n\t\t"),
    ("Crème brûlée, naïve café", "brûlée"),
]


@pytest.mark.parametrize("name", ALL)
def test_stop_strings_over_token_stream(tokenizers, name):
    tok = tokenizers[name]
    checked = 0
    for text, stop in STOP_CASES:
        ids = tok.encode(text, add_special_tokens=False)
        full = tok.decode(ids)
        if stop not in full:
            continue  # a small sentencepiece vocabulary maps some of these characters to <unk>
        checked += 1
        cut = full[: full.index(stop)]
        detok = IncrementalDetokenizer(tok)
        matcher = StopSequenceMatcher([stop])
        out = []
        stopped = False
        for i in ids:
            safe, stopped = matcher.push(detok.add(i))
            out.append(safe)
            assert stop not in "".join(out)
            if stopped:
                break
        if not stopped:
            safe, stopped = matcher.push(detok.finish())
            out.append(safe)
        assert stopped, (text, stop)
        assert "".join(out) == cut
        # the stop string is longer than one token here, so it really was split
        assert len(tok.encode(stop, add_special_tokens=False)) > 1
    assert checked >= 2, f"{name}: too few stop cases representable to test anything"


@pytest.mark.parametrize("name", ALL)
def test_random_ids_fuzz(tokenizers, name):
    """Random ids (invalid UTF-8 runs, specials anywhere, cleanup patterns) keep the invariant."""
    import random

    tok = tokenizers[name]
    rng = random.Random(1234)
    specials = sorted(tok.all_special_ids)
    likely = [
        i
        for i in (tok.token_to_id(t) for t in ["Ġ.", "Ġ'", "Ġn", "'", "t", "Ġ", "▁", "▁.", "▁'", "n", "s", "."])
        if i is not None
    ]
    for _ in range(150):
        ids = []
        for _ in range(rng.randint(1, 20)):
            r = rng.random()
            if r < 0.3 and likely:
                ids.append(rng.choice(likely))
            elif r < 0.4 and specials:
                ids.append(rng.choice(specials))
            else:
                ids.append(rng.randrange(tok.vocab_size))
        for skip in (True, False):
            pieces = stream(tok, ids, skip_special_tokens=skip)
            assert "".join(pieces) == tok.decode(ids, skip_special_tokens=skip), ids
            prompt = [rng.randrange(tok.vocab_size) for _ in range(3)]
            context_text = tok.decode(prompt, skip_special_tokens=skip)
            full = tok.decode(prompt + ids, skip_special_tokens=skip)
            if full.startswith(context_text):
                pieces = stream(tok, ids, skip_special_tokens=skip, prompt_ids=prompt)
                assert "".join(pieces) == full[len(context_text) :], (prompt, ids)
