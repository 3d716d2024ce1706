"""SIGTERM during 8 streams: every stream finishes, the process exits 0 (a server under a process manager)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from tests.conftest import FIXTURES  # noqa: E402
from tests.serve.support import free_port  # noqa: E402

SERVER = """
import sys, time
from inference4py import OnnxTextGenerator
from inference4py.serve import ServerSettings, create_app, serve_app

def slow(ids, scores):  # 20 ms a token: the streams are still running when SIGTERM comes
    time.sleep(0.02)
    return scores

model = OnnxTextGenerator.builder().model_path(sys.argv[1]).logits_processor(slow).build()
settings = ServerSettings(shutdown_timeout=60)
serve_app(create_app({"qwen2": model}, settings), settings, port=int(sys.argv[2]), log_level="warning")
"""


def _stream(base: str, out: dict, i: int) -> None:
    body = json.dumps(
        {"model": "qwen2", "messages": [{"role": "user", "content": f"Story {i}"}], "max_tokens": 40, "stream": True}
    ).encode()
    request = urllib.request.Request(
        f"{base}/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    lines = []
    with urllib.request.urlopen(request, timeout=120) as response:
        for raw in response:
            line = raw.decode().strip()
            if line.startswith("data: "):
                lines.append(line[6:])
                out.setdefault("started", set()).add(i)
    out[i] = lines


def test_sigterm_lets_every_running_stream_finish_then_exits_0():
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(FIXTURES / "models" / "qwen2"), str(port)])
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                urllib.request.urlopen(f"{base}/health", timeout=2)
                break
            except OSError:
                time.sleep(0.1)
        out: dict = {}
        threads = [threading.Thread(target=_stream, args=(base, out, i)) for i in range(8)]
        for t in threads:
            t.start()
        while len(out.get("started", ())) < 8 and time.time() < deadline:
            time.sleep(0.01)
        assert len(out["started"]) == 8, "the streams did not all start"
        proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(timeout=120)
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    for i in range(8):
        lines = out[i]
        assert lines[-1] == "[DONE]", f"stream {i} was cut: {lines[-3:]}"
        finishes = [json.loads(x)["choices"][0]["finish_reason"] for x in lines[:-1] if json.loads(x)["choices"]]
        assert finishes[-1] in ("stop", "length")
