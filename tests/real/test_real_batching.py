"""Continuous batching on real checkpoints: a request decoded with others equals the same request alone.

Eight chat requests of different lengths arrive while others decode (each next one once the
previous has produced tokens).  float32 graphs (the optimum export, the fused folder) equal the single-request ``generate()``.
The int4 folder's MatMulNBits nodes use accuracy_level 4 (int8 activations), and onnxruntime runs
a one-row product with another kernel than a several-row one: the step logits differ (by ~0.6 on
SmolLM2).  The scheduler therefore never steps an int4 request alone (a ballast row keeps it
company), and a request gives the same tokens alone in the scheduler as in any batch; the
single-request ``generate()``, which steps one row, can part from both at a near tie.
"""

from __future__ import annotations

import queue
import threading

import pytest

from inference4py import OnnxTextGenerator, RequestOptions
from tests.real.conftest import REAL, not_built

pytestmark = pytest.mark.real

QUESTIONS = [
    "What is the capital of France?",
    "Explain the water cycle in detail.",
    "Write a haiku about the sea.",
    "List three prime numbers.",
    "Why is the sky blue?",
    "Name a famous painter.",
    "How do vaccines work?",
    "Say hello in Spanish.",
]
MAX_NEW = [24, 48, 20, 16, 40, 12, 36, 8]


def _model(layout: str) -> OnnxTextGenerator:
    folder = REAL / layout
    if not folder.is_dir():
        not_built(layout, "llm")
    # the optimum export as it is: its growing cache is what the test batches (the default load would fuse it)
    return OnnxTextGenerator.builder().model_path(folder).fuse_attention(not layout.endswith("optimum")).build()


def _staggered(batched, prompts, options):
    outs = [queue.SimpleQueue() for _ in prompts]
    for i, (prompt, opts) in enumerate(zip(prompts, options)):
        started = threading.Event()
        seen: list = []

        def take(item, i=i, started=started, seen=seen):
            if isinstance(item, BaseException):
                outs[i].put(item)
                started.set()
                return
            seen.append(item)
            if len(seen) >= 2 or item.finish_reason is not None:
                started.set()
            if item.finish_reason is not None:
                outs[i].put(tuple(c.token_id for c in seen if c.token_id is not None))

        batched.submit(prompt, take, RequestOptions(**opts))
        assert started.wait(120)
    results = [q.get(timeout=600) for q in outs]
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return results


@pytest.mark.parametrize("layout", ["smollm2-optimum", "smollm2-fused"])
def test_staggered_chat_requests_equal_each_alone(layout):
    model = _model(layout)
    prompts = [[{"role": "user", "content": q}] for q in QUESTIONS]
    options = [{"max_new_tokens": n, "do_sample": False} for n in MAX_NEW]
    alone = [model.generate(p, **o).token_ids for p, o in zip(prompts, options)]
    with model.batched(max_concurrent=8) as batched:
        together = _staggered(batched, prompts, options)
        assert batched.stats.step_rows > batched.stats.steps
    assert together == alone


def test_int4_requests_give_the_same_tokens_alone_and_in_any_batch():
    """The scheduler steps a lone int4 request beside a ballast row, so it never takes the one-row kernel."""
    model = _model("smollm2-genai-int4")
    prompts = [[{"role": "user", "content": q}] for q in QUESTIONS]
    options = [{"max_new_tokens": n, "do_sample": False} for n in MAX_NEW]
    with model.batched(max_concurrent=8) as batched:
        assert batched._scheduler.ballast
        alone = [batched.generate(p, **o).token_ids for p, o in zip(prompts, options)]
        together = _staggered(batched, prompts, options)
        assert batched.stats.step_rows > batched.stats.steps
    assert together == alone
