"""The weight-free ONNX signature reader agrees with onnxruntime on every fixture graph."""

from __future__ import annotations

import onnxruntime as ort
import pytest

from inference4py.engine.graph_io import has_op, read_graph_io
from inference4py.engine.sessions import graph_inputs, graph_outputs
from tests.conftest import MODELS

GRAPHS = sorted(MODELS.glob("*/*.onnx"))


@pytest.mark.parametrize("path", GRAPHS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_same_inputs_and_outputs_as_onnxruntime(path):
    io = read_graph_io(path)
    assert io is not None
    inputs, outputs = io
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert inputs == graph_inputs(session)  # names, order, dtypes and declared shapes
    expected = graph_outputs(session)
    assert list(outputs) == list(expected)
    assert all(
        outputs[n].dtype == expected[n].dtype and len(outputs[n].shape) == len(expected[n].shape) for n in outputs
    )


def test_unreadable_files_give_none(tmp_path):
    (tmp_path / "empty.onnx").write_bytes(b"")
    (tmp_path / "junk.onnx").write_bytes(b"\xff\xff\xff\xff not protobuf")
    (tmp_path / "text.onnx").write_text("version https://git-lfs.github.com/spec/v1\noid sha256:abc\n")
    for name in ("empty.onnx", "junk.onnx", "text.onnx", "missing.onnx"):
        assert read_graph_io(tmp_path / name) is None


def test_has_op_scans_the_bytes(tmp_path):
    path = next(p for p in GRAPHS if p.stat().st_size > 0)
    assert has_op(path, b"MatMul") or has_op(path, b"Gemm")
    assert not has_op(path, b"NoSuchOperatorAnywhere")
    assert not has_op(tmp_path / "missing.onnx", b"MatMul")
    (tmp_path / "empty.onnx").write_bytes(b"")
    assert not has_op(tmp_path / "empty.onnx", b"MatMul")
