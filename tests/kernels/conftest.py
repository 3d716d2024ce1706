"""The compiled operators must be there: CI builds them with ``pip install -e .``. An install made
without them on purpose (``INFERENCE4PY_NO_COMPILE=1``) skips these tests and says so."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from inference4py.engine import kernels


@pytest.fixture(scope="session")
def library() -> kernels.KernelLibrary:
    lib = kernels.kernel_library()
    if lib.path is None:
        if os.environ.get("INFERENCE4PY_NO_COMPILE"):
            pytest.skip(f"built without the compiled operators (INFERENCE4PY_NO_COMPILE): {lib.reason}")
        pytest.fail(f"the compiled ggml operators are not available: {lib.reason}")
    return lib


def cpu_isas() -> list[str]:
    """Every kernel path this CPU (and build) has: each is tested."""
    best = kernels.kernel_library().best_isa or "scalar"
    return list(kernels.ISAS[: kernels.ISAS.index(best) + 1])


@pytest.fixture(params=cpu_isas())
def isa(request: pytest.FixtureRequest, library: kernels.KernelLibrary) -> Iterator[str]:
    kernels.set_isa(request.param)
    yield request.param
    kernels.set_isa(library.best_isa or "scalar")
