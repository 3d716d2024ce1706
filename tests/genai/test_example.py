"""examples/genai_generate.py runs offline on the genai fixtures (both modes)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import FIXTURES
from tests.genai.conftest import require_genai

require_genai()

ROOT = FIXTURES.parent.parent
MODEL = "tests/fixtures/models/genai-llama"


@pytest.mark.parametrize("extra", [[], ["--compare", "--runs", "2", "--threads", "1"]], ids=["generate", "compare"])
def test_genai_example_runs(extra):
    args = [
        sys.executable,
        "examples/genai_generate.py",
        "--model",
        MODEL,
        "--prompt",
        "The old house",
        "--max-new-tokens",
        "8",
        *extra,
    ]
    proc = subprocess.run(
        args,
        cwd=ROOT,
        text=True,
        capture_output=True,
        timeout=120,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr
    if extra:
        assert "tokens/s" in proc.stdout and "same ids: True" in proc.stdout
    else:
        assert "prompt tokens" in proc.stdout
