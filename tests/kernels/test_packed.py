"""Q4_K, Q6_K, Q4_0, Q4_1, Q5_0, Q8_0 and MXFP4 weights repacked eight rows at a time (csrc/ggml_ops/repack.cpp) for the SIMD kernels.

A weight whose rows are a multiple of eight is rearranged the first time its operator runs; the
product must equal the numpy reference of llama.cpp's rounding and the same session built with
``INFERENCE4PY_GGML_REPACK=0`` (the file's rows as stored), for every tile of activation rows and on
every kernel path the CPU has. A GgmlGather of the same constant (a tied embedding table) reads its rows
back from the copy and must still equal gguf's dequantize bit for bit.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from tests.kernels.blocks import magnitude, random_rows, reference, type_id
from tests.kernels.test_ggml_ops import TOLERANCE, matmul


@pytest.mark.parametrize("kind", ["Q4_K", "Q6_K", "Q4_0", "Q4_1", "Q5_0", "Q8_0", "MXFP4"])
@pytest.mark.parametrize("rows", [1, 4, 9, 19])
def test_repacked_rows_equal_the_reference_and_the_rows_as_stored(
    kind: str, rows: int, isa: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(type_id(kind) * 100 + rows)
    k, n = 768, 56  # seven groups of eight rows, over tasks of sixteen: the last task holds one group
    raw = random_rows(kind, n, k, rng)
    x = rng.normal(0, 1, (1, rows, k)).astype(np.float32)
    packed = matmul([(kind, raw)], k)
    y = packed.run(None, {"X": x})[0]
    assert np.array_equal(packed.run(None, {"X": x})[0], y)  # the packed copy is made once and kept
    monkeypatch.setenv("INFERENCE4PY_GGML_REPACK", "0")
    stored = matmul([(kind, raw)], k).run(None, {"X": x})[0]
    scale = magnitude(kind, raw, x[0])
    assert (np.abs(y[0] - reference(kind, raw, x[0])) / scale).max() < TOLERANCE
    assert (np.abs(y[0] - stored[0]) / scale).max() < TOLERANCE


def test_a_weight_of_rows_not_a_multiple_of_eight_is_read_as_stored(isa: str) -> None:
    rng = np.random.default_rng(5)
    k, n = 256, 44
    raw = random_rows("Q4_K", n, k, rng)
    x = rng.normal(0, 1, (1, 3, k)).astype(np.float32)
    y = matmul([("Q4_K", raw)], k).run(None, {"X": x})[0]
    assert (np.abs(y[0] - reference("Q4_K", raw, x[0])) / magnitude("Q4_K", raw, x[0])).max() < TOLERANCE


def _input_weight_session(n: int, k: int):
    """A GgmlMatMul whose Q4_K weight is a graph input (not a constant initializer)."""
    from onnx import TensorProto, helper

    from inference4py.engine import kernels
    from tests.kernels.test_ggml_ops import _session

    node = helper.make_node("GgmlMatMul", ["X", "W"], ["Y"], domain=kernels.DOMAIN, K=k, type=type_id("Q4_K"))
    return _session(
        [node],
        [
            helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 1, k]),
            helper.make_tensor_value_info("W", TensorProto.UINT8, [n, None]),
        ],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
        [],
    )


def _error(y: np.ndarray, raw: np.ndarray, x: np.ndarray) -> float:
    return float((np.abs(y[0] - reference("Q4_K", raw, x[0])) / magnitude("Q4_K", raw, x[0])).max())


def test_a_weight_fed_as_an_input_is_read_as_it_comes_every_run(isa: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a constant initializer is repacked: a weight fed as a graph input may change between runs, even
    in place at the same address, and each run reads what the buffer then holds (the rows as stored)."""
    rng = np.random.default_rng(1)
    k, n = 256, 16
    a, b, c = (random_rows("Q4_K", n, k, rng) for _ in range(3))
    x = rng.normal(0, 1, (1, 1, k)).astype(np.float32)
    session = _input_weight_session(n, k)
    buffer = a.copy()
    assert _error(session.run(None, {"X": x, "W": buffer})[0], a, x) < TOLERANCE
    buffer[:] = b  # the same address, other rows
    assert _error(session.run(None, {"X": x, "W": buffer})[0], b, x) < TOLERANCE
    y = session.run(None, {"X": x, "W": c})[0]
    assert _error(y, c, x) < TOLERANCE
    monkeypatch.setenv("INFERENCE4PY_GGML_REPACK", "0")
    assert np.array_equal(_input_weight_session(n, k).run(None, {"X": x, "W": c})[0], y)  # the stored rows' path


def test_a_constant_mapped_from_a_file_is_repacked_and_the_file_left_as_it_was(tmp_path, isa: str) -> None:
    """onnxruntime maps a constant's external data from its file; the repacked copy replaces those pages in
    memory (they are given back) and the file's bytes are never written."""
    from onnx import TensorProto, helper

    from inference4py.engine import kernels
    from inference4py.engine.file_weights import FOLDER_CONFIG

    rng = np.random.default_rng(2)
    k, n = 256, 8 * 64
    stored = random_rows("Q4_K", n, k, rng)
    path = tmp_path / "weights.bin"
    path.write_bytes(stored.tobytes())
    weight = TensorProto(name="W", data_type=TensorProto.UINT8, dims=stored.shape)
    weight.data_location = TensorProto.EXTERNAL
    for key, value in (("location", path.name), ("offset", "0"), ("length", str(stored.nbytes))):
        weight.external_data.add(key=key, value=value)
    node = helper.make_node("GgmlMatMul", ["X", "W"], ["Y"], domain=kernels.DOMAIN, K=k, type=type_id("Q4_K"))
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 1, k])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
        [weight],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(kernels.DOMAIN, 1)]
    )
    model.ir_version = 10
    options = ort.SessionOptions()
    assert kernels.register_kernels(options)
    options.add_session_config_entry(FOLDER_CONFIG, str(tmp_path))
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    x = rng.normal(0, 1, (1, 1, k)).astype(np.float32)
    y = session.run(None, {"X": x})[0]
    assert _error(y, stored, x) < TOLERANCE
    assert np.array_equal(session.run(None, {"X": x})[0], y)  # the copy, made once and kept
    assert path.read_bytes() == stored.tobytes()


def _tied_session(kind: str, raw: np.ndarray, k: int) -> ort.InferenceSession:
    """One constant table read by a GgmlMatMul (an output head) and a GgmlGather (the embedding lookup)."""
    from onnx import TensorProto, helper, numpy_helper

    from inference4py.engine import kernels
    from tests.kernels.test_ggml_ops import _session

    head = helper.make_node("GgmlMatMul", ["X", "W"], ["Y"], domain=kernels.DOMAIN, K=k, type=type_id(kind))
    lookup = helper.make_node("GgmlGather", ["W", "ids"], ["E"], domain=kernels.DOMAIN, K=k, type=type_id(kind))
    return _session(
        [head, lookup],
        [
            helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 1, k]),
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"]),
        ],
        [
            helper.make_tensor_value_info("Y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("E", TensorProto.FLOAT, None),
        ],
        [numpy_helper.from_array(raw, "W")],
    )


@pytest.mark.parametrize("kind", ["Q4_K", "Q6_K", "Q4_0", "Q4_1", "Q5_0", "Q8_0", "MXFP4"])
def test_a_tied_table_gathers_its_rows_from_the_repacked_copy_bit_for_bit(kind: str, isa: str) -> None:
    """A tied output head repacks the table and gives the file's pages back; the embedding lookup then reads
    its rows from that copy, back in the file's layout, and must give gguf's values to the bit. The first run
    makes the copy; the second run's gather finds it."""
    from tests.kernels.blocks import dequantize
    from tests.kernels.test_ggml_ops import gather

    rng = np.random.default_rng(type_id(kind) + 40)
    k, n = 768, 64  # eight groups of eight rows
    raw = random_rows(kind, n, k, rng)
    ids = np.concatenate([[0, n - 1, 9, 9], rng.permutation(n), rng.integers(0, n, 12)]).reshape(4, -1)
    x = rng.normal(0, 1, (1, 1, k)).astype(np.float32)
    session = _tied_session(kind, raw, k)
    expected = dequantize(kind, raw)[ids]
    for _ in range(2):
        y, e = session.run(None, {"X": x, "ids": ids})
        assert np.array_equal(e, expected)
    assert np.array_equal(gather(kind, raw, k).run(None, {"ids": ids})[0], e)
    assert (np.abs(y[0] - reference(kind, raw, x[0])) / magnitude(kind, raw, x[0])).max() < TOLERANCE
