"""tools/structure.py: the structure measures, on small packages written here.

Run as a script (tests never import tools/), as a developer would.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from types import SimpleNamespace

ROOT = pathlib.Path(__file__).resolve().parents[2]


def measure(root: pathlib.Path) -> SimpleNamespace:
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "structure.py"), "--json", "--root", str(root)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr
    report = SimpleNamespace(**json.loads(done.stdout))
    assert (done.returncode == 1) == any(vars(report).values())
    return report


def _write(root: pathlib.Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_a_lazy_import_closes_a_circle(tmp_path: pathlib.Path) -> None:
    _write(
        tmp_path,
        {
            "inference4py/__init__.py": "",
            "inference4py/a.py": "from inference4py.b import f\n",
            "inference4py/b.py": "def f():\n    from inference4py import a\n",
            "inference4py/c.py": "from inference4py.a import f\n",
        },
    )
    report = measure(tmp_path)
    assert report.circles == [["inference4py.a", "inference4py.b"]]


def test_type_checking_reexports_of_a_package_init_are_not_a_circle(tmp_path: pathlib.Path) -> None:
    _write(
        tmp_path,
        {
            "inference4py/__init__.py": "from typing import TYPE_CHECKING\nHINT = 1\nif TYPE_CHECKING:\n    from inference4py.a import A\n",
            "inference4py/a.py": "def g():\n    from inference4py import HINT\n",
        },
    )
    assert measure(tmp_path).circles == []


def test_private_names_across_packages_and_untyped_kwargs(tmp_path: pathlib.Path) -> None:
    _write(
        tmp_path,
        {
            "inference4py/__init__.py": "",
            "inference4py/engine/__init__.py": "",
            "inference4py/engine/x.py": "def _op(): ...\ndef step(**overrides: Any): ...\ndef ok(**kw: int): ...\n",
            "inference4py/engine/y.py": "from inference4py.engine.x import _op\n",  # same package: allowed
            "inference4py/tasks/__init__.py": "",
            "inference4py/tasks/t.py": "from inference4py.engine.x import _op\nfrom inference4py.engine import x\nx._op()\n",
        },
    )
    report = measure(tmp_path)
    assert report.untyped_kwargs == ["inference4py/engine/x.py:2 step(**overrides: Any)"]
    assert report.private_imports == [
        "inference4py/tasks/t.py:1 imports _op from inference4py.engine.x",
        "inference4py/tasks/t.py:3 reaches _op in inference4py.engine.x",
    ]


def test_long_classes_and_modules(tmp_path: pathlib.Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(401))
    _write(tmp_path, {"inference4py/__init__.py": "", "inference4py/big.py": "class Big:\n" + body + "\n" * 300})
    report = measure(tmp_path)
    assert report.long_classes == ["inference4py/big.py:1 Big: 402 lines"]
    assert report.long_modules == ["inference4py/big.py: 702 lines"]


def test_the_package_itself_crosses_no_limit():
    """No import circle, no class over 400 lines or module over 700, no untyped **kwargs below the
    tasks, no private name across packages (issue 31), no import of a higher layer and no module
    outside the layer table (issue 46): CI keeps it that way."""
    report = measure(ROOT)
    assert vars(report) == {k: [] for k in vars(report)}, vars(report)


def test_an_import_of_a_higher_layer_is_an_arrow_up(tmp_path: pathlib.Path) -> None:
    _write(
        tmp_path,
        {
            "inference4py/__init__.py": "",
            "inference4py/errors.py": "",
            "inference4py/engine/__init__.py": "",
            "inference4py/engine/x.py": "from inference4py import errors\n",  # down: allowed
            "inference4py/tasks/__init__.py": "",
            "inference4py/tasks/t.py": "from inference4py.engine import x\n",
            "inference4py/optimize/__init__.py": "",
            "inference4py/optimize/o.py": "def f():\n    from inference4py.tasks.t import T\n",  # lazy, up
            "inference4py/elsewhere.py": "",
        },
    )
    report = measure(tmp_path)
    assert report.arrows_up == ["inference4py/optimize/o.py:2 imports inference4py.tasks.t, a higher layer"]
    assert report.unlayered == ["inference4py.elsewhere"]
