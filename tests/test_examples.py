"""The examples run (offline, on the fixtures)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MODELS = "tests/fixtures/models"

RUNS = {
    "generate.py": (["--model", f"{MODELS}/qwen2", "--prompt", "Hello", "--max-new-tokens", "8"], None),
    "chat.py": (["--model", f"{MODELS}/qwen2", "--max-new-tokens", "6"], "Hi there\nAnd then?\n\n"),
    "seq2seq_tasks.py": (["--fixtures", MODELS], None),
    "rerank.py": (["--model", f"{MODELS}/cross-encoder"], None),
    "vision_server.py": (
        ["--model", f"{MODELS}/llava-tiny", "--image", f"{MODELS}/llava-tiny/images/sunset.png"],
        None,
    ),
    "transcribe.py": (
        ["tests/fixtures/references/whisper/bursts.flac", "--model", f"{MODELS}/whisper", "--max-new-tokens", "12"],
        None,
    ),
}


def test_every_example_is_exercised():
    present = {p.name for p in (ROOT / "examples").glob("*.py")}
    assert present <= set(RUNS) | EXTRA, f"examples without a test run: {present - set(RUNS) - EXTRA}"


EXTRA: set[str] = {"genai_generate.py", "agent.py", "push_pull.py"}  # examples tested elsewhere or below


@pytest.mark.parametrize("name", sorted(RUNS))
def test_example_runs(name):
    args, stdin = RUNS[name]
    proc = subprocess.run(
        [sys.executable, f"examples/{name}", *args],
        cwd=ROOT,
        input=stdin,
        text=True,
        capture_output=True,
        timeout=120,
        # this tree's inference4py, whichever one is installed
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "NO_PROXY": "127.0.0.1", "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip()
    if name == "generate.py":
        assert "prompt tokens" in proc.stdout
    if name == "chat.py":
        assert proc.stdout.count("assistant:") == 2
    if name == "rerank.py":
        assert "same ranking through the server: True" in proc.stdout
    if name == "vision_server.py":
        assert "same answer through the server: True" in proc.stdout
    if name == "seq2seq_tasks.py":
        for label in ("summary:", "German:", "corrected:", "SQL:"):
            assert label in proc.stdout


def test_agent_example_calls_the_tool_through_all_three_apis(tmp_path):
    """examples/agent.py on the qwen2 fixture (a longer context: the tool prompt is ~400 tokens)."""
    pytest.importorskip("anthropic")
    from tests.conftest import long_context_copy

    folder = long_context_copy(tmp_path)
    proc = subprocess.run(
        [sys.executable, "examples/agent.py", "--model", str(folder), "--tool-choice", "required"],
        cwd=ROOT,
        text=True,
        capture_output=True,
        timeout=300,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "NO_PROXY": "127.0.0.1"},
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert sum(line.startswith("  tool get_weather(") for line in lines) == 3, proc.stdout
    answers = [line for line in lines if line.startswith("  answer: ")]
    assert len(answers) == 3 and len(set(answers)) == 1, proc.stdout  # greedy: one answer, whichever API


def test_push_pull_example_round_trips_through_a_hub(tmp_path):
    """examples/push_pull.py against the fake Hub of tests/hubserver.py (huggingface_hub reads HF_ENDPOINT)."""
    from tests.hubserver import FakeHub

    env = {
        "PATH": "/usr/bin:/bin",
        "NO_PROXY": "127.0.0.1",
        "HF_HOME": str(tmp_path / "hf"),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "PYTHONPATH": str(ROOT),  # this tree's inference4py, whichever one is installed
        "HF_HUB_DISABLE_XET": "1",  # the fake Hub takes LFS uploads (huggingface_hub >= 1.0 would use Xet)
    }
    with FakeHub(tokens={"hf_example"}) as hub:
        proc = subprocess.run(
            [sys.executable, "examples/push_pull.py", f"{MODELS}/gpt2", "me/tiny-gpt2", "--token", "hf_example"],
            cwd=ROOT,
            text=True,
            capture_output=True,
            timeout=120,
            env={**env, "HF_ENDPOINT": hub.url},
        )
    assert proc.returncode == 0, proc.stderr
    assert "pushed 9 files to me/tiny-gpt2@main" in proc.stdout
    assert "same ids as the local folder: True" in proc.stdout
    assert hub.repos["me/tiny-gpt2"].files["model.onnx"] == (ROOT / MODELS / "gpt2" / "model.onnx").read_bytes()
