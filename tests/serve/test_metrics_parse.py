"""/metrics as a router reads it: parsed by prometheus_client's own parser, its gauges moving with the load."""

from __future__ import annotations

import threading
import time
import urllib.request

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")
parser = pytest.importorskip("prometheus_client.parser")

from inference4py import OnnxTextGenerator  # noqa: E402
from inference4py.serve import create_app  # noqa: E402
from tests.conftest import FIXTURES  # noqa: E402
from tests.serve.support import running  # noqa: E402


def _scrape(base: str) -> dict[str, dict[str, float]]:
    """{family: {model: value}} of the gauges and counters (histograms left out)."""
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as response:
        text = response.read().decode()
    out: dict[str, dict[str, float]] = {}
    for family in parser.text_string_to_metric_families(text):
        if family.type in ("gauge", "counter"):
            for sample in family.samples:
                if not sample.name.endswith("_created"):
                    out.setdefault(sample.name, {})[sample.labels["model"]] = sample.value
    return out


def test_gauges_move_with_the_load_and_parse():
    def slow(ids, scores):  # 30 ms a token: requests stay running while we look
        time.sleep(0.03)
        return scores

    model = OnnxTextGenerator.builder().model_path(FIXTURES / "models" / "qwen2").logits_processor(slow).build()
    with running(create_app({"qwen2": model})) as base:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0, timeout=60)
        idle = _scrape(base)
        for name in (
            "inference4py_requests_waiting",
            "inference4py_requests_running",
            "inference4py_kv_cache_usage_ratio",
            "inference4py_prefix_cache_hit_rate",
        ):
            assert idle[name]["qwen2"] == 0, name

        def ask() -> None:
            client.chat.completions.create(
                model="qwen2", messages=[{"role": "user", "content": "Hi there"}], max_tokens=30
            )

        threads = [threading.Thread(target=ask) for _ in range(4)]
        for t in threads:
            t.start()
        busy = None
        deadline = time.time() + 30
        while time.time() < deadline:
            m = _scrape(base)
            if m["inference4py_requests_running"]["qwen2"] >= 2:
                busy = m
                break
            time.sleep(0.02)
        for t in threads:
            t.join()
        assert busy is not None, "no two requests were seen running"
        assert 0 < busy["inference4py_kv_cache_usage_ratio"]["qwen2"] <= 1
        done = _scrape(base)
        assert done["inference4py_requests_running"]["qwen2"] == 0
        assert done["inference4py_kv_cache_usage_ratio"]["qwen2"] == 0
        assert done["inference4py_requests_total"]["qwen2"] == 4
        ask()  # the same prompt again: it starts from the cached prefix of the first four
        again = _scrape(base)
        assert again["inference4py_prefix_cache_hit_rate"]["qwen2"] == pytest.approx(
            again["inference4py_prefix_cache_hits_total"]["qwen2"] / 5
        )
        assert again["inference4py_prefix_cache_hits_total"]["qwen2"] >= 1
