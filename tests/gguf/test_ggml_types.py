"""Every ggml block type on inference4py's compiled operators: the GGUF file's own bytes, in place.

The same random files as tests/gguf/test_types.py (every matrix of a tiny model in one type),
converted at the default width with the compiled operators there:

- the graph holds every matrix as a ``GgmlMatMul`` / ``GgmlGather`` input whose external data is
  the GGUF file itself at the tensor's offset (the folder holds no weight bytes);
- with float32 activations (``float_activations=1`` on every product) it computes the float32
  conversion's logits (to summation order) and greedy ids: its weights are the file's;
- with llama.cpp's activation rounding (the graph as written) the greedy steps agreeing with float32
  are recorded, not asserted (tiny random models have top-2 margins that 8-bit activations flip);
- a file changed or moved after conversion is a clear error, and the cache converts again.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
onnx = pytest.importorskip("onnx")

from inference4py import OnnxTextGenerator  # noqa: E402
from inference4py.engine.kernels import DOMAIN, kernel_library  # noqa: E402
from inference4py.engine.sessions import create_session  # noqa: E402
from inference4py.errors import ModelLoadError  # noqa: E402
from inference4py.gguf.convert import gguf_folder  # noqa: E402
from tests.gguf import test_types as types  # noqa: E402
from tests.gguf.test_types import (  # noqa: E402
    KINDS,
    LOGIT_TOLERANCE,
    PROMPT,
    SHAPE,
    TIED,
    agreeing_steps,
    all_logits,
    files,  # noqa: E402,F401  (the same random files)
)


@pytest.fixture(scope="module", autouse=True)
def compiled_operators() -> None:
    if not kernel_library().available:
        if os.environ.get("INFERENCE4PY_NO_COMPILE"):
            pytest.skip(f"built without the compiled operators: {kernel_library().reason}")
        pytest.fail(f"the compiled ggml operators are not available: {kernel_library().reason}")


def float_activation_copy(folder: Path, out: Path) -> Path:
    """A copy of a converted folder whose products take float32 activations (the weights untouched)."""
    shutil.copytree(folder, out)
    model = onnx.load(str(out / "model.onnx"), load_external_data=False)
    for node in model.graph.node:
        if node.op_type == "GgmlMatMul":
            node.attribute.append(onnx.helper.make_attribute("float_activations", 1))
    (out / "model.onnx").write_bytes(model.SerializeToString())
    return out


class Converted(types.Converted):
    """The same conversions on the compiled operators; float activations set on every GgmlMatMul."""

    def float_activation_copy(self, folder: Path, out: Path) -> Path:
        return float_activation_copy(folder, out)


@pytest.fixture(scope="module")
def converted(files, tmp_path_factory):  # noqa: F811
    cache: dict[str, Converted] = {}

    def get(kind: str) -> Converted:
        if kind not in cache:
            cache[kind] = Converted(files[kind], tmp_path_factory.mktemp(f"{kind}-ggml"))
        return cache[kind]

    return get


@pytest.mark.parametrize("kind", KINDS)
def test_every_matrix_is_the_files_own_bytes_in_place(converted, kind):
    c = converted(kind)
    folder = c.folder("file")
    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    nodes = list(model.graph.node)
    assert not [n for n in nodes if n.op_type in ("MatMulNBits", "MatMul", "Gemm")]
    products = [n for n in nodes if n.op_type == "GgmlMatMul" and n.domain == DOMAIN]
    assert len(products) == 4 * 2 + 1  # qkv, o, gate_up, down per layer; the head
    gather = next(n for n in nodes if n.op_type == "GgmlGather")
    head = next(n for n in products if n.name.startswith("lm_head"))
    assert (head.input[1] == gather.input[0]) is TIED[SHAPE[kind]]  # a tied head reads the embedding's bytes

    reader = gguf.GGUFReader(str(c.source))
    spans = {t.name: (int(t.data_offset), int(t.n_bytes)) for t in reader.tensors}
    external = {t.name: {e.key: e.value for e in t.external_data} for t in model.graph.initializer if t.external_data}
    matrices = {t.name for t in reader.tensors if len(t.shape) > 1}
    assert set(external) == matrices
    for name, entry in external.items():
        assert entry["location"] == c.source.name
        assert (int(entry["offset"]), int(entry["length"])) == spans[name]
    # the folder holds no weight bytes: the graph and what the file does not hold
    assert not (folder / "model.onnx.data").exists()
    record = json.loads((folder / "inference4py-weights.json").read_text())
    assert record["file"] == str(c.source.resolve())
    assert sum(p.stat().st_size for p in folder.iterdir()) < 0.5 * c.source.stat().st_size + (1 << 20)


@pytest.mark.parametrize("kind", KINDS)
def test_float_activations_compute_the_float32_conversion(converted, kind):
    c = converted(kind)
    want = c.greedy("float32")
    reference = all_logits(c.folder("float32"), PROMPT + want)
    got = all_logits(c.folder("float_act"), PROMPT + want)
    difference = float(np.abs(got - reference).max())
    assert difference < LOGIT_TOLERANCE, f"{kind}: logits differ from float32 by {difference:.3g}"
    assert c.greedy("float_act") == want


@pytest.mark.parametrize("kind", KINDS)
def test_llama_cpp_rounding_agreement_is_recorded(converted, kind, record_property):
    c = converted(kind)
    got, want = c.greedy("file"), c.greedy("float32")
    assert got
    error = np.abs(all_logits(c.folder("file"), PROMPT + want) - all_logits(c.folder("float32"), PROMPT + want))
    assert error.max() < 0.5  # 8-bit activations move logits by ~1e-2, a wrong weight by far more
    record_property("agreement_steps_q8", agreeing_steps(got, want))
    record_property("max_logit_error_q8", round(float(error.max()), 4))


def test_a_changed_or_moved_file_is_a_clear_error_and_the_cache_converts_again(files, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv("INFERENCE4PY_CACHE", str(tmp_path / "cache"))
    source = tmp_path / "model.gguf"
    shutil.copy(files["Q4_K"], source)
    folder = gguf_folder(source)
    assert folder.name.endswith("-file-ggml")
    create_session(folder / "model.onnx")

    moved = tmp_path / "elsewhere.gguf"
    source.rename(moved)
    with pytest.raises(ModelLoadError, match="is gone or moved since it was converted"):
        create_session(folder / "model.onnx")
    again = gguf_folder(moved)  # same bytes, new place: the graph is written again, pointing there
    assert json.loads((again / "inference4py-weights.json").read_text())["file"] == str(moved.resolve())
    create_session(again / "model.onnx")

    os.utime(moved, ns=(0, 0))
    with pytest.raises(ModelLoadError, match="changed since it was converted"):
        create_session(again / "model.onnx")


def test_without_the_library_a_file_converts_onto_onnxruntimes_operators_and_says_why(
    files,  # noqa: F811
    tmp_path,
    monkeypatch,
    caplog,
):
    from inference4py.engine import kernels

    monkeypatch.setenv("INFERENCE4PY_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("INFERENCE4PY_GGML_OPS", "0")
    kernels._load.cache_clear()
    kernels._say_once.cache_clear()
    try:
        with caplog.at_level("WARNING", logger="inference4py.kernels"):
            folder = gguf_folder(files["Q4_K"])
        assert folder.name.endswith("-file")
        said = [r.getMessage() for r in caplog.records if "GGUF files run on" in r.getMessage()]
        assert len(said) == 1 and "MatMulNBits" in said[0] and "INFERENCE4PY_GGML_OPS=0" in said[0]
        model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
        assert {n.op_type for n in model.graph.node} >= {"MatMulNBits"}
        assert not (folder / "inference4py-weights.json").exists()
        with OnnxTextGenerator.builder().model_path(folder).build() as generator:
            assert generator.generate(PROMPT, max_new_tokens=4, do_sample=False).token_ids
    finally:
        monkeypatch.delenv("INFERENCE4PY_GGML_OPS")
        kernels._load.cache_clear()
