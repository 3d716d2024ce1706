"""Importing inference4py_genai without onnxruntime-genai: a clear error naming the install command.

Runs whether or not onnxruntime-genai is installed (a child interpreter hides it).
"""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import FIXTURES

REPO = FIXTURES.parent.parent

_HIDE = (
    "import sys\n"
    "sys.modules['onnxruntime_genai'] = None  # as if it were not installed\n"
    "try:\n"
    "    import inference4py_genai\n"
    "except ModuleNotFoundError as exc:\n"
    "    print('ERROR', exc.name, '|', exc)\n"
    "import inference4py\n"
    "print('CORE', 'onnxruntime_genai' in [m for m in sys.modules if sys.modules[m] is not None])\n"
)


def test_missing_onnxruntime_genai_names_the_extra():
    out = subprocess.run([sys.executable, "-c", _HIDE], cwd=REPO, capture_output=True, text=True, check=True).stdout
    error = next(line for line in out.splitlines() if line.startswith("ERROR"))
    assert 'pip install "inference4py[genai]"' in error
    assert error.split()[1] == "onnxruntime_genai"
    assert "CORE False" in out  # inference4py itself never needs it
