"""A prompt continued from a cached prefix gives the logits of one prefill, bit for bit.

The prefix cache reuses a prefix only where :func:`~inference4py.engine.prompt_tiles.exact_split` says
the rest is computed as one pass computes it (two tokens left; the last row alone in its query tile
both ways or neither); these tests check that rule, at every split it allows, against
onnxruntime's kernels on every graph family the engine runs: fused optimum exports, genai folders
(fp32 and int4, a sliding window), GGUF conversions, and a graph without GroupQueryAttention. And on
the scheduler: answers with the cache on equal the answers with it off, whatever was asked before.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from inference4py import OnnxTextGenerator
from inference4py.engine.prompt_tiles import MIN_REST, exact_rows, exact_split, query_tile
from inference4py.engine.rows import RowBatch
from tests.conftest import FIXTURES
from tests.generation.test_scheduler import gguf_files  # noqa: F401  (a fixture)

MODELS = FIXTURES / "models"
FAMILIES = ["qwen2", "llama", "genai-llama", "genai-llama-int4", "genai-gemma3-int4", "gpt2", "tiny-q4_k_m"]


def _load(name: str, gguf: dict) -> OnnxTextGenerator:
    kv = "int8" if name.endswith(":int8") else "float"
    name = name.removesuffix(":int8")
    path = gguf[name] if name in gguf else MODELS / name
    return OnnxTextGenerator.builder().model_path(path).kv_cache(kv).build()


def _prompt(model: OnnxTextGenerator, length: int) -> np.ndarray:
    rng = random.Random(length)
    words = " ".join(
        rng.choice(["red", "fox", "jumps", "over", "a", "lazy", "dog", "and", "runs"]) for _ in range(length)
    )
    ids = np.asarray(model.encode_prompt(words), dtype=np.int64)
    assert len(ids) >= length
    return ids[:length]


def _admit(model: OnnxTextGenerator, ids: np.ndarray, prefix=None) -> np.ndarray:
    batch = RowBatch(model._runtime, 1)
    logits, _ = batch.admit(ids, prefix=prefix)
    return logits


def _held(model: OnnxTextGenerator, ids: np.ndarray):
    """The cache of a finished prompt, as the scheduler keeps it: the prompt pass's positions only."""
    batch = RowBatch(model._runtime, 1)
    batch.admit(ids)
    batch.step(np.asarray([7]))  # a generated token: decode-step positions are not kept
    return batch.row_cache(0, len(ids))


@pytest.mark.parametrize("name", FAMILIES)
def test_a_prompt_continued_at_a_tile_boundary_equals_one_prefill(name, gguf_files):  # noqa: F811
    model = _load(name, gguf_files)
    tile = model._runtime.prompt_tile
    head = model._runtime.layout.head_dim
    assert tile == (query_tile(head) if model._runtime.shared_kv else 1)
    ids = _prompt(model, max(3 * tile + 7, 60))  # three tiles and a bit (within the fixtures' 128 positions)
    whole = _admit(model, ids)
    step = max(tile, 9)  # every tile boundary on the GQA graphs; a spread of splits on the others
    splits = [k for k in range(step, len(ids) - MIN_REST + 1, step)] + [len(ids) - MIN_REST - (len(ids) - 2) % tile]
    assert len(splits) >= 3
    for k in splits:
        # held by an earlier prompt that ran past k (its own split point), and one that diverged at k
        longer = _held(model, ids[: min(len(ids), k + 5)])
        other = _held(model, np.concatenate([ids[:k], ids[:3]]))
        for held in (longer, other):
            continued = _admit(model, ids, prefix=held.cut(k))
            assert np.array_equal(continued, whole), (name, tile, k, float(np.abs(continued - whole).max()))


@pytest.mark.parametrize("name", FAMILIES)
def test_a_prompt_continued_at_any_split_the_rule_allows_equals_one_prefill(name, gguf_files):  # noqa: F811
    """Between tile boundaries too: every row of a pass computed in a tile of two rows or more has the bits
    of one pass, so only the last row's tile decides (exact_split); a held prompt keeps its last row only
    when it did not run alone in its tile (exact_rows).  Lengths one past a tile multiple included."""
    model = _load(name, gguf_files)
    tile = model._runtime.prompt_tile
    checked = 0
    lengths = (2 * tile + 1, 2 * tile + 6) if tile > 1 else (40,)
    for n in sorted({min(n, 120) for n in lengths}):  # within the fixtures' 128 positions, each length once
        ids = _prompt(model, n)
        whole = _admit(model, ids)
        for k in range(2, n - 1, 3):
            for length in (k, min(n, k + 4)):  # an earlier prompt that ended at k, and one that ran past it
                held = _held(model, ids[:length])
                usable = exact_rows(length, 0, tile)
                if k > usable or not exact_split(k, n, tile):
                    continue
                continued = _admit(model, ids, prefix=held.cut(k))
                assert np.array_equal(continued, whole), (name, tile, n, k, length)
                checked += 1
    assert checked >= 20


def test_the_cache_reuses_only_exact_splits_and_keeps_no_answer():
    model = _load("qwen2", {})
    tile = model._runtime.prompt_tile
    with model.batched(prefix_cache_mb=64) as cached:
        first = cached.generate("the quick brown fox jumps over the lazy dog " * 4, max_new_tokens=6, do_sample=False)
        prompt = model.encode_prompt("the quick brown fox jumps over the lazy dog " * 4)
        cache = cached.prefix_cache
        assert len(cache) == 1 and next(iter(cache._entries.values())).length == len(prompt)  # not the answer
        again = model.encode_prompt("the quick brown fox jumps over the lazy dog " * 4 + "and more")
        found = cache.lookup(again)
        assert found is not None and exact_split(found.length, len(again), tile)
        same = cache.lookup(prompt)  # the whole prompt held: two tokens are prefilled again at least
        assert (
            same is not None and same.length <= len(prompt) - MIN_REST and exact_split(same.length, len(prompt), tile)
        )
    assert first.token_ids


QUESTIONS = ["Hello there", "What is the capital of France?", "Tell me a story", "Count to five", "Why?"]


@pytest.mark.parametrize("name", ["qwen2", "genai-llama-int4"])
def test_answers_with_the_cache_equal_answers_without_it_whatever_came_before(name):
    """What the Ray app's replicas met: each holds its own history, so the same question continues from
    different cached prefixes on each; the answer must not depend on which."""
    model = _load(name, {})
    system = {"role": "system", "content": "You answer briefly and kindly, in plain words, to everyone who asks."}
    chats = [[system, {"role": "user", "content": q}] for q in QUESTIONS]
    options = {"max_new_tokens": 12, "do_sample": False, "logprobs": True}

    def answer(result) -> tuple:  # the ids, and every chosen token's log-probability to the last bit
        return result.token_ids, tuple(t.logprob for t in result.logprobs)

    with model.batched(prefix_cache_mb=0) as plain:
        want = [answer(plain.generate(c, **options)) for c in chats]
    rng = random.Random(3)
    for _ in range(3):
        order = rng.sample(range(len(QUESTIONS)), len(QUESTIONS)) * 2
        with model.batched(prefix_cache_mb=64) as cached:
            got = {i: answer(cached.generate(chats[i], **options)) for i in order}
            assert cached.prefix_cache.hits > 0
        assert [got[i] for i in range(len(QUESTIONS))] == want, order


@pytest.mark.parametrize("name", [f for f in FAMILIES if f != "gpt2"] + ["genai-gemma3", "tiny-q4_k_m:int8"])
def test_a_long_prompt_run_in_pieces_equals_one_run(name, gguf_files):  # noqa: F811
    """A prompt longer than ``prefill_chunk`` runs in pieces of whole tiles (bounded activations): the same
    last logits, every position's logits (prompt log-probabilities) and KV cache as one run, bit for bit;
    with the int8 cache, on its float twin (``:int8``)."""
    model = _load(name, gguf_files)
    rt = model._runtime
    ids = _prompt(model, max(3 * rt.prompt_tile + 7, 60))
    whole = RowBatch(rt, 1)
    last, everything = whole.admit(ids, all_logits=True)
    rt.prefill_chunk = rt.prompt_tile  # pieces of one tile: the most cuts
    try:
        for all_logits in (True, False):
            pieces = RowBatch(rt, 1)
            got_last, got_all = pieces.admit(ids, all_logits=all_logits)
            assert np.array_equal(got_last, last)
            if all_logits:
                assert got_all is not None and np.array_equal(got_all, everything)
            assert all(np.array_equal(a, b) for a, b in zip(pieces.row_cache(0).arrays, whole.row_cache(0).arrays))
            # and the first step after it
            assert np.array_equal(pieces.step(np.asarray([7])), whole.step(np.asarray([7])))
            whole = RowBatch(rt, 1)
            whole.admit(ids)
        state = rt.new_state(1, len(ids) + 4)  # DecoderState.prefill (generate()) takes the same path
        assert np.array_equal(state.prefill(ids[None]), last)
    finally:
        rt.prefill_chunk = 512


def test_the_split_rule_in_numbers():
    """exact_split / exact_rows / longest_exact_split on a tile of 16: the cases the rule tells apart."""
    from inference4py.engine.prompt_tiles import longest_exact_split

    assert exact_split(32, 50, 16) and exact_split(34, 50, 16)  # a tile multiple; neither last row alone
    assert not exact_split(33, 50, 16)  # the continuation's 17 rows leave its last row alone
    assert not exact_split(33, 49, 16)  # one pass's last row runs alone (49 = 3 x 16 + 1), the continuation's not
    assert exact_split(32, 49, 16)  # a tile multiple keeps the same tiles
    assert not exact_split(8, 25, 16)  # the continuation's 17 rows leave its last row alone
    assert not exact_split(48, 49, 16)  # one token left: the decode kernel
    assert all(exact_split(k, 50, 1) for k in range(0, 49))  # no tiles (an unfused attention)
    assert exact_rows(33, 0, 16) == 32 and exact_rows(33, 30, 16) == 33 and exact_rows(34, 0, 16) == 34
    assert longest_exact_split(40, 49, 16) == 32  # 33..40 would leave one pass's last row alone
    assert longest_exact_split(40, 50, 16) == 40
    assert longest_exact_split(24, 41, 16) == 23  # 24 leaves 17 rows: its last alone
