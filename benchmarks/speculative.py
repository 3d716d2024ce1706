"""Speculative decoding on real text: tokens/s with and without, and the acceptance rate.

    python benchmarks/speculative.py [--models smollm2-fused,smollm2-genai-int4] [--runs 3]
                                     [--max-new-tokens 256] [--tasks summarize,code,story]
                                     [--draft smollm2-genai-int4:smollm2-fused]

Folders come from ``~/.cache/inference4py/real/<name>`` (the real-checkpoint tier's cache,
``INFERENCE4PY_REAL_DIR`` overrides it; ``<name>:as-is`` loads an optimum export without fusing
it, a growing KV cache), the prompts from this file: two grounded tasks (a
summary of a given passage, an edit of a given function: the answer copies its input) and an
open-ended one (a story).  Every call is greedy, with the model's chat template, so the
speculative output is the plain output token for token (checked on every run: a mismatch
aborts).  Each run does, per model and task, the plain call then each speculative variant,
rotating the order between runs; reported per cell are the medians over runs of the decode
rate (tokens 2..n over the time after the first token), the whole call's tokens/s, and their
ratios to plain decoding, plus the acceptance rate and target passes per token.

``--draft DRAFT:TARGET`` adds a draft-model row (DRAFT drafting for TARGET; same tokenizer).
Results go to ``benchmarks/results/speculative-<time>.json``; ``--markdown PAGE`` rewrites the
table between ``<!-- bench:speculative:start/end -->`` in PAGE.  Run it on an idle machine:
the ratios compare timings taken seconds apart.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python benchmarks/speculative.py`: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.run import RESULTS, machine

REAL = Path(os.environ.get("INFERENCE4PY_REAL_DIR", Path.home() / ".cache" / "inference4py" / "real"))

PASSAGE = """\
The Rosetta Stone is a granodiorite stele inscribed with three versions of a decree issued in \
Memphis, Egypt, in 196 BC during the Ptolemaic dynasty on behalf of King Ptolemy V Epiphanes. \
The top and middle texts are in Ancient Egyptian using hieroglyphic and Demotic scripts, \
respectively, while the bottom is in Ancient Greek. The decree has only minor differences \
across the three versions, making the Rosetta Stone key to deciphering the Egyptian scripts.

The stone was carved during the Hellenistic period and is believed to have originally been \
displayed within a temple, possibly at Sais. It was probably moved in late antiquity or during \
the Mameluke period, and was eventually used as building material in the construction of Fort \
Julien near the town of Rashid (Rosetta) in the Nile Delta. It was found there in July 1799 by \
French officer Pierre-François Bouchard during the Napoleonic campaign in Egypt. It was the first \
Ancient Egyptian bilingual text recovered in modern times, and it aroused widespread public \
interest with its potential to decipher this previously untranslated hieroglyphic script. \
Lithographic copies and plaster casts soon began circulating among European museums and \
scholars. When the British defeated the French, they took the stone to London under the terms \
of the Capitulation of Alexandria in 1801. Since 1802, it has been on public display at the \
British Museum almost continuously and it is the most visited object there.

Study of the decree was already underway when the first complete translation of the Greek text \
was published in 1803. Jean-François Champollion announced the transliteration of the Egyptian \
scripts in Paris in 1822; it took longer still before scholars were able to read Ancient \
Egyptian inscriptions and literature confidently. Major advances in the decoding were \
recognition that the stone offered three versions of the same text (1799); that the Demotic \
text used phonetic characters to spell foreign names (1802); that the hieroglyphic text did so \
as well, and had pervasive similarities to the Demotic (1814); and that phonetic characters were \
also used to spell native Egyptian words (1822-1824).
"""

CODE = """\
def moving_average(values, window):
    if window <= 0:
        raise ValueError("window must be positive")
    result = []
    total = 0.0
    for index, value in enumerate(values):
        total += value
        if index >= window:
            total -= values[index - window]
        if index >= window - 1:
            result.append(total / window)
    return result


def normalise(values):
    low = min(values)
    high = max(values)
    if high == low:
        return [0.0 for _ in values]
    return [(value - low) / (high - low) for value in values]
"""

TASKS: dict[str, tuple[str, str]] = {
    # name: (kind, user message)
    "summarize": (
        "grounded",
        f"{PASSAGE}\nUsing only the passage above, explain where the Rosetta Stone was found, by whom, "
        "how it came to London and who deciphered it. Quote the passage where you can.",
    ),
    "code": (
        "grounded",
        f"```python\n{CODE}```\n\nRewrite both functions above with type hints (list[float], int) and a "
        "one-line docstring each. Keep the code otherwise unchanged and give the whole code.",
    ),
    "story": ("open-ended", "Write a short story about a lighthouse keeper who finds a message in a bottle."),
}


def load(name: str) -> Any:
    from inference4py import OnnxTextGenerator

    base, _, variant = name.partition(":")  # NAME:as-is runs an optimum export as exported (growing cache)
    folder = REAL / base
    if not folder.is_dir():
        raise SystemExit(f"{folder} does not exist: build the real-checkpoint cache first (tests/real).")
    builder = OnnxTextGenerator.builder().model_path(folder).chat_template()
    if variant == "as-is":
        builder = builder.fuse_attention(False)
    return builder.build()


SETTINGS: dict[str, dict[str, Any]] = {
    "greedy": {"do_sample": False},
    # benchmarks/README.md's sampling rule; the seed changes per run, the same for every row of a run
    "sample": {"do_sample": True, "temperature": 0.8, "top_k": 50, "top_p": 0.9},
}


def one_call(
    gen: Any, messages: list[dict[str, str]], max_new: int, speculative: Any, options: dict[str, Any] | None = None
) -> dict[str, Any]:
    started = time.perf_counter()
    result = gen.generate(messages, max_new_tokens=max_new, speculative=speculative, **(options or SETTINGS["greedy"]))
    wall = time.perf_counter() - started
    stats = result.speculative
    return {
        "ids": list(result.token_ids),
        "tokens": result.generated_tokens,
        "wall": wall,
        "ttft": result.time_to_first_token,
        "decode_tps": result.tokens_per_second,
        "call_tps": result.generated_tokens / wall,
        "drafted": stats.drafted_tokens if stats else 0,
        "accepted": stats.accepted_tokens if stats else 0,
        "passes": stats.target_passes if stats else result.generated_tokens - 1,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="smollm2-fused,smollm2-genai-int4")
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--settings", default="greedy", help="greedy,sample")
    parser.add_argument("--draft", action="append", default=[], metavar="DRAFT:TARGET")
    parser.add_argument(
        "--lookup",
        action="append",
        default=[],
        metavar="MAX,MIN,START,BOUND",
        help="also PromptLookup(max_ngram, min_ngram, num_draft_tokens, max_draft_tokens) (repeatable)",
    )
    parser.add_argument("--markdown", metavar="PAGE", help="rewrite the table between the bench:speculative markers")
    parser.add_argument("--no-save", action="store_true", help="do not write benchmarks/results/ (smoke runs)")
    args = parser.parse_args(argv)

    from inference4py.generation.speculative import DraftModel, PromptLookup

    names = [m for m in args.models.split(",") if m]
    models = {name: load(name) for name in names}
    variants: list[tuple[str, str, Any]] = [(name, "prompt_lookup", PromptLookup()) for name in names]
    for text in args.lookup:
        mx, mn, start, bound = (int(v) for v in text.split(","))
        lookup = PromptLookup(max_ngram=mx, min_ngram=mn, num_draft_tokens=start, max_draft_tokens=bound)
        variants += [(name, f"lookup({text})", lookup) for name in names]
    for pair in args.draft:
        draft, target = pair.split(":")
        for n in (draft, target):
            if n not in models:
                models[n] = load(n)
        variants.append((target, f"draft:{draft}", DraftModel(models[draft])))
    tasks = [t for t in args.tasks.split(",") if t]
    cells: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for name in {v[0] for v in variants}:  # warm-up: sessions, arenas, caches
        one_call(models[name], [{"role": "user", "content": "Hi"}], 8, None)
    cases = [
        (task if setting == "greedy" else f"{task}+{setting}", task, setting)
        for setting in args.settings.split(",")
        for task in tasks
    ]
    for run in range(args.runs):
        for key, task, setting in cases:
            messages = [{"role": "user", "content": TASKS[task][1]}]
            options = dict(SETTINGS[setting])
            if options["do_sample"]:
                options["seed"] = 1234 + run
            for name in sorted({v[0] for v in variants}):
                mine = [("plain", None), *((label, spec) for target, label, spec in variants if target == name)]
                order = mine[run % len(mine) :] + mine[: run % len(mine)]
                outputs = {}
                for label, spec in order:
                    res = one_call(models[name], messages, args.max_new_tokens, spec, options)
                    outputs[label] = res
                    cells.setdefault((name, key, label), []).append(res)
                for label, res in outputs.items():
                    res["same_as_plain"] = res["ids"] == outputs["plain"]["ids"]
                    res["agreeing_prefix"] = next(
                        (i for i, (a, b) in enumerate(zip(res["ids"], outputs["plain"]["ids"])) if a != b),
                        min(len(res["ids"]), len(outputs["plain"]["ids"])),
                    )
                    if not res["same_as_plain"] and "int4" not in name and setting == "greedy":
                        # float32 graphs compute one row and several rows alike: a difference is a bug
                        raise SystemExit(f"{name} {task} {label}: the output differs from plain greedy")
                brief = "  ".join(f"{lb} {r['decode_tps']:.1f} tok/s" for lb, r in outputs.items())
                print(f"run {run + 1} {name:20} {key:16} {outputs['plain']['tokens']:4} tokens  {brief}", flush=True)

    rows = []
    for (name, task, label), runs in sorted(cells.items()):
        if label == "plain":
            continue
        plain = cells[(name, task, "plain")]
        med = {k: statistics.median(r[k] for r in runs) for k in ("decode_tps", "call_tps", "wall")}
        base = {k: statistics.median(r[k] for r in plain) for k in ("decode_tps", "call_tps", "wall")}
        drafted, accepted = sum(r["drafted"] for r in runs), sum(r["accepted"] for r in runs)
        rows.append(
            {
                "model": name,
                "task": task,
                "kind": TASKS[task.split("+")[0]][0],
                "method": label,
                "tokens": statistics.median(r["tokens"] for r in runs),
                "plain_tokens": statistics.median(r["tokens"] for r in plain),
                "plain_decode_tps": base["decode_tps"],
                "decode_tps": med["decode_tps"],
                "decode_ratio": med["decode_tps"] / base["decode_tps"],
                "plain_call_tps": base["call_tps"],
                "call_tps": med["call_tps"],
                "call_ratio": med["call_tps"] / base["call_tps"],
                "drafted": drafted,
                "accepted": accepted,
                "acceptance_rate": accepted / drafted if drafted else 0.0,
                "passes_per_token": sum(r["passes"] for r in runs) / max(1, sum(r["tokens"] - 1 for r in runs)),
                "same_as_plain": all(r["same_as_plain"] for r in runs),
                "agreeing_prefix": min(r["agreeing_prefix"] for r in runs),
            }
        )
    table = render(rows, args)
    print(table)
    if not args.no_save:
        RESULTS.mkdir(exist_ok=True)
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        out = RESULTS / f"speculative-{stamp}.json"
        raw = {
            f"{n}|{t}|{lb}": [{k: v for k, v in r.items() if k != "ids"} for r in rs]
            for (n, t, lb), rs in cells.items()
        }
        payload = {
            "machine": machine(),
            "args": vars(args),
            "time": stamp,
            "rows": rows,
            "runs": raw,
            "prompts": {t: TASKS[t][1] for t in tasks},
        }
        out.write_text(json.dumps(payload, indent=1), encoding="utf-8")
        print(f"wrote {out}")
    if args.markdown:
        page = Path(args.markdown)
        text = page.read_text(encoding="utf-8")
        start, end = "<!-- bench:speculative:start -->", "<!-- bench:speculative:end -->"
        if start not in text or end not in text:
            raise SystemExit(f"{page} has no {start} ... {end} markers.")
        head, rest = text.split(start, 1)
        page.write_text(f"{head}{start}\n{table}\n{end}{rest.split(end, 1)[1]}", encoding="utf-8")
    return 0


def render(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [
        f"chat template, max_new_tokens={args.max_new_tokens}, median of {args.runs} runs; ratios are to plain "
        "decoding of the same model in the same run; +sample: temperature 0.8, top-k 50, top-p 0.9, seed 1234 + run "
        "(plain and speculative texts differ, so their token counts may too)",
        "",
        "| model | task | method | tokens | plain decode tok/s | decode tok/s | decode ratio | call ratio "
        "| accepted / drafted | passes per token | same ids as plain |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        same = "yes" if r["same_as_plain"] else f"first {r['agreeing_prefix']} tokens"
        if "+" in r["task"]:
            same = "(sampled)"
        lines.append(
            f"| {r['model']} | {r['task']} ({r['kind']}) | {r['method']} | {r['tokens']:.0f} | "
            f"{r['plain_decode_tps']:.1f} | {r['decode_tps']:.1f} | {r['decode_ratio']:.2f}x | {r['call_ratio']:.2f}x | "
            f"{r['accepted']} / {r['drafted']} ({r['acceptance_rate']:.0%}) | {r['passes_per_token']:.2f} | {same} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
