"""Constrained decoding on the tiny random fixtures: every output obeys its constraint or is flagged incomplete.

The random models want to write garbage, which makes them the hardest case: at
temperature 1.0 only the mask keeps their output valid.  ``generate()`` does
not take constraints yet, so each model gets a slot processor through the
builder's public ``logits_processor`` hook and every call puts a fresh
:class:`ConstraintProcessor` in it.
"""

from __future__ import annotations

import json
import re
import shutil
import sys

import jsonschema
import numpy as np
import pytest

from inference4py import OnnxTextGenerator
from inference4py.errors import ConfigurationError
from inference4py.generation.constraints import Constraint, ConstraintProcessor, compile_grammar, llg_tokenizer
from inference4py.generation.processors import MinNewTokens
from tests.conftest import FIXTURES

pytest.importorskip("llguidance")

SEEDS = range(30)
FEW_SEEDS = range(10)
MODELS = ["gpt2", "qwen2", "llama", "llama-spm"]

SCHEMA = {
    "type": "object",
    "properties": {
        "user": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 6},
                "code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{2}$"},
            },
            "required": ["name", "code"],
            "additionalProperties": False,
        },
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 2},
        "color": {"enum": ["red", "green", "blue"]},
        "score": {"type": "number", "minimum": 0, "maximum": 10},
        "level": {"type": "integer", "minimum": -3, "maximum": 3},
    },
    "required": ["user", "tags", "color", "score", "level"],
    "additionalProperties": False,
}

LARK = r"""
start: expr
expr: term (OP term)*
term: NUMBER | "(" expr ")"
OP: "+" | "-" | "*"
NUMBER: /[0-9]{1,3}/
"""


class _Slot:
    """The processor the builder holds; each call swaps in a fresh ConstraintProcessor."""

    def __init__(self) -> None:
        self.proc: ConstraintProcessor | None = None

    def __call__(self, ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        return scores if self.proc is None else self.proc(ids, scores)


_models: dict[str, tuple[OnnxTextGenerator, _Slot]] = {}


@pytest.fixture(scope="module")
def spm_folder(tmp_path_factory):
    """The llama fixture without tokenizer.json: the sentencepiece back end loads tokenizer.model."""
    folder = tmp_path_factory.mktemp("llama-spm")
    for item in (FIXTURES / "models" / "llama").iterdir():
        if item.name != "tokenizer.json":
            shutil.copy2(item, folder / item.name)
    return folder


@pytest.fixture
def model(request, spm_folder):
    name = request.param
    if name not in _models:
        folder = spm_folder if name == "llama-spm" else FIXTURES / "models" / name
        slot = _Slot()
        gen = OnnxTextGenerator.builder().model_path(folder).logits_processor(slot).build()
        _models[name] = (gen, slot)
    gen, slot = _models[name]
    if name == "llama-spm":
        assert type(gen.tokenizer).__name__ == "_SentencePieceTokenizer"
    slot.proc = None
    yield gen, slot
    slot.proc = None


def _constraint(gen: OnnxTextGenerator, **kind) -> Constraint:
    return Constraint(gen.tokenizer, eos_token_ids=gen.generation_config.eos_token_id, **kind)


def _sample(gen, slot, constraint, seed, *, prompt="Output:", max_new_tokens=100, **kw):
    proc = ConstraintProcessor(constraint)
    slot.proc = proc
    result = gen.generate(prompt, max_new_tokens=max_new_tokens, do_sample=True, temperature=1.0, seed=seed, **kw)
    return result, proc


def _check(result, proc, check, row=0):
    """An output the constraint calls complete passes ``check``; one ended by EOS is always complete.

    An output cut off by max_new_tokens may still be complete (``[0-9]+`` after "12"); if not, it is flagged.
    """
    complete = proc.is_complete(result.token_ids, row=row)
    if result.finish_reason == "eos":
        assert complete, result.text
    else:
        assert result.finish_reason == "length"
    if complete:
        check(result.text)
    return complete


def _check_json(text: str) -> None:
    jsonschema.validate(json.loads(text), SCHEMA)


# ---------------------------------------------------------------------------------- every kind, many seeds
@pytest.mark.parametrize("model", MODELS, indirect=True)
def test_json_schema_outputs_parse_and_validate(model):
    gen, slot = model
    constraint = _constraint(gen, json_schema=SCHEMA)
    done = sum(_check(*_sample(gen, slot, constraint, seed), _check_json) for seed in SEEDS)
    assert done >= len(SEEDS) // 2  # the budget suffices most of the time: the test is not vacuous


@pytest.mark.parametrize("model", MODELS, indirect=True)
def test_json_object_outputs_are_objects(model):
    gen, slot = model
    constraint = _constraint(gen, json_object=True)
    for seed in FEW_SEEDS:  # any keys, any values: a random model seldom closes it, but never writes non-JSON
        result, proc = _sample(gen, slot, constraint, seed, max_new_tokens=120)
        _check(result, proc, lambda text: isinstance(json.loads(text), dict) or pytest.fail(text))


@pytest.mark.parametrize("model", MODELS, indirect=True)
def test_regex_outputs_fullmatch(model):
    gen, slot = model
    pattern = r"\([0-9]{3}\) [0-9]{3}-[0-9]{4}( ext [a-z]{1,3})?"
    constraint = _constraint(gen, regex=pattern)
    for seed in SEEDS:
        result, proc = _sample(gen, slot, constraint, seed, max_new_tokens=40)
        assert _check(result, proc, lambda text: re.fullmatch(pattern, text) or pytest.fail(text))


@pytest.mark.parametrize("model", MODELS, indirect=True)
def test_choices_are_exact(model):
    gen, slot = model
    options = ["red", "green", "light blue", "{x}", 'say "hi"\n']
    constraint = _constraint(gen, choices=options)
    seen = set()
    for seed in SEEDS:
        result, proc = _sample(gen, slot, constraint, seed, max_new_tokens=20)
        assert _check(result, proc, lambda text: text in options or pytest.fail(text))
        seen.add(result.text)
    assert len(seen) > 1  # sampling still samples among the choices


def _parse_arith(text: str) -> None:
    """A hand parser for LARK: expr := term (op term)*; term := 1-3 digits | '(' expr ')'."""
    pos = 0

    def term() -> None:
        nonlocal pos
        if text.startswith("(", pos):
            pos += 1
            expr()
            assert text.startswith(")", pos), text
            pos += 1
            return
        m = re.compile(r"[0-9]{1,3}").match(text, pos)
        assert m, text
        pos = m.end()

    def expr() -> None:
        nonlocal pos
        term()
        while pos < len(text) and text[pos] in "+-*":
            pos += 1
            term()

    expr()
    assert pos == len(text), text


@pytest.mark.parametrize("model", MODELS, indirect=True)
def test_lark_grammar_outputs_parse(model):
    gen, slot = model
    constraint = _constraint(gen, grammar=LARK)
    done = sum(_check(*_sample(gen, slot, constraint, seed, max_new_tokens=60), _parse_arith) for seed in SEEDS)
    assert done >= 1


# ---------------------------------------------------------------------------------- the mask changes nothing it need not
# prompts whose greedy continuation is whole UTF-8 text (a lone byte token can match no text constraint)
GREEDY_PROMPTS = {"gpt2": "Hi", "qwen2": "Hello there", "llama": "Hello there"}


@pytest.mark.parametrize("model", list(GREEDY_PROMPTS), indirect=True)
def test_constrained_greedy_equals_greedy_when_already_valid(model, request):
    gen, slot = model
    prompt = GREEDY_PROMPTS[request.node.callspec.params["model"]]
    plain = gen.generate(prompt, max_new_tokens=12, do_sample=False)
    assert "\ufffd" not in plain.text
    # a regex that any text matches, and a choices list holding exactly the greedy text
    for kind in ({"regex": r"(?s:.*)"}, {"choices": ["zzz", plain.text]}):
        slot.proc = proc = ConstraintProcessor(_constraint(gen, **kind))
        constrained = gen.generate(prompt, max_new_tokens=12, do_sample=False)
        assert constrained.token_ids == plain.token_ids, kind
        assert constrained.finish_reason == plain.finish_reason
        assert proc.is_complete(constrained.token_ids)


# ---------------------------------------------------------------------------------- every search path
@pytest.mark.parametrize("model", ["gpt2", "llama"], indirect=True)
def test_beam_search_outputs_are_valid(model):
    gen, slot = model
    constraint = _constraint(gen, json_schema=SCHEMA)
    slot.proc = proc = ConstraintProcessor(constraint)
    result = gen.generate("Output:", max_new_tokens=100, num_beams=3, num_return_sequences=3, do_sample=False)
    assert len(result.candidates) == 3
    for cand in result.candidates:
        if cand.finish_reason == "eos":
            _check_json(cand.text)
            assert proc.is_complete(cand.token_ids)
        else:
            assert not proc.is_complete(cand.token_ids)
    pattern = r"(yes|no|maybe)!"
    slot.proc = proc = ConstraintProcessor(_constraint(gen, regex=pattern))
    result = gen.generate("Output:", max_new_tokens=10, num_beams=3, num_return_sequences=2, do_sample=True, seed=3)
    for cand in result.candidates:
        assert cand.finish_reason == "eos" and re.fullmatch(pattern, cand.text), cand


@pytest.mark.parametrize("model", ["qwen2", "llama-spm"], indirect=True)
def test_several_samples_each_follow_the_constraint(model):
    gen, slot = model
    pattern = r"[a-c]{2,5}\.[0-9]"
    slot.proc = proc = ConstraintProcessor(_constraint(gen, regex=pattern))
    result = gen.generate("Output:", max_new_tokens=30, do_sample=True, temperature=1.0, seed=7, num_return_sequences=4)
    assert len(result.candidates) == 4
    for cand in result.candidates:
        assert cand.finish_reason == "eos" and re.fullmatch(pattern, cand.text), cand
        assert proc.is_complete(cand.token_ids)


@pytest.mark.parametrize("model", ["gpt2", "qwen2", "llama-spm"], indirect=True)
def test_generate_batch_rows_each_follow_the_request_constraint(model):
    """generate_batch runs on the scheduler: every row gets its own mask from the request's constraint."""
    gen, _ = model
    prompts = ["A", "A much longer prompt that needs left padding", "Pick:", "Free row"]
    pattern = r"[0-9]{2}-[a-z]{2}"
    for seed in FEW_SEEDS:
        for result in gen.generate_batch(prompts, max_new_tokens=20, do_sample=True, seed=seed, regex=pattern):
            assert result.finish_reason == "eos" and re.fullmatch(pattern, result.text), result.text
        results = gen.generate_batch(prompts, max_new_tokens=100, do_sample=True, seed=seed, json_schema=SCHEMA)
        for prompt, result in zip(prompts, results):
            if result.finish_reason == "eos":
                _check_json(result.text)
            alone = gen.generate(prompt, max_new_tokens=100, do_sample=True, seed=seed, json_schema=SCHEMA)
            assert result.token_ids == alone.token_ids  # a seeded sampled row gives what it gives alone


# ---------------------------------------------------------------------------------- mask details
def _tokenizer_and_eos(name: str = "gpt2"):
    gen, _ = _models.get(name) or (OnnxTextGenerator.builder().model_path(FIXTURES / "models" / name).build(), None)
    return gen.tokenizer, gen.generation_config.eos_token_id


def test_padding_ids_beyond_the_tokenizer_are_never_allowed():
    tok, eos = _tokenizer_and_eos()
    proc = ConstraintProcessor(Constraint(tok, eos_token_ids=eos, regex=r"(?s:.*)"))
    scores = np.zeros((2, tok.vocab_size + 7), dtype=np.float32)
    out = proc(np.zeros((2, 3), dtype=np.int64), scores)
    assert np.isneginf(out[:, tok.vocab_size :]).all()
    assert np.isfinite(out[:, eos[0]]).all()  # ".*" is complete at once: EOS allowed


def test_complete_output_keeps_eos_even_when_an_earlier_processor_banned_it():
    tok, eos = _tokenizer_and_eos()
    ids = tok.encode("red", add_special_tokens=False)
    prompt = [5, 6]
    proc = ConstraintProcessor(Constraint(tok, eos_token_ids=eos, choices=["red"]), prompt_length=len(prompt))
    seq = np.asarray([prompt + ids], dtype=np.int64)
    scores = MinNewTokens(len(prompt), 50, eos)(seq, np.zeros((1, tok.vocab_size), dtype=np.float32))
    out = proc(seq, scores)
    assert np.flatnonzero(np.isfinite(out[0])).tolist() == list(eos)


def test_rows_follow_beam_reordering_and_duplication():
    tok, eos = _tokenizer_and_eos()
    a, b = tok.encode("12", add_special_tokens=False), tok.encode("ab", add_special_tokens=False)
    proc = ConstraintProcessor(Constraint(tok, eos_token_ids=eos, regex=r"(12|ab)x"), prompt_length=1)
    vocab = tok.vocab_size
    proc(np.zeros((2, 1), dtype=np.int64), np.zeros((2, vocab), dtype=np.float32))
    # rows swap, then one prefix is duplicated: each row's mask is its own prefix's
    for prefixes in ([a, b], [b, a], [a, a]):
        width = max(len(p) for p in prefixes)
        assert all(len(p) == width for p in prefixes)
        seq = np.asarray([[0, *p] for p in prefixes], dtype=np.int64)
        out = proc(seq, np.zeros((2, vocab), dtype=np.float32))
        x = tok.encode("x", add_special_tokens=False)[0]
        assert np.isfinite(out[:, x]).all()
        assert np.isneginf(out[:, eos[0]]).all()


def test_tokenizer_adapter_is_cached_per_tokenizer_and_eos():
    tok, eos = _tokenizer_and_eos()
    assert llg_tokenizer(tok, eos) is llg_tokenizer(tok, eos)
    assert llg_tokenizer(tok, eos) is not llg_tokenizer(tok, (*eos, 5))


# ---------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "kind,match",
    [
        ({"json_schema": {"type": "foo"}}, "json_schema"),
        ({"json_schema": '{"type": "object",'}, "not valid JSON"),
        ({"json_schema": ["not", "a", "schema"]}, "must be a JSON object"),
        ({"regex": "(abc"}, "regex"),
        ({"regex": ""}, "non-empty"),
        ({"grammar": "start: undefined_rule"}, "grammar"),
        ({"grammar": "start: ("}, "grammar"),
        ({"choices": []}, "empty"),
        ({"choices": "red"}, "list of strings"),
        ({"choices": ["red", 3]}, "non-empty strings"),
        ({"regex": "a", "choices": ["a"]}, "Only one output constraint"),
        ({"json_object": True, "json_schema": {}}, "Only one output constraint"),
    ],
)
def test_bad_constraints_fail_before_generation(kind, match):
    with pytest.raises(ConfigurationError, match=match):
        compile_grammar(**kind)
    tok, eos = _tokenizer_and_eos()
    with pytest.raises(ConfigurationError, match=match):
        Constraint(tok, eos_token_ids=eos, **kind)


def test_no_constraint_is_none_or_an_error():
    assert compile_grammar() is None
    tok, eos = _tokenizer_and_eos()
    with pytest.raises(ConfigurationError, match="needs one of"):
        Constraint(tok, eos_token_ids=eos)


def test_constraints_per_row_must_fit_the_batch():
    tok, eos = _tokenizer_and_eos()
    c = Constraint(tok, eos_token_ids=eos, regex="a+")
    proc = ConstraintProcessor([c, c])
    with pytest.raises(ValueError, match="2 constraints for a batch of 3 rows"):
        proc(np.zeros((3, 2), dtype=np.int64), np.zeros((3, tok.vocab_size), dtype=np.float32))


def test_missing_llguidance_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "llguidance", None)
    with pytest.raises(ConfigurationError, match=re.escape('pip install "inference4py[structured]"')):
        compile_grammar(regex="a")
