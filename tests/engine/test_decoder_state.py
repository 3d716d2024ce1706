"""DecoderState in growing-cache mode: steps, reorder and rewind against one full prefill.

Each step rebinds the attention mask and the KV cache through StepBinding (native
IOBinding calls when onnxruntime has them, the public wrapper otherwise); the logits
after any mix of steps, reorders and rewinds must be those of a fresh state fed the
same tokens in one prefill.
"""

from __future__ import annotations

import numpy as np
import pytest

from inference4py import OnnxTextGenerator
from inference4py.engine.sessions import StepBinding
from tests.conftest import FIXTURES

GROWING = ["gpt2", "llama", "llama-merged", "llama-fp16", "qwen2"]
PROMPT = [5, 17, 42, 9, 100, 3]
_runtimes: dict = {}


def runtime(name: str):
    if name not in _runtimes:
        _runtimes[name] = (
            OnnxTextGenerator.builder().model_path(FIXTURES / "models" / name).fuse_attention(False).build()._runtime
        )
    return _runtimes[name]


def tolerance(name: str) -> dict:
    return {"atol": 2e-2, "rtol": 2e-2} if "fp16" in name else {"atol": 1e-4, "rtol": 1e-4}


def prefilled(name: str, ids: list[int]) -> np.ndarray:
    """Last-position logits of ``ids`` fed at once to a fresh state, [vocab]."""
    return runtime(name).new_state(1).prefill(np.array([ids]))[0].copy()


@pytest.mark.parametrize("name", GROWING)
def test_growing_steps_match_one_prefill(name):
    rt = runtime(name)
    assert not rt.shared_kv
    state = rt.new_state(1, capacity=4)  # small: the mask buffer grows while stepping
    logits = state.prefill(np.array([PROMPT]))
    ids = list(PROMPT)
    for _ in range(8):
        token = int(logits[0].argmax())
        ids.append(token)
        logits = state.step(np.array([token]))
        assert logits.dtype == np.float32 and logits.shape[0] == 1
        np.testing.assert_allclose(logits[0], prefilled(name, ids), **tolerance(name))
    assert state.length == len(ids)


@pytest.mark.parametrize("name", GROWING)
def test_growing_steps_after_reorder_and_rewind(name):
    rt = runtime(name)
    tol = tolerance(name)
    state = rt.new_state(1, capacity=len(PROMPT) + 16)
    state.prefill(np.array([PROMPT]))
    state.step(np.array([7]))
    state.reorder(np.array([0, 0]))  # one row -> two rows (beam search)
    logits = state.step(np.array([11, 12]))
    np.testing.assert_allclose(logits[0], prefilled(name, PROMPT + [7, 11]), **tol)
    np.testing.assert_allclose(logits[1], prefilled(name, PROMPT + [7, 12]), **tol)
    logits = state.step(np.array([13, 14]))
    np.testing.assert_allclose(logits[1], prefilled(name, PROMPT + [7, 12, 14]), **tol)
    state.reorder(np.array([1]))  # keep the second row only
    logits = state.step(np.array([15]))
    np.testing.assert_allclose(logits[0], prefilled(name, PROMPT + [7, 12, 14, 15]), **tol)
    state.rewind(len(PROMPT) + 1)  # back to PROMPT + [7]
    logits = state.step(np.array([20]))
    np.testing.assert_allclose(logits[0], prefilled(name, PROMPT + [7, 20]), **tol)
    logits = state.prefill(np.array([[21, 22]]))  # a continuation prefill on the rewound cache
    np.testing.assert_allclose(logits[0], prefilled(name, PROMPT + [7, 20, 21, 22]), **tol)
    logits = state.step(np.array([23]))
    np.testing.assert_allclose(logits[0], prefilled(name, PROMPT + [7, 20, 21, 22, 23]), **tol)
    state.rewind(0)
    logits = state.step(np.array([5]))  # an empty cache: the step is a one-token prefill
    np.testing.assert_allclose(logits[0], prefilled(name, [5]), **tol)


@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_public_binding_path_gives_the_same_tokens(name, monkeypatch):
    """Without the native binding calls (another onnxruntime), StepBinding uses the
    public IOBinding wrapper: the same logits, step for step."""

    def greedy_logits() -> list[np.ndarray]:
        state = runtime(name).new_state(1)
        logits = state.prefill(np.array([PROMPT]))
        out = [logits[0].copy()]
        state.reorder(np.array([0]))
        for _ in range(6):
            logits = state.step(np.array([int(logits[0].argmax())]))
            out.append(logits[0].copy())
        return out

    assert StepBinding(runtime(name).rest.session)._native is not None  # this onnxruntime has them
    native = greedy_logits()
    original_init = StepBinding.__init__

    def public_only(self, session):
        original_init(self, session)
        self._native = None

    monkeypatch.setattr(StepBinding, "__init__", public_only)
    public = greedy_logits()
    for a, b in zip(native, public):
        np.testing.assert_array_equal(a, b)


def test_a_rewind_right_after_a_reorder_keeps_the_cache_it_cuts():
    """gemma's cache has one head: a batch-of-one cut along the positions is a view of the reordered
    cache, which the rewind drops (its copy must be the state's own, not freed memory)."""
    rt = runtime("gemma")
    assert not rt.shared_kv and all(rt.layout.empty(e, 1).shape[1] == 1 for e in rt.layout.self_entries)
    state = rt.new_state(1, capacity=len(PROMPT) + 8)
    state.prefill(np.array([PROMPT]))
    state.step(np.array([7]))
    shapes = [(1, *v.numpy().shape[1:]) for v in state._past]
    state.reorder(np.array([0]))  # the cache is now numpy memory of the state's own
    state.rewind(len(PROMPT))
    scribbled = [np.full(shape, np.nan, np.float32) for shape in shapes for _ in range(4)]  # the freed sizes
    logits = state.step(np.array([11]))
    np.testing.assert_allclose(logits[0], prefilled("gemma", PROMPT + [11]), **tolerance("gemma"))
    assert scribbled
