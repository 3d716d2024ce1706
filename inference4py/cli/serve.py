"""``inference4py serve``: the OpenAI-compatible server (needs the ``serve`` extra).

FastAPI and uvicorn are imported inside the handler, so ``--help`` stays light.
"""

from __future__ import annotations

import argparse

from inference4py.cli.base import EXIT_OK


def _add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        "-m",
        action="append",
        required=True,
        metavar="FOLDER_OR_REPO",
        help="a model folder or Hugging Face repo id to serve (repeatable)",
    )
    parser.add_argument(
        "--served-model-name",
        action="append",
        default=[],
        metavar="NAME",
        help="the name clients use for the model (one per --model; default: the folder's or repo's name)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1, this machine only)")
    parser.add_argument("--port", type=int, default=8000, help="port (default: 8000)")
    parser.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"))


def _run_serve(args: argparse.Namespace) -> int:
    from inference4py.serve import serve

    serve(args.model, names=args.served_model_name, host=args.host, port=args.port, log_level=args.log_level)
    return EXIT_OK
