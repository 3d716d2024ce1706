"""Benchmark inference4py against its peers on the same model, prompt and settings.

    python benchmarks/run.py [--model tiny|smollm2|qwen2.5-coder|gpt2|llama|qwen2|t5|bart|all] [--runs N]
                             [--settings greedy,sample,beam4] [--peers NAME,...] [--memory]
                             [--prompt chat|long] [--markdown docs/performance.md]

Each (row, setting) runs in its own process (benchmarks/worker.py): load, one warm-up
generation, ``--iters`` measured generations, then the prompt alone (prefill + one
token, median of 3).  Rows are interleaved: every run goes through all rows, in a
rotated order, so slow drifts of the machine hit every row alike.  EOS is suppressed
everywhere (``min_new_tokens == max_new_tokens``; genai ``min_length``), so every peer
makes exactly the same number of tokens.  Reported per row: prompt time, time to first
token (from the text prompt: template + tokenization + prefill), decode tokens/s
(tokens 2..n over the time between the first and the last token), ms per token
(whole call / tokens), peak RSS during generation and over the whole process, and
ratios to the inference4py row on the same weights.  ``--memory`` adds a 1,000-token
generation and 100 repeated generations (RSS growth); ``--prompt long`` a ~1,000-token chat
turn instead of the model's prompt (prefill / TTFT).  A row with ``python`` set (OpenVINO GenAI,
onnxruntime-openvino) runs its worker with that interpreter; ``providers`` sets the onnxruntime execution
providers of an inference4py row.  Results: a JSON file in
benchmarks/results/ and, with ``--markdown``, the tables inside the given page
(between ``<!-- bench:KEY -->`` markers, so the page regenerates in place).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python benchmarks/run.py`: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.models import I4PY, ORTOV_HINT, OV_HINT, ROOT, Model, Row, long_prompt, resolve

RESULTS = Path(__file__).resolve().parent / "results"
PACKAGES = (
    "inference4py",
    "onnxruntime",
    "onnxruntime-genai",
    "optimum",
    "optimum-onnx",
    "transformers",
    "torch",
    "numpy",
    "tokenizers",
)
# Read from the interpreter of rows that run elsewhere (Row.python), e.g. the OpenVINO venv.
FOREIGN_PACKAGES = (
    "openvino",
    "openvino-genai",
    "openvino-tokenizers",
    "optimum-intel",
    "nncf",
    "onnxruntime-openvino",
)


# ---------------------------------------------------------------------------------------------- machine
def machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    mem = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        mem = int(Path("/proc/meminfo").read_text().split()[1]) // 1024  # MemTotal kB -> MiB
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "mem_total_mb": mem,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": versions,
        "loadavg_start": os.getloadavg(),
        "inference4py_source_sha256": source_digest(),
    }


def source_digest() -> str:
    """A digest of inference4py's source files: which engine a result belongs to (the tree may be uncommitted)."""
    import hashlib

    h = hashlib.sha256()
    for path in sorted((ROOT / "inference4py").rglob("*.py")):
        h.update(path.relative_to(ROOT).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


# ---------------------------------------------------------------------------------------------- workers
def foreign_versions(python: str) -> dict[str, str | None]:
    """FOREIGN_PACKAGES' versions as another interpreter sees them (None: not installed there)."""
    code = (
        "import json, importlib.metadata as m\n"
        "def v(n):\n"
        "    try:\n        return m.version(n)\n"
        "    except m.PackageNotFoundError:\n        return None\n"
        f"print(json.dumps({{n: v(n) for n in {FOREIGN_PACKAGES!r}}}))"
    )
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
        return json.loads(out)
    except (OSError, subprocess.SubprocessError, ValueError):
        return {}


def run_worker(
    task: dict[str, Any],
    timeout: float,
    *,
    module: str = "benchmarks.worker",
    flags: tuple[str, ...] = (),
    env_extra: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run one task in a fresh interpreter (``python -m MODULE [FLAGS] TASK.json OUT.json``) and return
    its result; a timeout or a worker that wrote nothing is an error result, never an exception."""
    python = task.get("python") or sys.executable
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        task_path, out_path = Path(tmp) / "task.json", Path(tmp) / "out.json"
        task_path.write_text(json.dumps(task), encoding="utf-8")
        env = {
            **os.environ,
            "TOKENIZERS_PARALLELISM": "false",
            "TRANSFORMERS_VERBOSITY": "error",
            "HF_HUB_OFFLINE": "1",
            "PYTHONWARNINGS": "ignore",
            **(env_extra or {}),
        }
        if python != sys.executable:  # another venv: `benchmarks` from this checkout (inference4py need not be there)
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
        try:
            proc = subprocess.run(
                [python, "-m", module, *flags, str(task_path), str(out_path)],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return {"status": "error", "reason": f"timed out after {timeout:.0f}s"}
        if not out_path.is_file():
            return {"status": "error", "reason": f"worker exited {proc.returncode}: {proc.stderr.strip()[-400:]}"}
        return json.loads(out_path.read_text(encoding="utf-8"))


def task_for(model: Model, row: Row, setting: str, mode: str, args: argparse.Namespace, **extra: Any) -> dict[str, Any]:
    return {
        "module": row.module,
        "folder": str(row.folder),
        "prompt": model.prompt,
        "python": row.python,
        "seq2seq": row.seq2seq,
        "fuse": row.fuse,
        "providers": list(row.providers) if row.providers else None,
        "kv_cache_precision": row.kv_cache_precision,
        "max_new_tokens": args.max_new_tokens or model.max_new_tokens,
        "setting": setting,
        "mode": mode,
        "warmup": args.warmup,
        "iters": args.iters or model.iters,
        **extra,
    }


def missing(row: Row, model: Model) -> str | None:
    """Why a row cannot run here (its folder or its interpreter is absent), or None."""
    if row.python and not Path(row.python).is_file():
        return f"interpreter {row.python} missing ({ORTOV_HINT if row.providers else OV_HINT})"
    if not row.folder.exists():
        hint = OV_HINT if row.module == "openvino_peer" else (model.build_hint or "build it")
        return f"{row.folder} missing ({hint})"
    return None


def selected_rows(model: Model, args: argparse.Namespace) -> list[Row]:
    rows = list(model.rows)
    if args.peers:
        wanted = [p.strip() for p in args.peers.split(",") if p.strip()]
        rows = [r for r in rows if r.name in wanted or any(r.name.startswith(w + "[") for w in wanted)]
    return rows


def bench_speed(model: Model, args: argparse.Namespace, log) -> dict[str, Any]:
    rows = selected_rows(model, args)
    out: dict[str, Any] = {}
    for setting in args.settings:
        runnable = []
        for r in rows:
            if setting not in r.settings:
                continue
            why = missing(r, model)
            if why:
                out.setdefault(setting, {})[r.name] = {"status": "skipped", "reason": why}
                continue
            runnable.append(r)
        raw: dict[str, list[dict[str, Any]]] = {r.name: [] for r in runnable}
        for run in range(args.runs):
            order = runnable[run % max(1, len(runnable)) :] + runnable[: run % max(1, len(runnable))]
            for r in order:
                t = time.perf_counter()
                res = run_worker(task_for(model, r, setting, "speed", args), args.timeout)
                raw[r.name].append(res)
                log(
                    f"  {model.key} {setting:6s} run {run + 1}/{args.runs} {r.name:28s} {_brief(res, setting)} "
                    f"({time.perf_counter() - t:.0f}s)"
                )
                if res.get("status") in ("unsupported",):
                    break
        agg = out.setdefault(setting, {})
        for r in runnable:
            agg[r.name] = aggregate(raw[r.name], r)
            if setting == "beam4" and agg[r.name].get("status") == "ok":
                # Beam search streams the best sequence once the search is over: no per-token arrival times.
                agg[r.name]["decode_tps"] = None
                agg[r.name]["decode_tps_all"] = []
    return out


def _brief(res: dict[str, Any], setting: str = "greedy") -> str:
    if res.get("status") != "ok":
        return f"{res.get('status')}: {res.get('reason', '')[:160]}"
    rec = res["records"][0]
    if setting == "beam4":  # tokens arrive together at the end: only the whole call is meaningful
        return f"{rec['ms_per_token']:.2f} ms/token, total {rec['total_s']:.2f} s"
    tps = rec["decode_tps"]
    return f"decode {tps:.1f} tok/s, ttft {rec['ttft_s'] * 1000:.1f} ms" if tps else "ok"


def aggregate(results: list[dict[str, Any]], row: Row) -> dict[str, Any]:
    ok = [r for r in results if r.get("status") == "ok"]
    if not ok:
        first = results[0] if results else {"status": "skipped", "reason": "not run"}
        return {
            "status": first.get("status"),
            "reason": first.get("reason"),
            "ref": row.ref,
            "precision": row.precision,
            "folder": str(row.folder),
        }
    recs = [rec for r in ok for rec in r["records"]]

    def med(key: str) -> float | None:
        vals = [x[key] for x in recs if x.get(key) is not None]
        return statistics.median(vals) if vals else None

    return {
        "status": "ok",
        "ref": row.ref,
        "precision": row.precision,
        "folder": str(row.folder),
        "runs": len(ok),
        "prompt_tokens": recs[0]["prompt_tokens"],
        "new_tokens": recs[0]["new_tokens"],
        "prompt_ms": 1000 * statistics.median(r["prompt_s"] for r in ok),
        "ttft_ms": 1000 * med("ttft_s"),
        "decode_tps": med("decode_tps"),
        "decode_tps_all": [x["decode_tps"] for x in recs],
        "ms_per_token": med("ms_per_token"),
        "peak_gen_rss_mb": max(r["peak_gen_rss_mb"] for r in ok),
        "max_rss_mb": max(r["max_rss_mb"] for r in ok),
        "load_s": statistics.median(r["load_s"] for r in ok),
        "ids_head": recs[0]["ids_head"],
        "info": ok[0].get("info"),
        "errors": [r.get("reason") for r in results if r.get("status") != "ok"],
    }


def bench_memory(model: Model, args: argparse.Namespace, log) -> dict[str, Any]:
    out: dict[str, Any] = {"long": {}, "growth": {}}
    rows = [r for r in selected_rows(model, args) if not missing(r, model)]
    for r in rows:
        res = run_worker(
            task_for(model, r, "greedy", "memory", args, max_new_tokens=args.memory_tokens, warmup_tokens=8),
            args.timeout * 4,
        )
        log(f"  {model.key} memory {r.name:28s} {_brief(res)} peak {res.get('peak_gen_rss_mb', 0):.0f} MB")
        out["long"][r.name] = res
    for r in rows:
        res = run_worker(
            task_for(
                model,
                r,
                "greedy",
                "growth",
                args,
                max_new_tokens=args.growth_tokens,
                generations=args.growth_generations,
                warmup=0,
            ),
            args.timeout * 4,
        )
        series = res.get("rss_series_mb") or []
        if series:
            log(f"  {model.key} growth {r.name:28s} rss {series[0]:.0f} -> {series[-1]:.0f} MB")
        else:
            log(f"  {model.key} growth {r.name:28s} {_brief(res)}")
        out["growth"][r.name] = res
    return out


# ---------------------------------------------------------------------------------------------- report
def _f(v: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def speed_table(setting: str, rows: dict[str, Any]) -> str:
    head = (
        "| peer | prompt tok | prompt ms | TTFT ms | decode tok/s | ms/token | peak RSS MB (gen / process) "
        "| decode vs inference4py | TTFT vs inference4py | same greedy ids |"
    )
    lines = [f"**{setting}**", "", head, "|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in rows.items():
        if r.get("status") != "ok":
            lines.append(f"| {name} | {r.get('status')}: {str(r.get('reason'))[:120]} | | | | | | | | |")
            continue
        ref = rows.get(r["ref"]) if r.get("ref") else None
        ratio_tps = ratio_ttft = same = "-"
        if ref and ref.get("status") == "ok":
            if r["decode_tps"] and ref["decode_tps"]:
                ratio_tps = f"{r['decode_tps'] / ref['decode_tps']:.2f}x"
            ratio_ttft = f"{r['ttft_ms'] / ref['ttft_ms']:.2f}x"
            if setting == "greedy":
                same = "yes" if r["ids_head"] == ref["ids_head"] else "no"
        elif not r.get("ref"):
            ratio_tps = ratio_ttft = "1 (ref)"
        lines.append(
            f"| {name} | {r['prompt_tokens']} | {_f(r['prompt_ms'])} | {_f(r['ttft_ms'])} | "
            f"{_f(r['decode_tps'])} | {_f(r['ms_per_token'], '{:.2f}')} | "
            f"{r['peak_gen_rss_mb']:.0f} / {r['max_rss_mb']:.0f} | {ratio_tps} | {ratio_ttft} | {same} |"
        )
    return "\n".join(lines)


def memory_tables(mem: dict[str, Any], model_key: str) -> str:
    lines = []
    if mem.get("long"):
        lines += [
            "**1,000 new tokens (greedy)**",
            "",
            "| peer | RSS after load MB | peak RSS while generating MB | increase MB | process peak MB |",
            "|---|---|---|---|---|",
        ]
        for name, r in mem["long"].items():
            if r.get("status") != "ok":
                lines.append(f"| {name} | {r.get('status')}: {str(r.get('reason'))[:100]} | | | |")
                continue
            lines.append(
                f"| {name} | {r['rss_before_mb']:.0f} | {r['peak_gen_rss_mb']:.0f} | "
                f"{r['peak_gen_rss_mb'] - r['rss_before_mb']:.0f} | {r['max_rss_mb']:.0f} |"
            )
        lines.append("")
    if mem.get("growth"):
        lines += [
            "**RSS across repeated generations**",
            "",
            "| peer | after 1st MB | after 10th MB | after last MB | growth 10th->last MB |",
            "|---|---|---|---|---|",
        ]
        for name, r in mem["growth"].items():
            s = r.get("rss_series_mb") or []
            if len(s) < 10:
                lines.append(f"| {name} | {r.get('status')}: {str(r.get('reason'))[:100]} | | | |")
                continue
            lines.append(f"| {name} | {s[0]:.0f} | {s[9]:.0f} | {s[-1]:.0f} | {s[-1] - s[9]:+.1f} |")
    return "\n".join(lines)


def targets(results: dict[str, Any]) -> list[str]:
    """The engine work's targets, with the ratios this run shows."""
    out = []

    def ok(model: str, setting: str, row: str) -> dict[str, Any] | None:
        r = results.get(model, {}).get("speed", {}).get(setting, {}).get(row)
        return r if r and r.get("status") == "ok" else None

    def line(label: str, value: float | None, goal: float, higher_better: bool = True) -> None:
        if value is None:
            out.append(f"- {label}: not measured")
            return
        met = value >= goal if higher_better else value <= goal
        out.append(
            f"- {label}: {value:.2f} ({'met' if met else 'MISSED'}; target {'>=' if higher_better else '<='} {goal})"
        )

    has_smollm2 = bool(results.get("smollm2", {}).get("speed"))
    i = ok("smollm2", "greedy", I4PY)
    for peer, goal in (("genai", 1.25), ("optimum", 1.4)) if has_smollm2 else ():
        p = ok("smollm2", "greedy", peer)
        line(
            f"smollm2 fp32 decode tok/s inference4py / {peer}",
            i["decode_tps"] / p["decode_tps"] if i and p else None,
            goal,
        )
        line(f"smollm2 TTFT inference4py / {peer}", i["ttft_ms"] / p["ttft_ms"] if i and p else None, 1.0, False)
    d, g = ok("smollm2", "greedy", f"{I4PY}[default]"), ok("smollm2", "greedy", "genai")
    if has_smollm2:  # issue 19: what a user gets with no flags (the optimum export, fused on first load)
        line(
            "smollm2 fp32 decode tok/s inference4py[default] / genai",
            d["decode_tps"] / g["decode_tps"] if d and g else None,
            1.3,
        )
    u, o = ok("smollm2", "greedy", f"{I4PY}[unfused]"), ok("smollm2", "greedy", "optimum")
    if u and o:  # not a target: optimum's export run as exported, without `inference4py optimize`
        out.append(
            f"- (info) smollm2 fp32 decode tok/s inference4py[unfused] / optimum: "
            f"{u['decode_tps'] / o['decode_tps']:.2f}; TTFT {u['ttft_ms'] / o['ttft_ms']:.2f}"
        )
    i32, g32 = ok("smollm2", "greedy", f"{I4PY}[genai-fp32]"), ok("smollm2", "greedy", "genai")
    if i32 and g32:  # not a target: the same comparison when inference4py runs genai's own fp32 graph
        out.append(
            f"- (info) smollm2 fp32 decode tok/s inference4py[genai-fp32] / genai: "
            f"{i32['decode_tps'] / g32['decode_tps']:.2f}; TTFT {i32['ttft_ms'] / g32['ttft_ms']:.2f}"
        )
    i4, g4 = ok("smollm2", "greedy", f"{I4PY}[genai-int4]"), ok("smollm2", "greedy", "genai[int4]")
    if not has_smollm2:
        pass
    elif not i4:
        r = results["smollm2"].get("speed", {}).get("greedy", {}).get(f"{I4PY}[genai-int4]", {})
        out.append(f"- smollm2 int4 genai folder run by inference4py: FAILED ({r.get('status')}: {r.get('reason')})")
    else:
        line(
            "smollm2 int4 decode tok/s inference4py[genai-int4] / genai[int4]",
            i4["decode_tps"] / g4["decode_tps"] if i4 and g4 else None,
            1.0,
        )
        q4 = ok("smollm2", "greedy", f"{I4PY}[quantized-int4]")
        if q4 and g4:  # not a target: optimum's export through `inference4py optimize` + `quantize --bits 4`
            out.append(
                f"- (info) smollm2 int4 decode tok/s inference4py[quantized-int4] / genai[int4]: "
                f"{q4['decode_tps'] / g4['decode_tps']:.2f}"
            )
    for model in ("smollm2", "qwen2.5-coder"):  # issue 23: against OpenVINO GenAI, when its rows were run
        greedy = results.get(model, {}).get("speed", {}).get("greedy", {})
        for mine, theirs, goal in ((I4PY, "openvino", 1.0), (f"{I4PY}[genai-int4]", "openvino[int4]", 1.3)):
            if theirs not in greedy:
                continue
            a, b = ok(model, "greedy", mine), ok(model, "greedy", theirs)
            line(
                f"{model} decode tok/s {mine} / {theirs}",
                a["decode_tps"] / b["decode_tps"] if a and b and a["decode_tps"] and b["decode_tps"] else None,
                goal,
            )
            line(f"{model} TTFT {mine} / {theirs}", a["ttft_ms"] / b["ttft_ms"] if a and b else None, 1.0, False)
    for model in ("gpt2", "llama", "qwen2", "t5", "bart"):
        for setting in ("greedy", "sample"):
            i, b = ok(model, setting, I4PY), ok(model, setting, "bare-iobinding")
            if i and b and i["decode_tps"] and b["decode_tps"]:
                line(
                    f"{model} {setting} per-token time inference4py / bare loop",
                    b["decode_tps"] / i["decode_tps"],
                    1.1,
                    False,
                )
    for model in ("smollm2", "gpt2", "llama", "qwen2", "t5", "bart"):
        g, b = ok(model, "greedy", I4PY), ok(model, "beam4", I4PY)
        if g and b:
            line(
                f"{model} beam 4 / greedy ms per token (inference4py)",
                b["ms_per_token"] / g["ms_per_token"],
                4.0,
                False,
            )
        elif g and model in results and "beam4" in results[model].get("speed", {}):
            r = results[model]["speed"]["beam4"].get(I4PY, {})
            out.append(f"- {model} beam 4: not available ({r.get('status')}: {r.get('reason')})")
    return out


def render(results: dict[str, Any], env: dict[str, Any], command: str) -> str:
    parts = []
    for key, res in results.items():
        if key.startswith("_"):
            continue
        spec = res["spec"]
        if res.get("speed"):
            parts.append(
                f"### {key}\n\n{spec['prompt_desc']}, {spec['max_new_tokens']} new tokens, EOS suppressed, "
                f"batch 1, median of {spec['runs']} run(s).\n"
            )
        else:
            parts.append(
                f"### {key}\n\n{spec['prompt_desc']}, EOS suppressed, greedy, batch 1: one generation of "
                f"{spec.get('memory_tokens', 1000)} new tokens, then {spec.get('growth_generations', 100)} "
                f"generations of {spec.get('growth_tokens', 8)} tokens in one process.\n"
            )
        for setting, rows in res.get("speed", {}).items():
            parts.append(speed_table(setting, rows) + "\n")
        if res.get("memory"):
            parts.append(memory_tables(res["memory"], key) + "\n")
    goals = targets(results)
    if goals:
        parts.append("### Targets\n\n" + "\n".join(goals) + "\n")
    head = (
        f"Machine: {env['nproc']} cores, {env['cpu']}, {env['mem_total_mb']} MiB; load average at start "
        f"{', '.join(f'{x:.1f}' for x in env['loadavg_start'])}; inference4py source digest "
        f"{env.get('inference4py_source_sha256', 'n/a')}. Python {env['python']}; "
        + ", ".join(f"{k} {v}" for k, v in env["versions"].items() if v)
        + f".\n\nCommand: `{command}`\n"
    )
    return head + "\n" + "\n".join(parts)


def save_json(path: Path, payload: Any) -> None:
    """Write a results file (its folder created) and say where it went, on stderr."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1), encoding="utf-8")
    print(f"results: {path}", file=sys.stderr)


def publish(page: Path, key: str, body: str) -> None:
    """:func:`update_markdown`, and say so on stderr."""
    update_markdown(page, key, body)
    print(f"tables written into {page} (section bench:{key})", file=sys.stderr)


def update_markdown(page: Path, key: str, body: str) -> None:
    start, end = f"<!-- bench:{key}:start -->", f"<!-- bench:{key}:end -->"
    text = page.read_text(encoding="utf-8") if page.is_file() else ""
    block = f"{start}\n{body.strip()}\n{end}"
    if start in text and end in text:
        text = text[: text.index(start)] + block + text[text.index(end) + len(end) :]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    page.write_text(text, encoding="utf-8")


# ---------------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--model", default="tiny", help="tiny (gpt2, llama, qwen2, t5, bart), smollm2, one name, or all")
    ap.add_argument("--runs", type=int, default=3, help="processes per row and setting (interleaved)")
    ap.add_argument(
        "--iters", type=int, default=0, help="measured generations per process (default: 30 tiny, 2 smollm2)"
    )
    ap.add_argument("--warmup", type=int, default=1, help="warm-up generations per process")
    ap.add_argument("--settings", default="greedy,sample,beam4", help="comma list of greedy, sample, beam4")
    ap.add_argument("--peers", default="", help="comma list of row names (default: all)")
    ap.add_argument("--max-new-tokens", type=int, default=0, help="override the model's default")
    ap.add_argument(
        "--prompt",
        choices=("chat", "long"),
        default="chat",
        help="chat: the model's own prompt; long: a ~1,000-token chat turn (prefill / TTFT; chat models only)",
    )
    ap.add_argument("--memory", action="store_true", help="also: one long generation and repeated generations")
    ap.add_argument("--only-memory", action="store_true", help="the memory part alone (its own page section)")
    ap.add_argument("--memory-tokens", type=int, default=1000)
    ap.add_argument("--growth-generations", type=int, default=100)
    ap.add_argument("--growth-tokens", type=int, default=16)
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per worker process")
    ap.add_argument(
        "--out", type=Path, default=None, help="JSON file (default: benchmarks/results/<model>-<time>.json)"
    )
    ap.add_argument(
        "--markdown", type=Path, default=None, help="page to update with the tables (e.g. docs/performance.md)"
    )
    ap.add_argument(
        "--render", type=Path, default=None, help="re-render a results JSON (with --markdown: into the page)"
    )
    ap.add_argument(
        "--section",
        default=None,
        help="the page section --markdown rewrites (default: the model's name, with -long / -memory)",
    )
    args = ap.parse_args(argv)
    if args.render:
        saved = json.loads(args.render.read_text(encoding="utf-8"))
        report = render(saved["results"], saved["machine"], saved["command"])
        print(report)
        if args.markdown:
            only_memory = "--only-memory" in saved["command"]
            model = saved["command"].split("--model", 1)[1].split()[0] if "--model" in saved["command"] else "tiny"
            model += "-long" if "--prompt long" in saved["command"] else ""
            publish(args.markdown, args.section or model + ("-memory" if only_memory else ""), report)
        return 0
    args.settings = [s.strip() for s in args.settings.split(",") if s.strip()]
    command = "python benchmarks/run.py " + " ".join(argv if argv is not None else sys.argv[1:])

    env = machine()
    results: dict[str, Any] = {}

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    models = resolve(args.model)
    for python in sorted({r.python for m in models for r in selected_rows(m, args) if r.python}):
        if Path(python).is_file():  # versions of the rows that run in another venv (OpenVINO GenAI)
            env["versions"].update({k: v for k, v in foreign_versions(python).items() if v})
            env.setdefault("foreign_python", []).append(python)
    for model in models:
        if args.prompt == "long":
            if "messages" not in model.prompt:
                log(f"== {model.key}: skipped (--prompt long is for chat models)")
                continue
            model = dataclasses.replace(model, prompt=long_prompt())
        log(f"== {model.key}")
        if args.prompt == "long":
            content = model.prompt["messages"][-1]["content"]
            prompt_desc = (
                f"long chat prompt (~1,000 tokens, {len(content)} characters: benchmarks/models.py long_prompt)"
            )
        elif "messages" in model.prompt:
            prompt_desc = "chat prompt " + json.dumps(model.prompt["messages"][-1]["content"])
        else:
            prompt_desc = "text prompt " + json.dumps(model.prompt["text"])
        res: dict[str, Any] = {
            "spec": {
                "prompt": model.prompt,
                "prompt_desc": prompt_desc,
                "runs": args.runs,
                "max_new_tokens": args.max_new_tokens or model.max_new_tokens,
                "memory_tokens": args.memory_tokens,
                "growth_generations": args.growth_generations,
                "growth_tokens": args.growth_tokens,
            }
        }
        res["speed"] = {} if args.only_memory else bench_speed(model, args, log)
        if args.memory or args.only_memory:
            res["memory"] = bench_memory(model, args, log)
        results[model.key] = res
    env["loadavg_end"] = os.getloadavg()
    report = render(results, env, command)
    print(report)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    suffix = "-long" if args.prompt == "long" else ""
    out = args.out or RESULTS / f"{args.model.replace(',', '+')}{suffix}-{stamp}.json"
    save_json(out, {"machine": env, "command": command, "results": results, "targets": targets(results)})
    if args.markdown:
        publish(args.markdown, args.section or args.model + suffix + ("-memory" if args.only_memory else ""), report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
