"""Measures of the package's structure that anyone can rerun (issue 31's "must show").

    python tools/structure.py            # a report; exit 1 when a limit is crossed
    python tools/structure.py --json     # the same numbers as JSON

What it counts, from the source text alone (nothing is imported or run):

- import circles among the package's modules (strongly connected parts of the import graph,
  imports inside functions included: a lazy import still ties two modules together; a package
  `__init__`'s `if TYPE_CHECKING:` re-exports are left out, as they exist for type checkers only);
- classes longer than 400 lines and modules longer than 700;
- `**overrides: Any` / `**kwargs: Any` parameters in the layers below the tasks
  (engine/, generation/, serve/);
- imports of a private name (`_name`, or a name from a `_module`) from another package of the
  library (a package's own modules may share private names; others use its public surface);
- arrows up: an import (lazy ones included) from a module to one in a higher layer of `LAYERS`,
  the layer table of docs/architecture.md, and modules that are in no layer of it.
"""

from __future__ import annotations

import argparse
import ast
import json
import pathlib
import sys
from dataclasses import asdict, dataclass, field

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("inference4py", "inference4py_genai")
CLASS_LIMIT = 400
MODULE_LIMIT = 700
UNTYPED_LAYERS = ("inference4py/engine", "inference4py/generation", "inference4py/serve")

#: The layers of docs/architecture.md, top to bottom.  A module imports modules of its own layer or
#: of a lower one, never of a higher one; a name stands for a module and every module below it
#: (``inference4py`` alone: the package's ``__init__``, the public facade), the longest name wins.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("inference4py.__main__", "inference4py.cli"),  # the command line: a client of the public facade
    ("inference4py",),  # the public facade: lazy re-exports, __all__
    ("inference4py.serve", "inference4py.batch"),  # edges: a request in, RequestOptions, a task, an answer out
    ("inference4py_genai",),  # the task facade again, over onnxruntime-genai
    ("inference4py.speech",),  # speech to text: Whisper's task over tasks/ (speech.files, its converters, sit lower)
    (
        "inference4py.tasks",
        "inference4py._quick",
        "inference4py.publish",
    ),  # task classes; push (a model card from tasks/kinds)
    (  # model folders converted or rewritten; the cache rules every converter shares
        "inference4py.gguf",
        "inference4py.speech.files",
        "inference4py.optimize",
        "inference4py.quantize",
        "inference4py.converted",
        "inference4py.kv_cache_types",
        "inference4py.pip_packages",
    ),
    ("inference4py.vision",),  # images -> vision-encoder inputs; the vision pipeline on the engine
    ("inference4py.generation",),  # logits -> tokens -> text: the step core, search, streaming, scheduler
    ("inference4py.engine",),  # sessions, KV caches, step functions, pipeline descriptions
    ("inference4py.tokenization", "inference4py.audio", "inference4py.hub"),  # text <-> ids; audio; model id -> folder
    ("inference4py.env", "inference4py.errors"),  # environment variables; exceptions
)


@dataclass
class Report:
    circles: list[list[str]] = field(default_factory=list)
    long_classes: list[str] = field(default_factory=list)
    long_modules: list[str] = field(default_factory=list)
    untyped_kwargs: list[str] = field(default_factory=list)
    private_imports: list[str] = field(default_factory=list)
    arrows_up: list[str] = field(default_factory=list)
    unlayered: list[str] = field(default_factory=list)

    def failures(self) -> int:
        return sum(len(v) for v in asdict(self).values())


def module_name(path: pathlib.Path, root: pathlib.Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_of(module: str, is_package: bool) -> str:
    """The package a module belongs to (itself, for an __init__)."""
    return module if is_package else module.rpartition(".")[0]


def resolve_from(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = package_of(module, is_package).split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def top_package(module: str, modules: dict[str, pathlib.Path]) -> str:
    """The innermost package directory holding a module: `a.b.c` -> `a.b` (or itself when a package)."""
    path = modules.get(module)
    if path is not None and path.name == "__init__.py":
        return module
    return module.rpartition(".")[0]


def layer_of(module: str) -> int | None:
    """The index in :data:`LAYERS` of the layer holding ``module`` (0: the top), None when none does."""
    found: tuple[int, int] | None = None  # (layer, length of the name that matched)
    for index, names in enumerate(LAYERS):
        for name in names:
            holds = module == name or (name != PACKAGES[0] and module.startswith(name + "."))
            if holds and (found is None or len(name) > found[1]):
                found = (index, len(name))
    return None if found is None else found[0]


def measure(root: pathlib.Path = ROOT) -> Report:
    files = [p for pkg in PACKAGES for p in sorted((root / pkg).rglob("*.py"))]
    modules = {module_name(p, root): p for p in files}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    report = Report()
    for module, path in modules.items():
        rel = path.relative_to(root).as_posix()
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source)
        lines = source.count("\n")
        if lines > MODULE_LIMIT:
            report.long_modules.append(f"{rel}: {lines} lines")
        is_package = path.name == "__init__.py"
        here = top_package(module, modules)
        module_aliases: dict[str, str] = {}  # a local name bound to another module of the library
        # a package's __init__ re-exports lazily; its `if TYPE_CHECKING:` imports are for type checkers only
        skipped = {id(n) for n in type_checking_imports(tree)} if is_package else set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > CLASS_LIMIT:
                    report.long_classes.append(f"{rel}:{node.lineno} {node.name}: {length} lines")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                kwarg = node.args.kwarg
                if kwarg is not None and rel.startswith(UNTYPED_LAYERS):
                    annotation = ast.unparse(kwarg.annotation) if kwarg.annotation else "Any"
                    if annotation.endswith("Any"):
                        report.untyped_kwargs.append(f"{rel}:{node.lineno} {node.name}(**{kwarg.arg}: {annotation})")
            elif id(node) in skipped:
                continue
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in modules:
                        graph[module].add(alias.name)
                        arrow_up(report, rel, node.lineno, module, alias.name)
                        if alias.asname:
                            module_aliases[alias.asname] = alias.name
            elif isinstance(node, ast.ImportFrom):
                target = resolve_from(module, is_package, node)
                if target not in modules:
                    continue
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    # `from pkg import module` ties to the module; `from module import name` to the module
                    dest = sub if sub in modules else target
                    if dest != module:
                        graph[module].add(dest)
                        arrow_up(report, rel, node.lineno, module, dest)
                    if dest == sub:
                        module_aliases[alias.asname or alias.name] = dest
                    there = top_package(dest, modules)
                    crosses = not (there == here or there.startswith(here + ".") or here.startswith(there + "."))
                    private_module = any(is_private(part) for part in dest.split(".")[len(there.split(".")) :])
                    if crosses and (is_private(alias.name) or private_module):
                        report.private_imports.append(f"{rel}:{node.lineno} imports {alias.name} from {dest}")
        for node in ast.walk(tree):
            # `module._name`: a private name reached through a module of another package
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and is_private(node.attr):
                dest = module_aliases.get(node.value.id)
                if dest is None:
                    continue
                there = top_package(dest, modules)
                if not (there == here or there.startswith(here + ".") or here.startswith(there + ".")):
                    report.private_imports.append(f"{rel}:{node.lineno} reaches {node.attr} in {dest}")
    report.circles = strongly_connected(graph)
    report.unlayered = sorted(m for m in modules if layer_of(m) is None)
    return report


def arrow_up(report: Report, rel: str, line: int, module: str, dest: str) -> None:
    """Record ``module`` importing ``dest`` when ``dest`` sits in a higher layer."""
    here, there = layer_of(module), layer_of(dest)
    if here is not None and there is not None and there < here:
        report.arrows_up.append(f"{rel}:{line} imports {dest}, a higher layer")


def type_checking_imports(tree: ast.Module) -> list[ast.stmt]:
    found: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            found.extend(n for n in node.body if isinstance(n, (ast.Import, ast.ImportFrom)))
    return found


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm; only the parts with more than one module (a circle)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(start: str) -> None:
        nonlocal counter
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                part = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    part.append(member)
                    if member == node:
                        break
                if len(part) > 1:
                    found.append(sorted(part))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    parser.add_argument("--root", type=pathlib.Path, default=ROOT, help="the checkout to measure")
    args = parser.parse_args(argv)
    report = measure(args.root)
    if args.json:
        print(json.dumps(asdict(report), indent=2))
    else:
        titles = {
            "circles": "import circles",
            "long_classes": f"classes over {CLASS_LIMIT} lines",
            "long_modules": f"modules over {MODULE_LIMIT} lines",
            "untyped_kwargs": "**kwargs: Any below the tasks (engine, generation, serve)",
            "private_imports": "private names imported across packages",
            "arrows_up": "imports of a higher layer (LAYERS, docs/architecture.md)",
            "unlayered": "modules in no layer of LAYERS",
        }
        for key, title in titles.items():
            items = getattr(report, key)
            print(f"{title}: {len(items)}")
            for item in items:
                print(f"  {' <-> '.join(item) if isinstance(item, list) else item}")
    return 1 if report.failures() else 0


if __name__ == "__main__":
    sys.exit(main())
