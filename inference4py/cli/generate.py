"""Command line interface: ``inference4py <command> ...`` (or ``python -m inference4py``).

Thin by design: parse the arguments, build the task object, call it, print.
Library errors (:class:`~inference4py.errors.Inference4pyError`) become
``error: <message>`` on stderr with exit code 2; Ctrl-C exits with 130.  Heavy
modules (onnxruntime, numpy, the engine) are imported inside the commands, so
``inference4py --help`` stays instant.

Adding a command is one entry in :data:`COMMANDS`: a help line, a function that
adds its arguments to an ``argparse`` parser and a function that runs it.

Examples::

    inference4py generate --model inference4j/gpt2 --max-new-tokens 40 "Once upon a time"
    inference4py chat --model inference4j/smollm2-360m-instruct --system "Be brief."
    inference4py pull inference4j/flan-t5-small
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from inference4py.errors import Inference4pyError, InvalidInputError

__all__ = ["main", "build_parser", "Command", "COMMANDS"]

EXIT_OK = 0
EXIT_ERROR = 2  # library errors, like argparse's usage errors
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for Ctrl-C


@dataclass(frozen=True)
class Command:
    """One subcommand: its help line, its arguments and what it does."""

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    description: str | None = None


# --------------------------------------------------------------------------- output


class _Echo:
    """on_token callback: writes each piece to stdout at once and keeps the text."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._pieces: list[str] = []

    def __call__(self, piece: str) -> None:
        self._pieces.append(piece)
        self._out.write(piece)
        self._out.flush()

    @property
    def text(self) -> str:
        return "".join(self._pieces)

    def end_line(self) -> None:
        """Finish the output with a newline unless it already ends with one."""
        if not self.text.endswith("\n"):
            self._out.write("\n")
        self._out.flush()


# --------------------------------------------------------------------------- generate / chat

# (argparse dest, builder method) for the options that map one-to-one.
_GENERATION_OPTIONS: tuple[tuple[str, str], ...] = (
    ("max_new_tokens", "max_new_tokens"),
    ("temperature", "temperature"),
    ("top_k", "top_k"),
    ("top_p", "top_p"),
    ("min_p", "min_p"),
    ("repetition_penalty", "repetition_penalty"),
    ("seed", "seed"),
)


def _add_model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        "-m",
        required=True,
        metavar="ID_OR_PATH",
        help="Hugging Face repo id (org/name) or local model folder",
    )
    parser.add_argument("--revision", metavar="R", help="branch, tag or commit of the hub repo (default: main)")


def _add_generation_arguments(parser: argparse.ArgumentParser) -> None:
    _add_model_arguments(parser)
    group = parser.add_argument_group("generation options (default: the model's generation_config.json)")
    group.add_argument("--max-new-tokens", type=int, metavar="N", help="generate at most N tokens")
    group.add_argument("--temperature", type=float, metavar="T", help="sampling temperature (0 = greedy)")
    group.add_argument("--top-k", type=int, metavar="K", help="sample among the K most likely tokens")
    group.add_argument("--top-p", type=float, metavar="P", help="nucleus sampling threshold in (0, 1]")
    group.add_argument("--min-p", type=float, metavar="P", help="drop tokens less likely than P x the top token")
    group.add_argument("--repetition-penalty", type=float, metavar="R", help="> 1 discourages repeats")
    group.add_argument("--seed", type=int, metavar="S", help="seed for reproducible sampling")
    group.add_argument(
        "--stop",
        action="append",
        default=[],
        metavar="STR",
        help="stop when STR appears; not printed (repeatable)",
    )
    group.add_argument("--greedy", action="store_true", help="always take the most likely token")
    group.add_argument("--system", metavar="PROMPT", help="system prompt (needs a model with a chat template)")
    parser.add_argument(
        "--fuse-attention",
        action="store_true",
        help="run a fused copy of the graph (inference4py optimize; made once, cached; needs the onnx package)",
    )


def _build_generator(args: argparse.Namespace) -> Any:
    from inference4py import OnnxTextGenerator

    builder = OnnxTextGenerator.builder()
    folder = Path(args.model).expanduser()
    builder = builder.model_path(folder) if folder.is_dir() else builder.model_id(args.model)
    if args.revision:
        builder = builder.revision(args.revision)
    for dest, method in _GENERATION_OPTIONS:
        value = getattr(args, dest)
        if value is not None:
            builder = getattr(builder, method)(value)
    for stop in args.stop:
        builder = builder.stop_sequence(stop)
    if args.greedy:  # last, so that it wins over sampling options
        builder = builder.greedy()
    if args.system is not None:
        builder = builder.system_prompt(args.system)
    if getattr(args, "chat_template", False):
        builder = builder.chat_template()
    if args.fuse_attention:
        builder = builder.fuse_attention()
    return builder.build()


def _add_generate_arguments(parser: argparse.ArgumentParser) -> None:
    _add_generation_arguments(parser)
    parser.add_argument(
        "--chat-template",
        action="store_true",
        help="render the prompt with the model's chat template (implied by --system)",
    )
    parser.add_argument("prompt", nargs="?", help="the prompt; read from stdin when omitted")


def _run_generate(args: argparse.Namespace) -> int:
    prompt = args.prompt if args.prompt is not None else sys.stdin.read()
    if not prompt.strip():
        raise InvalidInputError("The prompt is empty: pass it as an argument or on stdin.")
    # A system prompt only exists in a conversation: send the prompt as a user message.
    request: str | list[dict[str, str]] = [{"role": "user", "content": prompt}] if args.system is not None else prompt
    echo = _Echo(sys.stdout)
    with _build_generator(args) as generator:
        generator.generate(request, on_token=echo)
    echo.end_line()
    return EXIT_OK


def _add_chat_arguments(parser: argparse.ArgumentParser) -> None:
    _add_generation_arguments(parser)


_CHAT_HELP = "Chat: one message per line; /reset clears the history, /exit or Ctrl-D quits."


def _run_chat(args: argparse.Namespace) -> int:
    interactive = sys.stdin.isatty()
    with _build_generator(args) as generator:
        # The session keeps the KV cache between turns: only each new turn is prefilled.
        session = generator.chat_session()
        if interactive:
            print(_CHAT_HELP, file=sys.stderr)
        while True:
            if interactive:
                print(">>> ", end="", file=sys.stderr, flush=True)
            line = sys.stdin.readline()
            if not line:  # EOF
                break
            text = line.rstrip("\r\n")
            command = text.strip()
            if command == "/exit":
                break
            if command == "/reset":
                session = generator.chat_session()
                continue
            if not command:
                continue
            echo = _Echo(sys.stdout)
            session.send(text, on_token=echo)
            echo.end_line()
    return EXIT_OK


# --------------------------------------------------------------------------- pull


def _add_pull_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="ID", help="Hugging Face repo id (org/name)")
    parser.add_argument("--revision", metavar="R", help="branch, tag or commit (default: main)")
    parser.add_argument(
        "--variant",
        metavar="V",
        help="precision variant (fp16, quantized, q4, ...) or genai folder instead of full precision",
    )


def _run_pull(args: argparse.Namespace) -> int:
    from inference4py.hub import pull

    folder = pull(args.model, revision=args.revision, variant=args.variant)
    print(folder)
    return EXIT_OK


# --------------------------------------------------------------------------- encoder-decoder tasks


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


# --------------------------------------------------------------------------- transcribe

_DEFAULT_WHISPER = "onnx-community/whisper-base"


def _add_transcribe_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="audio file (wav, flac, mp3, ogg, ...)")
    parser.add_argument(
        "--model",
        "-m",
        default=None,
        metavar="ID_OR_PATH",
        help=f"Whisper repo id or local folder (default: {_DEFAULT_WHISPER})",
    )
    parser.add_argument("--revision", metavar="R", help="branch, tag or commit of the hub repo (default: main)")
    parser.add_argument("--language", "-l", metavar="XX", help="spoken language, e.g. en or french (default: detect)")
    parser.add_argument(
        "--task",
        choices=("transcribe", "translate"),
        default=None,
        help="transcribe (default) or translate into English",
    )
    parser.add_argument("--timestamps", action="store_true", help="print time-stamped segments")
    parser.add_argument(
        "--format",
        "-f",
        choices=("text", "srt", "vtt"),
        default="text",
        help="text (default), or SRT / WebVTT subtitles (implies --timestamps)",
    )
    parser.add_argument("--max-new-tokens", type=int, metavar="N", help="at most N tokens per 30 s window")
    parser.add_argument("--num-beams", type=int, metavar="N", help="beam width (default: greedy)")


def _run_transcribe(args: argparse.Namespace) -> int:
    from inference4py import WhisperSpeechModel

    builder = WhisperSpeechModel.builder()
    model = args.model or _DEFAULT_WHISPER
    folder = Path(model).expanduser()
    builder = builder.model_path(folder) if folder.is_dir() else builder.model_id(model)
    if args.revision:
        builder = builder.revision(args.revision)
    if args.language:
        builder = builder.language(args.language)
    if args.task:
        builder = builder.task(args.task)
    if args.max_new_tokens is not None:
        builder = builder.max_new_tokens(args.max_new_tokens)
    if args.num_beams is not None:
        builder = builder.num_beams(args.num_beams)
    timestamps = args.timestamps or args.format != "text"
    with builder.timestamps(timestamps).build() as asr:
        if args.format == "text" and not timestamps:
            echo = _Echo(sys.stdout)
            asr.transcribe(args.file, on_token=echo)
            echo.end_line()
            return EXIT_OK
        result = asr.transcribe(args.file)
    if args.format == "srt":
        sys.stdout.write(result.to_srt())
    elif args.format == "vtt":
        sys.stdout.write(result.to_vtt())
    else:
        for seg in result.segments:
            if seg.text.strip():
                print(f"[{_seconds(seg.start)} --> {_seconds(seg.end)}] {seg.text.strip()}")
    sys.stdout.flush()
    return EXIT_OK


def _seconds(t: float) -> str:
    minutes, seconds = divmod(max(t, 0.0), 60.0)
    return f"{int(minutes):02d}:{seconds:06.3f}"


# --------------------------------------------------------------------------- inspect


def _add_inspect_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="FOLDER_OR_ID", help="model folder (or Hugging Face repo id, downloaded)")
    parser.add_argument("--revision", metavar="R", help="branch, tag or commit of the hub repo (default: main)")
    parser.add_argument(
        "--detect",
        action="store_true",
        help="ignore inference4py.json and genai_config.json: show what detection alone finds",
    )


def _run_inspect(args: argparse.Namespace) -> int:
    import json

    from inference4py.engine.pipeline import DESCRIPTION_FILE, detect_pipeline, load_pipeline

    folder = Path(args.model).expanduser()
    if not folder.is_dir():
        from inference4py.hub import resolve_model_folder

        folder = resolve_model_folder(args.model, revision=args.revision)
    spec = detect_pipeline(folder) if args.detect else load_pipeline(folder)
    print(json.dumps(spec.describe(), indent=2, ensure_ascii=False))
    origin = "detection (file names and graph inputs/outputs)" if spec.source == "detected" else spec.source
    print(
        f"# resolved from {origin} in {folder}; save the JSON above as {DESCRIPTION_FILE} there to edit it",
        file=sys.stderr,
    )
    return EXIT_OK


# --------------------------------------------------------------------------- quantize


def _add_quantize_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("folder", help="model folder with ONNX graphs (e.g. an optimum export)")
    parser.add_argument("out", help="output folder (created; the other files are copied)")
    parser.add_argument("--bits", type=int, default=4, choices=(4, 8), help="bits per weight (default: 4)")
    parser.add_argument("--block-size", type=int, default=32, help="weights per block (default: 32)")


def _run_quantize(args: argparse.Namespace) -> int:
    from inference4py.quantize import quantize_folder

    for path in quantize_folder(args.folder, args.out, bits=args.bits, block_size=args.block_size):
        print(path)
    return EXIT_OK


# --------------------------------------------------------------------------- optimize


def _add_optimize_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("folder", help="decoder-only model folder (e.g. an optimum export)")
    parser.add_argument("out", help="output folder (created; the other files are copied)")
    parser.add_argument(
        "--level",
        choices=("rotary", "attention"),
        default="rotary",
        help="rotary: also fold the rotary embedding and q/k/v projections into the operator when "
        "the graph allows it (default); attention: attention only",
    )


def _run_optimize(args: argparse.Namespace) -> int:
    from inference4py.optimize import optimize_folder

    report = optimize_folder(args.folder, args.out, level=args.level)
    print(f"{args.out}: {report.summary()}")
    for note in report.notes:
        print(f"  note: {note}")
    return EXIT_OK


# --------------------------------------------------------------------------- table and entry point

#: Subcommand name -> Command.  Add an entry to add a command.
COMMANDS: dict[str, Command] = {
    "generate": Command(
        help="generate text from a prompt, streamed to stdout",
        add_arguments=_add_generate_arguments,
        run=_run_generate,
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
    "pull": Command(
        help="download a model into the Hugging Face cache and print its folder",
        add_arguments=_add_pull_arguments,
        run=_run_pull,
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
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        sys.stdout.flush()
        print(file=sys.stderr)
        return EXIT_INTERRUPTED
