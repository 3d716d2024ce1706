"""Command line interface: ``inference4py <command> ...`` (or ``python -m inference4py``).

Being split into one module per command group; for now everything is in ``generate``.
"""

from __future__ import annotations

from inference4py.cli.generate import COMMANDS as COMMANDS
from inference4py.cli.generate import EXIT_ERROR as EXIT_ERROR
from inference4py.cli.generate import EXIT_INTERRUPTED as EXIT_INTERRUPTED
from inference4py.cli.generate import EXIT_OK as EXIT_OK
from inference4py.cli.generate import Command as Command
from inference4py.cli.generate import build_parser as build_parser
from inference4py.cli.generate import main as main

__all__ = ["main", "build_parser", "Command", "COMMANDS"]
