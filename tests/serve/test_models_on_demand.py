"""``inference4py serve --models-dir DIR``: models listed with their status, loaded when asked for, unloaded when idle.

Real servers (uvicorn on a free port) over copies of the fixture models, driven by the ``openai``
client: answers equal a server with the same models loaded at start, the least recently used idle
model makes room, an idle one is unloaded, a broken file fails only its own requests, and the admin
routes load and unload behind the API key.
"""

from __future__ import annotations

import gc
import http.client
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")

import inference4py.serve.registry as registry_module  # noqa: E402
from inference4py import OnnxTextGenerator  # noqa: E402
from inference4py.errors import ConfigurationError  # noqa: E402
from inference4py.serve import ServerSettings, create_app, load_models  # noqa: E402
from inference4py.serve.loading import load_model, scan_models_dir  # noqa: E402
from tests.conftest import MODELS  # noqa: E402
from tests.serve.support import metrics, request, running  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
THREE = ("gpt2", "llama", "qwen2")
PROMPT = "Once upon a time"
KEY = "sk-admin"


@pytest.fixture()
def models_dir(tmp_path) -> Path:
    """A models folder with three text models (copies of the fixtures)."""
    folder = tmp_path / "models"
    folder.mkdir()
    for name in THREE:
        shutil.copytree(MODELS / name, folder / name)
    return folder


def _client(url: str, key: str = "none") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=60)


def _status(url: str, key: str | None = None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {key}"} if key else None
    status, _, body = request(url, "/v1/models", headers=headers)
    assert status == 200
    return {m["id"]: m["status"] for m in body["data"]}


def _complete(url: str, model: str, key: str = "none") -> str:
    r = _client(url, key).completions.create(model=model, prompt=PROMPT, max_tokens=8, temperature=0)
    return r.choices[0].text


def _wait_for(condition, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def _slow_loads(monkeypatch, seconds: float) -> list[str]:
    """Loads that take ``seconds`` longer (in the loading thread); returns the list of sources loaded."""
    loaded: list[str] = []

    def slow(source: str, **options):
        loaded.append(source)
        time.sleep(seconds)
        return load_model(source, **options)

    monkeypatch.setattr(registry_module, "load_model", slow)
    return loaded


def _slow_generation(monkeypatch) -> None:
    """Models that take 20 ms a token, so that a stream stays open while the test acts."""

    def pace(ids, scores):
        time.sleep(0.02)
        return scores

    def slow(source: str, **options):  # (the float KV cache: the options' default)
        return OnnxTextGenerator.builder().model_path(source).logits_processor(pace).build()

    monkeypatch.setattr(registry_module, "load_model", slow)


def _open_stream(url: str, model: str, key: str | None = None) -> http.client.HTTPConnection:
    """A streamed completion whose first event has arrived; the caller closes the connection."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    body = {"model": model, "prompt": "Hi", "max_tokens": 100, "stream": True}
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    conn.request("POST", "/v1/completions", json.dumps(body), headers)
    response = conn.getresponse()
    assert response.status == 200
    response.fp.readline()
    return conn


# ------------------------------------------------------------------------------- listing and answers
def test_models_load_on_demand_answer_as_a_fixed_server_and_the_least_recently_used_makes_room(models_dir):
    with running(create_app(load_models([str(MODELS / n) for n in THREE]))) as fixed:
        want = {name: _complete(fixed, name) for name in THREE}
        chat = [{"role": "user", "content": "Hi there"}]
        want_chat = _client(fixed).chat.completions.create(model="qwen2", messages=chat, max_tokens=8, temperature=0)
        assert _status(fixed) == dict.fromkeys(THREE, "loaded")

    settings = ServerSettings(models_dir=models_dir, max_loaded_models=2)
    with running(create_app({}, settings)) as url:
        listed = request(url, "/v1/models")[2]["data"]
        assert [m["id"] for m in listed] == list(THREE)
        assert all(m["object"] == "model" and m["owned_by"] == "inference4py" for m in listed)
        assert _status(url) == dict.fromkeys(THREE, "unloaded")

        assert _complete(url, "qwen2") == want["qwen2"]
        assert _complete(url, "llama") == want["llama"]
        assert _status(url) == {"gpt2": "unloaded", "llama": "loaded", "qwen2": "loaded"}
        assert _complete(url, "gpt2") == want["gpt2"]  # qwen2 is the least recently used: unloaded
        assert _status(url) == {"gpt2": "loaded", "llama": "loaded", "qwen2": "unloaded"}
        m = metrics(url)
        assert m['inference4py_model_loaded{model="qwen2"}'] == 0
        assert m['inference4py_model_loaded{model="gpt2"}'] == 1
        assert m['inference4py_model_unloads_total{model="qwen2"}'] == 1
        assert m['inference4py_model_loads_total{model="llama"}'] == 1
        assert 'inference4py_requests_total{model="qwen2"}' not in m  # an unloaded model has no worker
        assert m['inference4py_requests_total{model="gpt2"}'] == 1

        got = _client(url).chat.completions.create(model="qwen2", messages=chat, max_tokens=8, temperature=0)
        assert got.choices[0].message.content == want_chat.choices[0].message.content
        assert _status(url) == {"gpt2": "loaded", "llama": "unloaded", "qwen2": "loaded"}
        assert metrics(url)['inference4py_model_loads_total{model="qwen2"}'] == 2


def test_a_model_copied_into_the_folder_later_is_served_without_a_restart(models_dir):
    with running(create_app({}, ServerSettings(models_dir=models_dir))) as url:
        assert set(_status(url)) == set(THREE)
        status, _, body = request(url, "/v1/completions", json.dumps({"model": "late", "prompt": PROMPT}))
        assert status == 404 and "late" in body["error"]["message"]
        shutil.copytree(MODELS / "qwen2", models_dir / "late")
        assert _complete(url, "late") == _complete(url, "qwen2")  # a request for the new name finds it
        assert _status(url)["late"] == "loaded"
        # as cp -r does: the folder first (listed while empty: not a model yet), then its files
        (models_dir / "later").mkdir()
        assert "later" not in _status(url)
        time.sleep(0.01)
        for path in (MODELS / "llama").iterdir():
            (shutil.copytree if path.is_dir() else shutil.copy2)(path, models_dir / "later" / path.name)
        assert _status(url)["later"] == "unloaded"  # its own folder changed: looked at again, and listed


def test_given_models_stay_loaded_and_count(models_dir, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    shutil.copytree(MODELS / "qwen2", other / "pinned")
    pinned = load_models([str(other / "pinned")])
    settings = ServerSettings(models_dir=models_dir, max_loaded_models=2)
    with running(create_app(pinned, settings)) as url:
        assert _status(url) == {"pinned": "loaded", **dict.fromkeys(THREE, "unloaded")}
        _complete(url, "gpt2")
        _complete(url, "llama")  # two slots: the pinned model and one more
        assert _status(url) == {"pinned": "loaded", "gpt2": "unloaded", "llama": "loaded", "qwen2": "unloaded"}
        m = metrics(url)
        assert m['inference4py_model_loaded{model="pinned"}'] == 1
        assert m['inference4py_model_loads_total{model="pinned"}'] == 0  # given loaded
    with pytest.raises(ConfigurationError, match="leaving no room"):  # the given model fills the one slot
        create_app(load_models([str(other / "pinned")]), ServerSettings(models_dir=models_dir, max_loaded_models=1))
    with pytest.raises(ConfigurationError, match="max_loaded_models is 1"):
        create_app(load_models([str(MODELS / "gpt2"), str(MODELS / "llama")]), ServerSettings(max_loaded_models=1))


def test_the_scan_serves_gguf_files_and_model_folders_and_skips_the_rest(models_dir, caplog):
    (models_dir / "tiny-00001-of-00002.gguf").write_bytes(b"GGUF")
    (models_dir / "notes").mkdir()
    (models_dir / "notes" / "readme.txt").write_text("not a model")
    (models_dir / "README.md").write_text("my models")
    (models_dir / ".cache").mkdir()
    (models_dir / "whole.gguf").write_bytes(b"GGUF")
    with caplog.at_level(logging.WARNING, logger="inference4py.serve"):
        found = scan_models_dir(models_dir)
    assert list(found) == ["gpt2", "llama", "qwen2", "whole"]
    assert found["whole"] == (str(models_dir / "whole.gguf"), "gguf")
    assert found["qwen2"][1] == "decoder"
    warned = "\n".join(caplog.messages)
    assert "tiny-00001-of-00002.gguf" in warned and "gguf-split --merge" in warned
    assert "notes" in warned and "not a model folder" in warned
    with pytest.raises(ConfigurationError, match="not a folder"):
        scan_models_dir(models_dir / "missing")


def test_a_gguf_file_is_converted_when_first_asked_for(tmp_path, monkeypatch, caplog):
    pytest.importorskip("gguf")
    pytest.importorskip("onnx")
    from tests.gguf.test_convert import write_gguf

    monkeypatch.setenv("INFERENCE4PY_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "models"
    folder.mkdir()
    path = write_gguf(folder / "tiny-llama.gguf", "model-llama-F32.gguf", "tokenizer-llama.gguf")
    want = OnnxTextGenerator.builder().model_path(path).build().generate(PROMPT, max_new_tokens=8, do_sample=False)
    with (
        caplog.at_level(logging.INFO, logger="inference4py"),
        running(create_app({}, ServerSettings(models_dir=folder))) as url,
    ):
        assert _status(url) == {"tiny-llama": "unloaded"}
        assert _complete(url, "tiny-llama") == want.text
        assert _status(url) == {"tiny-llama": "loaded"}
    assert any("loaded model 'tiny-llama'" in m for m in caplog.messages)


# ------------------------------------------------------------------------------- unloading
def test_a_model_nobody_asked_for_is_unloaded_after_idle_unload(models_dir, tmp_path):
    pinned = load_models([str(MODELS / "gpt2")])
    settings = ServerSettings(models_dir=models_dir, idle_unload=1.0)
    with running(create_app({"fixed": pinned["gpt2"]}, settings)) as url:
        _complete(url, "qwen2")
        assert _status(url)["qwen2"] == "loaded"
        assert _wait_for(lambda: _status(url)["qwen2"] == "unloaded", 10)
        m = metrics(url)
        assert m['inference4py_model_unloads_total{model="qwen2"}'] == 1
        assert _status(url)["fixed"] == "loaded"  # a given model is never unloaded
        assert _complete(url, "qwen2")  # and it loads again
        assert metrics(url)['inference4py_model_loads_total{model="qwen2"}'] == 2


def test_unloading_frees_the_model(models_dir):
    app = create_app({}, ServerSettings(models_dir=models_dir, api_key=KEY))
    with running(app) as url:
        _complete(url, "qwen2", KEY)
        worker = app.state.models.workers()["qwen2"]
        model = weakref.ref(worker.model)
        scheduler = "inference4py-scheduler-qwen2"
        assert any(t.name == scheduler for t in threading.enumerate())
        del worker
        status, _, body = request(url, "/admin/models/qwen2/unload", "", {"Authorization": f"Bearer {KEY}"})
        assert status == 200 and body["status"] == "unloaded"
        gc.collect()
        assert model() is None  # nothing holds the model: its sessions are gone
        assert not any(t.name == scheduler for t in threading.enumerate())


def test_unloading_gives_the_memory_back(tmp_path, monkeypatch):
    """RSS drops when a ~70 MB model is unloaded (psutil): on the compiled operators its weights are the file's
    mapped pages (resident once a request has read them), unmapped with the session."""
    psutil = pytest.importorskip("psutil")
    pytest.importorskip("gguf")
    pytest.importorskip("onnx")
    monkeypatch.setenv("INFERENCE4PY_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "models"
    folder.mkdir()
    path = folder / "mid.gguf"
    # tools/random_gguf.py's tiny shape, wider and deeper: ~70 MB of Q8_0 (tests run tools as scripts)
    write = (
        "import dataclasses, sys; sys.path.insert(0, sys.argv[1]); import random_gguf as r; "
        "shape = dataclasses.replace(r.SHAPES['tiny'], name='mid', layers=6, hidden=1024, intermediate=2816, "
        "heads=8, head_dim=128); r.write_random_gguf(sys.argv[2], shape, 'q8_0')"
    )
    subprocess.run([sys.executable, "-c", write, str(ROOT / "tools"), str(path)], check=True)
    size = path.stat().st_size
    # measured in a process of its own: a long test session's heap (other tests' arrays) hides the drop
    measure = (
        "import gc, json, sys, psutil; sys.path.insert(0, sys.argv[1]); "
        "from inference4py.serve import ServerSettings, create_app; "
        "from tests.serve.support import request, running; "
        "process = psutil.Process(); "
        "app = create_app({}, ServerSettings(models_dir=sys.argv[2])); "
        "ctx = running(app); url = ctx.__enter__(); "
        "assert request(url, '/admin/models/mid/load', '')[0] == 200; "  # converted once, then loaded
        "assert request(url, '/admin/models/mid/unload', '')[0] == 200; "
        "gc.collect(); before = process.memory_info().rss; "
        "assert request(url, '/admin/models/mid/load', '')[0] == 200; "
        # the weights are the GGUF file's pages, mapped: a request reads them in
        "assert request(url, '/v1/completions', json.dumps({'model': 'mid', 'prompt': 'Hi', 'max_tokens': 2}))[0] == 200; "
        "loaded = process.memory_info().rss; "
        "assert request(url, '/admin/models/mid/unload', '')[0] == 200; "
        "gc.collect(); unloaded = process.memory_info().rss; ctx.__exit__(None, None, None); "
        "print(json.dumps([before, loaded, unloaded]))"
    )
    env = {**os.environ, "INFERENCE4PY_CACHE": str(tmp_path / "cache")}
    out = subprocess.run(
        [sys.executable, "-c", measure, str(ROOT), str(folder)], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-2000:]
    before, loaded, unloaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert psutil is not None
    assert loaded - before > size / 2, (before, loaded, size)
    assert loaded - unloaded > size / 3, (loaded, unloaded, size)


# ------------------------------------------------------------------------------- failures and contention
def test_a_broken_model_file_fails_its_requests_and_the_others_keep_answering(models_dir):
    broken = models_dir / "broken.gguf"
    broken.write_bytes(b"this is no GGUF file" * 10)
    with running(create_app({}, ServerSettings(models_dir=models_dir, max_loaded_models=2))) as url:
        assert _complete(url, "qwen2")
        for attempt in (1, 2):  # every request tries again
            with pytest.raises(openai.InternalServerError) as caught:
                _complete(url, "broken")
            error = caught.value.body
            assert caught.value.status_code == 500
            assert error["code"] == "model_load_failed" and error["type"] == "server_error"
            assert str(broken) in error["message"] and "not a GGUF file" in error["message"]
            card = next(m for m in request(url, "/v1/models")[2]["data"] if m["id"] == "broken")
            assert card["status"] == "failed" and "not a GGUF file" in card["error"]
            assert metrics(url)['inference4py_model_load_failures_total{model="broken"}'] == attempt
        assert _complete(url, "llama") and _complete(url, "qwen2")
        status, _, body = request(
            url,
            "/v1/chat/completions",
            json.dumps({"model": "nothing", "messages": [{"role": "user", "content": "x"}]}),
        )
        assert status == 404 and "broken" in body["error"]["message"]


def test_concurrent_first_requests_load_the_model_once(models_dir, monkeypatch):
    loads = _slow_loads(monkeypatch, 1.5)
    with running(create_app({}, ServerSettings(models_dir=models_dir))) as url:
        answers: list[str] = []

        def ask() -> None:
            answers.append(_complete(url, "qwen2"))

        threads = [threading.Thread(target=ask) for _ in range(6)]
        for t in threads:
            t.start()
        assert _wait_for(lambda: _status(url)["qwen2"] == "loading", 5)
        started = time.monotonic()
        assert _complete(url, "gpt2")  # another model loads and answers meanwhile
        assert time.monotonic() - started < 30
        for t in threads:
            t.join(60)
        assert len(answers) == 6 and len(set(answers)) == 1
        assert loads.count(str(models_dir / "qwen2")) == 1
        assert metrics(url)['inference4py_model_loads_total{model="qwen2"}'] == 1


def test_no_room_while_every_model_is_busy_is_a_503_with_retry_after(models_dir, monkeypatch):
    _slow_generation(monkeypatch)
    with running(create_app({}, ServerSettings(models_dir=models_dir, max_loaded_models=1))) as url:
        conn = _open_stream(url, "qwen2")  # qwen2 is answering: it cannot make room
        try:
            status, headers, body = request(
                url, "/v1/completions", json.dumps({"model": "llama", "prompt": "Hi", "max_tokens": 2})
            )
            assert status == 503 and headers.get("retry-after", headers.get("Retry-After")) == "1"
            assert body["error"]["code"] == "model_slots_busy" and "qwen2" in body["error"]["message"]
        finally:
            conn.close()
        assert _wait_for(lambda: metrics(url)['inference4py_requests_running{model="qwen2"}'] == 0)
        assert _complete(url, "llama")  # once qwen2 is idle it makes room
        assert _status(url) == {"gpt2": "unloaded", "llama": "loaded", "qwen2": "unloaded"}


# ------------------------------------------------------------------------------- admin
def test_admin_load_and_unload_need_the_key(models_dir, monkeypatch):
    _slow_generation(monkeypatch)
    pinned = {"fixed": OnnxTextGenerator.builder().model_path(MODELS / "gpt2").build()}
    auth = {"Authorization": f"Bearer {KEY}"}
    settings = ServerSettings(models_dir=models_dir, api_key=KEY)
    with running(create_app(pinned, settings)) as url:
        for action in ("load", "unload"):
            status, _, body = request(url, f"/admin/models/qwen2/{action}", "")
            assert status == 401 and body["error"]["code"] == "invalid_api_key"
        assert _status(url, KEY)["qwen2"] == "unloaded"

        status, _, body = request(url, "/admin/models/qwen2/load", "", auth)
        assert status == 200 and body["id"] == "qwen2" and body["status"] == "loaded"
        assert _status(url, KEY)["qwen2"] == "loaded"
        assert request(url, "/admin/models/qwen2/load", "", auth)[0] == 200  # loaded already: nothing to do

        conn = _open_stream(url, "qwen2", KEY)
        try:
            status, _, body = request(url, "/admin/models/qwen2/unload", "", auth)
            assert status == 409 and body["error"]["code"] == "model_busy"
        finally:
            conn.close()
        assert _wait_for(lambda: request(url, "/admin/models/qwen2/unload", "", auth)[0] == 200)
        assert _status(url, KEY)["qwen2"] == "unloaded"
        assert metrics_with_key(url)['inference4py_model_unloads_total{model="qwen2"}'] == 1

        status, _, body = request(url, "/admin/models/fixed/unload", "", auth)
        assert status == 409 and body["error"]["code"] == "model_pinned"
        status, _, body = request(url, "/admin/models/nothing/load", "", auth)
        assert status == 404 and body["error"]["type"] == "not_found_error"
        assert _complete(url, "fixed", KEY)


def metrics_with_key(url: str) -> dict[str, float]:
    status, _, text = request(url, "/metrics", headers={"Authorization": f"Bearer {KEY}"})
    assert status == 200
    return {k: float(v) for k, v in (line.rsplit(" ", 1) for line in text.splitlines() if line and line[0] != "#")}


# ------------------------------------------------------------------------------- settings and the CLI
def test_the_settings_and_the_command_line(models_dir, monkeypatch):
    for bad in ({"max_loaded_models": 0}, {"idle_unload": 0}, {"idle_unload": -1.0}):
        with pytest.raises(ConfigurationError):
            ServerSettings(**bad)
    import inference4py.serve as serve_module
    from inference4py.cli.app import main

    calls = []
    monkeypatch.setattr(serve_module, "serve", lambda models, **kw: calls.append((models, kw)))
    argv = ["serve", "--models-dir", str(models_dir), "--max-loaded-models", "2", "--idle-unload", "30"]
    assert main(argv) == 0
    models, kw = calls[0]
    assert models == [] and kw["settings"].models_dir == str(models_dir)
    assert kw["settings"].max_loaded_models == 2 and kw["settings"].idle_unload == 30
    assert main(["serve"]) == 2  # neither --model nor --models-dir


def test_a_model_that_does_not_fit_the_memory_budget_unloads_an_idle_one_first(models_dir):
    """--memory-gb with room for one model's weights (and a little KV): asking for a second model unloads
    the idle first one to make room, instead of failing; every answer equals a fixed server's."""
    from inference4py.serve.worker import source_bytes

    largest = max(source_bytes(models_dir / name) for name in THREE)
    settings = ServerSettings(models_dir=models_dir, memory_gb=(largest * 1.5 + (64 << 10)) / 2**30)
    with running(create_app({}, settings)) as url:
        first = _complete(url, "qwen2")
        assert _status(url)["qwen2"] == "loaded"
        second = _complete(url, "llama")
        statuses = _status(url)
        assert statuses["llama"] == "loaded" and statuses["qwen2"] == "unloaded"
        assert _complete(url, "qwen2") == first  # loaded again, the same answer
        assert _status(url)["llama"] == "unloaded"
    with running(create_app(load_models([str(models_dir / "llama")]))) as fixed:
        assert _complete(fixed, "llama") == second
