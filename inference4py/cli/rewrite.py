"""``inference4py quantize`` and ``inference4py optimize``: write a rewritten copy of a model folder.

``quantize`` stores the weights in int4/int8 (MatMulNBits), ``optimize`` fuses a
decoder's attention into GroupQueryAttention.  The library is imported inside the
handlers.
"""

from __future__ import annotations

import argparse

from inference4py.cli.base import EXIT_OK


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
