"""Where a long prompt's prefill goes, per onnxruntime operator type and per MatMul, for a model folder.

    python benchmarks/profile_prefill.py FOLDER [FOLDER ...] [--runs 3] [--prompt long|chat]

Each folder loads as ``OnnxTextGenerator.builder().model_path(FOLDER).build()`` would (a decoder
export runs its fused copy), with onnxruntime's profiler on.  The prompt (``long``: run.py's
~1,000-token chat turn, benchmarks/models.py ``long_prompt``) goes through the chat template,
then ``--runs`` prefills from an empty cache; the profile of all but the first (a warm-up) is
summed per operator type and per MatMul (layers folded together), and divided by the runs.
The wall time of each prefill is printed too: the profiler itself adds a little.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.models import SMOLLM2_PROMPT, long_prompt

_LAYER = re.compile(r"layers\.\d+")
_NUMBER = re.compile(r"\d+")


def summarize(events: list[dict[str, Any]], runs: int) -> dict[str, Any]:
    """Per op type and per MatMul node family (``layers.N`` folded), ms per prefill, from the profiler's events.

    Only the last ``runs`` ``model_run`` spans count: kernels are attributed by their start time.
    """
    spans = [e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"][-runs:]
    if not spans:
        raise ValueError("the profile holds no model_run span")
    start, end = spans[0]["ts"], spans[-1]["ts"] + spans[-1]["dur"]
    by_op: collections.Counter[str] = collections.Counter()
    calls: collections.Counter[str] = collections.Counter()
    matmuls: dict[str, list[Any]] = {}
    for e in events:
        if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time") or not start <= e["ts"] <= end:
            continue
        op = e.get("args", {}).get("op_name", "?")
        by_op[op] += e["dur"]
        calls[op] += 1
        if op.startswith("MatMul"):
            family = _NUMBER.sub("#", _LAYER.sub("layers.N", e["name"][: -len("_kernel_time")]))
            entry = matmuls.setdefault(family, [0.0, 0, e["args"].get("input_type_shape")])
            entry[0] += e["dur"]
            entry[1] += 1
    kernels = sum(by_op.values())
    return {
        "runs": len(spans),
        "run_ms": sum(s["dur"] for s in spans) / len(spans) / 1000.0,
        "kernel_ms": kernels / len(spans) / 1000.0,
        "ops": [
            {
                "op": op,
                "ms": d / len(spans) / 1000.0,
                "share": d / kernels if kernels else 0.0,
                "calls": calls[op] // len(spans),
            }
            for op, d in by_op.most_common()
        ],
        "matmuls": [
            {"node": name, "ms": v[0] / len(spans) / 1000.0, "calls": v[1] // len(spans), "input_shapes": v[2]}
            for name, v in sorted(matmuls.items(), key=lambda kv: -kv[1][0])
        ],
    }


def profile(folder: Path, runs: int, prompt: dict[str, Any]) -> dict[str, Any]:
    import numpy as np

    from inference4py import OnnxTextGenerator
    from inference4py.engine import sessions

    original = sessions.SessionOptions.ort_options
    prefix = Path(tempfile.mkdtemp(prefix="i4py-profile-")) / "prefill"

    def with_profiler(self: Any) -> Any:
        options = original(self)
        options.enable_profiling = True
        options.profile_file_prefix = str(prefix)
        return options

    sessions.SessionOptions.ort_options = with_profiler  # type: ignore[method-assign]
    try:
        gen = OnnxTextGenerator.builder().model_path(folder).chat_template().build()
    finally:
        sessions.SessionOptions.ort_options = original  # type: ignore[method-assign]
    ids = np.array([gen.encode_prompt(prompt.get("messages", prompt.get("text")))])
    walls = []
    for _ in range(runs + 1):  # the first is a warm-up
        state = gen._runtime.new_state(1, capacity=ids.shape[1] + 128)
        t = time.perf_counter()
        state.prefill(ids)
        walls.append((time.perf_counter() - t) * 1000.0)
    trace = gen._runtime.rest.session.end_profiling()
    events = json.loads(Path(trace).read_text(encoding="utf-8"))
    out = summarize(events, runs)
    out.update(folder=str(folder), model_folder=str(gen.folder), prompt_tokens=int(ids.shape[1]), wall_ms=walls[1:])
    gen.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--runs", type=int, default=3, help="profiled prefills after one warm-up")
    ap.add_argument("--prompt", choices=("long", "chat"), default="long")
    ap.add_argument("--json", type=Path, default=None, help="also write the summaries here")
    args = ap.parse_args(argv)
    prompt = long_prompt() if args.prompt == "long" else SMOLLM2_PROMPT
    summaries = []
    for folder in args.folders:
        s = profile(folder, args.runs, prompt)
        summaries.append(s)
        walls = ", ".join(f"{w:.0f}" for w in s["wall_ms"])
        print(f"\n{folder} ({s['model_folder']}): {s['prompt_tokens']} tokens, prefill wall ms {walls}")
        print(f"  onnxruntime run {s['run_ms']:.0f} ms, kernels {s['kernel_ms']:.0f} ms per prefill")
        for op in s["ops"][:8]:
            print(f"  {op['op']:34s} {op['ms']:8.1f} ms {100 * op['share']:5.1f} %  ({op['calls']} calls per prefill)")
        for mm in s["matmuls"][:8]:
            print(f"    {mm['node'][:60]:60s} {mm['ms']:7.1f} ms  {mm['input_shapes']}")
    if args.json:
        args.json.write_text(json.dumps(summaries, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
