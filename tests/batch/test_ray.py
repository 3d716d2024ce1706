"""run_batch on a real local Ray (2 CPUs): the same rows as the local runner, and a killed replica loses nothing."""

from __future__ import annotations

import sys

import pytest
import ray  # ray[data] is in the test extra: a missing install fails here, it is not skipped

from inference4py.batch import read_results, run_batch
from inference4py.batch.runner import _Stop
from inference4py.errors import ConfigurationError
from tests.batch.conftest import LONG, PROMPTS, QWEN, T5, by_id, write_jsonl


@pytest.fixture(scope="module", autouse=True)
def local_ray(tmp_path_factory):
    home = tmp_path_factory.mktemp("ray_hf_home")
    env = {  # the workers' own copy of the isolation tests/conftest.py gives this process
        "HF_HOME": str(home),
        "HF_HUB_CACHE": str(home / "hub"),
        "HF_HUB_OFFLINE": "1",
        "INFERENCE4PY_CACHE": str(home / "inference4py"),
    }
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": env})
    yield
    ray.shutdown()


CASES = {
    "generate": (QWEN, [{"prompt": p} for p in PROMPTS[:4]] + [{"prompt": ""}, {"prompt": LONG}]),
    "chat": (QWEN, [{"messages": [{"role": "user", "content": p}]} for p in PROMPTS[:4]] + [{"messages": []}]),
    "summarize": (T5, [{"text": p} for p in PROMPTS[:5]] + [{"text": " "}]),
}


@pytest.mark.parametrize("task", list(CASES))
def test_ray_gives_the_local_runners_rows(tmp_path, task):
    model, records = CASES[task]
    src = write_jsonl(tmp_path / "in.jsonl", records)
    options = dict(model=model, task=task, max_new_tokens=8, batch_size=2, progress=False)
    report = run_batch(src, tmp_path / "ray", replicas=2, **options)
    run_batch(src, tmp_path / "local", **options)
    on_ray, local = by_id(read_results(tmp_path / "ray")), by_id(read_results(tmp_path / "local"))
    assert report.engine == "ray" and report.completed == len(records)
    assert set(on_ray) == {str(i) for i in range(len(records))}
    assert on_ray == local
    assert any(r["error"] for r in on_ray.values()) and sum(1 for r in on_ray.values() if r["text"]) >= 4


def test_killed_replica_and_resumed_job_lose_and_repeat_nothing(tmp_path):
    records = [{"id": f"r{i}", "prompt": f"{PROMPTS[i % len(PROMPTS)]} {i}"} for i in range(12)]
    src = write_jsonl(tmp_path / "in.jsonl", records)
    options = dict(model=QWEN, id_column="id", max_new_tokens=6, batch_size=2, progress=False)
    with pytest.raises(_Stop):  # interrupted after 2 parts (4 rows) ...
        run_batch(src, tmp_path / "out", _stop_after_parts=2, **options)
    marker = tmp_path / "crashed"
    # ... resumed on Ray, where the replica running row r9 dies abruptly the first time
    report = run_batch(src, tmp_path / "out", replicas=2, _crash_once=("r9", str(marker)), **options)
    assert marker.is_file()  # the replica did die
    assert (report.skipped, report.completed, report.errors) == (4, 8, 0)
    run_batch(src, tmp_path / "whole", **options)
    got, whole = by_id(read_results(tmp_path / "out")), by_id(read_results(tmp_path / "whole"))
    assert set(got) == {r["id"] for r in records}
    assert got == whole


def test_without_ray_installed_the_error_names_the_extra(tmp_path, monkeypatch):
    src = write_jsonl(tmp_path / "in.jsonl", [{"prompt": "Hi"}])
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ConfigurationError, match=r'pip install "inference4py\[ray\]"'):
        run_batch(src, tmp_path / "out", model=QWEN, replicas=2, progress=False)
    # without replicas / ray_address the job runs here
    assert run_batch(src, tmp_path / "out", model=QWEN, max_new_tokens=2, progress=False).completed == 1


def test_a_replica_that_cannot_load_raises_the_librarys_error(tmp_path):
    from inference4py.errors import ModelNotFoundError

    src = write_jsonl(tmp_path / "in.jsonl", [{"prompt": "Hi"}])
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        run_batch(src, tmp_path / "out", model=str(tmp_path / "no-model"), replicas=1, progress=False)
    assert not list((tmp_path / "out").glob("part-*"))
