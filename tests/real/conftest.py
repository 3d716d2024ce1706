"""Set-up of the real-checkpoint tier (every test is marked ``real``; ``pytest -m real`` runs them).

The checkpoints, their ONNX layouts and the references live in ``$INFERENCE4PY_REAL_DIR``
(default ``~/.cache/inference4py/real``), built by ``python tools/build_real.py``.  The folder
is resolved here the way tools/real/common.py resolves it: tests never import tools/.  When it
is not built, the tests fail (they do not skip) and name the build command.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

REAL_DIR_ENV = "INFERENCE4PY_REAL_DIR"
BUILD_COMMAND = "python tools/build_real.py"


def real_dir() -> Path:
    """``$INFERENCE4PY_REAL_DIR``, else ``~/.cache/inference4py/real`` (as tools/real/common.py)."""
    value = os.environ.get(REAL_DIR_ENV)
    return Path(value).expanduser() if value else Path.home() / ".cache" / "inference4py" / "real"


REAL = real_dir()


def read_json(path: Path) -> Any | None:
    """The JSON in ``path``, or None when it does not exist (tests then fail with :func:`not_built`)."""
    if not path.is_file():
        return None
    with path.open(encoding="utf-8") as fh:
        return json.load(fh)


def not_built(what: str, only: str | None = None) -> None:
    """Fail the test: ``what`` is missing from the real-checkpoint cache."""
    command = f"{BUILD_COMMAND} --only {only}" if only else BUILD_COMMAND
    pytest.fail(
        f"The real-checkpoint cache {REAL} has no {what}. Build it with `{command}` "
        f"(set {REAL_DIR_ENV} to build or read it elsewhere).",
        pytrace=False,
    )


def pytest_collection_modifyitems(session, config, items):
    """Group the LLM tests by (model, layout), so each model folder is loaded once per run.

    Only test_real_llm.py's items move, and only among their own positions.
    """
    slots = [
        i
        for i, item in enumerate(items)
        if item.nodeid.split("::")[0].endswith("real/test_real_llm.py") and hasattr(item, "callspec")
    ]
    if not slots:
        return
    group_order: dict[tuple[Any, Any], int] = {}
    for i in slots:
        params = items[i].callspec.params
        group_order.setdefault((params.get("model"), params.get("layout")), len(group_order))
    ordered = sorted(
        (items[i] for i in slots),
        key=lambda item: group_order[(item.callspec.params.get("model"), item.callspec.params.get("layout"))],
    )
    for i, item in zip(slots, ordered):  # sorted() is stable: within a group the order is the file's
        items[i] = item
