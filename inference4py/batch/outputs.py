"""The output folder of a batch job: result parts written atomically, and what they already hold.

Each finished batch becomes one file ``part-NNNNN.parquet`` (or ``.jsonl``), written to a
temporary name in the same folder and renamed into place, so a killed job leaves only whole parts.
The ids in the parts are the rows already done: a rerun skips them.  ``job.json`` records the
settings the results were made with; a rerun with other settings is refused rather than mixed in.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from inference4py.batch.adapters import RESULT_COLUMNS
from inference4py.batch.inputs import BATCH_INSTALL
from inference4py.errors import ConfigurationError, InvalidInputError

__all__ = ["OutputFolder", "read_results", "has_pyarrow", "OUTPUT_FORMATS"]

OUTPUT_FORMATS = ("parquet", "jsonl")
_PART = re.compile(r"^part-(\d+)\.(parquet|jsonl)$")
_JOB = "job.json"


def has_pyarrow() -> bool:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


class OutputFolder:
    """Result parts in one folder; one writer at a time (the local runner or the Ray driver)."""

    def __init__(self, path: str | os.PathLike[str], *, output_format: str | None = None) -> None:
        self.path = Path(path).expanduser()
        if output_format is None:
            output_format = "parquet" if has_pyarrow() else "jsonl"
        if output_format not in OUTPUT_FORMATS:
            raise ConfigurationError(f"Unknown output format {output_format!r}: use parquet or jsonl.")
        if output_format == "parquet" and not has_pyarrow():
            raise ConfigurationError(f"Parquet output needs pyarrow: {BATCH_INSTALL}, or ask for jsonl.")
        if self.path.exists() and not self.path.is_dir():
            raise ConfigurationError(f"The output {os.fspath(path)!r} is a file: pass a folder for the result parts.")
        self.format = output_format
        self.path.mkdir(parents=True, exist_ok=True)
        self._next = max((int(m.group(1)) + 1 for m in self._part_matches()), default=0)

    def _part_matches(self) -> list[re.Match[str]]:
        return [m for p in sorted(self.path.iterdir()) if (m := _PART.match(p.name))]

    def parts(self) -> list[Path]:
        """The finished parts, in the order they were written."""
        return [self.path / m.group(0) for m in sorted(self._part_matches(), key=lambda m: int(m.group(1)))]

    def check_job(self, settings: Mapping[str, Any]) -> None:
        """Record the job's settings, or refuse when the folder holds results made with others."""
        file = self.path / _JOB
        wanted = json.loads(json.dumps(dict(settings), default=str))
        if file.is_file() and self.parts():  # settings of a folder with no results yet are simply replaced
            found = json.loads(file.read_text(encoding="utf-8"))
            if found != wanted:
                changed = sorted(k for k in {*found, *wanted} if found.get(k) != wanted.get(k))
                raise ConfigurationError(
                    f"{self.path} holds results of a job with other settings ({', '.join(changed)} differ): "
                    "rerun with the same settings to resume it, or pass a new output folder."
                )
            return
        _write_atomic(file, json.dumps(wanted, indent=2, sort_keys=True).encode("utf-8"))

    def done_ids(self) -> set[str]:
        """The ids of every row already written."""
        return {row["id"] for part in self.parts() for row in _read_part(part, columns=("id",))}

    def write(self, rows: Sequence[Mapping[str, Any]]) -> Path:
        """Write one part atomically (temporary file, then rename) and return its path."""
        name = f"part-{self._next:05d}.{self.format}"
        self._next += 1
        target = self.path / name
        if self.format == "jsonl":
            data = "".join(
                json.dumps({c: row.get(c) for c in RESULT_COLUMNS}, ensure_ascii=False) + "\n" for row in rows
            )
            _write_atomic(target, data.encode("utf-8"))
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            table = pa.Table.from_pylist([{c: row.get(c) for c in RESULT_COLUMNS} for row in rows], schema=_schema())
            tmp = target.with_name(f".{name}.tmp-{os.getpid()}")
            pq.write_table(table, tmp)
            os.replace(tmp, target)
        return target


def _schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            ("id", pa.string()),
            ("text", pa.string()),
            ("finish_reason", pa.string()),
            ("prompt_tokens", pa.int64()),
            ("completion_tokens", pa.int64()),
            ("error", pa.string()),
        ]
    )


def _write_atomic(target: Path, data: bytes) -> None:
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, target)


def _read_part(part: Path, *, columns: Sequence[str] = RESULT_COLUMNS) -> list[dict[str, Any]]:
    if part.suffix == ".jsonl":
        with open(part, encoding="utf-8") as fh:
            return [{c: rec.get(c) for c in columns} for rec in map(json.loads, filter(str.strip, fh))]
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ConfigurationError(f"{part} is a Parquet part and reading it needs pyarrow: {BATCH_INSTALL}.") from exc
    return list(pq.read_table(part, columns=list(columns)).to_pylist())


def read_results(output_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every result row of a job's output folder (parts in the order written).

    Raises:
        InvalidInputError: the folder does not exist.
    """
    folder = Path(output_dir).expanduser()
    if not folder.is_dir():
        raise InvalidInputError(f"{os.fspath(output_dir)!r} is not a batch output folder (it does not exist).")
    return [row for part in OutputFolder(folder, output_format="jsonl").parts() for row in _read_part(part)]
