"""Continuous batching: a request decoded with others gives exactly what it gives alone.

Requests arrive while others decode (each next one is submitted once the previous has produced
tokens), with different prompt lengths and max_new_tokens, on the three cache layouts: a growing
cache (optimum export), a genai folder (shared GroupQueryAttention buffer) and an int4 folder; and on
every graph family the engine builds: GGUF conversions of 4- and 8-bit files, an int4 folder with a
sliding window, and the int8 KV cache.
"""

from __future__ import annotations

import queue
import threading

import numpy as np
import pytest

from inference4py import OnnxTextGenerator, RequestOptions
from inference4py.engine.prompt_tiles import exact_rows, longest_exact_split
from inference4py.engine.rows import RowBatch
from inference4py.errors import ConfigurationError, QueueFullError, RequestTimeoutError
from inference4py.generation.result import GenerationChunk
from tests.conftest import FIXTURES

MODELS = FIXTURES / "models"
LAYOUTS = ["qwen2", "genai-llama", "genai-llama-int4", "genai-gemma3", "llama"]
PROMPTS = [
    "hello",
    "the quick brown fox jumps over the lazy dog " * 3,
    "a b c d e f",
    "Once upon a time",
    "one two three four five six seven eight nine ten eleven twelve",
    "x",
    "what is the capital of France? The capital is",
    "tokens " * 9,
]
MAX_NEW = [5, 17, 9, 30, 3, 25, 12, 20]

_models: dict[str, OnnxTextGenerator] = {}


def _model(name: str) -> OnnxTextGenerator:
    if name not in _models:
        _models[name] = OnnxTextGenerator.builder().model_path(MODELS / name).build()
    return _models[name]


def _staggered(batched, prompts, options):
    """Submit request i+1 once request i delivered two chunks; returns each request's token ids."""
    done = [queue.SimpleQueue() for _ in prompts]
    started = [threading.Event() for _ in prompts]

    def deliver(i):
        seen = []

        def take(item):
            if isinstance(item, BaseException):
                done[i].put(item)
                started[i].set()
                return
            seen.append(item)
            if len(seen) >= 2:
                started[i].set()
            if item.finish_reason is not None:
                started[i].set()
                done[i].put(tuple(c.token_id for c in seen if c.token_id is not None))

        return take

    for i, (prompt, opts) in enumerate(zip(prompts, options)):
        batched.submit(prompt, deliver(i), RequestOptions(**opts))
        assert started[i].wait(30)
    results = [q.get(timeout=60) for q in done]
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return results


@pytest.mark.parametrize("name", LAYOUTS)
def test_staggered_greedy_requests_equal_each_alone(name):
    model = _model(name)
    options = [{"max_new_tokens": n, "do_sample": False} for n in MAX_NEW]
    alone = [model.generate(p, **o).token_ids for p, o in zip(PROMPTS, options)]
    # whether a submission lands while the one before still decodes is up to the threads: on a loaded
    # machine a tiny model may finish each request first, so a run with no shared step is tried again
    for _ in range(3):
        with model.batched(max_concurrent=8, prefix_cache_mb=0) as batched:
            together = _staggered(batched, PROMPTS, options)
            stats = batched.stats
        assert together == alone
        assert stats.completed == len(PROMPTS) and stats.failed == 0
        if stats.step_rows > stats.steps:
            break
    assert stats.step_rows > stats.steps, "the requests never shared a step, in three tries"


@pytest.fixture(scope="module")
def gguf_files(tmp_path_factory):
    """tools/random_gguf.py's tiny qwen2 and llama files in the block types a GGUF conversion keeps as they are."""
    pytest.importorskip("gguf")
    import subprocess
    import sys

    folder = tmp_path_factory.mktemp("gguf")
    tools = MODELS.parents[2] / "tools"
    files = {}
    for shape, mix in (("tiny", "q8_0"), ("tiny", "q4_k_m"), ("tiny-llama", "Q4_0"), ("tiny-llama", "Q4_1")):
        path = folder / f"{shape}-{mix}.gguf"
        code = (
            "import sys; sys.path.insert(0, sys.argv[1]); import random_gguf as r; r.write_random_gguf(*sys.argv[2:])"
        )
        subprocess.run([sys.executable, "-c", code, str(tools), str(path), shape, mix], check=True)
        files[f"{shape}-{mix}"] = path
    return files


@pytest.mark.parametrize(
    ("source", "kv"),
    [
        ("tiny-q8_0", "float"),
        ("tiny-q4_k_m", "float"),
        ("tiny-llama-Q4_0", "float"),
        ("tiny-llama-Q4_1", "float"),
        ("tiny-q4_k_m", "int8"),
        ("genai-llama-int4", "int8"),
        ("genai-gemma3-int4", "float"),
    ],
)
def test_every_graph_family_gives_each_request_alone_what_it_gives_in_a_batch(source, kv, gguf_files):
    """GGUF conversions (the file's 4- and 8-bit blocks as MatMulNBits), int4 folders and the int8 cache
    (whose first prompt runs on the float twin): each request gives alone on the server's scheduler what
    it gives among others. (Alone means on the scheduler: with MatMulNBits a lone request steps beside a
    ballast row, because onnxruntime rounds a one-row product differently from a several-row one; a
    plain generate() call of one row may differ in the last bits.)"""
    path = gguf_files[source] if source in gguf_files else MODELS / source
    model = OnnxTextGenerator.builder().model_path(path).kv_cache(kv).build()
    options = [{"max_new_tokens": n, "do_sample": False} for n in MAX_NEW]
    with model.batched(max_concurrent=8, prefix_cache_mb=0) as batched:
        alone = [batched.generate(p, **o).token_ids for p, o in zip(PROMPTS, options)]
        together = _staggered(batched, PROMPTS, options)
        stats = batched.stats
    assert together == alone
    assert stats.step_rows > stats.steps, "the requests never shared a step"


def test_seeded_sampling_stop_strings_and_logprobs_equal_alone():
    model = _model("genai-llama")
    options = [
        {"max_new_tokens": 20, "do_sample": True, "temperature": 0.9, "top_k": 20, "seed": 11},
        {"max_new_tokens": 15, "do_sample": False, "logprobs": True, "top_logprobs": 2},
        {"max_new_tokens": 25, "do_sample": True, "top_p": 0.8, "seed": 3, "repetition_penalty": 1.3},
        {"max_new_tokens": 12, "do_sample": False, "presence_penalty": 0.5, "logit_bias": {5: 3.0}},
    ]
    prompts = PROMPTS[:4]
    alone = [model.generate(p, **o) for p, o in zip(prompts, options)]
    # a stop string cut from the greedy answer's own text: the batched run must stop there too
    stop = alone[1].text[4:8]
    options[1]["stop_sequences"] = [stop]
    alone[1] = model.generate(prompts[1], **options[1])
    assert alone[1].finish_reason == "stop"
    with model.batched(max_concurrent=4) as batched:
        results: list = [None] * 4

        def run(i):
            results[i] = batched.generate(prompts[i], **options[i])

        threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for got, want in zip(results, alone):
        assert got.token_ids == want.token_ids
        assert got.text == want.text
        assert got.finish_reason == want.finish_reason
    assert [(e.token, e.logprob) for e in results[1].logprobs] == [(e.token, e.logprob) for e in alone[1].logprobs]


def test_json_schema_constraint_in_a_batch_equals_alone():
    pytest.importorskip("llguidance")
    model = _model("qwen2")
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    alone = model.generate("give json", json_schema=schema, max_new_tokens=20, do_sample=False)
    with model.batched() as batched:
        together = batched.generate_batch(
            ["give json", "plain"], json_schema=schema, max_new_tokens=20, do_sample=False
        )
    assert together[0].token_ids == alone.token_ids


def test_closing_a_stream_cancels_its_request_and_frees_the_row():
    model = _model("qwen2")
    with model.batched(max_concurrent=2) as batched:
        chunks = batched.stream_chunks("hello", max_new_tokens=100, do_sample=False)
        first = [next(chunks) for _ in range(3)]
        chunks.close()
        after = batched.generate("a b c", max_new_tokens=4, do_sample=False)
        assert batched.running == 0
        assert batched.stats.cancelled == 1
    assert all(isinstance(c, GenerationChunk) for c in first)
    assert after.token_ids == model.generate("a b c", max_new_tokens=4, do_sample=False).token_ids


def test_a_full_queue_raises_and_the_admitted_requests_finish():
    model = _model("qwen2")
    with model.batched(max_concurrent=1, max_waiting=2) as batched:
        sinks = []
        rejected = 0
        for _ in range(12):
            q: queue.SimpleQueue = queue.SimpleQueue()
            try:
                batched.submit("hello there", q.put, RequestOptions(max_new_tokens=30, do_sample=False))
                sinks.append(q)
            except QueueFullError as err:
                assert "retry shortly" in str(err)
                rejected += 1
        finished = 0
        for q in sinks:
            while True:
                item = q.get(timeout=30)
                assert not isinstance(item, BaseException)
                if item.finish_reason is not None:
                    finished += 1
                    break
    assert rejected > 0 and finished == len(sinks) and batched.stats.rejected == rejected


def test_a_request_past_its_timeout_is_stopped_with_a_clear_error():
    model = _model("qwen2")
    with model.batched(timeout=1e-4) as batched, pytest.raises(RequestTimeoutError, match="time limit"):
        batched.generate("hello", max_new_tokens=100, do_sample=False)


def test_beam_search_is_refused_with_the_way_out():
    with _model("qwen2").batched() as batched, pytest.raises(ConfigurationError, match="generate"):
        batched.generate("hello", num_beams=2)


@pytest.mark.parametrize("name", ["qwen2", "genai-llama"])
def test_second_turn_prefills_only_its_new_tokens_and_answers_as_without_cache(name):
    model = _model(name)
    turn1 = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say something"}]
    with model.batched(prefix_cache_mb=64) as cached, model.batched(prefix_cache_mb=0) as plain:
        first = cached.generate(turn1, max_new_tokens=12, do_sample=False)
        turn2 = [*turn1, {"role": "assistant", "content": first.text}, {"role": "user", "content": "More please"}]
        prompt2 = len(model.encode_prompt(turn2))
        before = cached.stats.prefilled_tokens
        second = cached.generate(turn2, max_new_tokens=12, do_sample=False)
        prefilled = cached.stats.prefilled_tokens - before
        reference = plain.generate(turn2, max_new_tokens=12, do_sample=False)
        assert cached.prefix_cache.hits == 1
        # the first turn's prompt is reused where the rest continues exactly; its answer (decode steps) is
        # prefilled again
        turn1_prompt, tile = len(model.encode_prompt(turn1)), model._runtime.prompt_tile
        assert prefilled == prompt2 - longest_exact_split(exact_rows(turn1_prompt, 0, tile), prompt2, tile)
    assert (
        second.token_ids == reference.token_ids == model.generate(turn2, max_new_tokens=12, do_sample=False).token_ids
    )


def test_a_graph_without_position_ids_decodes_one_request_at_a_time_and_stays_exact():
    model = _model("gemma")  # its positions come from the cache width: padding would shift them
    options = [{"max_new_tokens": n, "do_sample": False} for n in MAX_NEW[:4]]
    alone = [model.generate(p, **o).token_ids for p, o in zip(PROMPTS[:4], options)]
    with model.batched(max_concurrent=4) as batched:
        assert batched._scheduler.max_rows == 1
        assert _staggered(batched, PROMPTS[:4], options) == alone


@pytest.mark.parametrize("name", ["qwen2", "genai-llama"])
def test_row_batch_retires_rows_and_trims_padding(name):
    model = _model(name)
    batch = RowBatch(model._runtime, 4)
    long, short = model.encode_prompt(PROMPTS[1]), model.encode_prompt("hello")
    batch.admit(np.asarray(long))
    batch.admit(np.asarray(short))
    batch.admit(np.asarray(short))
    assert batch.batch == 3 and [batch.row_length(i) for i in range(3)] == [len(long), len(short), len(short)]
    order = batch.retire([0])
    assert sorted(order) == [1, 2] and batch.batch == 2
    assert [batch.row_length(i) for i in range(2)] == [len(short), len(short)]
    if not batch.shared_buffer:
        assert batch.length == len(short)  # the long row's padding columns were trimmed
    logits = batch.step(np.array([5, 5]))
    assert np.array_equal(logits[0], logits[1])  # two copies of one sequence stay identical


def test_a_kv_budget_keeps_requests_that_do_not_fit_waiting():
    model = _model("genai-llama")
    options = [{"max_new_tokens": n, "do_sample": False} for n in MAX_NEW[:4]]
    alone = [model.generate(p, **o).token_ids for p, o in zip(PROMPTS[:4], options)]
    reserve = max(len(model.encode_prompt(p)) + o["max_new_tokens"] for p, o in zip(PROMPTS[:4], options))
    with model.batched(max_concurrent=4, kv_budget=reserve) as batched:  # room for one request at a time
        together = batched.generate_batch(PROMPTS[:4], max_new_tokens=MAX_NEW[3], do_sample=False)
        stats = batched.stats
    assert stats.steps == stats.step_rows  # never two rows in one step
    want = [model.generate(p, max_new_tokens=MAX_NEW[3], do_sample=False).token_ids for p in PROMPTS[:4]]
    assert [r.token_ids for r in together] == want
    assert alone[3] == want[3]


def _step_sizes(batched) -> list[int]:
    """Record the row count of every decode step the scheduler runs from now on."""
    batch = batched._scheduler._batch
    sizes: list[int] = []
    plain = batch.step

    def step(tokens):
        sizes.append(len(tokens))
        return plain(tokens)

    batch.step = step
    return sizes


@pytest.mark.parametrize(
    ("name", "forced", "lone_rows"),
    [
        ("genai-llama-int4", None, 2),  # MatMulNBits: a ballast row by default
        ("genai-llama-int4", False, 1),
        ("genai-llama", None, 1),  # float32: no ballast
        ("qwen2", True, 2),  # forced on a growing cache
        ("genai-llama", True, 2),  # forced on a shared buffer
    ],
)
def test_a_lone_request_steps_with_a_ballast_row_where_kernels_depend_on_the_row_count(name, forced, lone_rows):
    model = _model(name)
    options = [{"max_new_tokens": n, "do_sample": False} for n in MAX_NEW]
    with model.batched(max_concurrent=8, prefix_cache_mb=0, batch_invariant=forced) as batched:
        sizes = _step_sizes(batched)
        alone = [batched.generate(p, **o).token_ids for p, o in zip(PROMPTS, options)]
        lone_sizes = sorted(set(sizes))
        together = _staggered(batched, PROMPTS, options)
        assert batched._scheduler._batch.batch == 0, "an idle scheduler keeps no rows (no ballast either)"
    assert lone_sizes == [lone_rows]
    assert together == alone
    assert min(sizes) == lone_rows


def test_the_ballast_keeps_prefix_cache_turns_exact_and_never_prefills_one_token():
    model = _model("genai-llama-int4")
    first = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    first += "seventeen eighteen nineteen twenty a b"
    tile = model._runtime.prompt_tile
    assert len(model.encode_prompt(first)) % tile == 1  # the whole first prompt but one token would be reusable
    with model.batched(max_concurrent=4) as batched:
        sizes = _step_sizes(batched)
        batch = batched._scheduler._batch
        prefilled: list[int] = []
        begin = batch.begin  # every prompt pass starts there (the ballast's admit too)

        def counting_begin(ids, *, prefix=None, **kw):
            prefilled.append(len(ids) - (prefix.length if prefix is not None else 0))
            return begin(ids, prefix=prefix, **kw)

        batch.begin = counting_begin
        reply = batched.generate(first, max_new_tokens=6, do_sample=False)
        # the second prompt is the first plus one token: a one-token prefill would be a one-row product
        second = model.encode_prompt(first) + [model.encode_prompt("x")[-1]]
        cached = batched.generate(second, max_new_tokens=6, do_sample=False)
        reused = batched.prefix_cache.reused_tokens
    with model.batched(max_concurrent=4, prefix_cache_mb=0) as plain:
        fresh = plain.generate(second, max_new_tokens=6, do_sample=False)
    assert reused > 0
    assert cached.token_ids == fresh.token_ids
    assert min(sizes) == 2
    requests = prefilled[0], prefilled[2]  # [1] is the ballast's copy of the first request's cache
    assert requests[0] == len(model.encode_prompt(first)) and requests[1] == len(second) - reused >= 2
    assert reused % tile == 0 and reply.token_ids
