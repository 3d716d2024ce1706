"""Constrained JSON ends: every string, number, integer and array a schema leaves open gets a bound."""

from __future__ import annotations

import copy
import json

import pytest

from inference4py.generation.constraints.bounds import MAX_ITEMS, MAX_STRING, bounded_schema

jsonschema = pytest.importorskip("jsonschema")
pytest.importorskip("llguidance")


def test_open_leaves_get_bounds_and_given_bounds_stay():
    schema = {
        "type": "object",
        "properties": {
            "score": {"type": "number", "maximum": 100},
            "count": {"type": "integer"},
            "name": {"type": "string"},
            "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}},
            "choice": {"anyOf": [{"type": "number"}, {"type": "null"}]},
            "exact": {"type": "number", "multipleOf": 0.5, "minimum": 0},
        },
        "$defs": {"inner": {"type": "string"}},
    }
    original = copy.deepcopy(schema)
    out = bounded_schema(schema)
    assert schema == original  # never modified
    p = out["properties"]
    assert p["score"] == {"type": "number", "maximum": 100, "minimum": -1e15, "multipleOf": 1e-9}
    assert p["count"] == {"type": "integer", "minimum": -(2**53 - 1), "maximum": 2**53 - 1}
    assert p["name"]["maxLength"] == MAX_STRING and "maxLength" not in p["code"]
    assert p["tags"]["maxItems"] == MAX_ITEMS and p["tags"]["items"]["maxLength"] == 8
    assert p["choice"]["anyOf"][0]["multipleOf"] == 1e-9
    assert p["exact"] == {"type": "number", "multipleOf": 0.5, "minimum": 0, "maximum": 1e15}
    assert out["$defs"]["inner"]["maxLength"] == MAX_STRING


def test_a_bounded_number_cannot_run_on(tmp_path):
    """The issue's case: a number under `maximum: 100` written as 11.1111... until the token cap."""
    from inference4py.generation.constraints import compile_grammar

    kind, grammar = compile_grammar(json_schema={"type": "number", "maximum": 100})
    import llguidance

    from tests.conftest import FIXTURES

    lltok = llguidance.LLTokenizer((FIXTURES / "models" / "qwen2" / "tokenizer.json").read_text(encoding="utf-8"))
    matcher = llguidance.LLMatcher(lltok, grammar)
    assert matcher.consume_tokens(lltok.tokenize_str("11.111111111"))  # nine decimals
    assert not matcher.consume_tokens(lltok.tokenize_str("1"))  # a tenth is refused
    assert kind == "json_schema"


@pytest.mark.parametrize("seed", range(6))
def test_sampled_json_ends_inside_the_budget(seed):
    """A random model sampling under an open schema still finishes: the bounds leave it nowhere to go."""
    from inference4py import OnnxTextGenerator
    from tests.conftest import FIXTURES

    gen = OnnxTextGenerator.builder().model_path(FIXTURES / "models" / "llama").build()
    schema = {
        "type": "object",
        "properties": {"x": {"type": "number", "maximum": 100}, "n": {"type": "integer"}},
        "required": ["x", "n"],
        "additionalProperties": False,
    }
    r = gen.generate("Numbers:", json_schema=schema, do_sample=True, seed=seed, max_new_tokens=100)
    assert r.finish_reason == "eos", r.text
    jsonschema.validate(json.loads(r.text), schema)
