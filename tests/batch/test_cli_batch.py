"""``inference4py batch``: the command runs run_batch, resumes, and reports library errors cleanly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from inference4py.batch import read_results
from inference4py.cli import main
from tests.batch.conftest import PROMPTS, QWEN, by_id, write_jsonl

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_batch_command_writes_every_row_and_resumes(tmp_path, capsys, qwen):
    src = write_jsonl(tmp_path / "in.jsonl", [{"q": p} for p in PROMPTS[:5]])
    argv = ["batch", "-m", QWEN, "-i", str(src), "-o", str(tmp_path / "out"), "--column", "q"]
    argv += ["--batch-size", "2", "--max-new-tokens", "5", "--format", "jsonl", "--no-progress"]
    assert main(argv) == 0
    assert "5 rows (0 errors) of 5" in capsys.readouterr().err
    rows = by_id(read_results(tmp_path / "out"))
    assert [rows[str(i)]["text"] for i in range(5)] == [qwen.generate(p, max_new_tokens=5).text for p in PROMPTS[:5]]
    assert main(argv) == 0
    assert "0 rows (0 errors, 5 done earlier) of 5" in capsys.readouterr().err


def test_batch_command_errors_are_clean(tmp_path, capsys):
    src = write_jsonl(tmp_path / "in.jsonl", [{"prompt": "Hi"}])
    assert main(["batch", "-m", QWEN, "-i", str(src), "-o", str(tmp_path / "o"), "--column", "nope"]) == 2
    assert "error: in.jsonl has no column 'nope'" in capsys.readouterr().err
    assert (
        main(
            [
                "batch",
                "-m",
                QWEN,
                "-i",
                str(src),
                "-o",
                str(tmp_path / "o"),
                "--task",
                "translate",
                "--column",
                "prompt",
            ]
        )
        == 2
    )
    assert "error: --task translate runs on t5 or marian models" in capsys.readouterr().err
    assert main(["batch", "-m", QWEN, "-i", str(src), "-o", str(tmp_path / "o"), "--batch-size", "0"]) == 2


def test_batch_help_imports_neither_ray_nor_the_runtime():
    script = (
        "import json, sys\n"
        "from inference4py.cli import main\n"
        "code = main(['batch', '--help'])\n"
        "heavy = [m for m in ('ray', 'pyarrow', 'onnxruntime', 'numpy', 'inference4py.batch') if m in sys.modules]\n"
        "print(json.dumps({'code': code, 'heavy': heavy}), file=sys.stderr)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert json.loads(result.stderr.strip().splitlines()[-1]) == {"code": 0, "heavy": []}
    for flag in ("--replicas", "--ray-address", "--seed", "--max-new-tokens", "--column"):
        assert flag in result.stdout
