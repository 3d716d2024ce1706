"""Finding the library: which path runs, why not, and the switches."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from inference4py.engine import kernels
from inference4py.errors import ConfigurationError


@pytest.fixture
def fresh_load(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    kernels._load.cache_clear()
    yield
    monkeypatch.undo()  # the environment as it was, before the library is found again
    kernels._load.cache_clear()
    best = kernels.kernel_library().best_isa
    if best is not None:
        kernels.set_isa(best)


def test_the_library_asks_no_newer_api_than_the_runtime_serves(library: kernels.KernelLibrary) -> None:
    assert library.api_version is not None and library.api_version <= kernels._runtime_api_version()
    assert library.isa in kernels.ISAS and "compiled ggml operators" in library.describe()


def test_turned_off_says_why(monkeypatch: pytest.MonkeyPatch, fresh_load: None) -> None:
    monkeypatch.setenv("INFERENCE4PY_GGML_OPS", "0")
    lib = kernels.kernel_library()
    assert lib.path is None and "INFERENCE4PY_GGML_OPS=0" in (lib.reason or "")
    assert "MatMulNBits" in lib.describe()


def test_a_runtime_older_than_the_library_is_refused(monkeypatch: pytest.MonkeyPatch, fresh_load: None) -> None:
    monkeypatch.setattr(kernels.ort, "__version__", "1.17.0")
    lib = kernels.kernel_library()
    assert lib.path is None
    assert "needs onnxruntime's C API version 18" in (lib.reason or "") and "pip install -U onnxruntime" in (
        lib.reason or ""
    )


def test_a_library_built_from_other_sources_is_refused(monkeypatch: pytest.MonkeyPatch, fresh_load: None) -> None:
    """A stale build (say, one without GgmlExpertMatMul) would fail inside onnxruntime: it is refused first."""
    monkeypatch.setattr(kernels, "OPS_VERSION", kernels.OPS_VERSION + 1)
    lib = kernels.kernel_library()
    assert lib.path is None
    assert f"needs version {kernels.OPS_VERSION}" in (lib.reason or "") and "pip install -e ." in (lib.reason or "")


def test_a_forced_path_the_cpu_lacks_is_an_error(monkeypatch: pytest.MonkeyPatch, fresh_load: None) -> None:
    monkeypatch.setenv("INFERENCE4PY_GGML_ISA", "neon")
    with pytest.raises(ConfigurationError, match="INFERENCE4PY_GGML_ISA=neon cannot run here"):
        kernels.kernel_library()


def test_a_forced_path_is_used(monkeypatch: pytest.MonkeyPatch, fresh_load: None) -> None:
    monkeypatch.setenv("INFERENCE4PY_GGML_ISA", "scalar")
    assert kernels.kernel_library().isa == "scalar"


def test_a_library_named_by_the_environment_must_exist(
    monkeypatch: pytest.MonkeyPatch, fresh_load: None, tmp_path
) -> None:
    monkeypatch.setenv("INFERENCE4PY_GGML_LIBRARY", str(tmp_path / "missing.so"))
    with pytest.raises(ConfigurationError, match="INFERENCE4PY_GGML_LIBRARY=.*missing.so is not a file"):
        kernels.kernel_library()
