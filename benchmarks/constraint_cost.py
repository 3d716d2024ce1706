"""Per-token cost of a JSON-schema constraint, as a ratio to unconstrained decoding.

    python benchmarks/constraint_cost.py --model FOLDER [--model FOLDER ...] [--tokens 64] [--runs 5]

Loads each folder once, warms up, then interleaves runs: unconstrained greedy, and greedy under a
typical nested schema (``SCHEMA``). Each run is timed as decode time per token after the first,
``(duration - time_to_first_token) / (tokens - 1)``. The medians and their ratio are printed. The
constrained run stops when the JSON is complete, so it usually makes fewer tokens than the
unconstrained one; only per-token times are compared. Run it alone: on 2 cores a second job skews
the figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from inference4py import OnnxTextGenerator  # noqa: E402 - after the sys.path line above

PROMPT = [{"role": "user", "content": "Give me a user record for a customer database, as JSON."}]
SCHEMA = {
    "type": "object",
    "properties": {
        "user": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 24},
                "email": {"type": "string", "format": "email"},
                "age": {"type": "integer", "minimum": 0, "maximum": 120},
            },
            "required": ["name", "email", "age"],
            "additionalProperties": False,
        },
        "tags": {"type": "array", "items": {"enum": ["new", "vip", "churned"]}, "maxItems": 3},
        "active": {"type": "boolean"},
    },
    "required": ["user", "tags", "active"],
    "additionalProperties": False,
}


def per_token(result) -> float | None:
    if result.generated_tokens < 2:
        return None
    return (result.duration - result.time_to_first_token) / (result.generated_tokens - 1)


def measure(folder: Path, tokens: int, runs: int, threads: int) -> dict[str, object]:
    gen = OnnxTextGenerator.builder().model_path(folder).intra_op_threads(threads).build()
    options = {"max_new_tokens": tokens, "do_sample": False}
    for _ in range(2):  # warm-up: sessions, the constraint's tokenizer adapter
        gen.generate(PROMPT, **options)
        gen.generate(PROMPT, json_schema=SCHEMA, **options)
    plain, constrained, lengths = [], [], []
    text = ""
    for _ in range(runs):
        a = gen.generate(PROMPT, **options)
        b = gen.generate(PROMPT, json_schema=SCHEMA, **options)
        if (t := per_token(a)) is not None:
            plain.append(t)
        if (t := per_token(b)) is not None:
            constrained.append(t)
        lengths.append(b.generated_tokens)
        text = b.text
    gen.close()
    p, c = statistics.median(plain), statistics.median(constrained)
    return {
        "model": str(folder),
        "unconstrained_ms_per_token": round(p * 1000, 3),
        "constrained_ms_per_token": round(c * 1000, 3),
        "ratio": round(c / p, 3),
        "constrained_tokens": lengths,
        "constrained_output": text,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", required=True, type=Path, help="a model folder (repeatable)")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    for folder in args.model:
        row = measure(folder, args.tokens, args.runs, args.threads)
        print(json.dumps(row, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
