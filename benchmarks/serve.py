"""Load benchmark of OpenAI-compatible servers: ``inference4py serve`` against llama.cpp's ``llama-server``.

    python benchmarks/serve.py [--onnx FOLDER ...] [--gguf FILE ...] [--llama-server PATH]
                               [--concurrency 1,4,8,16] [--requests-per-client R] [--max-tokens N]
                               [--parallel 8] [--threads T] [--out FILE]

Each server runs alone (never two at once) as a subprocess on 127.0.0.1 and a free port, in
its own process group: the script waits for ``/health``, reads the served model's id from
``/v1/models``, warms it up (each prompt once), then for each concurrency C starts C clients
(asyncio + httpx, one connection each) that send ``--requests-per-client`` streaming chat
completions back to back. Client c's request i asks prompt ``(c + i) % len(PROMPTS)``, so every
server gets the same requests. Every body is the same: greedy (temperature 0), ``max_tokens``,
``stream_options.include_usage``. EOS is not suppressed (inference4py answers 400 to unknown
fields such as llama-server's ``ignore_eos``): the prompts ask for long answers and the
completion tokens are counted from each stream's usage chunk, for both servers alike.

Reported per server and concurrency: completion tokens/s over the level's wall time (all
tokens of all clients / time from the first request sent to the last stream closed), its ratio
to 1 client on the same server, requests/s, time to first token (request sent -> first
non-empty content chunk) p50/p95, inter-token latency (gap between consecutive non-empty content
chunks of one stream, over all streams) p50/p95, the median per-stream decode rate, mean
completion tokens per request, errors, and the server's peak RSS (VmHWM). The clients run in
this process, on the same cores as the server: their cost is part of what is measured.

Output: a markdown table on stdout, progress on stderr, and JSON in
``benchmarks/results/serve-<time>.json`` (or ``--out``). A server's own log goes to a
temporary file, whose tail is shown when it fails to start. Ctrl-C or an error stops every
server the script started (SIGTERM to its process group, SIGKILL after 15 s).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from types import FrameType
from typing import Any

if __package__ in (None, ""):  # `python benchmarks/serve.py`: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.run import RESULTS, machine

try:
    import httpx
except ImportError:  # pragma: no cover - a message instead of a traceback
    sys.exit("benchmarks/serve.py needs httpx: pip install httpx (the test extra's openai brings it).")

# Chat prompts that draw long answers from a small instruct model, so that most streams run to max_tokens.
PROMPTS = (
    "What is the capital of France? Describe the city in detail: its history, its landmarks, its food and its culture.",
    "Write a long story about a robot who learns to paint.",
    "Explain step by step how a computer compiles and runs a program.",
    "Describe the water cycle in detail, with examples from different climates.",
    "Write a detailed guide to growing tomatoes at home, from seed to harvest.",
)
STOP_GRACE_S = 15.0
PACKAGES = ("httpx", "fastapi", "uvicorn", "gguf")


# ---------------------------------------------------------------------------------------------- servers
@dataclass
class Server:
    """One server to measure: how to start it on a port, and what to call it in the table."""

    name: str
    kind: str  # "inference4py" | "llama.cpp"
    model_path: Path
    precision: str
    version: str
    argv_head: list[str]  # the command, "{port}" standing for the port
    info: dict[str, Any] = field(default_factory=dict)

    def argv(self, port: int) -> list[str]:
        return [a.replace("{port}", str(port)) for a in self.argv_head]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def folder_mb(path: Path) -> float:
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files) / 2**20


def inference4py_server(folder: Path, parallel: int, replicas: int | None = None, threads: int = 1) -> Server:
    """``inference4py serve`` on ``folder``, run by this interpreter; ``--max-concurrent`` when the CLI has it.

    ``replicas``: ``serve --ray --replicas N`` instead (a local Ray; each replica reserves ``threads`` CPUs).
    """
    head = [sys.executable, "-c", "import sys; from inference4py.cli import main; sys.exit(main())", "serve"]
    helptext = subprocess.run([*head, "--help"], capture_output=True, text=True, timeout=120).stdout
    argv = [*head, "--model", str(folder), "--host", "127.0.0.1", "--port", "{port}", "--log-level", "warning"]
    info: dict[str, Any] = {"setup": "no --max-concurrent flag in this CLI", "max_concurrent": None}
    if "--max-concurrent" in helptext:
        argv += ["--max-concurrent", str(parallel)]
        info.update(setup=f"--max-concurrent {parallel}", max_concurrent=parallel)
    versions = {}
    for name in ("inference4py", "onnxruntime"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[name] = metadata.version(name)
    info["size_mb"] = round(folder_mb(folder), 1)
    name = f"inference4py {folder.name}"
    if replicas is not None:
        argv += ["--ray", "--replicas", str(replicas), "--replica-cpus", str(threads)]
        info["setup"] += f"; --ray --replicas {replicas} --replica-cpus {threads}"
        info["replicas"] = replicas
        name = f"inference4py[ray x{replicas}] {folder.name}"
    return Server(
        name=name,
        kind="inference4py",
        model_path=folder,
        precision=onnx_precision(folder),
        version=", ".join(f"{k} {v}" for k, v in versions.items()),
        argv_head=argv,
        info=info,
    )


def onnx_precision(folder: Path) -> str:
    """Read from the graphs, not the folder's name: int4 with MatMulNBits nodes, else the dtype of most weights."""
    try:
        import onnx
    except ImportError:
        return "? (pip install onnx to read it)"
    elements: Counter[str] = Counter()
    for path in folder.glob("*.onnx"):
        graph = onnx.load(str(path), load_external_data=False).graph
        if any(node.op_type == "MatMulNBits" for node in graph.node):
            return "int4 (MatMulNBits)"
        for init in graph.initializer:
            elements[onnx.TensorProto.DataType.Name(init.data_type).lower()] += math.prod(init.dims)
    names = {"float": "fp32", "float16": "fp16", "bfloat16": "bf16"}
    return names.get(elements.most_common(1)[0][0], elements.most_common(1)[0][0]) if elements else "?"


def gguf_precision(path: Path) -> str:
    """The GGUF's file type (general.file_type) and the tensor types it holds, e.g. ``MOSTLY_Q4_1 (Q4_1 x210, ...)``."""
    try:
        from gguf import GGUFReader, LlamaFileType
    except ImportError:
        return "? (pip install gguf to read it)"
    reader = GGUFReader(str(path))
    ftype = reader.fields.get("general.file_type")
    name = "?"
    if ftype is not None:
        value = int(ftype.parts[ftype.data[0]][0])
        with contextlib.suppress(ValueError):
            name = LlamaFileType(value).name
    counts = Counter(t.tensor_type.name for t in reader.tensors)
    return f"{name} ({', '.join(f'{k} x{v}' for k, v in counts.most_common())})"


def llama_server(binary: Path, gguf: Path, parallel: int, ctx_per_slot: int, threads: int) -> Server:
    """``llama-server`` with ``parallel`` slots of ``ctx_per_slot`` tokens, continuous batching, ``threads`` threads."""
    helptext = subprocess.run([str(binary), "--help"], capture_output=True, text=True, timeout=60)
    flags = helptext.stdout + helptext.stderr
    done = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60)
    version = " ".join((done.stdout + done.stderr).split()) or "?"
    argv = [str(binary), "-m", str(gguf), "--host", "127.0.0.1", "--port", "{port}"]
    setup = ["-np", str(parallel), "-c", str(parallel * ctx_per_slot), "-t", str(threads)]
    if re.search(r"(^|[\s,])--cont-batching\b", flags):
        setup.append("--cont-batching")  # the default in recent builds; explicit where the flag exists
    argv += setup
    return Server(
        name=f"llama-server {gguf.name}",
        kind="llama.cpp",
        model_path=gguf,
        precision=gguf_precision(gguf),
        version=version,
        argv_head=argv,
        info={
            "setup": " ".join(setup),
            "slots": parallel,
            "ctx": parallel * ctx_per_slot,
            "threads": threads,
            "size_mb": round(folder_mb(gguf), 1),
        },
    )


class Running:
    """A started server: its process (own process group), base URL, served model id and log file."""

    def __init__(self, server: Server, log_dir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_dir / f"{re.sub(r'[^A-Za-z0-9._-]+', '_', server.name)}.log"
        self.argv = server.argv(self.port)
        self._log = self.log_path.open("wb")
        started = time.perf_counter()
        # a new session: Ctrl-C in the terminal reaches this script only, which then stops the server itself
        self.proc = subprocess.Popen(
            self.argv, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
        self.started = started
        self.model = ""
        self.load_s = 0.0

    def wait_ready(self, timeout: float) -> None:
        """Until /health answers 200 and /v1/models names a model (the id the requests use)."""
        self.model = self._poll(timeout)
        self.load_s = time.perf_counter() - self.started

    def _poll(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        with httpx.Client(base_url=self.url, timeout=5.0, trust_env=False) as http:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise self.failure(f"exited with code {self.proc.returncode} while starting")
                with contextlib.suppress(httpx.HTTPError):
                    if http.get("/health").status_code == 200:  # llama-server answers 503 while loading
                        models = http.get("/v1/models")
                        if models.status_code == 200 and models.json().get("data"):
                            return str(models.json()["data"][0]["id"])
                time.sleep(0.25)
        raise self.failure(f"not ready after {timeout:.0f}s")

    def failure(self, what: str) -> RuntimeError:
        """An error naming ``what`` happened and the log's last line; the log's tail on the following lines."""
        tail = self.log_tail()
        last = next((line for line in reversed(tail.splitlines()) if line.strip()), "(empty log)")
        return RuntimeError(f"{what}: {last.strip()[:300]}\n{tail}")

    def log_tail(self, lines: int = 25) -> str:
        return "\n".join(self._log_lines()[-lines:])

    def log_excerpt(self, head: int = 30, tail: int = 30) -> list[str]:
        """The log's first and last lines (llama-server states its slots, context and threads at the start)."""
        text = self._log_lines()
        return text if len(text) <= head + tail else [*text[:head], "...", *text[-tail:]]

    def _log_lines(self) -> list[str]:
        self._log.flush()
        return self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()

    def rss_mb(self) -> dict[str, float | None]:
        """The server's current and peak resident memory (VmRSS, VmHWM), from /proc."""
        out: dict[str, float | None] = {"rss_mb": None, "peak_rss_mb": None}
        with contextlib.suppress(OSError, ValueError):
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    out["rss_mb" if key == "VmRSS" else "peak_rss_mb"] = int(value.split()[0]) / 1024
        return out

    def stop(self) -> None:
        """SIGTERM to the server's process group, SIGKILL if it is still there after STOP_GRACE_S."""
        if self.proc.poll() is None:
            for sig, wait in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, 5.0)):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, sig)
                try:
                    self.proc.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        with contextlib.suppress(ProcessLookupError):  # children left in the group (none expected)
            os.killpg(self.proc.pid, signal.SIGKILL)
        self._log.close()


@contextlib.contextmanager
def running(server: Server, log_dir: Path, timeout: float) -> Iterator[Running]:
    proc: Running | None = None
    try:
        proc = Running(server, log_dir)
        proc.wait_ready(timeout)
        yield proc
    finally:
        if proc is not None:
            proc.stop()


# ---------------------------------------------------------------------------------------------- clients
@dataclass
class Record:
    """One streamed request, as the client saw it."""

    client: int
    prompt: int
    ok: bool = False
    error: str | None = None
    ttft_s: float | None = None
    duration_s: float = 0.0
    gaps_s: list[float] = field(default_factory=list)  # between consecutive non-empty content chunks
    chunks: int = 0  # non-empty content chunks
    completion_tokens: int | None = None  # from the usage chunk
    finish_reason: str | None = None
    replica: str | None = None  # x-inference4py-replica (Ray Serve)

    def tokens(self) -> int:
        return self.completion_tokens if self.completion_tokens is not None else self.chunks

    def stream_tps(self) -> float | None:
        """Tokens 2..n over the time between the first and the last content chunk of this stream."""
        span = sum(self.gaps_s)
        return (self.tokens() - 1) / span if span > 0 and self.tokens() > 1 else None

    def to_json(self) -> dict[str, Any]:
        itl = sorted(self.gaps_s)
        return {
            "client": self.client,
            "prompt": self.prompt,
            "ok": self.ok,
            "error": self.error,
            "ttft_ms": None if self.ttft_s is None else round(self.ttft_s * 1000, 2),
            "duration_s": round(self.duration_s, 4),
            "completion_tokens": self.completion_tokens,
            "content_chunks": self.chunks,
            "finish_reason": self.finish_reason,
            "itl_ms_p50": _ms(percentile(itl, 0.5)),
            "itl_ms_max": _ms(itl[-1] if itl else None),
        }


def body(model: str, prompt: str, max_tokens: int) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def one_request(http: httpx.AsyncClient, model: str, client: int, prompt: int, max_tokens: int) -> Record:
    rec = Record(client=client, prompt=prompt)
    sent = time.perf_counter()
    last: float | None = None
    try:
        async with http.stream("POST", "/v1/chat/completions", json=body(model, PROMPTS[prompt], max_tokens)) as resp:
            if resp.status_code != 200:
                rec.error = f"HTTP {resp.status_code}: {(await resp.aread()).decode(errors='replace')[:300]}"
                return rec
            rec.replica = resp.headers.get("x-inference4py-replica")
            async for line in resp.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                event = json.loads(data)
                now = time.perf_counter()
                if event.get("usage"):
                    rec.completion_tokens = int(event["usage"]["completion_tokens"])
                for choice in event.get("choices") or ():
                    if (choice.get("delta") or {}).get("content"):
                        rec.chunks += 1
                        if last is None:
                            rec.ttft_s = now - sent
                        else:
                            rec.gaps_s.append(now - last)
                        last = now
                    if choice.get("finish_reason"):
                        rec.finish_reason = choice["finish_reason"]
            rec.ok = rec.ttft_s is not None
            if not rec.ok:
                rec.error = "no content in the stream"
    except (httpx.HTTPError, json.JSONDecodeError, KeyError, ValueError) as exc:
        rec.error = f"{type(exc).__name__}: {exc}"
    finally:
        rec.duration_s = time.perf_counter() - sent
    return rec


async def run_level(
    url: str, model: str, clients: int, per_client: int, max_tokens: int, timeout: float
) -> dict[str, Any]:
    """``clients`` concurrent clients, each sending ``per_client`` requests back to back; their records and wall time."""
    limits = httpx.Limits(max_connections=clients + 2, max_keepalive_connections=clients + 2)
    async with httpx.AsyncClient(
        base_url=url, timeout=httpx.Timeout(timeout, connect=10.0), limits=limits, trust_env=False
    ) as http:

        async def client(c: int) -> list[Record]:
            return [await one_request(http, model, c, (c + i) % len(PROMPTS), max_tokens) for i in range(per_client)]

        start = time.perf_counter()
        per_client_records = await asyncio.gather(*(client(c) for c in range(clients)))
        wall = time.perf_counter() - start
    return {"wall_s": wall, "records": [r for rs in per_client_records for r in rs]}


async def warm_up(url: str, model: str, max_tokens: int, timeout: float) -> list[Record]:
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(timeout, connect=10.0), trust_env=False) as http:
        return [await one_request(http, model, 0, p, max_tokens) for p in range(len(PROMPTS))]


# ---------------------------------------------------------------------------------------------- statistics
def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default); None for no values."""
    if not values:
        return None
    s = sorted(values)
    k = (len(s) - 1) * q
    lo = math.floor(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)


def summarize(clients: int, level: dict[str, Any]) -> dict[str, Any]:
    records: list[Record] = level["records"]
    ok = [r for r in records if r.ok]
    wall = level["wall_s"]
    tokens = sum(r.tokens() for r in ok)
    gaps = [g for r in ok for g in r.gaps_s]
    ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
    stream_tps = [t for t in (r.stream_tps() for r in ok) if t is not None]
    return {
        "concurrency": clients,
        "requests": len(records),
        "errors": len(records) - len(ok),
        "error_samples": sorted({r.error for r in records if r.error})[:3],
        "wall_s": round(wall, 3),
        "completion_tokens": tokens,
        "tokens_from_usage": all(r.completion_tokens is not None for r in ok),
        "mean_tokens_per_request": round(tokens / len(ok), 1) if ok else None,
        "finish_reasons": dict(Counter(r.finish_reason for r in ok)),
        "tok_s": round(tokens / wall, 2) if wall > 0 else None,
        "req_s": round(len(ok) / wall, 3) if wall > 0 else None,
        "ttft_ms_p50": _ms(percentile(ttfts, 0.5)),
        "ttft_ms_p95": _ms(percentile(ttfts, 0.95)),
        "itl_ms_p50": _ms(percentile(gaps, 0.5)),
        "itl_ms_p95": _ms(percentile(gaps, 0.95)),
        "stream_tok_s_p50": None if not stream_tps else round(percentile(stream_tps, 0.5) or 0.0, 2),
        "replicas_used": len({r.replica for r in ok if r.replica}) or None,
        "affinity": affinity(ok),
        "per_request": [r.to_json() for r in records],
    }


def affinity(records: Sequence[Record]) -> float | None:
    """Of the requests repeating a prompt, the share served by the replica that served it first (Ray rows):
    what a prefix cache on that replica can hit."""
    first: dict[int, str] = {}
    same = repeats = 0
    for r in records:
        if r.replica is None:
            return None
        if r.prompt in first:
            repeats += 1
            same += first[r.prompt] == r.replica
        else:
            first[r.prompt] = r.replica
    return round(same / repeats, 3) if repeats else None


# ---------------------------------------------------------------------------------------------- report
def _f(value: Any, fmt: str = "{:.1f}") -> str:
    return "-" if value is None else fmt.format(value)


def render(results: list[dict[str, Any]], spec: dict[str, Any], env: dict[str, Any]) -> str:
    lines = [
        f"Machine: {env['nproc']} cores, {env['cpu']}, {env['mem_total_mb']} MiB; load average at start "
        f"{', '.join(f'{x:.1f}' for x in env['loadavg_start'])}. Streaming chat completions, greedy, "
        f"max_tokens {spec['max_tokens']} (EOS not suppressed), {spec['requests_per_client']} request(s) per client "
        f"back to back, {len(PROMPTS)} prompts in rotation; clients in the same process and on the same cores.",
        "",
        "Servers:",
        "",
    ]
    for res in results:
        info = res["info"]
        lines.append(
            f"- **{res['name']}**: {res['precision']}, {_f(info.get('size_mb'), '{:.0f}')} MB on disk; "
            f"{res['version']}; `{info.get('setup', '')}`; ready in {_f(res.get('load_s'))} s"
        )
    base_clients = 1 if 1 in spec["concurrency"] else spec["concurrency"][0]
    lines += [
        "",
        f"| server | clients | requests | errors | tokens/req | completion tok/s | vs {base_clients} client(s) | req/s "
        "| TTFT p50 ms | TTFT p95 ms | ITL p50 ms | ITL p95 ms | stream tok/s p50 | peak RSS MB | replicas used "
        "| same replica for a repeated prompt |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for res in results:
        levels = res["levels"]
        if not levels:
            reason = f": {str(res.get('reason'))[:200]}" if res.get("reason") else ""
            lines.append(f"| {res['name']} | {res['status']}{reason} |" + " |" * 14)
            continue
        base = next((lv for lv in levels if lv["concurrency"] == base_clients), None)
        for lv in levels:
            ratio = lv["tok_s"] / base["tok_s"] if base and base["tok_s"] and lv["tok_s"] else None
            name = res["name"] if res["status"] == "ok" else f"{res['name']} ({res['status']})"
            lines.append(
                f"| {name} | {lv['concurrency']} | {lv['requests']} | {lv['errors']} | "
                f"{_f(lv['mean_tokens_per_request'])} | {_f(lv['tok_s'])} | {_f(ratio, '{:.2f}x')} | "
                f"{_f(lv['req_s'], '{:.2f}')} | {_f(lv['ttft_ms_p50'])} | {_f(lv['ttft_ms_p95'])} | "
                f"{_f(lv['itl_ms_p50'])} | {_f(lv['itl_ms_p95'])} | {_f(lv['stream_tok_s_p50'])} | "
                f"{_f(lv.get('peak_rss_mb'), '{:.0f}')} | {_f(lv.get('replicas_used'), '{}')} | "
                f"{_f(lv.get('affinity'), '{:.0%}')} |"
            )
    if any(lv["errors"] for res in results for lv in res.get("levels", ())):
        lines += ["", "Errors (samples):"]
        for res in results:
            for lv in res.get("levels", ()):
                for err in lv["error_samples"]:
                    lines.append(f"- {res['name']}, {lv['concurrency']} clients: {err[:300]}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- main
def measure(server: Server, args: argparse.Namespace, log_dir: Path, results: list[dict[str, Any]]) -> None:
    """Start ``server``, warm it up, run every concurrency level, stop it; its entry goes into ``results`` first
    (status "interrupted" until done), so Ctrl-C keeps the levels already measured."""
    out: dict[str, Any] = {
        "name": server.name,
        "kind": server.kind,
        "model_path": str(server.model_path),
        "precision": server.precision,
        "version": server.version,
        "info": server.info,
        "levels": [],
        "status": "interrupted",
    }
    results.append(out)
    log(f"== {server.name}: starting")
    try:
        with running(server, log_dir, args.start_timeout) as proc:
            out.update(command=proc.argv, served_model=proc.model, load_s=round(proc.load_s, 2))
            log(f"   ready in {proc.load_s:.1f}s at {proc.url} (model {proc.model!r}); warming up")
            warm = asyncio.run(warm_up(proc.url, proc.model, min(args.max_tokens, 32), args.request_timeout))
            if not all(r.ok for r in warm):
                raise RuntimeError(f"warm-up failed: {next(r.error for r in warm if not r.ok)}")
            for clients in args.concurrency:
                level = asyncio.run(
                    run_level(
                        proc.url, proc.model, clients, args.requests_per_client, args.max_tokens, args.request_timeout
                    )
                )
                summary = summarize(clients, level)
                summary.update(proc.rss_mb())
                out["levels"].append(summary)
                log(
                    f"   {clients:3d} clients: {summary['tok_s']} tok/s, {summary['req_s']} req/s, "
                    f"TTFT p50 {summary['ttft_ms_p50']} ms, ITL p50 {summary['itl_ms_p50']} ms, "
                    f"{summary['errors']} error(s)"
                )
            if proc.proc.poll() is not None:
                raise proc.failure(f"exited with code {proc.proc.returncode} during the run")
            out["log"] = proc.log_excerpt()
        out["status"] = "ok"
    except Exception as exc:  # recorded, and the next server still runs (this one is stopped already)
        text = str(exc) if isinstance(exc, RuntimeError) else f"{type(exc).__name__}: {exc}"
        log(f"   FAILED: {text}")
        out.update(status="error", reason=text.splitlines()[0] if text else type(exc).__name__, reason_detail=text)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # unwind like Ctrl-C, so every `running` block stops its server


def catch_signals() -> None:
    """SIGINT, SIGTERM and SIGHUP raise KeyboardInterrupt, even where SIGINT came ignored (a `&` job of a script).

    The servers run in sessions of their own: a closed terminal or Ctrl-C reaches this script only, and
    the script stops them. A SIGHUP ignored on purpose (nohup) stays ignored.
    """
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
        signal.signal(signal.SIGHUP, _interrupt)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--onnx", type=Path, action="append", default=[], metavar="FOLDER", help="served by inference4py (repeatable)"
    )
    ap.add_argument(
        "--gguf", type=Path, action="append", default=[], metavar="FILE", help="served by llama-server (repeatable)"
    )
    ap.add_argument(
        "--llama-server", type=Path, default=None, metavar="PATH", help="the llama-server binary (default: on PATH)"
    )
    ap.add_argument(
        "--ray",
        default="",
        metavar="N[,N...]",
        help="also serve each --onnx folder with serve --ray --replicas N, for each N (a local Ray; peak RSS is the "
        "driver's only: the replicas are Ray's processes)",
    )
    ap.add_argument("--replica-threads", type=int, default=1, help="CPUs (and threads) per Ray replica (default: 1)")
    ap.add_argument("--concurrency", default="1,4,8,16", help="comma list of concurrent clients (default: 1,4,8,16)")
    ap.add_argument(
        "--requests-per-client", type=int, default=4, metavar="R", help="requests each client sends back to back"
    )
    ap.add_argument(
        "--max-tokens", type=int, default=128, metavar="N", help="max_tokens of every request (default: 128)"
    )
    ap.add_argument(
        "--parallel",
        type=int,
        default=8,
        help="llama-server -np; inference4py --max-concurrent when it has it (default: 8)",
    )
    ap.add_argument("--ctx-per-slot", type=int, default=512, help="llama-server -c is parallel x this (default: 512)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="llama-server -t (default: all cores)")
    ap.add_argument("--start-timeout", type=float, default=300.0, help="seconds for a server to become ready")
    ap.add_argument("--request-timeout", type=float, default=600.0, help="seconds per request")
    ap.add_argument("--out", type=Path, default=None, help="JSON file (default: benchmarks/results/serve-<time>.json)")
    args = ap.parse_args(argv)
    try:
        args.concurrency = [int(c) for c in args.concurrency.split(",") if c.strip()]
    except ValueError:
        ap.error("--concurrency takes a comma list of integers, e.g. 1,4,8,16")
    try:
        args.ray = [int(n) for n in args.ray.split(",") if n.strip()]
    except ValueError:
        ap.error("--ray takes a comma list of replica counts, e.g. 1,2")
    if args.ray and (min(args.ray) < 1 or not args.onnx):
        ap.error("--ray needs --onnx folders and replica counts >= 1")
    if not args.concurrency or min(args.concurrency) < 1:
        ap.error("--concurrency needs at least one level, each >= 1")
    if args.requests_per_client < 1 or args.max_tokens < 1 or args.parallel < 1:
        ap.error("--requests-per-client, --max-tokens and --parallel must be >= 1")
    if not args.onnx and not args.gguf:
        ap.error("give at least one server: --onnx FOLDER and/or --gguf FILE")
    for path in [*args.onnx, *args.gguf]:
        if not path.exists():
            ap.error(f"{path} does not exist")
    if args.gguf:
        found = args.llama_server or (Path(p) if (p := shutil.which("llama-server")) else None)
        if found is None or not found.is_file():
            ap.error("--gguf needs llama-server: give --llama-server PATH (build it: benchmarks/README.md, Serving)")
        args.llama_server = found
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = "python benchmarks/serve.py " + " ".join(argv if argv is not None else sys.argv[1:])
    catch_signals()
    env = machine()
    for name in PACKAGES:
        with contextlib.suppress(metadata.PackageNotFoundError):
            env["versions"][name] = metadata.version(name)
    servers = [inference4py_server(folder, args.parallel) for folder in args.onnx]
    for n in args.ray:
        threads = args.replica_threads or max(1, (os.cpu_count() or 1) // n)
        servers += [inference4py_server(folder, args.parallel, n, threads) for folder in args.onnx]
    servers += [llama_server(args.llama_server, g, args.parallel, args.ctx_per_slot, args.threads) for g in args.gguf]
    spec = {
        "concurrency": args.concurrency,
        "requests_per_client": args.requests_per_client,
        "max_tokens": args.max_tokens,
        "prompts": list(PROMPTS),
        "parallel": args.parallel,
    }
    results: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
            for server in servers:  # one after another: never two servers on the cores at once
                measure(server, args, Path(tmp), results)
    except KeyboardInterrupt:
        log("interrupted: servers stopped; partial results follow")
    env["loadavg_end"] = os.getloadavg()
    print(render(results, spec, env))
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or RESULTS / f"serve-{stamp}.json"
    out.write_text(
        json.dumps({"machine": env, "command": command, "spec": spec, "results": results}, indent=1), encoding="utf-8"
    )
    log(f"results: {out}")
    return 0 if results and all(r.get("status") == "ok" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
