"""One memory budget for a server's models (--memory-gb): requests wait for room, nothing is lost or hung."""

from __future__ import annotations

import threading
import time

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")

from inference4py import OnnxTextGenerator  # noqa: E402
from inference4py.errors import MemoryBudgetError  # noqa: E402
from inference4py.generation.memory import MemoryBudget  # noqa: E402
from inference4py.serve import ServerSettings, create_app  # noqa: E402
from inference4py.serve.worker import weights_bytes  # noqa: E402
from tests.conftest import FIXTURES  # noqa: E402
from tests.serve.support import metrics, running  # noqa: E402

QWEN = FIXTURES / "models" / "qwen2"
ASK = [{"role": "user", "content": "Hi there"}]
NEW = 20


def _slow(ids, scores):  # 10 ms a token: requests overlap while we look
    time.sleep(0.01)
    return scores


def test_a_budget_for_four_requests_makes_the_fifth_wait():
    model = OnnxTextGenerator.builder().model_path(QWEN).logits_processor(_slow).build()
    alone = OnnxTextGenerator.builder().model_path(QWEN).build()
    prompt = len(alone.encode_prompt(ASK))
    per_request = (prompt + NEW) * model.runtime.layout.position_bytes
    budget = weights_bytes(model) + 4 * per_request + per_request // 2  # four fit, a fifth does not
    settings = ServerSettings(memory_gb=budget / 2**30, prefix_cache_mb=0)
    with running(create_app({"qwen2": model}, settings)) as base:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0, timeout=120)
        answers: dict[int, str] = {}

        def ask(i: int) -> None:
            r = client.chat.completions.create(model="qwen2", messages=ASK, max_tokens=NEW, temperature=0)
            answers[i] = r.choices[0].message.content

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(5)]
        for t in threads:
            t.start()
        most_running, waited = 0, False
        while any(t.is_alive() for t in threads):
            m = metrics(base)
            most_running = max(most_running, m['inference4py_requests_running{model="qwen2"}'])
            waited = waited or m['inference4py_requests_waiting{model="qwen2"}'] >= 1
            time.sleep(0.005)
        for t in threads:
            t.join()
        assert most_running == 4 and waited  # the fifth waited for room
        expected = alone.generate(ASK, max_new_tokens=NEW).text
        assert [answers[i] for i in range(5)] == [expected] * 5  # none lost, each the same as alone


def test_a_request_that_could_never_fit_is_a_clear_503():
    model = OnnxTextGenerator.builder().model_path(QWEN).build()
    positions = 40  # the budget's room for KV beside the weights: fewer than this prompt + max_tokens
    budget = weights_bytes(model) + positions * model.runtime.layout.position_bytes
    with running(create_app({"qwen2": model}, ServerSettings(memory_gb=budget / 2**30, prefix_cache_mb=0))) as base:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0, timeout=60)
        with pytest.raises(openai.InternalServerError) as refused:
            client.chat.completions.create(model="qwen2", messages=ASK, max_tokens=NEW)
        assert refused.value.status_code == 503 and "memory budget" in refused.value.message
        assert "max_tokens" in refused.value.message  # what to change
        r = client.completions.create(model="qwen2", prompt="Hi", max_tokens=4)  # a small one still runs
        assert r.choices[0].text is not None


def test_a_model_that_does_not_fit_is_refused_at_start():
    model = OnnxTextGenerator.builder().model_path(QWEN).build()
    with pytest.raises(MemoryBudgetError, match="Raise --memory-gb"):
        create_app({"qwen2": model}, ServerSettings(memory_gb=weights_bytes(model) / 2 / 2**30))


def test_models_share_the_budget_and_a_waiting_one_is_woken():
    """Model A's running request holds the room; model B's waits, then runs as soon as A's gives it back."""
    a = OnnxTextGenerator.builder().model_path(QWEN).logits_processor(_slow).build()
    b = OnnxTextGenerator.builder().model_path(QWEN).build()
    prompt = len(b.encode_prompt(ASK))
    per_request = (prompt + NEW) * a.runtime.layout.position_bytes
    memory = MemoryBudget(per_request + per_request // 2)  # one request at a time, across both models
    batched_a = a.batched(memory=memory, prefix_cache_mb=0, name="a")
    batched_b = b.batched(memory=memory, prefix_cache_mb=0, name="b")
    try:
        order: list[str] = []
        first = threading.Thread(target=lambda: (batched_a.generate(ASK, max_new_tokens=NEW), order.append("a")))
        first.start()
        while batched_a.running == 0:
            time.sleep(0.001)
        result = batched_b.generate(ASK, max_new_tokens=NEW)  # waits for a's room, then runs
        order.append("b")
        first.join()
        assert order == ["a", "b"] and result.generated_tokens == NEW
        assert memory.reserved == 0  # every byte given back
    finally:
        batched_a.close()
        batched_b.close()


def test_the_prefix_cache_lives_inside_the_budget_and_gives_room_back():
    model = OnnxTextGenerator.builder().model_path(QWEN).build()
    prompt = len(model.encode_prompt(ASK))
    per_request = (prompt + NEW) * model.runtime.layout.position_bytes
    memory = MemoryBudget(per_request + per_request // 4)  # one request; its cached KV leaves no room for two
    batched = model.batched(memory=memory, prefix_cache_mb=64)
    try:
        batched.generate(ASK, max_new_tokens=NEW)
        held = batched.prefix_cache.nbytes
        assert held > 0 and memory.reserved == held  # the finished request's KV, kept and counted
        other = [{"role": "user", "content": "Something else entirely, please"}]
        r = batched.generate(other, max_new_tokens=NEW)  # needs the room: the cache gives it back
        assert r.generated_tokens == NEW
        assert memory.reserved == batched.prefix_cache.nbytes <= memory.total
    finally:
        batched.close()
    assert memory.reserved == 0
