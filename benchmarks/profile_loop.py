"""Where inference4py's per-token time goes, next to the bare IO-binding loop on the same graph.

    python benchmarks/profile_loop.py [--model llama] [--setting greedy|sample] [--tokens 100] [--gens 30]

Both run in this process on a tiny fixture (where the graph itself costs little, so the
Python work around it shows).  First plain timings (median µs per token over ``--gens``
generations, no profiler), then cProfile of the same generations: the functions with
the most own time, in µs per generated token, and the cumulative time of the stages of
inference4py's loop.  cProfile inflates Python-heavy code: read its numbers as shares.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.models import FIXTURES, TINY_PROMPT
from benchmarks.peers import bare_loop, inference4py_peer

# Stages of inference4py's loop, found by function name in the profile (cumulative time).
STAGES = (
    ("whole stream_chunks iteration", "generate.py", "stream_generate"),
    ("token loop (generate_step)", "search.py", "generate_step"),
    ("engine step (DecoderState.step)", "decoder.py", "step"),
    ("engine _run (binding + run + outputs)", "growing_kv.py", "_run"),
    ("onnxruntime run_with_iobinding", "onnxruntime_inference_collection.py", "run_with_iobinding"),
    ("IOBinding.get_outputs", "onnxruntime_inference_collection.py", "get_outputs"),
    ("OrtValue.numpy", "onnxruntime_inference_collection.py", "numpy"),
    ("sampler", "sampling.py", "__call__"),
    ("greedy argmax", "sampling.py", "greedy"),
    ("logits processors (MinNewTokens)", "processors.py", "__call__"),
    ("detokenizer add", "streaming.py", "add"),
)


class OrtClock:
    """Wraps ``InferenceSession.run_with_iobinding`` to add up the time spent inside onnxruntime."""

    def __init__(self) -> None:
        import onnxruntime as ort

        self.inside = 0.0
        original = ort.InferenceSession.run_with_iobinding
        clock = self

        def timed(session, *a, **kw):
            t = time.perf_counter()
            try:
                return original(session, *a, **kw)
            finally:
                clock.inside += time.perf_counter() - t

        ort.InferenceSession.run_with_iobinding = timed


def per_token_us(fn, gens: int, tokens: int, clock: OrtClock) -> tuple[float, float]:
    """Median whole-call and in-onnxruntime time per token, in µs."""
    times, inside = [], []
    for _ in range(gens):
        clock.inside = 0.0
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
        inside.append(clock.inside)
    return 1e6 * statistics.median(times) / tokens, 1e6 * statistics.median(inside) / tokens


def profile(fn, gens: int) -> pstats.Stats:
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(gens):
        fn()
    prof.disable()
    return pstats.Stats(prof)


def top(stats: pstats.Stats, per: float, n: int) -> list[str]:
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:n]  # by own time
    out = []
    for (file, line, func), (_cc, nc, tt, ct, _) in rows:
        out.append(
            f"  {1e6 * tt / per:8.1f} own {1e6 * ct / per:8.1f} cum  {nc / per:6.1f} calls/token  "
            f"{Path(file).name}:{line} {func}"
        )
    return out


def stages(stats: pstats.Stats, per: float) -> list[str]:
    out = []
    for label, file, func in STAGES:
        cum = sum(v[3] for (f, _, fn), v in stats.stats.items() if fn == func and f.endswith(file))
        calls = sum(v[1] for (f, _, fn), v in stats.stats.items() if fn == func and f.endswith(file))
        if calls:
            out.append(f"  {1e6 * cum / per:8.1f} µs/token  {calls / per:5.2f} calls/token  {label}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="llama", help="a decoder fixture: gpt2, llama, qwen2")
    ap.add_argument("--setting", default="greedy", choices=("greedy", "sample"))
    ap.add_argument("--tokens", type=int, default=100)
    ap.add_argument("--gens", type=int, default=30)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args(argv)
    clock = OrtClock()
    spec = {"folder": str(FIXTURES / args.model), "prompt": TINY_PROMPT}
    i4py = inference4py_peer.load(spec)
    bare = bare_loop.load(spec)
    ids = i4py.prompt_ids()
    if ids != bare.prompt_ids():
        print("warning: prompt ids differ between inference4py and the bare tokenizer", file=sys.stderr)

    def run_i4py() -> None:
        timed = i4py.generate(args.tokens, args.setting)
        assert len(timed.token_ids) == args.tokens, len(timed.token_ids)

    def run_bare() -> None:
        timed = bare.generate(args.tokens, args.setting)
        assert len(timed.token_ids) == args.tokens

    for fn in (run_i4py, run_bare):  # warm-up
        fn()
        fn()
    # Interleave the plain timings so both see the same machine.
    t_i, t_b = [], []
    for _ in range(5):
        t_i.append(per_token_us(run_i4py, max(1, args.gens // 5), args.tokens, clock))
        t_b.append(per_token_us(run_bare, max(1, args.gens // 5), args.tokens, clock))
    ti, tb = (
        (statistics.median(x[0] for x in t_i), statistics.median(x[1] for x in t_i)),
        (statistics.median(x[0] for x in t_b), statistics.median(x[1] for x in t_b)),
    )
    print(f"# {args.model}, {args.setting}, {args.tokens} new tokens, prompt {len(ids)} tokens")
    print("plain timing, µs per token (whole call / tokens; median of 5 interleaved batches):")
    print(f"  inference4py {ti[0]:7.1f} = onnxruntime {ti[1]:7.1f} + Python around it {ti[0] - ti[1]:7.1f}")
    print(f"  bare loop    {tb[0]:7.1f} = onnxruntime {tb[1]:7.1f} + Python around it {tb[0] - tb[1]:7.1f}")
    print(f"  ratio {ti[0] / tb[0]:.2f}; Python overhead ratio {(ti[0] - ti[1]) / max(tb[0] - tb[1], 1e-9):.2f}")
    per = args.gens * args.tokens
    si = profile(run_i4py, args.gens)
    sb = profile(run_bare, args.gens)
    print("\ninference4py stages (cProfile, cumulative):")
    print("\n".join(stages(si, per)))
    print(f"\ninference4py top {args.top} by own time (µs/token):")
    print("\n".join(top(si, per, args.top)))
    print(f"\nbare loop top {min(args.top, 12)} by own time (µs/token):")
    print("\n".join(top(sb, per, min(args.top, 12))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
