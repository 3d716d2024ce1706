"""``inference4py convert``: a GGUF file (llama.cpp) or a Whisper file (faster-whisper, whisper.cpp) as an ONNX
model folder anyone can ship."""

from __future__ import annotations

import argparse
import sys

from inference4py.cli.base import EXIT_OK


def _add_convert_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "source",
        metavar="MODEL",
        help="a .gguf file, a faster-whisper (CTranslate2) folder, a whisper.cpp ggml-*.bin file, or pip:PACKAGE "
        "holding one of them",
    )
    parser.add_argument("out", metavar="OUT_FOLDER", help="the folder to write (must not exist unless --overwrite)")
    parser.add_argument(
        "--bits",
        type=int,
        choices=(4, 8, 16, 32),
        help="weights: 32 float32 (exact, larger), 16 float16 (exact for F16 files), 8 or 4 (re-rounded "
        "MatMulNBits blocks, lossy); "
        "default: every weight as the file holds it (docs/gguf.md)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace OUT_FOLDER if it exists")


def _run_convert(args: argparse.Namespace) -> int:
    from inference4py.errors import ConfigurationError
    from inference4py.gguf.convert import convert_gguf
    from inference4py.gguf.sources import PIP_PREFIX, gguf_from_pip
    from inference4py.tasks.kinds import is_whisper_source

    if is_whisper_source(args.source):
        from inference4py.speech.files import convert_whisper

        if args.bits is not None:
            raise ConfigurationError(
                "--bits applies to GGUF files; a Whisper file is converted as it holds its weights."
            )
        print(convert_whisper(args.source, args.out, overwrite=args.overwrite), file=sys.stdout)
        return EXIT_OK

    source = gguf_from_pip(args.source) if args.source.startswith(PIP_PREFIX) else args.source
    folder = convert_gguf(source, args.out, bits=args.bits, overwrite=args.overwrite)
    print(folder, file=sys.stdout)
    return EXIT_OK
