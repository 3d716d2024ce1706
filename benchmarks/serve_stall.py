"""Does one large request stall the others? ``inference4py serve`` with 4 streaming clients, with and without
a 10 MB (and a 1 MB) prompt sent in the middle (issue 36, item 2).

    python benchmarks/serve_stall.py --model /path/to/smollm2.gguf [--clients 4] [--max-tokens 160] [--out FILE]

One server (started by benchmarks/serve.py's ``Running``: its own process group, a free port) runs
three phases one after another, each with ``--clients`` greedy streaming chat completions started
together:

- ``alone``: the streams only;
- ``10 MB``: the same, and 0.5 s in, a chat request whose message is 10 MB of text (refused: it
  cannot fit the context), sent by ``curl`` (another process);
- ``1 MB``: the same with 1 MB, half of it spaces (few enough characters that the server must
  tokenize it to know it is too long);
- ``alone again``: the streams only, to see the noise.

Meanwhile a poller asks ``/health`` every 20 ms. Reported per phase: the streams' inter-token latency
(gap between consecutive content chunks of one stream) p50 / p95 / max, its p95 over the alone
phase's, the large request's status and time, and ``/health``'s p50 / max latency. The clients run
in this process, on the same cores as the server. JSON goes to ``benchmarks/results/stall-<time>.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.quality import cpu_flags  # noqa: E402
from benchmarks.run import machine, save_json  # noqa: E402
from benchmarks.serve import inference4py_server, percentile, running  # noqa: E402

PROMPT = "Write a long story about a lighthouse keeper and the sea."


def stream(url: str, model: str, max_tokens: int, gaps: list[float]) -> None:
    """One greedy streamed chat completion; the gaps between its content chunks are appended to ``gaps``."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
    }
    last = None
    with (
        httpx.Client(timeout=600, trust_env=False) as http,
        http.stream("POST", f"{url}/v1/chat/completions", json=body) as r,
    ):
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choices = json.loads(line[6:]).get("choices") or [{}]
            if not (choices[0].get("delta") or {}).get("content"):
                continue
            now = time.perf_counter()
            if last is not None:
                gaps.append(now - last)
            last = now


def phase(url: str, model: str, clients: int, max_tokens: int, large: Path | None) -> dict[str, Any]:
    gaps: list[float] = []
    health: list[float] = []
    stop = threading.Event()

    def poll() -> None:
        with httpx.Client(timeout=30, trust_env=False) as http:
            while not stop.is_set():
                t0 = time.perf_counter()
                http.get(f"{url}/health")
                health.append(time.perf_counter() - t0)
                time.sleep(0.02)

    poller = threading.Thread(target=poll)
    poller.start()
    threads = [threading.Thread(target=stream, args=(url, model, max_tokens, gaps)) for _ in range(clients)]
    for t in threads:
        t.start()
    big: dict[str, Any] = {}
    if large is not None:
        # sent by curl, another process: building and sending megabytes here would stall these clients' own
        # interpreter and show up in their gaps, not the server's
        time.sleep(0.5)
        t0 = time.perf_counter()
        argv = ["curl", "-s", "-w", "\\n%{http_code}", "-H", "Content-Type: application/json"]
        sent = subprocess.run(
            [*argv, "--data-binary", f"@{large}", f"{url}/v1/chat/completions"],
            capture_output=True,
            text=True,
            timeout=600,
        )
        answer, _, status = sent.stdout.rpartition("\n")
        big = {
            "bytes": large.stat().st_size,
            "status": int(status or 0),
            "seconds": round(time.perf_counter() - t0, 3),
            "answer": answer[:200],
        }
    for t in threads:
        t.join()
    stop.set()
    poller.join()
    ms = [g * 1000 for g in gaps]
    hs = [h * 1000 for h in health]
    return {
        "itl_ms": {"p50": percentile(ms, 0.5), "p95": percentile(ms, 0.95), "max": max(ms)},
        "tokens": len(ms) + clients,
        "health_ms": {"p50": percentile(hs, 0.5), "max": max(hs), "n": len(hs)},
        "large_request": big,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a model folder or GGUF file for inference4py serve")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    server = inference4py_server(Path(args.model), parallel=8)
    results: dict[str, Any] = {"machine": machine(), "cpu_flags": cpu_flags(), "model": args.model, "phases": {}}
    with tempfile.TemporaryDirectory() as logs, running(server, Path(logs), timeout=600) as srv:
        stream(srv.url, srv.model, 8, [])  # warm up
        bodies = {}
        for name, text in (
            ("10 MB, refused by its length", "lorem ipsum " * ((10 << 20) // 12)),
            # half of it whitespace: few enough characters that the server must tokenize it to know
            ("1 MB, tokenized then refused", "a " * ((1 << 20) // 2)),
        ):
            bodies[name] = Path(logs) / f"{len(bodies)}.json"
            bodies[name].write_text(json.dumps({"model": srv.model, "messages": [{"role": "user", "content": text}]}))
        for name, large in (("alone", None), *bodies.items(), ("alone again", None)):
            results["phases"][name] = phase(srv.url, srv.model, args.clients, args.max_tokens, large)
            print(f"{name}: {json.dumps(results['phases'][name])}", file=sys.stderr)
    alone = results["phases"]["alone"]["itl_ms"]["p95"]
    print(
        "| phase | ITL p50 ms | ITL p95 ms | p95 / alone | ITL max ms | /health p50 ms | /health max ms | large request |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, p in results["phases"].items():
        big = p["large_request"]
        what = f"{big['status']} in {big['seconds']} s" if big else "—"
        print(
            f"| {name} | {p['itl_ms']['p50']:.1f} | {p['itl_ms']['p95']:.1f} | {p['itl_ms']['p95'] / alone:.2f} | "
            f"{p['itl_ms']['max']:.1f} | {p['health_ms']['p50']:.1f} | {p['health_ms']['max']:.1f} | {what} |"
        )
    save_json(args.out or Path(__file__).parent / "results" / f"stall-{time.strftime('%Y%m%d-%H%M%S')}.json", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
