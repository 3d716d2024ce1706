"""A GGUF file at the sizes people run: conversion memory, folder size, load, speed, against llama.cpp.

    python benchmarks/gguf_size.py --gguf FILE.gguf [--gguf ...] --llama-bin DIR \\
        [--speed FILE.gguf ...] [--work benchmarks/work/gguf-size] [--markdown docs/gguf.md]

Per file, each step in its own process, one at a time (2-core machines: never two at once):

1. **convert**: ``convert_gguf(file, folder)`` at the default width (every weight as the file holds
   it); peak RSS of the converting process (``ru_maxrss``), wall time, folder size and where its
   bytes go (the initializers grouped by role: block codes, scales, minimums, float tensors);
2. **load**: ``OnnxTextGenerator.builder().model_path(folder).build()``: seconds and RSS after
   the load, and after a 512-token prompt and 128 new tokens (RSS then includes that KV cache,
   reported beside it);
3. **speed** (files given with ``--speed``): a 512-token prefill (seconds to the first token's
   logits) and greedy decode tok/s over 128 tokens, median of 3, onnxruntime's default threads
   (2 on this machine), against ``llama-bench -p 512 -n 128 -t 2 -r 3`` on the same file;
4. **llama.cpp's load**: ``llama-server -m FILE -t 2 -c 4096`` until ``/health`` answers: seconds,
   and its RSS then.

Random-weight files (tools/random_gguf.py) measure all of this at real shapes: speed and memory
do not depend on the weights' values.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.quality import cpu_flags  # noqa: E402
from benchmarks.run import machine, publish, save_json  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"

_CONVERT = """
import json, resource, sys, time
from inference4py.gguf.convert import convert_gguf
started = time.perf_counter()
convert_gguf(sys.argv[1], sys.argv[2], overwrite=True)
print(json.dumps({"seconds": time.perf_counter() - started,
                  "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""

_RUN = """
import json, statistics, sys, time
import psutil
def rss(): return psutil.Process().memory_info().rss
started = time.perf_counter()
from inference4py import OnnxTextGenerator
model = OnnxTextGenerator.builder().model_path(sys.argv[1]).build()
out = {"load_seconds": time.perf_counter() - started, "rss_loaded_bytes": rss()}
speed = sys.argv[2] == "1"
prompt = [100 + (i * 7919) % 5000 for i in range(512)]
prefill, decode = [], []
for _ in range(3 if speed else 1):
    t = time.perf_counter()
    model.generate(prompt, max_new_tokens=1, do_sample=False)
    prefill.append(time.perf_counter() - t)
    t = time.perf_counter()
    result = model.generate(prompt[:16], max_new_tokens=128, min_new_tokens=128, do_sample=False)
    decode.append(result.generated_tokens / (time.perf_counter() - t))
out["rss_after_512_plus_128_bytes"] = rss()
if speed:
    out["prefill_512_seconds"] = statistics.median(prefill)
    out["decode_tok_s"] = statistics.median(decode)
print(json.dumps(out))
"""


def _json_line(run: subprocess.CompletedProcess[str], what: str) -> dict[str, Any]:
    if run.returncode:
        raise SystemExit(f"{what} failed ({run.returncode}): {run.stderr[-1500:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def bytes_by_role(folder: Path) -> dict[str, int]:
    """The graph's initializers grouped by role (their names end in the role)."""
    import onnx

    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    roles: dict[str, int] = {}
    for tensor in model.graph.initializer:
        length = next((int(e.value) for e in tensor.external_data if e.key == "length"), len(tensor.raw_data))
        name = tensor.name
        location = next((e.value for e in tensor.external_data if e.key == "location"), "")
        if location.endswith(".gguf"):
            role = "the GGUF file's blocks, in place (not in the folder)"
        elif "weight_Q" in name:
            role = "block codes (" + name.rsplit("_Q", 1)[1] + "-bit)"
        elif name.endswith(("weight_scales", "weight_scales_3d")):
            role = "block scales (float32)"
        elif name.endswith("weight_minimums"):
            role = "block minimums (float32)"
        elif "zero_points" in name:
            role = "zero points"
        elif name.startswith(("cos_cache", "sin_cache")):
            role = "rotary caches"
        else:
            role = "float tensors (norms, biases, float weights)"
        roles[role] = roles.get(role, 0) + length
    return roles


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def llama_server_load(binary: Path, gguf: Path) -> dict[str, Any]:
    port = free_port()
    started = time.perf_counter()
    server = subprocess.Popen(
        [str(binary), "-m", str(gguf), "-t", "2", "-c", "4096", "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while True:
            if server.poll() is not None:
                raise SystemExit(f"llama-server exited with {server.returncode} loading {gguf}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.1)
        seconds = time.perf_counter() - started
        status = Path(f"/proc/{server.pid}/status").read_text()
        rss = next(int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmRSS"))
        return {"load_seconds": seconds, "rss_loaded_bytes": rss}
    finally:
        server.terminate()
        server.wait(timeout=30)


def llama_bench(binary: Path, gguf: Path) -> dict[str, Any]:
    run = subprocess.run(
        [str(binary), "-m", str(gguf), "-t", "2", "-p", "512", "-n", "128", "-r", "3", "-o", "json"],
        capture_output=True,
        text=True,
    )
    if run.returncode:
        raise SystemExit(f"llama-bench failed: {run.stderr[-800:]}")
    rows = json.loads(run.stdout)
    prefill = next(r for r in rows if r["n_prompt"] == 512 and r["n_gen"] == 0)
    decode = next(r for r in rows if r["n_gen"] == 128 and r["n_prompt"] == 0)
    return {"prefill_512_seconds": 512 / prefill["avg_ts"], "decode_tok_s": decode["avg_ts"], "raw": rows}


def kv_bytes(folder: Path, positions: int) -> int:
    config = json.loads((folder / "config.json").read_text())
    if config.get("kv_lora_rank"):  # latent attention: the latent and the rope key per token and layer
        return int((config["kv_lora_rank"] + config["qk_rope_head_dim"]) * config["num_hidden_layers"] * 4 * positions)
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    return int(2 * config["num_hidden_layers"] * config["num_key_value_heads"] * head_dim * 4 * positions)


def measure(gguf: Path, work: Path, bin_dir: Path, speed: bool) -> dict[str, Any]:
    folder = work / gguf.stem
    python = sys.executable
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    row: dict[str, Any] = {"file": gguf.name, "file_bytes": gguf.stat().st_size}
    print(f"{gguf.name}: converting", file=sys.stderr)
    row["convert"] = _json_line(
        subprocess.run([python, "-c", _CONVERT, str(gguf), str(folder)], capture_output=True, text=True, env=env),
        "convert",
    )
    row["folder_bytes"] = sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
    row["folder_roles"] = bytes_by_role(folder)
    print(f"{gguf.name}: loading{' and timing' if speed else ''}", file=sys.stderr)
    row["inference4py"] = _json_line(
        subprocess.run(
            [python, "-c", _RUN, str(folder), "1" if speed else "0"], capture_output=True, text=True, env=env
        ),
        "load",
    )
    row["kv_bytes_640"] = kv_bytes(folder, 640)
    print(f"{gguf.name}: llama.cpp", file=sys.stderr)
    row["llama.cpp"] = llama_server_load(bin_dir / "llama-server", gguf)
    if speed:
        row["llama.cpp"].update(llama_bench(bin_dir / "llama-bench", gguf))
    shutil.rmtree(folder, ignore_errors=True)
    return row


def render(rows: list[dict[str, Any]], env: dict[str, Any], command: str) -> str:
    gb = 1e9
    lines = [
        "| file | size | convert: peak RSS | time | folder | folder / file | load | loaded RSS | RSS after 640 tokens (KV) | llama.cpp load | llama.cpp RSS |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ours, llama = r["inference4py"], r["llama.cpp"]
        lines.append(
            f"| {r['file']} | {r['file_bytes'] / gb:.2f} GB | {r['convert']['peak_rss_bytes'] / gb:.2f} GB "
            f"(file + {(r['convert']['peak_rss_bytes'] - r['file_bytes']) / gb:.2f}) | {r['convert']['seconds']:.0f} s "
            f"| {r['folder_bytes'] / gb:.2f} GB | {r['folder_bytes'] / r['file_bytes']:.2f}x | {ours['load_seconds']:.1f} s "
            f"| {ours['rss_loaded_bytes'] / gb:.2f} GB | {ours['rss_after_512_plus_128_bytes'] / gb:.2f} GB "
            f"({r['kv_bytes_640'] / gb:.3f}) | {llama['load_seconds']:.1f} s | {llama['rss_loaded_bytes'] / gb:.2f} GB |"
        )
    speed = [r for r in rows if "decode_tok_s" in r["inference4py"]]
    if speed:
        lines += [
            "",
            "| file | prefill 512: inference4py | llama.cpp | ratio | decode tok/s: inference4py | llama.cpp | ratio |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in speed:
            ours, llama = r["inference4py"], r["llama.cpp"]
            lines.append(
                f"| {r['file']} | {ours['prefill_512_seconds']:.2f} s | {llama['prefill_512_seconds']:.2f} s "
                f"| {llama['prefill_512_seconds'] / ours['prefill_512_seconds']:.2f}x | {ours['decode_tok_s']:.1f} "
                f"| {llama['decode_tok_s']:.1f} | {ours['decode_tok_s'] / llama['decode_tok_s']:.2f}x |"
            )
    lines += ["", "Where the folder's bytes go:", ""]
    for r in rows:
        parts = ", ".join(f"{k} {v / 1e6:.0f} MB" for k, v in sorted(r["folder_roles"].items(), key=lambda kv: -kv[1]))
        lines.append(f"- {r['file']}: {parts}")
    flags = ", ".join(env.get("cpu_flags", []))
    return (
        "\n".join(lines)
        + f"\n\n{env['cpu']}, {env['nproc']} cores ({flags}), {env['mem_total_mb']} MiB; onnxruntime "
        + f"{env['versions'].get('onnxruntime')}; llama.cpp {env.get('llama_cpp')}. Command: `{command}`\n"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gguf", action="append", default=[], type=Path, help="a file to measure (repeat)")
    ap.add_argument("--speed", action="append", default=[], type=Path, help="a file to measure, with speed")
    ap.add_argument("--llama-bin", required=True, type=Path, help="llama.cpp's build/bin folder")
    ap.add_argument("--work", type=Path, default=ROOT / "benchmarks" / "work" / "gguf-size")
    ap.add_argument("--markdown", type=Path, help="write the tables into this page (section bench:gguf-size)")
    args = ap.parse_args(argv)
    env = {**machine(), "cpu_flags": cpu_flags()}
    version = subprocess.run([str(args.llama_bin / "llama-bench"), "--version"], capture_output=True, text=True)
    env["llama_cpp"] = (version.stdout + version.stderr).strip().splitlines()[0] if version.returncode == 0 else None
    args.work.mkdir(parents=True, exist_ok=True)
    rows = [measure(p, args.work, args.llama_bin, False) for p in args.gguf]
    rows += [measure(p, args.work, args.llama_bin, True) for p in args.speed]
    command = "python benchmarks/gguf_size.py " + " ".join(sys.argv[1:] if argv is None else argv)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    save_json(RESULTS / f"gguf-size-{stamp}.json", {"env": env, "command": command, "rows": rows})
    body = render(rows, env, command)
    if args.markdown:
        publish(args.markdown, "gguf-size", body)
    print(body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
