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


# ----------------------------------------------------------------------- the contributor's pages
_GUIDES = [ROOT / "docs" / "architecture.md", ROOT / "CONTRIBUTING.md"]
_FILE = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w-]+\.(?:py|md|json|toml|h|cpp|inc|txt))(?![\w-])")
_PROJECTS = {"llama.cpp", "whisper.cpp"}  # names of projects, not files


def _cited_files(text: str) -> set[str]:
    return {m.group(1) for m in _FILE.finditer(text) if m.group(1) not in _PROJECTS}


def _module_sections(text: str) -> list[tuple[str, str]]:
    """``(folder, line)`` for each line under a ``### `folder/` `` heading of the Modules section."""
    out, folder = [], ""
    for line in text[text.index("## Modules") :].splitlines():
        heading = re.match(r"#{3,4} `([^`]+)`", line)
        if heading:
            folder = heading.group(1).rstrip("/")
        else:
            out.append((folder, line))
    return out


@pytest.mark.parametrize("page", _GUIDES, ids=lambda p: p.name)
def test_the_contributor_guides_cite_only_files_in_the_repository(page):
    text = page.read_text(encoding="utf-8")
    places = [ROOT, page.parent, ROOT / "inference4py"]
    # a bare name (a model folder's config.json, a module under its section) is some file of the repository
    names = {p.name for p in ROOT.rglob("*") if not any(part.startswith(".") for part in p.relative_to(ROOT).parts)}
    missing = set()
    for name in _cited_files(text):
        if not any((base / name).exists() for base in places) and ("/" in name or name not in names):
            missing.add(name)
    if page.name == "architecture.md":  # module lists name files relative to their section's folder
        for folder, line in _module_sections(text):
            missing -= {name for name in _cited_files(line) if (ROOT / folder / name).exists()}
    assert not missing, f"{page.name} cites files that are not in the repository: {sorted(missing)}"


def test_architecture_lists_every_module():
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    listed = {
        (ROOT / folder / name).resolve() for folder, line in _module_sections(text) for name in _cited_files(line)
    }
    modules = [p for pkg in ("inference4py", "inference4py_genai") for p in (ROOT / pkg).rglob("*.py")]
    unlisted = sorted(p.relative_to(ROOT).as_posix() for p in modules if p.name != "__init__.py" and p not in listed)
    assert not unlisted, f"docs/architecture.md does not list: {unlisted}"
