"""What every command shares: :class:`Command`, the exit codes and :class:`_Echo`.

A command is a help line, a function that adds its arguments to an ``argparse``
parser and a function that runs it, returning one of the exit codes below.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

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
