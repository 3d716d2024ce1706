"""The step-level Generator and multi-turn cache reuse, on the fixtures."""

from __future__ import annotations

import numpy as np
import pytest

from inference4py import OnnxTextGenerator
from inference4py.errors import InvalidInputError
from tests.conftest import MODELS, load_reference

REF = load_reference("decoder")["models"]


@pytest.fixture(scope="module")
def qwen():
    with OnnxTextGenerator.builder().model_path(MODELS / "qwen2").build() as gen:
        yield gen


def _run(g):
    out = []
    while not g.is_done():
        out.append(g.generate_next_token())
    return out


@pytest.mark.parametrize("name", ["qwen2", "llama", "gpt2", "llama-merged"])
def test_step_loop_equals_transformers(name):
    case = REF[name]["cases"][0]
    with OnnxTextGenerator.builder().model_path(MODELS / name).build() as gen:
        g = gen.generator(max_new_tokens=case["max_new_tokens"])
        g.append_tokens(case["prompt_ids"])
        assert _run(g) == case["output_ids"]
        assert g.sequence(0) == case["prompt_ids"] + case["output_ids"]
        assert g.next_tokens == [case["output_ids"][-1]]


def test_rewind_then_continue_equals_generating_the_prefix_afresh(qwen):
    case = REF["qwen2"]["cases"][6]  # the long prompt
    g = qwen.generator(max_new_tokens=30)
    g.append_tokens(case["prompt_ids"])
    full = _run(g)
    assert full == case["output_ids"]
    # Rewind into the prompt, then continue with fresh generation.
    cut = len(case["prompt_ids"]) - 7
    g.rewind_to(cut)
    assert g.sequence(0) == case["prompt_ids"][:cut]
    g.set_config(g.config.replace(max_new_tokens=12))  # counted from the rewind point
    resumed = _run(g)
    fresh = qwen.generate(case["prompt_ids"][:cut], max_new_tokens=12)
    assert resumed == list(fresh.token_ids)
    # Rewind into the generated part: continuing reproduces the original continuation.
    g2 = qwen.generator(max_new_tokens=30)
    g2.append_tokens(case["prompt_ids"])
    first = [g2.generate_next_token() for _ in range(10)]
    g2.rewind_to(len(case["prompt_ids"]) + 4)
    rest = _run(g2)
    assert first[:4] + rest == full


def test_logits_can_be_read_and_replaced(qwen):
    g = qwen.generator(max_new_tokens=3)
    g.append_tokens([272, 486])
    logits = g.get_logits()
    assert logits.shape[0] == 1
    forced = np.full_like(logits, -1e9)
    forced[0, 42] = 0.0
    g.set_logits(forced)
    assert g.generate_next_token() == 42
    with pytest.raises(InvalidInputError, match="shape"):
        g.set_logits(np.zeros((1, 3), dtype=np.float32))


def test_generator_misuse_is_explained(qwen):
    g = qwen.generator(max_new_tokens=1)
    with pytest.raises(InvalidInputError, match="append_tokens"):
        g.generate_next_token()
    g.append_tokens([272])
    g.generate_next_token()
    assert g.is_done()
    with pytest.raises(InvalidInputError, match="done"):
        g.generate_next_token()
    with pytest.raises(InvalidInputError, match="rewind"):
        g.rewind_to(99)


def test_multi_turn_chat_reuses_the_cache_and_matches_a_full_rerun(qwen):
    session = qwen.chat_session(system_prompt="You are a helpful assistant.", max_new_tokens=12)
    first = session.send("How many days are there in a week?")
    assert session.reused_tokens == 0
    second = session.send("And how many months are there in a year?")
    assert session.reused_tokens > 20  # the whole first exchange came from the cache
    rerun = qwen.generate(session.messages[:-1], max_new_tokens=12)
    assert second.token_ids == rerun.token_ids
    assert first.text and session.messages[-1]["content"] == second.text
