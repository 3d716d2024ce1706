"""``inference4py serve --ray``: the OpenAI server as a Ray Serve application, on a real local Ray (2 CPUs).

Two replicas of a fixture model behind Serve's proxy, driven by the official openai client: the same
greedy answers as the plain server, 16 clients at once, a conversation's turns on one replica
(prefix-aware routing; Serve's default router spreads them), and a replica killed mid-stream.
"""

from __future__ import annotations

import concurrent.futures
import json
import time
import urllib.request

import pytest

pytest.importorskip("fastapi")
ray = pytest.importorskip("ray")  # ray[serve] is in the test extra
serve = pytest.importorskip("ray.serve")

from openai import OpenAI  # noqa: E402

from inference4py.serve import create_app, load_models  # noqa: E402
from inference4py.serve.forwarding import REPLICA_HEADER, prefix_key  # noqa: E402
from inference4py.serve.ray_serve import app_builder, build_app  # noqa: E402
from tests.conftest import MODELS, long_context_copy  # noqa: E402
from tests.serve.support import free_port, running  # noqa: E402


def test_the_command_serves_on_ray_and_stops_on_sigterm(tmp_path):
    """The newcomer's path: one command, a real port, the openai client, SIGTERM ends it (Ray and all)."""
    import os
    import signal
    import subprocess
    import sys

    port = free_port()
    env = {**os.environ, "INFERENCE4PY_CACHE": str(tmp_path / "cache")}
    command = [sys.executable, "-m", "inference4py", "serve", "--ray", "--replicas", "2", "--replica-cpus", "0.5"]
    command += ["--model", str(MODELS / "qwen2"), "--port", str(port)]
    log = tmp_path / "serve.log"  # a file, not a pipe: Ray logs plenty, and a full pipe would block it
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=open(log, "w"))  # noqa: SIM115
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=5)
                break
            except OSError:
                assert proc.poll() is None, log.read_text()[-3000:]
                time.sleep(1)
        assert chat(client(f"http://127.0.0.1:{port}"), "Hello")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    bad = subprocess.run(
        [sys.executable, "-m", "inference4py", "serve", "--ray", "--autoscale", "3,1", "--model", "x"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "give MIN,MAX with 0 < MIN <= MAX" in bad.stderr


QUESTIONS = ["Hello there", "What is the capital of France?", "Tell me a story", "Count to five", "Why?"]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return str(long_context_copy(tmp_path_factory.mktemp("ray-serve")))  # 1,024 positions: long streams


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, model):
    """A local Ray with Serve on a free port: the app with prefix routing at /, Serve's default router at /spread."""
    home = tmp_path_factory.mktemp("ray_serve_home")
    env = {"HF_HOME": str(home), "HF_HUB_OFFLINE": "1", "INFERENCE4PY_CACHE": str(home / "inference4py")}
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": env})
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(build_app([model], names=["qwen2"], replicas=2, num_cpus=0.25), name="routed", route_prefix="/")
    # the second app as a Serve config file gives it (import_path: inference4py.serve.ray_serve:app_builder)
    plain = app_builder(
        {"models": [model], "names": ["qwen2"], "replicas": 2, "num_cpus": 0.25, "prefix_routing": False}
    )
    serve.run(plain, name="spread", route_prefix="/spread")
    yield f"http://127.0.0.1:{port}"
    serve.shutdown()
    ray.shutdown()


@pytest.fixture(scope="module")
def plain_server(model):
    with running(create_app(load_models([model], ["qwen2"]))) as base:
        yield base


def client(base: str) -> OpenAI:
    return OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0, timeout=120)


def chat(c: OpenAI, content: str, **extra) -> str:
    r = c.chat.completions.create(
        model="qwen2", messages=[{"role": "user", "content": content}], max_tokens=12, temperature=0, **extra
    )
    return r.choices[0].message.content or ""


def test_the_ray_app_answers_as_the_plain_server(cluster, plain_server):
    ours, plain = client(cluster), client(plain_server)
    assert [m.id for m in ours.models.list().data] == ["qwen2"]
    for question in QUESTIONS[:3]:
        assert chat(ours, question) == chat(plain, question)
        stream = ours.chat.completions.create(
            model="qwen2", messages=[{"role": "user", "content": question}], max_tokens=12, temperature=0, stream=True
        )
        assert "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices) == chat(plain, question)
        completion = ours.completions.create(model="qwen2", prompt=question, max_tokens=12, temperature=0)
        expected = plain.completions.create(model="qwen2", prompt=question, max_tokens=12, temperature=0)
        assert completion.choices[0].text == expected.choices[0].text


def test_sixteen_clients_at_once_all_complete(cluster, plain_server):
    expected = {q: chat(client(plain_server), q) for q in QUESTIONS}
    asks = [QUESTIONS[i % len(QUESTIONS)] for i in range(16)]
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda q: chat(client(cluster), q), asks))
    assert answers == [expected[q] for q in asks]  # a request inside a batch gives what it gives alone


def _conversation_replicas(base: str, conversations: int = 4, turns: int = 3) -> list[set[str]]:
    """The replicas that answered each conversation's turns (each turn resends the history, as clients do)."""
    c = client(base)
    seen = []
    for n in range(conversations):
        messages = [{"role": "system", "content": f"You are assistant number {n}."}]
        replicas = set()
        for turn in range(turns):
            messages.append({"role": "user", "content": f"Question {turn} of conversation {n}"})
            raw = c.chat.completions.with_raw_response.create(
                model="qwen2", messages=messages, max_tokens=6, temperature=0
            )
            replicas.add(raw.headers[REPLICA_HEADER])
            messages.append({"role": "assistant", "content": raw.parse().choices[0].message.content or ""})
        seen.append(replicas)
    return seen


def test_a_conversations_turns_stay_on_one_replica(cluster):
    routed = _conversation_replicas(cluster)
    assert all(len(r) == 1 for r in routed), routed
    spread = _conversation_replicas(f"{cluster}/spread")
    assert any(len(r) > 1 for r in spread), spread  # Serve's default router: turns go anywhere


def test_replicas_cpus_memory_and_autoscaling_reach_serve():
    """What Serve is told per replica (no cluster needed to build the application)."""
    app = build_app([str(MODELS / "qwen2")], autoscale=(1, 3), num_cpus=2, memory_gb=1.5)
    ingress = app._bound_deployment  # Serve's Application: the ingress, bound to the model deployment
    model = ingress.init_args[0]._bound_deployment
    scaling = model._deployment_config.autoscaling_config
    assert (scaling.min_replicas, scaling.max_replicas) == (1, 3)
    options = model.ray_actor_options
    assert options["num_cpus"] == 2 and options["memory"] == int(1.5 * (1 << 30))
    assert options["runtime_env"]["env_vars"]["INFERENCE4PY_NUM_THREADS"] == "2"
    fixed = build_app([str(MODELS / "qwen2")], replicas=3)._bound_deployment.init_args[0]._bound_deployment
    assert fixed.num_replicas == 3


def test_a_serve_config_with_an_unknown_key_is_refused():
    from inference4py.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match=r"Unknown args \['replica'\] in the Serve config"):
        app_builder({"models": ["m"], "replica": 2})
    with pytest.raises(ConfigurationError, match=r"--autoscale MIN,MAX needs 0 < MIN <= MAX"):
        app_builder({"models": ["m"], "autoscale": [3, 1]})


def test_the_prefix_key_is_the_conversations_start():
    first = json.dumps(
        {"model": "m", "messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}]}
    )
    later = json.loads(first)
    later["messages"] += [{"role": "assistant", "content": "A"}, {"role": "user", "content": "Q2"}]
    assert prefix_key("v1/chat/completions", first.encode()) == prefix_key(
        "v1/chat/completions", json.dumps(later).encode()
    )
    other = first.replace('"Q"', '"R"')
    assert prefix_key("v1/chat/completions", other.encode()) != prefix_key("v1/chat/completions", first.encode())
    assert prefix_key("v1/models", b"") == "" and prefix_key("v1/chat/completions", b"not json") == ""


def test_a_killed_replica_ends_its_streams_cleanly_and_is_replaced(cluster):
    import threading

    def replicas() -> list[str]:
        named = ray.util.list_named_actors(all_namespaces=True)
        return [a["name"] for a in named if a["namespace"] == "serve" and "routed#ModelServer" in a["name"]]

    served_by: dict[int, str] = {}
    started = threading.Barrier(9)

    def stream(i: int) -> str:
        begun = time.time()
        try:
            raw = client(cluster).chat.completions.with_raw_response.create(
                model="qwen2",
                messages=[{"role": "user", "content": f"Write a long story number {i}"}],
                max_tokens=900,
                temperature=0,
                stream=True,
            )
            served_by[i] = raw.headers[REPLICA_HEADER]
            chunks = raw.parse()
            next(iter(chunks))  # the stream is running
            started.wait(timeout=60)
            for _ in chunks:
                pass
            return "completed"
        except Exception as exc:  # the error event (the openai client raises it as an APIError)
            return f"error: {type(exc).__name__}"
        finally:
            assert time.time() - begun < 120  # nobody waits past a timeout

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(stream, i) for i in range(8)]
        started.wait(timeout=60)  # all 8 streams are running
        victim = max(set(served_by.values()), key=list(served_by.values()).count)
        name = next(n for n in replicas() if n.endswith(victim))
        ray.kill(ray.get_actor(name, namespace="serve"), no_restart=True)
        outcomes = {i: f.result(timeout=180) for i, f in enumerate(futures)}
    print("\n[ray serve] outcomes after a replica was killed:", outcomes, served_by)
    for i, outcome in outcomes.items():
        if served_by[i] == victim:
            assert outcome in ("error: APIError", "completed"), outcome  # ended by an error event (or just done)
        else:
            assert outcome == "completed", (i, outcome)
    assert any(outcomes[i] == "error: APIError" for i in outcomes if served_by[i] == victim)
    deadline = time.time() + 120
    while time.time() < deadline:  # Serve starts a replacement; then every request succeeds again
        now = replicas()
        if len(now) == 2 and name not in now:
            break
        time.sleep(1)
    assert len(replicas()) == 2 and name not in replicas()
    assert all(chat(client(cluster), q) for q in QUESTIONS[:4])
    with urllib.request.urlopen(f"{cluster}/health", timeout=30) as response:
        assert response.status == 200
