"""The table of commands (:data:`COMMANDS`), the parser built from it and :func:`main`.

:func:`main` turns library errors (:class:`~inference4py.errors.Inference4pyError`)
into ``error: <message>`` on stderr with exit code 2, Ctrl-C into exit code 130, and a reader that
stops reading (``inference4py generate ... | head``) into exit code 141, quietly, as other tools do.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from inference4py.cli.base import EXIT_BROKEN_PIPE, EXIT_ERROR, EXIT_INTERRUPTED, Command
from inference4py.cli.batch import _add_batch_arguments, _run_batch
from inference4py.cli.convert import _add_convert_arguments, _run_convert
from inference4py.cli.embed import _add_embed_arguments, _run_embed
from inference4py.cli.generate import _CHAT_HELP, _add_chat_arguments, _add_generate_arguments, _run_chat, _run_generate
from inference4py.cli.models import (
    _add_inspect_arguments,
    _add_pull_arguments,
    _add_push_arguments,
    _run_inspect,
    _run_pull,
    _run_push,
)
from inference4py.cli.rewrite import _add_optimize_arguments, _add_quantize_arguments, _run_optimize, _run_quantize
from inference4py.cli.seq2seq import (
    _add_seq2seq_arguments,
    _add_sql_arguments,
    _add_translate_arguments,
    _run_correct,
    _run_sql,
    _run_summarize,
    _run_translate,
)
from inference4py.cli.serve import _add_serve_arguments, _run_serve
from inference4py.cli.transcribe import _add_transcribe_arguments, _run_transcribe
from inference4py.errors import Inference4pyError

#: Subcommand name -> Command.  Add an entry to add a command.
COMMANDS: dict[str, Command] = {
    "generate": Command(
        help="generate text from a prompt, streamed to stdout",
        add_arguments=_add_generate_arguments,
        run=_run_generate,
    ),
    "serve": Command(
        help="serve models over the OpenAI API (needs the serve extra)",
        add_arguments=_add_serve_arguments,
        run=_run_serve,
    ),
    "chat": Command(
        help="multi-turn chat on stdin/stdout (/exit or EOF ends it)",
        add_arguments=_add_chat_arguments,
        run=_run_chat,
        description=_CHAT_HELP,
    ),
    "summarize": Command(
        help="summarize text (BART-CNN by default)",
        add_arguments=lambda p: _add_seq2seq_arguments(p, "inference4j/distilbart-cnn-12-6"),
        run=_run_summarize,
    ),
    "translate": Command(
        help="translate text with a Marian opus-mt model",
        add_arguments=_add_translate_arguments,
        run=_run_translate,
    ),
    "correct": Command(
        help="fix grammar with CoEdIT",
        add_arguments=lambda p: _add_seq2seq_arguments(p, "inference4j/coedit-base"),
        run=_run_correct,
    ),
    "sql": Command(
        help="turn a question into SQL for a schema",
        add_arguments=_add_sql_arguments,
        run=_run_sql,
    ),
    "embed": Command(
        help="sentence embeddings of texts (sentence-transformers ONNX models), one JSON line per text",
        add_arguments=_add_embed_arguments,
        run=_run_embed,
    ),
    "batch": Command(
        help="run a task over every row of a JSONL/CSV/Parquet file, resumable, locally or on Ray (--replicas)",
        add_arguments=_add_batch_arguments,
        run=_run_batch,
    ),
    "quantize": Command(
        help="weight-only int4/int8 quantization of a model folder (onnxruntime MatMulNBits)",
        add_arguments=_add_quantize_arguments,
        run=_run_quantize,
    ),
    "optimize": Command(
        help="fuse a decoder graph's attention into GroupQueryAttention (faster on CPU, same outputs)",
        add_arguments=_add_optimize_arguments,
        run=_run_optimize,
    ),
    "convert": Command(
        help="convert a GGUF file (llama.cpp; needs the gguf extra) or a Whisper file (faster-whisper, whisper.cpp) "
        "into an ONNX model folder",
        add_arguments=_add_convert_arguments,
        run=_run_convert,
    ),
    "pull": Command(
        help="download a model into the Hugging Face cache and print its folder",
        add_arguments=_add_pull_arguments,
        run=_run_pull,
    ),
    "push": Command(
        help="upload a model folder to a Hugging Face repo, with a model card saying what it is",
        add_arguments=_add_push_arguments,
        run=_run_push,
    ),
    "transcribe": Command(
        help="transcribe (or translate to English) an audio file with Whisper",
        add_arguments=_add_transcribe_arguments,
        run=_run_transcribe,
    ),
    "inspect": Command(
        help="print a model folder's resolved pipeline description (JSON) and where it came from",
        add_arguments=_add_inspect_arguments,
        run=_run_inspect,
    ),
}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with one sub-parser per entry of :data:`COMMANDS`."""
    from inference4py import __version__

    parser = argparse.ArgumentParser(
        prog="inference4py",
        description="Run generative ONNX models (LLMs, T5/BART/Marian, Whisper) on ONNX Runtime.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, command in COMMANDS.items():
        sub = subparsers.add_parser(name, help=command.help, description=command.description or command.help)
        command.add_arguments(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (0 ok, 2 error, 130 interrupted)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, usage errors
        return exc.code if isinstance(exc.code, int) else EXIT_ERROR
    try:
        return COMMANDS[args.command].run(args)
    except Inference4pyError as exc:
        sys.stdout.flush()
        print(f"error: {exc.message_for('cli')}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        sys.stdout.flush()
        print(file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # the reader is gone: what is left in stdout's buffer goes nowhere, so the flush at exit does not fail again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE
