"""Speed and memory of the int8 KV cache (``kv_cache("int8")``) against the float32 cache on one GGUF model.

    python benchmarks/kv_speed.py --gguf FILE.gguf [--contexts 1024,4096] [--new 64] [--repeats 3] [--rows 8]

For each cache type, in a process of its own (so that peak memory is that type's alone):

* time to first token (the prompt pass) and decode milliseconds per token after a prompt of each
  ``--contexts`` length (greedy, as OpenVINO's peer decodes, ``min_new_tokens`` = ``max_new_tokens`` = ``--new``), the median
  of ``--repeats`` runs after one warm-up;
* peak resident memory (VmHWM) while ``--rows`` requests with the longest prompt run together on the
  continuous-batching scheduler (``batched()``), and that run's wall time.

The prompt is a long English text's tokens (the quality benchmark's), cut to length. The CPU
flags are recorded with the numbers (JSON to ``benchmarks/results/kv-speed-<time>.json``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TEXT = (
    "The lighthouse keeper climbed the stairs every evening, counting the steps as his father had, "
    "and watched the ships pass along the coast while the sea changed colour with the weather. "
)


def _peak_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure(gguf: str, kind: str, contexts: list[int], new: int, repeats: int, rows: int) -> dict[str, Any]:
    """One cache type's numbers (run in a child process)."""
    from concurrent.futures import ThreadPoolExecutor

    from inference4py import OnnxTextGenerator

    builder = OnnxTextGenerator.builder().model_path(gguf)
    gen = (builder.kv_cache("int8") if kind == "int8" else builder).build()
    base = gen.tokenizer.encode(TEXT * 400, add_special_tokens=False)
    out: dict[str, Any] = {"kv_cache": kind, "position_bytes": gen.runtime.layout.position_bytes, "contexts": {}}
    for n in contexts:
        gen.generate(base[:n], max_new_tokens=4, min_new_tokens=4, do_sample=False)  # warm-up at this length
        ttft, decode = [], []
        for run in range(repeats):  # each run its own window of the text, as OpenVINO's peer does
            window = base[7 * (run + 1) : 7 * (run + 1) + n]
            r = gen.generate(window, max_new_tokens=new, min_new_tokens=new, do_sample=False)  # greedy, as the peers
            ttft.append(r.time_to_first_token * 1000)
            decode.append((r.duration - r.time_to_first_token) * 1000 / max(1, r.generated_tokens - 1))
        out["contexts"][n] = {"ttft_ms": statistics.median(ttft), "decode_ms_per_token": statistics.median(decode)}
    longest = base[: max(contexts)]
    batched = gen.batched(max_concurrent=rows, prefix_cache_mb=0)
    started = time.perf_counter()
    with ThreadPoolExecutor(rows) as pool:
        done = list(
            pool.map(
                lambda i: batched.generate(longest[i:], max_new_tokens=32, min_new_tokens=32, do_sample=False),
                range(rows),
            )
        )
    out["batch"] = {
        "rows": rows,
        "prompt_tokens": len(longest),
        "wall_s": round(time.perf_counter() - started, 2),
        "tokens": sum(d.generated_tokens for d in done),
    }
    batched.close()
    out["peak_rss_mb"] = round(_peak_mb(), 1)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", required=True)
    parser.add_argument("--contexts", default="1024,4096")
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    contexts = [int(c) for c in args.contexts.split(",")]
    from benchmarks.quality import cpu_flags  # here: OpenVINO's peer imports this module for TEXT alone

    if args.child:
        print(json.dumps(measure(args.gguf, args.child, contexts, args.new, args.repeats, args.rows)))
        return 0
    results: dict[str, Any] = {"gguf": args.gguf, "cpu_flags": cpu_flags(), "runs": []}
    for kind in ("float", "int8"):
        argv = [sys.executable, __file__, "--gguf", args.gguf, "--contexts", args.contexts, "--new", str(args.new)]
        argv += ["--repeats", str(args.repeats), "--rows", str(args.rows), "--child", kind]
        child = subprocess.run(argv, capture_output=True, text=True, check=True)
        run = json.loads(child.stdout.strip().splitlines()[-1])
        results["runs"].append(run)
        print(f"{kind}: {json.dumps(run)}", file=sys.stderr)
    print(
        "| KV cache | bytes/position | "
        + " | ".join(f"TTFT {n} ms | decode @{n} ms/tok" for n in contexts)
        + " | peak RSS MB |"
    )
    print("|---" * (3 + 2 * len(contexts)) + "|")
    for run in results["runs"]:
        cells = []
        for n in contexts:
            c = run["contexts"][str(n)] if str(n) in run["contexts"] else run["contexts"][n]
            cells += [f"{c['ttft_ms']:.0f}", f"{c['decode_ms_per_token']:.1f}"]
        print(f"| {run['kv_cache']} | {run['position_bytes']} | " + " | ".join(cells) + f" | {run['peak_rss_mb']} |")
    from benchmarks.run import save_json

    save_json(Path(__file__).parent / "results" / f"kv-speed-{time.strftime('%Y%m%d-%H%M%S')}.json", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
