"""GroupQueryAttention graphs (onnxruntime-genai folders) decode into one KV buffer shared by past and present.

The shared path must be taken on the genai fixtures, and give the same ids as the
growing-cache path (forced here by turning ``runtime.shared_kv`` off) for greedy,
beam search, rewind and capacity growth; batches must give each row's ids alone.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

from inference4py import OnnxTextGenerator
from tests.conftest import FIXTURES

GENAI = ["genai-llama", "genai-qwen2", "genai-llama-int4"]
PROMPTS = ["The old house", "Once upon a time there was a little girl who lived", "Hi"]
_models: dict[str, OnnxTextGenerator] = {}


def model(name: str) -> OnnxTextGenerator:
    if name not in _models:
        # the exports as they are: these tests compare the growing cache with the shared buffer
        _models[name] = OnnxTextGenerator.builder().model_path(FIXTURES / "models" / name).fuse_attention(False).build()
    return _models[name]


@contextlib.contextmanager
def growing(gen: OnnxTextGenerator):
    runtime = gen._runtime
    saved = runtime.shared_kv
    runtime.shared_kv = False
    try:
        yield
    finally:
        runtime.shared_kv = saved


def ids(result) -> list[int]:
    return list(result.token_ids)


@pytest.mark.parametrize("name", GENAI)
def test_genai_folders_take_the_shared_buffer_path(name):
    runtime = model(name)._runtime
    assert runtime.shared_kv
    state = runtime.new_state(1, capacity=20)
    assert state.shared_buffer
    logits = state.prefill(np.array([[1, 5, 9, 13]]))
    buffers = {k: v[1] for k, v in state._kv.items()}
    arrays = {k: v[0] for k, v in state._kv.items()}
    assert all(a.shape[2] == 20 for a in arrays.values())  # capacity, not the model's context
    token = int(logits.argmax())
    for _ in range(5):
        token = int(state.step(np.array([token])).argmax())
        # the very same OrtValues are bound as past and present at every step
        assert all(state._kv[k][1] is v for k, v in buffers.items())
    assert state.length == 9
    assert int(state._valid[0]) == 9


def test_other_graphs_keep_the_growing_cache():
    runtime = model("llama")._runtime
    assert not runtime.shared_kv
    assert not runtime.new_state(1).shared_buffer


@pytest.mark.parametrize("name", GENAI)
def test_greedy_and_beam_ids_match_the_growing_cache(name):
    gen = model(name)
    for prompt in PROMPTS:
        shared = ids(gen.generate(prompt, max_new_tokens=12, do_sample=False))
        beam = ids(gen.generate(prompt, max_new_tokens=8, num_beams=3, do_sample=False))
        with growing(gen):
            assert ids(gen.generate(prompt, max_new_tokens=12, do_sample=False)) == shared
            assert ids(gen.generate(prompt, max_new_tokens=8, num_beams=3, do_sample=False)) == beam


@pytest.mark.parametrize("name", GENAI)
def test_batch_rows_get_their_own_ids(name):
    gen = model(name)
    batch = gen.generate_batch(PROMPTS, max_new_tokens=8, do_sample=False)
    for prompt, result in zip(PROMPTS, batch):
        assert ids(result) == ids(gen.generate(prompt, max_new_tokens=8, do_sample=False))


@pytest.mark.parametrize("name", GENAI)
def test_rewind_and_continue_match_the_growing_cache(name):
    gen = model(name)

    def run() -> list[list[int]]:
        g = gen.generator(max_new_tokens=6, do_sample=False)
        g.append_tokens(gen.encode_prompt("The old house"))
        out = []
        while not g.is_done():
            g.generate_next_token()
        out.append(g.sequence(0))
        g.rewind_to(5)
        g.append_tokens([7, 8, 9])
        while not g.is_done():
            g.generate_next_token()
        out.append(g.sequence(0))
        g.rewind_to(0)
        g.append_tokens(gen.encode_prompt("Hi"))
        while not g.is_done():
            g.generate_next_token()
        out.append(g.sequence(0))
        return out

    shared = run()
    with growing(gen):
        assert run() == shared


@pytest.mark.parametrize("name", GENAI)
def test_buffers_grow_past_a_small_capacity(name):
    runtime = model(name)._runtime
    prompt = np.array([[1, 5, 9, 13, 17]])

    def greedy(capacity):
        state = runtime.new_state(1, capacity=capacity)
        token = int(state.prefill(prompt).argmax())
        out = [token]
        for _ in range(12):
            token = int(state.step(np.array([token])).argmax())
            out.append(token)
        return out

    assert greedy(6) == greedy(64) == greedy(None)


def test_chat_session_reuses_the_cache_on_the_shared_buffer():
    gen = model("genai-llama")
    chat = gen.chat_session(max_new_tokens=6)
    first = chat.send("Hello there")
    second = chat.send("And again")
    assert chat.reused_tokens > 0
    with growing(gen):
        chat2 = gen.chat_session(max_new_tokens=6)
        assert chat2.send("Hello there").text == first.text
        assert chat2.send("And again").text == second.text
