"""``inference4py embed``: the tiny sentence-bert fixture end to end, compared with OnnxEmbedder."""

from __future__ import annotations

import io
import json

import numpy as np

from inference4py import OnnxEmbedder
from inference4py.cli import main
from tests.conftest import MODELS, load_reference

FOLDER = MODELS / "sentence-bert"
TEXTS = load_reference("embedding")["texts"]


def _lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def test_embed_prints_one_json_line_per_text(capsys):
    assert main(["embed", "--model", str(FOLDER), "--batch-size", "2", *TEXTS[:3]]) == 0
    rows = _lines(capsys.readouterr().out)
    assert [r["index"] for r in rows] == [0, 1, 2]
    with OnnxEmbedder.builder().model_path(FOLDER).build() as model:
        expected = model.embed(TEXTS[:3])
    np.testing.assert_array_equal(np.asarray([r["embedding"] for r in rows], dtype=np.float32), expected)


def test_embed_reads_stdin_and_truncates_dimensions(capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("Hello world\nJava\n"))
    assert main(["embed", "--model", str(FOLDER), "--dimensions", "4"]) == 0
    rows = _lines(capsys.readouterr().out)
    assert len(rows) == 2 and all(len(r["embedding"]) == 4 for r in rows)
    assert abs(np.linalg.norm(rows[0]["embedding"]) - 1) < 1e-6


def test_embed_errors_are_clean(capsys, monkeypatch):
    assert main(["embed", "--model", str(FOLDER), "--no-truncate", TEXTS[1]]) == 2
    assert "more than the model's max_seq_length of 16" in capsys.readouterr().err
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert main(["embed", "--model", str(FOLDER)]) == 2
    assert "error: texts is an empty list" in capsys.readouterr().err
    assert main(["embed", "--model", str(MODELS / "gpt2"), "hi"]) == 2
    assert "For text generation use OnnxTextGenerator" in capsys.readouterr().err
