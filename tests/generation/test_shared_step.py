"""Prefill that shares the step: a waiting prompt runs a piece per scheduler iteration, between the
running rows' decode steps, and every request's tokens and log-probabilities stay those it gets alone.

The fixtures' contexts are short (128 positions), so the tests give the scheduler a tiny step budget:
one query tile of prompt per iteration, the most interleavings a prompt can have.
"""

from __future__ import annotations

import collections
import queue
import threading

import numpy as np
import pytest

from inference4py import RequestOptions
from inference4py.engine.prompt_pass import PromptPass
from inference4py.engine.prompt_tiles import MIN_REST, next_cut, prefill_bounds
from inference4py.engine.rows import RowBatch
from inference4py.errors import ConfigurationError
from inference4py.generation.prompt_stage import PrefillBudget
from tests.generation.test_prefix_splits import _load, _prompt
from tests.generation.test_scheduler import gguf_files  # noqa: F401  (a fixture)

TINY = 1e-9  # step_seconds: one tile of prompt per iteration


def _record(monkeypatch, batched) -> list[tuple[str, int]]:
    """Log the scheduler's engine calls from now on: ("piece", the pass's id) and ("step", rows)."""
    events: list[tuple[str, int]] = []
    run = PromptPass.run

    def piece(self, limit):
        fed = run(self, limit)
        events.append(("piece", id(self)))
        return fed

    monkeypatch.setattr(PromptPass, "run", piece)
    batch = batched._scheduler._batch
    step = batch.step

    def stepped(tokens):
        events.append(("step", len(tokens)))
        return step(tokens)

    batch.step = stepped
    return events


def _answer(chunks) -> tuple:
    """A request's token ids, each token's log-probability and the prompt's log-probabilities, to the bit."""
    tokens = tuple((c.token_id, c.logprob) for c in chunks if c.token_id is not None)
    return tokens, chunks[0].prompt_logprobs


def _together(batched, requests):
    """Submit each request once the one before has delivered two chunks; the scheduler waits in that
    delivery until the next request is queued (so it arrives while the one before decodes, however
    slowly this thread runs)."""
    results = [queue.SimpleQueue() for _ in requests]
    going = [threading.Event() for _ in requests]
    queued = [threading.Event() for _ in requests] + [threading.Event()]
    queued[-1].set()

    def deliver(i):
        seen = []

        def take(item):
            if isinstance(item, BaseException):
                results[i].put(item)
                going[i].set()
                return
            seen.append(item)
            if len(seen) >= 2 or item.finish_reason is not None:
                going[i].set()
            if len(seen) == 2:
                assert queued[i + 1].wait(60)
            if item.finish_reason is not None:
                results[i].put(_answer(seen))

        return take

    for i, (prompt, options) in enumerate(requests):
        batched.submit(prompt, deliver(i), RequestOptions(**options))
        queued[i].set()
        assert going[i].wait(60)
    out = [r.get(timeout=120) for r in results]
    for r in out:
        if isinstance(r, BaseException):
            raise r
    return out


def _interleaved(events: list[tuple[str, int]]) -> set[int]:
    """The prompt passes with a decode step between two of their pieces."""
    seen: dict[int, int] = {}  # pass -> index of its first piece
    found = set()
    for i, (kind, who) in enumerate(events):
        if kind != "piece":
            continue
        first = seen.setdefault(who, i)
        if any(k == "step" for k, _ in events[first:i]):
            found.add(who)
    return found


@pytest.mark.parametrize(
    "name", ["genai-llama", "qwen2", "genai-llama-int4", "genai-gemma3", "tiny-q4_k_m", "tiny-q4_k_m:int8"]
)
def test_a_prompt_interleaved_with_a_stream_gives_both_what_they_give_alone(name, gguf_files, monkeypatch):  # noqa: F811
    """A stream runs; a long prompt (several tiles), then a sampled one, arrive while it decodes. Each
    request's ids and log-probabilities (and the long one's prompt log-probabilities, computed piece by
    piece) equal those it gets alone. Where a prompt cannot be cut (an int8 cache's first prompt runs on
    its float twin) it runs whole, and the same holds."""
    model = _load(name, gguf_files)
    tile = model._runtime.prompt_tile
    stream = _prompt(model, 9).tolist()
    long = _prompt(model, 3 * max(tile, 16) + 5).tolist()
    sampled = _prompt(model, max(tile, 16) + 3).tolist()
    requests = [
        (stream, {"max_new_tokens": 100, "min_new_tokens": 100, "do_sample": False, "logprobs": True}),
        (long, {"max_new_tokens": 8, "do_sample": False, "logprobs": True, "prompt_logprobs": True}),
        (sampled, {"max_new_tokens": 12, "do_sample": True, "seed": 5, "temperature": 0.9, "logprobs": True}),
    ]
    with model.batched(max_concurrent=4, prefix_cache_mb=0, step_seconds=TINY) as batched:
        alone = [_together(batched, [r])[0] for r in requests]
        events = _record(monkeypatch, batched)
        together = _together(batched, requests)
        stats = batched.stats
    assert together == alone
    assert stats.completed == 2 * len(requests) and stats.failed == 0
    cuttable = model._runtime.shared_kv and not name.endswith(":int8")
    pieces = sum(kind == "piece" for kind, _ in events)
    if cuttable:
        assert len(_interleaved(events)) == 2, "a decode step ran between the pieces of both later prompts"
        assert pieces >= len(prefill_bounds(len(long), tile, tile)) - 1 + 2
    else:  # one piece per prompt (the ballast's copy of a lone row's cache is one more pass)
        assert set(collections.Counter(who for kind, who in events if kind == "piece").values()) == {1}


def test_a_prompt_continued_from_the_prefix_cache_is_cut_from_the_cached_tile(gguf_files, monkeypatch):  # noqa: F811
    """A second turn's prompt starts after a cached prefix (not a tile multiple: exact_split allows it) and
    runs in pieces between the stream's steps: the same answer as without the cache."""
    model = _load("genai-llama", gguf_files)
    tile = model._runtime.prompt_tile
    first = _prompt(model, tile + 5).tolist()
    second = first + _prompt(model, 2 * tile).tolist()  # two tiles and more after the cached one
    stream = _prompt(model, 7).tolist()
    greedy = {"max_new_tokens": 6, "do_sample": False, "logprobs": True}
    requests = [(stream, {**greedy, "max_new_tokens": 100, "min_new_tokens": 100}), (second, greedy)]
    with model.batched(max_concurrent=4, prefix_cache_mb=0) as plain:
        want = [_together(plain, [r])[0] for r in requests]
    with model.batched(max_concurrent=4, prefix_cache_mb=16, step_seconds=TINY) as batched:
        _together(batched, [(first, greedy)])
        events = _record(monkeypatch, batched)
        got = _together(batched, requests)
        reused = batched.prefix_cache.reused_tokens
    assert reused == len(first) == tile + 5
    assert got == want
    assert _interleaved(events), "the continued prompt ran in pieces between the stream's steps"


def test_a_request_cancelled_between_its_pieces_leaves_and_frees_its_room(gguf_files, monkeypatch):  # noqa: F811
    model = _load("genai-llama", gguf_files)
    tile = model._runtime.prompt_tile
    stream = (_prompt(model, 7).tolist(), {"max_new_tokens": 100, "min_new_tokens": 100, "do_sample": False})
    long = _prompt(model, 3 * tile + 5).tolist()
    with model.batched(max_concurrent=4, prefix_cache_mb=0, step_seconds=TINY) as batched:
        want = _together(batched, [stream])[0]
        run = PromptPass.run
        scheduler = batched._scheduler

        def piece(self, limit):
            fed = run(self, limit)
            if len(self.ids) == len(long) and not self.finished:
                assert scheduler._stage.current is not None and scheduler._stage.current[1] is self
                scheduler._stage.current[0].cancel()  # after its first piece
            return fed

        monkeypatch.setattr(PromptPass, "run", piece)
        results: queue.SimpleQueue = queue.SimpleQueue()
        going, queued = threading.Event(), threading.Event()
        chunks = []

        def take(item):
            chunks.append(item)
            if len(chunks) == 2:  # the scheduler waits here until the long prompt is queued
                going.set()
                assert queued.wait(60)
            if isinstance(item, BaseException) or item.finish_reason is not None:
                results.put(_answer(chunks))

        batched.submit(stream[0], take, RequestOptions(**stream[1]))
        assert going.wait(60)
        batched.submit(long, lambda item: None, RequestOptions(max_new_tokens=5))
        queued.set()
        got = results.get(timeout=60)
        stats = batched.stats
        assert batched.running == 0 and batched.kv_usage == 0.0
    assert got == want
    assert stats.cancelled == 1 and stats.failed == 0
    assert stats.prompt_tokens == 2 * len(stream[0])  # the cancelled prompt never joined the batch


def test_pieces_joined_into_a_stepping_batch_equal_one_admission(gguf_files):  # noqa: F811
    """The engine's half: a prompt prefilled a tile at a time while another row steps, then joined,
    gives the logits, cache and next step of one admission."""
    model = _load("genai-llama", gguf_files)
    rt = model._runtime
    ids = _prompt(model, 3 * rt.prompt_tile + 7)
    one = RowBatch(rt, 1)
    want_last, _ = one.admit(ids, reserve=len(ids) + 4)
    batch = RowBatch(rt, 2)
    batch.admit(ids[:5])
    pending = batch.begin(ids, reserve=len(ids) + 4)
    fed = []
    while not pending.finished:
        fed.append(pending.run(1))
        batch.step(np.asarray([7]))  # the other row decodes between the pieces
    last, _ = batch.join(pending)
    assert fed == np.diff(prefill_bounds(len(ids), rt.prompt_tile, rt.prompt_tile)).tolist() and len(fed) >= 3
    assert np.array_equal(last, want_last)
    for got, want in zip(batch.row_cache(1).arrays, one.row_cache(0).arrays):
        assert np.array_equal(got, want)
    assert np.array_equal(batch.step(np.asarray([3, 4]))[1], one.step(np.asarray([4]))[0])


@pytest.mark.parametrize(("n", "tile", "limit"), [(100, 16, 1), (100, 16, 40), (130, 32, 64), (34, 32, 1), (7, 32, 1)])
def test_cuts_are_whole_tiles_within_the_limit_with_two_tokens_left(n, tile, limit):
    done, cuts = 0, []
    while done < n:
        done = next_cut(done, n, tile, limit)
        cuts.append(done)
    for a, b in zip([0, *cuts], cuts):
        assert b == n or (b % tile == 0 and n - b >= MIN_REST)
        assert b - a <= max(tile * (limit // tile), tile) or b == n
    assert cuts[-1] == n and all(b > a for a, b in zip([0, *cuts], cuts))


def test_the_budget_follows_the_measured_speed_in_whole_pieces():
    budget = PrefillBudget(0.5, tile=128, most=512)
    assert budget.tokens() == 128  # one tile until a piece is measured
    budget.record(256, 0.25)  # 1,024 tokens/s: half a second is 512 tokens
    assert budget.tokens() == 512
    budget.record(128, 0.5)  # slower as the prompt grows: 128 tokens/half second
    assert budget.tokens() == 128
    budget.record(30, 10.0)  # shorter than a tile: fixed costs, not a speed
    assert budget.tokens() == 128
    budget.record(128, 5.0)  # slower than a tile per budget: the scheduler still runs a tile
    assert budget.tokens() == 12 and next_cut(0, 1000, 128, budget.tokens()) == 128
    with pytest.raises(ConfigurationError, match="step_seconds"):
        PrefillBudget(0, tile=128, most=512)


def test_memory_of_a_long_row_goes_back_when_it_leaves(gguf_files, monkeypatch):  # noqa: F811
    """A joined prompt's own cache is freed; a shared buffer far wider than its longest row shrinks when a
    row leaves (the short row left decodes on unchanged) and is dropped when the batch empties."""
    from inference4py.engine import rows

    monkeypatch.setattr(rows, "_SHRINK_FROM", 16)  # the fixtures' context is 128 positions
    model = _load("genai-llama", gguf_files)
    rt = model._runtime
    ids = _prompt(model, 100)
    reference = RowBatch(rt, 1)
    reference.admit(ids[:6])
    batch = RowBatch(rt, 2)
    batch.admit(ids[:6])
    pending = batch.begin(ids, reserve=120)
    while not pending.finished:
        pending.run(rt.prompt_tile)
    batch.join(pending)
    assert pending.state._kv == {}, "the pass's own buffers were kept after the batch copied them"
    wide = batch.capacity
    batch.retire([1])
    assert wide >= 120 and batch.capacity < wide / 4
    for token in range(5, 25):  # past the smaller buffer's end: it grows again, mid-step
        assert np.array_equal(batch.step(np.asarray([token])), reference.step(np.asarray([token])))
    batch.retire([0])
    assert batch._store == {} and batch.capacity == 0
