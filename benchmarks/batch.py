"""Batch inference throughput: rows/s of ``run_batch`` with the local runner and 1, 2 and 4 Ray replicas.

    python benchmarks/batch.py [--model smollm2-optimum] [--rows 128] [--max-new-tokens 32]
                               [--batch-size 16] [--configs local,ray1,ray2,ray4] [--markdown docs/batch.md]

The model folder comes from ``~/.cache/inference4py/real/<name>`` (the real-checkpoint tier's cache,
``INFERENCE4PY_REAL_DIR`` overrides it; a path works too); the default is SmolLM2-135M-Instruct's
optimum export, loaded the default way (fused on first load, reused afterwards).  The input is
``--rows`` chat rows (short instructions on varied topics, greedy, ``--max-new-tokens``).

Each configuration runs in its own process, one after another: the local runner (one process, the
library's batched generation, all cores) and Ray Data with N replicas on a local Ray.  A local Ray
gets ``max(N, cores)`` logical CPUs, so 4 replicas on a 2-core machine do run (each with one
onnxruntime thread, oversubscribing the cores: that row shows the cost).  Timed is the whole
``run_batch`` call as a user sees it: reading the input, Ray's start-up, every replica's model load,
the rows and the writes.  The model is fused once, untimed, before the first configuration.

Every configuration must give the same text for every row (greedy): a mismatch aborts the run.
Results go to ``benchmarks/results/batch-<time>.json``; ``--markdown PAGE`` rewrites the table
between ``<!-- bench:batch:start/end -->`` in PAGE.  Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python benchmarks/batch.py`: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.run import RESULTS, machine

REAL = Path(os.environ.get("INFERENCE4PY_REAL_DIR", Path.home() / ".cache" / "inference4py" / "real"))

TOPICS = (
    "the moon", "coffee", "rivers", "bicycles", "libraries", "volcanoes", "bread", "chess", "rain",
    "trains", "honey bees", "glaciers", "maps", "violins", "deserts", "lighthouses", "tea", "owls",
    "bridges", "snow", "clocks", "gardens", "whales", "paper", "mountains", "candles", "kites",
    "islands", "salt", "forests", "windmills", "stars",
)  # fmt: skip
ASKS = ("Write one sentence about {}.", "Give a short fact about {}.", "Describe {} in a few words.",
        "Why do people like {}?")  # fmt: skip


def rows(count: int) -> list[dict[str, Any]]:
    """``count`` chat rows with distinct ids and varied lengths."""
    out = []
    for i in range(count):
        ask = ASKS[(i // len(TOPICS)) % len(ASKS)].format(TOPICS[i % len(TOPICS)])
        out.append({"id": f"row-{i:05d}", "messages": [{"role": "user", "content": ask}]})
    return out


def resolve_model(name: str) -> Path:
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    folder = REAL / name
    if not folder.is_dir():
        raise SystemExit(f"{folder} does not exist: build the real cache with `python tools/build_real.py`.")
    return folder


def one(args: argparse.Namespace) -> None:
    """Run one configuration in this process and print its figures as JSON (the child side)."""
    from inference4py.batch import read_results, run_batch

    cores = os.cpu_count() or 1
    options: dict[str, Any] = {}
    if args.one.startswith("ray"):
        replicas = int(args.one[3:])
        options = {"replicas": replicas, "num_cpus": max(replicas, cores), "threads": max(1, cores // replicas)}
    report = run_batch(
        args.input, args.output, model=args.model, task="chat", column="messages", batch_size=args.batch_size,
        max_new_tokens=args.max_new_tokens, progress=False, **options,
    )  # fmt: skip
    texts = {r["id"]: r.get("text") for r in read_results(args.output)}
    errors = [r for r in read_results(args.output) if r.get("error")]
    print(
        json.dumps(
            {
                "config": args.one,
                "engine": report.engine,
                "rows": report.completed,
                "errors": len(errors),
                "completion_tokens": report.completion_tokens,
                "seconds": report.elapsed,
                "rows_per_s": report.completed / report.elapsed,
                "tokens_per_s": report.completion_tokens / report.elapsed,
                "texts": texts,
            }
        )
    )


def markdown(results: dict[str, Any]) -> str:
    meta = results["machine"]
    lines = [
        f"{results['rows']} chat rows, greedy, {results['max_new_tokens']} new tokens at most, batch size "
        f"{results['batch_size']}, model `{results['model_name']}`; {meta['nproc']} cores ({meta['cpu']}), "
        f"ray {meta['versions'].get('ray')}, onnxruntime {meta['versions'].get('onnxruntime')}. "
        "Timed: the whole `run_batch` call (Ray start-up and model loads included).",
        "",
        "| runner | rows/s | tokens/s | seconds | vs local |",
        "|---|---:|---:|---:|---:|",
    ]
    local = next((r for r in results["runs"] if r["config"] == "local"), None)
    for r in results["runs"]:
        label = "local (one process)" if r["config"] == "local" else f"Ray, {r['config'][3:]} replica(s)"
        ratio = f"{r['rows_per_s'] / local['rows_per_s']:.2f}×" if local else "–"
        lines.append(f"| {label} | {r['rows_per_s']:.2f} | {r['tokens_per_s']:.1f} | {r['seconds']:.1f} | {ratio} |")
    return "\n".join(lines)


def write_markdown(page: Path, table: str) -> None:
    start, end = "<!-- bench:batch:start -->", "<!-- bench:batch:end -->"
    text = page.read_text()
    if start not in text or end not in text:
        raise SystemExit(f"{page} has no {start} ... {end} block to fill")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    page.write_text(f"{head}{start}\n{table}\n{end}{tail}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-optimum")
    parser.add_argument("--rows", type=int, default=128)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--configs", default="local,ray1,ray2,ray4")
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--input", help=argparse.SUPPRESS)
    parser.add_argument("--output", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        one(args)
        return

    model = resolve_model(args.model)
    from inference4py import OnnxTextGenerator

    with OnnxTextGenerator.builder().model_path(model).build():  # fuse once, untimed
        pass
    results: dict[str, Any] = {
        "benchmark": "batch", "model_name": args.model, "model": str(model), "rows": args.rows,
        "max_new_tokens": args.max_new_tokens, "batch_size": args.batch_size, "machine": machine(), "runs": [],
    }  # fmt: skip
    for package in ("ray", "pyarrow"):
        try:
            results["machine"]["versions"][package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            results["machine"]["versions"][package] = None
    reference: dict[str, Any] | None = None
    with tempfile.TemporaryDirectory(prefix="i4py-batch-bench-") as tmp:
        source = Path(tmp) / "rows.jsonl"
        source.write_text("".join(json.dumps(r) + "\n" for r in rows(args.rows)))
        for config in args.configs.split(","):
            out = Path(tmp) / f"out-{config}"
            command = [
                sys.executable, __file__, "--one", config, "--input", str(source), "--output", str(out),
                "--model", str(model), "--max-new-tokens", str(args.max_new_tokens),
                "--batch-size", str(args.batch_size),
            ]  # fmt: skip
            done = subprocess.run(command, check=True, capture_output=True, text=True)
            run = json.loads(done.stdout.strip().splitlines()[-1])
            texts = run.pop("texts")
            if run["rows"] != args.rows or run["errors"] or len(texts) != args.rows:
                raise SystemExit(f"{config}: {run['rows']} rows, {run['errors']} errors, {len(texts)} distinct ids")
            if reference is None:
                reference = texts
            elif texts != reference:
                bad = sorted(k for k in texts if texts[k] != reference.get(k))
                raise SystemExit(f"{config}: {len(bad)} rows differ from the first configuration, e.g. {bad[:3]}")
            results["runs"].append(run)
            print(f"{config:>6}: {run['rows_per_s']:.2f} rows/s, {run['tokens_per_s']:.1f} tok/s, "
                  f"{run['seconds']:.1f} s", flush=True)  # fmt: skip
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = RESULTS / f"batch-{stamp}.json"
    path.write_text(json.dumps(results, indent=1))
    table = markdown(results)
    print(table)
    print(f"results: {path}")
    if args.markdown:
        write_markdown(args.markdown, table)


if __name__ == "__main__":
    main()
