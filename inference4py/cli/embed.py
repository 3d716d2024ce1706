"""``inference4py embed``: sentence embeddings of texts, one JSON line per text.

The texts are the arguments, or the lines of stdin when there are none.  Each output line is
``{"index": i, "embedding": [...]}``.  The library is imported inside the handler.
"""

from __future__ import annotations

import argparse
import json
import sys

from inference4py.cli.base import EXIT_OK

_DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def _add_embed_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("texts", nargs="*", metavar="TEXT", help="texts to embed (default: the lines of stdin)")
    parser.add_argument(
        "--model",
        "-m",
        default=_DEFAULT_MODEL,
        metavar="ID_OR_PATH",
        help=f"Hugging Face repo id (org/name) or local model folder of a sentence encoder (default: {_DEFAULT_MODEL})",
    )
    parser.add_argument(
        "--batch-size", type=int, default=None, metavar="N", help="texts per onnxruntime run (default: 32)"
    )
    parser.add_argument(
        "--dimensions",
        type=int,
        default=None,
        metavar="N",
        help="keep the first N values of each vector, normalized again",
    )
    parser.add_argument(
        "--no-truncate", action="store_true", help="refuse texts longer than the model's max_seq_length"
    )


def _run_embed(args: argparse.Namespace) -> int:
    from inference4py import OnnxEmbedder
    from inference4py.hub import resolve_checkpoint

    texts = list(args.texts) or [line.rstrip("\n") for line in sys.stdin]
    builder = OnnxEmbedder.builder().model_path(resolve_checkpoint(args.model)).truncate(not args.no_truncate)
    if args.batch_size is not None:
        builder.batch_size(args.batch_size)
    with builder.build() as embedder:
        vectors = embedder.embed(texts, dimensions=args.dimensions)
    for i, vector in enumerate(vectors):
        print(json.dumps({"index": i, "embedding": [float(x) for x in vector]}))
    return EXIT_OK
