"""A long prompt in one run against 512-token pieces: prefill speed and peak memory (issue 35).

    python benchmarks/prefill_pieces.py MODEL [MODEL ...] [--tokens 2048,8192] [--pieces 0,512] [--kv float,int8]

``MODEL`` is anything ``OnnxTextGenerator.builder().model_path()`` takes (a folder, a GGUF file).
Each (model, tokens, pieces, kv) runs in its own process: load, a 64-token warm-up prefill, one
timed prefill of random ids (``--pieces 0``: one run, however long), then 8 decode steps.  Reported:
prefill tokens/s, ms per step after it, RSS after loading, and the process's peak RSS (VmHWM).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _status(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1]) // 1024
    return 0


def worker(model: str, tokens: int, pieces: int, kv: str) -> dict:
    import numpy as np

    from inference4py import OnnxTextGenerator

    generator = OnnxTextGenerator.builder().model_path(model).kv_cache(kv).build()
    runtime = generator._runtime
    runtime.prefill_chunk = pieces or 1 << 30
    high = min(30000, runtime.vocab_size or 30000)  # ordinary tokens of any vocabulary
    ids = np.random.default_rng(0).integers(min(100, high // 2), high, size=(1, tokens))
    runtime.new_state(1, 72).prefill(ids[:, :64])
    loaded = _status("VmRSS:")
    state = runtime.new_state(1, tokens + 8)
    t = time.perf_counter()
    state.prefill(ids)
    prefill = time.perf_counter() - t
    t = time.perf_counter()
    for _ in range(8):
        state.step(np.array([5]))
    step = (time.perf_counter() - t) / 8
    return {
        "model": model,
        "tokens": tokens,
        "pieces": pieces,
        "kv": kv,
        "prefill_tps": tokens / prefill,
        "step_ms": 1000 * step,
        "rss_loaded_mb": loaded,
        "peak_mb": _status("VmHWM:"),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--tokens", default="2048,8192")
    ap.add_argument("--pieces", default="0,512", help="tokens per run (0: the whole prompt in one run)")
    ap.add_argument("--kv", default="float")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        model, tokens, pieces, kv = args.models[0], int(args.tokens), int(args.pieces), args.kv
        print(json.dumps(worker(model, tokens, pieces, kv)))
        return 0
    for model in args.models:
        for tokens in args.tokens.split(","):
            for kv in args.kv.split(","):
                for pieces in args.pieces.split(","):
                    command = [sys.executable, __file__, model, "--worker", "--tokens", tokens]
                    command += ["--pieces", pieces, "--kv", kv]
                    out = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
                    if out.returncode:
                        print(f"{model} {tokens} {pieces} {kv}: failed\n{out.stderr[-2000:]}")
                        continue
                    r = json.loads(out.stdout.strip().splitlines()[-1])
                    print(
                        f"{Path(model).name} N={r['tokens']} kv={r['kv']} pieces={r['pieces'] or 'one run'}: "
                        f"prefill {r['prefill_tps']:.1f} tok/s, then {r['step_ms']:.1f} ms/step, "
                        f"RSS loaded {r['rss_loaded_mb']} MB, peak {r['peak_mb']} MB",
                        flush=True,
                    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
