"""Every Python snippet in README.md and docs/ runs (offline, on the tiny fixtures).

Snippets that need the Hub (preset downloads) are marked with an HTML comment
``<!-- requires-network -->`` on the line before the code fence; they are
checked for syntax only.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(r"(?P<marker><!--\s*(?P<what>[\w-]+)\s*-->\s*\n)?```python\n(?P<code>.*?)```", re.S)


def _snippets():
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for i, m in enumerate(_FENCE.finditer(text)):
            yield pytest.param(page, m.group("code"), m.group("what"), id=f"{page.name}-{i}")


@pytest.mark.parametrize("page,code,marker", list(_snippets()))
def test_snippet_runs(page, code, marker, monkeypatch):
    compiled = compile(code, f"{page.name}-snippet", "exec")
    if marker in ("requires-network", "no-run"):
        return  # syntax checked above; it needs the Hub
    monkeypatch.chdir(ROOT)
    namespace: dict = {"__name__": "__docs__"}
    exec(compiled, namespace)


def test_every_page_has_a_runnable_snippet_or_is_prose():
    runnable = {p.name for p, _, marker in (x.values for x in _snippets()) if marker is None}
    for name in (
        "README.md",
        "getting-started.md",
        "text-generation.md",
        "summarization.md",
        "translation.md",
        "grammar-correction.md",
        "text-to-sql.md",
        "configuration.md",
    ):
        assert name in runnable, f"{name} has no snippet that runs offline"
