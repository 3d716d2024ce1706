"""Command line interface: ``inference4py <command> ...`` (or ``python -m inference4py``).

Thin by design: parse the arguments, build the task object, call it, print.
Library errors (:class:`~inference4py.errors.Inference4pyError`) become
``error: <message>`` on stderr with exit code 2; Ctrl-C exits with 130.  Heavy
modules (onnxruntime, numpy, the engine) are imported inside the commands, so
``inference4py --help`` stays instant.

Adding a command is one entry in :data:`COMMANDS` (in ``app``): a help line, a
function that adds its arguments to an ``argparse`` parser and a function that runs
it, both in the module of its command group.

One idea per module:

- ``base``: :class:`Command`, the exit codes and the streaming echo;
- ``generate``: ``generate`` and ``chat`` (decoder-only models);
- ``seq2seq``: ``summarize``, ``translate``, ``correct`` and ``sql`` (encoder-decoder models);
- ``transcribe``: ``transcribe`` (Whisper);
- ``embed``: ``embed`` (sentence encoders);
- ``models``: ``pull`` and ``inspect``;
- ``rewrite``: ``quantize`` and ``optimize``;
- ``convert``: ``convert`` (GGUF and Whisper files to model folders);
- ``serve``: ``serve`` (the OpenAI-compatible server);
- ``batch``: ``batch`` (a file of prompts, locally or on Ray);
- ``app``: :data:`COMMANDS`, :func:`build_parser` and :func:`main`.

Examples::

    inference4py generate --model inference4j/gpt2 --max-new-tokens 40 "Once upon a time"
    inference4py chat --model inference4j/smollm2-360m-instruct --system "Be brief."
    inference4py pull inference4j/flan-t5-small
"""

from __future__ import annotations

# Re-exported one by one (``X as X``): the public names importable from here before the split.
from inference4py.cli.app import COMMANDS as COMMANDS
from inference4py.cli.app import build_parser as build_parser
from inference4py.cli.app import main as main
from inference4py.cli.base import EXIT_ERROR as EXIT_ERROR
from inference4py.cli.base import EXIT_INTERRUPTED as EXIT_INTERRUPTED
from inference4py.cli.base import EXIT_OK as EXIT_OK
from inference4py.cli.base import Command as Command

__all__ = ["main", "build_parser", "Command", "COMMANDS"]
