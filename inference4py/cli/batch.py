"""``inference4py batch``: run a task over every row of a JSONL / CSV / Parquet file (docs/batch.md).

Thin: parse, call :func:`inference4py.batch.run_batch`, print a summary.  The library (and Ray,
and pyarrow) are imported inside the handler, so ``--help`` stays light.
"""

from __future__ import annotations

import argparse
import sys

from inference4py.cli.base import EXIT_OK
from inference4py.errors import ConfigurationError

_TASKS = ("generate", "chat", "summarize", "translate", "transcribe")


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _add_batch_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model", "-m", required=True, metavar="ID_OR_PATH", help="Hugging Face repo id or local folder"
    )
    parser.add_argument("--input", "-i", required=True, metavar="FILE", help="a .jsonl, .csv or .parquet file of rows")
    parser.add_argument(
        "--output", "-o", required=True, metavar="DIR", help="folder of result parts; rerun with it to resume"
    )
    parser.add_argument(
        "--task", default="generate", choices=_TASKS, help="what to run on each row (default: generate)"
    )
    parser.add_argument(
        "--column",
        metavar="NAME",
        help="the input column (default: prompt; messages for chat, text for summarize/translate, audio for transcribe)",
    )
    parser.add_argument("--id-column", metavar="NAME", help="a column of unique row ids (default: the row number)")
    parser.add_argument(
        "--batch-size", type=_positive_int, default=16, metavar="N", help="rows per batch and per part (default: 16)"
    )
    parser.add_argument("--max-new-tokens", type=_positive_int, metavar="N", help="generate at most N tokens per row")
    parser.add_argument("--temperature", type=float, metavar="T", help="sampling temperature (0: greedy)")
    parser.add_argument("--top-p", type=float, metavar="P", help="nucleus sampling threshold")
    parser.add_argument("--top-k", type=int, metavar="K", help="sample among the K likeliest tokens")
    parser.add_argument(
        "--seed", type=int, metavar="N", help="with sampling, each row's seed comes from N and the row's id"
    )
    parser.add_argument(
        "--source",
        metavar="LANG",
        help="translate: the source language (a T5 model needs it); transcribe: the spoken language",
    )
    parser.add_argument("--target", metavar="LANG", help="translate: the target language (T5, multilingual Marian)")
    parser.add_argument(
        "--json-schema",
        metavar="FILE",
        help="a JSON schema file every row's output must match (needs the structured extra)",
    )
    parser.add_argument(
        "--format", choices=("parquet", "jsonl"), help="output parts (default: parquet when pyarrow is installed)"
    )
    parser.add_argument(
        "--replicas",
        type=_positive_int,
        metavar="N",
        help="run on Ray Data with N model replicas (needs the ray extra; default: this process, no Ray)",
    )
    parser.add_argument(
        "--ray-address", metavar="ADDR", help="join a Ray cluster ('auto': the one `ray start` runs here)"
    )
    parser.add_argument(
        "--num-cpus", type=_positive_int, metavar="N", help="CPUs of the local Ray started without --ray-address"
    )
    parser.add_argument(
        "--threads",
        type=_positive_int,
        metavar="N",
        help="onnxruntime threads per model copy (default: on Ray, the CPUs per replica)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def _run_batch(args: argparse.Namespace) -> int:
    from inference4py.batch import run_batch

    schema = None
    if args.json_schema is not None:
        try:
            with open(args.json_schema, encoding="utf-8") as fh:
                schema = fh.read()
        except OSError as exc:
            raise ConfigurationError(f"Cannot read --json-schema {args.json_schema}: {exc.strerror}.") from exc

    report = run_batch(
        args.input,
        args.output,
        model=args.model,
        task=args.task,
        column=args.column,
        id_column=args.id_column,
        batch_size=args.batch_size,
        seed=args.seed,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        source_language=args.source,
        target_language=args.target,
        json_schema=schema,
        output_format=args.format,
        replicas=args.replicas,
        ray_address=args.ray_address,
        num_cpus=args.num_cpus,
        threads=args.threads,
        progress=not args.no_progress,
    )
    skipped = f", {report.skipped} done earlier" if report.skipped else ""
    print(
        f"{report.completed} rows ({report.errors} errors{skipped}) of {report.total} in {args.output} "
        f"[{report.engine}, {report.elapsed:.1f} s, {report.completion_tokens} tokens]",
        file=sys.stderr,
    )
    return EXIT_OK
