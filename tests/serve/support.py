"""A real server for tests: uvicorn on 127.0.0.1 and a free port, in a thread of the test process."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def running(app: Any) -> Iterator[str]:
    """Serve ``app`` until the block ends; yields its base URL."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not server.started and time.time() < deadline:
        time.sleep(0.02)
    assert server.started, "the server did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def metrics(base: str) -> dict[str, float]:
    """``GET /metrics`` as {'name{labels}': value}."""
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as response:
        text = response.read().decode()
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            values[key] = float(value)
    return values


def request(
    base: str,
    path: str,
    body: bytes | str | None = None,
    headers: dict[str, str] | None = None,
    method: str | None = None,
) -> tuple[int, dict[str, str], Any]:
    """``(status, headers, JSON body or text)`` of one request, error statuses included."""
    data = body.encode() if isinstance(body, str) else body
    sent = {"Content-Type": "application/json", **(headers or {})}
    req = urllib.request.Request(f"{base}{path}", data=data, headers=sent, method=method)
    try:
        with urllib.request.urlopen(req, timeout=60) as response:
            status, got, raw = response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as err:
        status, got, raw = err.code, dict(err.headers), err.read()
    try:
        return status, got, json.loads(raw)
    except ValueError:
        return status, got, raw.decode()
