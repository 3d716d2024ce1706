"""Reading a batch job's input: JSONL, CSV or Parquet rows -> ``(id, value)`` pairs.

JSONL and CSV are read with the standard library; Parquet needs pyarrow (``pip install
"inference4py[batch]"``).  Each row becomes an :class:`InputRow` with an id (the id column's
value as a string, else the row number) and the value of the chosen column (a string, a list of
chat messages, or None when the row has no such value: the adapter turns that into an error row).
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inference4py.errors import ConfigurationError, InvalidInputError

__all__ = ["InputRow", "read_rows", "input_format", "FORMATS", "DEFAULT_COLUMNS"]

FORMATS = ("jsonl", "csv", "parquet")
_SUFFIXES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv", ".parquet": "parquet"}

#: The column read when ``column`` is not given, per task.
DEFAULT_COLUMNS = {
    "generate": "prompt",
    "chat": "messages",
    "summarize": "text",
    "translate": "text",
    "transcribe": "audio",
}

BATCH_INSTALL = 'pip install "inference4py[batch]"'


@dataclass(frozen=True)
class InputRow:
    """One input row: its id (unique in the job) and the chosen column's value."""

    id: str
    value: Any


def input_format(path: str | os.PathLike[str]) -> str:
    """``"jsonl"``, ``"csv"`` or ``"parquet"`` from the file's suffix.

    Raises:
        ConfigurationError: an unknown suffix.
    """
    suffix = Path(path).suffix.lower()
    if suffix not in _SUFFIXES:
        raise ConfigurationError(
            f"Cannot tell the format of {os.fspath(path)!r} from its suffix: name it .jsonl, .csv or .parquet."
        )
    return _SUFFIXES[suffix]


def read_rows(
    path: str | os.PathLike[str], *, column: str, id_column: str | None = None, chat: bool = False
) -> list[InputRow]:
    """Every row of ``path`` as an :class:`InputRow`, in file order.

    Args:
        path: a .jsonl, .csv or .parquet file.
        column: the column holding each row's input.
        id_column: the column holding each row's id (unique); None numbers the rows 0, 1, 2...
        chat: the column holds chat messages; a CSV cell holding a JSON list is parsed.

    Raises:
        InvalidInputError: the file does not exist.
        ConfigurationError: the column or id column is not in the file; pyarrow missing for Parquet.
        InvalidInputError: a JSONL line that is not a JSON object, an id that is empty or repeated.
    """
    file = Path(path).expanduser()
    if not file.is_file():
        raise InvalidInputError(
            f"The input file {os.fspath(path)!r} does not exist: pass a .jsonl, .csv or .parquet file."
        )
    fmt = input_format(file)
    records = {"jsonl": _jsonl, "csv": _csv, "parquet": _parquet}[fmt](file)
    rows: list[InputRow] = []
    seen: set[str] = set()
    columns: set[str] = set()
    for number, record in enumerate(records):
        columns.update(record)
        if id_column is not None:
            raw = record.get(id_column)
            if raw is None or str(raw) == "":
                raise InvalidInputError(f"Row {number} of {file.name} has no {id_column!r}: every row needs an id.")
            row_id = str(raw)
        else:
            row_id = str(number)
        if row_id in seen:
            raise InvalidInputError(
                f"The id {row_id!r} appears twice in {file.name}: ids must be unique (drop id_column to number the rows)."
            )
        seen.add(row_id)
        value = record.get(column)
        if chat and isinstance(value, str) and value.lstrip().startswith("["):
            with contextlib.suppress(json.JSONDecodeError):  # else a plain user message that starts with "["
                value = json.loads(value)
        rows.append(InputRow(row_id, value))
    for name, what in ((column, "column"), (id_column, "id column")):
        if name is not None and rows and name not in columns:
            raise ConfigurationError(
                f"{file.name} has no {what} {name!r}; its columns are {', '.join(sorted(columns))}. "
                f"Choose one with --{'column' if what == 'column' else 'id-column'}."
            )
    return rows


def _jsonl(file: Path) -> Iterator[dict[str, Any]]:
    with open(file, encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InvalidInputError(
                    f"Line {line_no} of {file.name} is not valid JSON ({exc.msg}): fix or remove it."
                ) from exc
            if not isinstance(record, dict):
                raise InvalidInputError(
                    f"Line {line_no} of {file.name} is a JSON {type(record).__name__}, not an object: "
                    'write one {"prompt": ...} object per line.'
                )
            yield record


def _csv(file: Path) -> Iterator[dict[str, Any]]:
    with open(file, encoding="utf-8", newline="") as fh:
        yield from csv.DictReader(fh)


def _parquet(file: Path) -> Iterator[dict[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ConfigurationError(f"Reading Parquet needs pyarrow: {BATCH_INSTALL}.") from exc
    table = pq.read_table(file)
    yield from table.to_pylist()
