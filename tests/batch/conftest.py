"""Helpers of the batch tests: input files in each format and the reference of a row run alone."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.conftest import MODELS

QWEN = str(MODELS / "qwen2")
T5 = str(MODELS / "t5")
BART = str(MODELS / "bart")
MARIAN = str(MODELS / "marian")

PROMPTS = [
    "Hello there",
    "The quick brown fox jumps over the lazy dog",
    "Once",
    "A longer prompt about the weather in the mountains and the sea",
    "Tell me a story",
    "x",
    "Numbers: 1 2 3 4 5",
]
LONG = " ".join(["word"] * 300)  # more tokens than any fixture's context (qwen2: 128, bart: 64 positions)


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def write_csv(path: Path, records: list[dict]) -> Path:
    names = list(dict.fromkeys(k for r in records for k in r))
    with open(path, "w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=names)
        writer.writeheader()
        for r in records:
            writer.writerow({k: json.dumps(v) if isinstance(v, list) else v for k, v in r.items()})
    return path


def write_parquet(path: Path, records: list[dict]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(records), path)
    return path


def by_id(rows: list[dict]) -> dict[str, dict]:
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)), f"duplicated ids: {sorted(i for i in ids if ids.count(i) > 1)}"
    return {r["id"]: r for r in rows}


@pytest.fixture(scope="module")
def qwen():
    from inference4py import OnnxTextGenerator

    with OnnxTextGenerator.builder().model_path(QWEN).build() as gen:
        yield gen
