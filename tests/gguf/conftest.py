"""Fixtures of the GGUF tests: the fixture files converted onto the compiled operators."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import FIXTURES


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], tuple[Path, Path]]:
    """``compiled(file)`` -> (the folder gguf_folder writes on the compiled operators for a file of
    tests/fixtures/gguf, a copy of it whose products all take float32 activations)."""
    import onnx

    from inference4py.engine.kernels import kernel_library
    from inference4py.gguf.convert import gguf_folder

    if not kernel_library().available:
        if os.environ.get("INFERENCE4PY_NO_COMPILE"):
            pytest.skip(f"built without the compiled operators: {kernel_library().reason}")
        pytest.fail(f"the compiled ggml operators are not available: {kernel_library().reason}")
    cache = tmp_path_factory.mktemp("compiled-cache")
    made: dict[str, tuple[Path, Path]] = {}

    def get(name: str) -> tuple[Path, Path]:
        if name not in made:
            with pytest.MonkeyPatch.context() as mp:
                mp.setenv("INFERENCE4PY_CACHE", str(cache))
                folder = gguf_folder(FIXTURES / "gguf" / name)
            exact = cache / f"{name}-float-activations"
            shutil.copytree(folder, exact)
            model = onnx.load(str(exact / "model.onnx"), load_external_data=False)
            for node in model.graph.node:
                if node.domain == "ai.inference4py" and node.op_type != "GgmlGather":
                    node.attribute.append(onnx.helper.make_attribute("float_activations", 1))
            (exact / "model.onnx").write_bytes(model.SerializeToString())
            made[name] = (folder, exact)
        return made[name]

    return get
