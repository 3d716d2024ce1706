"""Encoder-decoder task classes end to end on the tiny fixtures, against transformers' ids."""

from __future__ import annotations

import pytest

from inference4py import (
    BartSummarizer,
    CoeditGrammarCorrector,
    FlanT5TextGenerator,
    Language,
    MarianTranslator,
    OnnxTextGenerator,
    T5SqlGenerator,
)
from inference4py.errors import (
    ConfigurationError,
    InvalidInputError,
    PromptTooLongError,
    UnsupportedModelError,
)
from tests.conftest import FIXTURES, MODELS, load_reference

REF = load_reference("seq2seq")["models"]
GREEDY_FOLDERS = [n for n in REF if n != "bart-cnn-like"]

_tasks: dict[str, object] = {}


def task(name: str, cls=None):
    key = f"{name}:{cls.__name__ if cls else ''}"
    if key not in _tasks:
        cls = cls or {"t5": FlanT5TextGenerator, "bart": BartSummarizer, "marian": MarianTranslator}[name.split("-")[0]]
        _tasks[key] = cls.builder().model_path(FIXTURES / REF[name]["folder"]).build()
    return _tasks[key]


def _cases():
    for name in GREEDY_FOLDERS:
        for case in REF[name]["cases"]:
            yield pytest.param(name, case, id=f"{name}-{case['name']}")


def _overrides(case):
    s = dict(case["settings"])
    out = {"max_new_tokens": s.get("max_new_tokens", case["max_new_tokens"]), "do_sample": False}
    if "eos_token_id" in s:
        eos = s["eos_token_id"]
        out["eos_token_id"] = tuple(eos) if isinstance(eos, list) else (eos,)
    for key in ("min_new_tokens", "repetition_penalty", "no_repeat_ngram_size"):
        if key in s:
            out[key] = s[key]
    return out


@pytest.mark.parametrize("name,case", list(_cases()))
def test_greedy_text_input_matches_transformers(name, case):
    t = task(name)
    assert t.encode_source(case["input"]) == case["input_ids"]
    result = t.generate(case["input"], **_overrides(case))
    assert list(result.token_ids) == case["generated_ids"]
    assert result.text == case["text"]


@pytest.mark.parametrize("name,case", list(_cases())[::3])
def test_greedy_token_id_input_matches_transformers(name, case):
    result = task(name).generate(list(case["input_ids"]), **_overrides(case))
    assert list(result.token_ids) == case["generated_ids"]


def test_encoder_runs_once_and_cross_cache_is_computed_once():
    t = task("bart")
    runtime = t._runtime
    case = REF["bart"]["cases"][0]
    before = runtime.encoder_runs
    states = []
    original = runtime.new_state

    def spy(*args, **kwargs):
        state = original(*args, **kwargs)
        states.append(state)
        return state

    runtime.new_state = spy
    try:
        seen: list[dict] = []
        chunks = t.stream_chunks(case["input"], max_new_tokens=12)
        for _ in chunks:
            if states and states[0].cross:
                seen.append(dict(states[0].cross))
    finally:
        del runtime.new_state
    assert runtime.encoder_runs == before + 1
    state = states[0]
    assert state.cross_computations == 1
    assert state.length >= 10
    # The very same OrtValues are bound at every step: never recomputed nor copied.
    first = seen[0]
    for snapshot in seen[1:]:
        assert all(snapshot[k] is first[k] for k in first)


def test_streaming_pieces_concatenate_to_text():
    t = task("marian")
    case = REF["marian"]["cases"][1]
    pieces: list[str] = []
    out = t.translate(case["input"], on_token=pieces.append, max_new_tokens=case["max_new_tokens"])
    assert "".join(pieces) == str(out) == "".join(t.stream(case["input"], max_new_tokens=case["max_new_tokens"]))


def test_flan_t5_prompt_formats(monkeypatch):
    t = task("t5", FlanT5TextGenerator)
    seen: list[str] = []
    real = t.generate

    def spy(source, on_token=None, **overrides):
        seen.append(source)
        return real(source, on_token=on_token, **overrides)

    monkeypatch.setattr(t, "generate", spy)
    out = t.summarize("The cat sat.", max_new_tokens=3)
    t.translate("Hello", Language.EN, Language.FR, max_new_tokens=3)
    t.translate("Hallo", "de", "en", max_new_tokens=3)
    t.correct("she go home", max_new_tokens=3)
    assert seen == [
        "summarize: The cat sat.",
        "translate English to French: Hello",
        "translate German to English: Hallo",
        "correct grammar: she go home",
    ]
    assert isinstance(out, str) and out.finish_reason in ("eos", "length") and out.generated_tokens <= 3


def test_summary_for_flan_matches_reference_ids():
    case = next(c for c in REF["t5"]["cases"] if c["input"].startswith("summarize: "))
    out = task("t5", FlanT5TextGenerator).summarize(case["input"][len("summarize: ") :], **_overrides(case))
    assert list(out.token_ids) == case["generated_ids"]


def test_coedit_and_sql_formats(monkeypatch):
    folder = FIXTURES / REF["t5"]["folder"]
    co = CoeditGrammarCorrector.builder().model_path(folder).max_new_tokens(3).build()
    sql = T5SqlGenerator.builder().model_path(folder).max_new_tokens(3).build()
    spider = T5SqlGenerator.t5LargeSpider().model_path(folder).max_new_tokens(3).build()
    custom = (
        T5SqlGenerator.builder()
        .model_path(folder)
        .max_new_tokens(3)
        .prompt_formatter(lambda q, schema: f"SQL {q} | {schema}")
        .build()
    )
    seen: list[str] = []
    for t in (co, sql, spider, custom):
        real = t.generate
        monkeypatch.setattr(
            t, "generate", lambda s, on_token=None, _r=real, **o: (seen.append(s), _r(s, on_token=on_token, **o))[1]
        )
    co.correct("I has a apple")
    sql.generate_sql("How many users?", "CREATE TABLE users (id INT)")
    spider.generate_sql("How many users?", "users(id)")
    custom.generate_sql("q", "s")
    assert seen == [
        "Fix grammatical errors in this sentence: I has a apple",
        "tables: CREATE TABLE users (id INT) query for: How many users?",
        "Question: How many users? Schema: users(id)",
        "SQL q | s",
    ]
    with pytest.raises(InvalidInputError, match="schema"):
        sql.generate_sql("How many?", " ")


def test_marian_multilingual_target_prefix():
    t = task("marian-multi")
    assert t.target_languages  # >>xxx<< tokens found in the vocabulary
    case = next(c for c in REF["marian-multi"]["cases"] if c["input"].startswith(">>"))
    code = case["input"][2 : case["input"].index("<<")]
    text = case["input"][case["input"].index("<<") + 3 :]
    out = t.translate(text, target=f">>{code}<<", **_overrides(case))
    assert list(out.token_ids) == case["generated_ids"]
    with pytest.raises(ConfigurationError, match="target language"):
        t.translate("Hello")
    with pytest.raises(UnsupportedModelError, match="cannot translate into"):
        t.translate("Hello", target=Language.HI)


def test_fixed_pair_marian_refuses_other_targets():
    t = MarianTranslator.opusMtEnDe().model_path(MODELS / "marian").build()
    assert t.translate("Hello", max_new_tokens=3)  # pair of the preset: fine
    with pytest.raises(UnsupportedModelError, match="en->de only"):
        t.translate("Hello", target=Language.FR)


def test_wrong_model_for_class():
    with pytest.raises(UnsupportedModelError, match="decoder-only"):
        BartSummarizer.builder().model_path(MODELS / "gpt2").build()
    with pytest.raises(UnsupportedModelError, match="encoder-decoder"):
        OnnxTextGenerator.builder().model_path(MODELS / "bart").build()


def test_over_long_input_errors_or_truncates():
    t = task("bart")
    limit = t.max_source_tokens
    long_text = "word " * (limit * 2)
    with pytest.raises(PromptTooLongError, match="truncat"):
        t.summarize(long_text)
    truncating = BartSummarizer.builder().model_path(MODELS / "bart").truncate().max_new_tokens(5).build()
    ids = truncating.encode_source(long_text)
    assert len(ids) == limit and ids[-1] == truncating.tokenizer.eos_token_id
    assert truncating.summarize(long_text).generated_tokens <= 5


def test_empty_input():
    with pytest.raises(InvalidInputError, match="empty"):
        task("bart").summarize("   ")
    with pytest.raises(InvalidInputError):
        task("bart").generate([])
