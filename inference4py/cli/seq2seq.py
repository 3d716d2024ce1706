"""The encoder-decoder commands: ``summarize``, ``translate``, ``correct`` and ``sql``.

Each takes its input text as an argument or on stdin, builds the task from its
preset (or ``--model``) and streams the output to stdout.  The library is imported
inside the handlers.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from inference4py.cli.base import EXIT_OK, _Echo
from inference4py.errors import InvalidInputError


def _add_seq2seq_arguments(parser: argparse.ArgumentParser, default_model: str) -> None:
    parser.add_argument(
        "--model",
        "-m",
        default=None,
        metavar="ID_OR_PATH",
        help=f"Hugging Face repo id or local folder (default: {default_model})",
    )
    parser.add_argument("--revision", metavar="R", help="branch, tag or commit of the hub repo (default: main)")
    parser.add_argument("--max-new-tokens", type=int, metavar="N", help="generate at most N tokens")
    parser.add_argument("--num-beams", type=int, metavar="N", help="beam width (default: the model's)")
    parser.add_argument("--truncate", action="store_true", help="cut inputs longer than the encoder accepts")
    parser.add_argument("text", nargs="?", help="the input text; read from stdin when omitted")


def _read_text(args: argparse.Namespace) -> str:
    text = args.text if args.text is not None else sys.stdin.read()
    if not text.strip():
        raise InvalidInputError("The input text is empty: pass it as an argument or on stdin.")
    return text.strip()


def _build_seq2seq(preset: Any, args: argparse.Namespace) -> Any:
    builder = preset
    if args.model:
        folder = Path(args.model).expanduser()
        builder = builder.model_path(folder) if folder.is_dir() else builder.model_id(args.model)
    if args.revision:
        builder = builder.revision(args.revision)
    if args.max_new_tokens is not None:
        builder = builder.max_new_tokens(args.max_new_tokens)
    if args.num_beams is not None:
        builder = builder.num_beams(args.num_beams)
    if args.truncate:
        builder = builder.truncate()
    return builder.build()


def _stream_call(task: Any, method: str, *call_args: Any, **call_kwargs: Any) -> int:
    echo = _Echo(sys.stdout)
    with task:
        getattr(task, method)(*call_args, on_token=echo, **call_kwargs)
    echo.end_line()
    return EXIT_OK


def _run_summarize(args: argparse.Namespace) -> int:
    from inference4py import BartSummarizer

    text = _read_text(args)
    return _stream_call(_build_seq2seq(BartSummarizer.distilBartCnn(), args), "summarize", text)


def _add_translate_arguments(parser: argparse.ArgumentParser) -> None:
    _add_seq2seq_arguments(parser, "inference4j/opus-mt-SOURCE-TARGET")
    parser.add_argument("--source", "-s", default="en", help="source language code (default: en)")
    parser.add_argument("--target", "-t", default="de", help="target language code (default: de)")


def _run_translate(args: argparse.Namespace) -> int:
    from inference4py import Language, MarianTranslator

    text = _read_text(args)
    src, tgt = Language.of(args.source), Language.of(args.target)
    preset = MarianTranslator._preset(
        f"opus-mt-{src.iso_code}-{tgt.iso_code}",
        f"inference4j/opus-mt-{src.iso_code}-{tgt.iso_code}",
        source=src,
        target=tgt,
    )
    task = _build_seq2seq(preset, args)
    return _stream_call(task, "translate", text, target=tgt, source=src)


def _run_correct(args: argparse.Namespace) -> int:
    from inference4py import CoeditGrammarCorrector

    text = _read_text(args)
    return _stream_call(_build_seq2seq(CoeditGrammarCorrector.coeditBase(), args), "correct", text)


def _add_sql_arguments(parser: argparse.ArgumentParser) -> None:
    _add_seq2seq_arguments(parser, "inference4j/t5-small-awesome-text-to-sql")
    parser.add_argument("--schema", required=True, help="CREATE TABLE statements the query runs against")


def _run_sql(args: argparse.Namespace) -> int:
    from inference4py import T5SqlGenerator

    text = _read_text(args)
    return _stream_call(_build_seq2seq(T5SqlGenerator.t5SmallAwesome(), args), "generate_sql", text, args.schema)
