"""What every command shares: :class:`Command`, the exit codes and :class:`_Echo`.

A command is a help line, a function that adds its arguments to an ``argparse``
parser and a function that runs it, returning one of the exit codes below.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

EXIT_OK = 0
EXIT_ERROR = 2  # library errors, like argparse's usage errors
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for Ctrl-C
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: the reader of stdout left (`| head`), what shells report for it


@dataclass(frozen=True)
class Command:
    """One subcommand: its help line, its arguments and what it does."""

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    description: str | None = None


def _read_text(path: str, option: str) -> str:
    """The text of the file an option names (UTF-8); an unreadable file is an error naming the option."""
    from inference4py.errors import InvalidInputError

    try:
        return Path(path).expanduser().read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInputError(f"{option}: cannot read {path} ({exc.strerror or exc}).") from exc


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
