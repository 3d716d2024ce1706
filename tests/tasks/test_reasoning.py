"""A reasoning model's thinking is split from its answer (result.reasoning), or left inline when asked."""

from __future__ import annotations

import pytest

from inference4py import OnnxTextGenerator
from inference4py.errors import ConfigurationError
from tests.conftest import long_context_copy, scripted, thinking_copy

ASK = [{"role": "user", "content": "Is Paris in France?"}]


def _model(tmp_path, *, opened: bool, script: str) -> OnnxTextGenerator:
    folder = thinking_copy(tmp_path, opened=opened)
    plain = OnnxTextGenerator.builder().model_path(folder).build()
    return OnnxTextGenerator.builder().model_path(folder).logits_processor(scripted(plain.tokenizer, script)).build()


def test_thinking_is_split_from_the_answer(tmp_path):
    gen = _model(tmp_path, opened=False, script="<think>\nParis is the capital.\n</think>\n\nYes, it is.")
    r = gen.generate(ASK, max_new_tokens=60)
    assert r.reasoning == "\nParis is the capital.\n" and r.text == "Yes, it is."
    inline = gen.generate(ASK, max_new_tokens=60, reasoning="inline")
    assert inline.reasoning is None and inline.text.startswith("<think>") and inline.text.endswith("Yes, it is.")
    assert inline.token_ids == r.token_ids  # where the thinking goes changes no token


def test_a_prompt_that_opens_the_block(tmp_path):
    gen = _model(tmp_path, opened=True, script="Paris is the capital.</think>\n\nYes.")
    r = gen.generate(ASK, max_new_tokens=60)
    assert (r.reasoning, r.text) == ("Paris is the capital.", "Yes.")
    cut = gen.generate(ASK, max_new_tokens=3)  # cut inside the thinking: no answer yet
    assert cut.finish_reason == "length" and cut.text == "" and cut.reasoning


def test_a_model_without_a_thinking_template_keeps_its_text(tmp_path):
    folder = long_context_copy(tmp_path)  # Qwen2.5's template: no <think> in it
    plain = OnnxTextGenerator.builder().model_path(folder).build()
    text = "<think>x</think>y"
    gen = OnnxTextGenerator.builder().model_path(folder).logits_processor(scripted(plain.tokenizer, text)).build()
    r = gen.generate(ASK, max_new_tokens=20)
    assert r.reasoning is None and r.text == text


def test_bad_reasoning_option():
    with pytest.raises(ConfigurationError, match="reasoning must be"):
        from inference4py.tasks.options import RequestOptions

        RequestOptions(reasoning="hidden")  # type: ignore[arg-type]
