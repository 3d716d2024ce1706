"""GgmlMatMul and GgmlGather on random blocks of every type, on every kernel path the CPU has.

With llama.cpp's activation rounding the product equals a numpy reference of the same rounding
(the integer block sums are exact, so what is left is float32 summation: 1e-5 of ``|x| @ |W|``;
one wrong code or scale is orders of magnitude more); with float activations it equals
``dequantize(W) @ x``; the gather equals gguf's dequantize bit for bit.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from inference4py.engine import kernels
from tests.kernels.blocks import TYPES, dequantize, magnitude, random_rows, reference, type_id

TOLERANCE = 1e-5


def _session(nodes: list, inputs: list, outputs: list, initializers: list) -> ort.InferenceSession:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=initializers)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(kernels.DOMAIN, 1)]
    )
    model.ir_version = 10
    options = ort.SessionOptions()
    assert kernels.register_kernels(options)
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def matmul(
    weights: list[tuple[str, np.ndarray]], k: int, *, float_activations: int = 0, gate: int = 0
) -> ort.InferenceSession:
    names = [f"W{i}" for i in range(len(weights))]
    attrs = {("type" if i == 0 else f"type{i}"): type_id(kind) for i, (kind, _) in enumerate(weights)}
    if gate:
        attrs["gate"] = gate
    node = helper.make_node(
        "GgmlMatMul", ["X", *names], ["Y"], domain=kernels.DOMAIN, K=k, float_activations=float_activations, **attrs
    )
    return _session(
        [node],
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", "seq", k])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(raw, name) for name, (_, raw) in zip(names, weights)],
    )


@pytest.mark.parametrize("kind", TYPES)
@pytest.mark.parametrize("rows", [1, 5, 11])
def test_matmul_with_llama_cpp_rounding_equals_the_reference(kind: str, rows: int, isa: str) -> None:
    rng = np.random.default_rng(type_id(kind) * 10 + rows)
    k, n = 512, 40  # 40 rows: the last task holds a partial group of rows
    raw = random_rows(kind, n, k, rng)
    x = rng.normal(0, 1, (1, rows, k)).astype(np.float32)
    x[0, 0, 256:288] = 0  # an all-zero block rounds to zero codes and a zero scale
    y = matmul([(kind, raw)], k).run(None, {"X": x})[0]
    assert y.shape == (1, rows, n)
    error = np.abs(y[0] - reference(kind, raw, x[0])) / magnitude(kind, raw, x[0])
    assert error.max() < TOLERANCE, f"{kind} on {isa}: {error.max():.2e}"


@pytest.mark.parametrize("kind", TYPES)
def test_matmul_with_float_activations_equals_dequantized_weights(kind: str, library: kernels.KernelLibrary) -> None:
    rng = np.random.default_rng(type_id(kind))
    k, n = 512, 24
    raw = random_rows(kind, n, k, rng)
    x = rng.normal(0, 1, (2, 3, k)).astype(np.float32)
    y = matmul([(kind, raw)], k, float_activations=1).run(None, {"X": x})[0]
    expected = x.astype(np.float64) @ dequantize(kind, raw).astype(np.float64).T
    scale = np.abs(x.astype(np.float64)) @ np.abs(dequantize(kind, raw).astype(np.float64)).T
    assert (np.abs(y - expected) / scale).max() < TOLERANCE


@pytest.mark.parametrize("kind", TYPES)
def test_every_path_equals_the_scalar_path(kind: str, isa: str) -> None:
    rng = np.random.default_rng(7 + type_id(kind))
    k, n = 768, 33
    raw = random_rows(kind, n, k, rng)
    x = rng.normal(0, 1, (1, 3, k)).astype(np.float32)
    session = matmul([(kind, raw)], k)
    y = session.run(None, {"X": x})[0]
    kernels.set_isa("scalar")
    scalar = session.run(None, {"X": x})[0]
    kernels.set_isa(isa)
    assert (np.abs(y - scalar)[0] / magnitude(kind, raw, x[0])).max() < TOLERANCE


def test_three_weights_of_different_types_side_by_side(isa: str) -> None:
    """q, k, v of a Q4_K_M file: Q4_K, Q4_K and Q6_K rows in one product, outputs in order."""
    rng = np.random.default_rng(3)
    k = 256
    parts = [("Q4_K", random_rows("Q4_K", 32, k, rng)), ("Q4_K", random_rows("Q4_K", 8, k, rng))]
    parts.append(("Q6_K", random_rows("Q6_K", 8, k, rng)))
    x = rng.normal(0, 1, (1, 2, k)).astype(np.float32)
    y = matmul(parts, k).run(None, {"X": x})[0]
    assert y.shape == (1, 2, 48)
    start = 0
    for kind, raw in parts:
        part = y[0, :, start : start + raw.shape[0]]
        assert (np.abs(part - reference(kind, raw, x[0])) / magnitude(kind, raw, x[0])).max() < TOLERANCE
        start += raw.shape[0]


@pytest.mark.parametrize("gate", [1, 2])
@pytest.mark.parametrize("rows", [1, 6, 11])
def test_a_gated_product_is_the_activation_of_the_gate_times_up(gate: int, rows: int, isa: str) -> None:
    """An MLP's gate and up in one product (of different types): silu(g) * u, or gelu_tanh(g) * u."""
    rng = np.random.default_rng(gate * 10 + rows)
    k, n = 256, 40
    parts = [("Q4_K", random_rows("Q4_K", n, k, rng)), ("Q6_K", random_rows("Q6_K", n, k, rng))]
    x = rng.normal(0, 1, (1, rows, k)).astype(np.float32)
    y = matmul(parts, k, gate=gate).run(None, {"X": x})[0]
    assert y.shape == (1, rows, n)
    g, u = (reference(kind, raw, x[0]) for kind, raw in parts)
    silu = g / (1 + np.exp(-g))
    gelu_tanh = 0.5 * g * (1 + np.tanh(np.sqrt(2 / np.pi) * (g + 0.044715 * g**3)))
    act = silu if gate == 1 else gelu_tanh
    np.testing.assert_allclose(y[0], act * u, rtol=1e-4, atol=1e-4 * np.abs(act * u).max())


def test_a_gated_product_needs_two_weights_of_equal_rows(library: kernels.KernelLibrary) -> None:
    rng = np.random.default_rng(0)
    parts = [("Q4_K", random_rows("Q4_K", 8, 256, rng)), ("Q4_K", random_rows("Q4_K", 16, 256, rng))]
    with pytest.raises(Exception, match="gated activation takes two weights of equal rows"):
        matmul(parts, 256, gate=1).run(None, {"X": np.zeros((1, 1, 256), np.float32)})


def gather(kind: str, raw: np.ndarray, k: int) -> ort.InferenceSession:
    node = helper.make_node("GgmlGather", ["W", "ids"], ["Y"], domain=kernels.DOMAIN, type=type_id(kind), K=k)
    return _session(
        [node],
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(raw, "W")],
    )


@pytest.mark.parametrize("kind", TYPES)
def test_gather_equals_gguf_dequantize_bit_for_bit(kind: str, library: kernels.KernelLibrary) -> None:
    rng = np.random.default_rng(11 + type_id(kind))
    raw = random_rows(kind, 50, 512, rng)
    ids = np.array([[0, 49, 7], [7, 3, 12]], dtype=np.int64)
    y = gather(kind, raw, 512).run(None, {"ids": ids})[0]
    assert y.shape == (2, 3, 512)
    np.testing.assert_array_equal(y, dequantize(kind, raw)[ids])


# ------------------------------------------------------------------ bad input: clear errors, never a crash
def test_an_input_of_the_wrong_width_is_a_clear_error(library: kernels.KernelLibrary) -> None:
    raw = random_rows("Q4_K", 8, 256, np.random.default_rng(0))
    node = helper.make_node("GgmlMatMul", ["X", "W"], ["Y"], domain=kernels.DOMAIN, type=type_id("Q4_K"), K=256)
    session = _session(
        [node],
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(raw, "W")],
    )
    with pytest.raises(Exception, match=r"GgmlMatMul input X has shape \[1, 300\], its last axis must be K=256"):
        session.run(None, {"X": np.zeros((1, 300), np.float32)})


def test_weights_of_the_wrong_size_are_a_clear_error(library: kernels.KernelLibrary) -> None:
    raw = random_rows("Q4_K", 8, 512, np.random.default_rng(0))  # rows of 512 values, said to be 256
    with pytest.raises(Exception, match=r"weight 0 of type Q4_K has shape \[8, 288\], expected \[rows, 144\]"):
        matmul([("Q4_K", raw)], 256).run(None, {"X": np.zeros((1, 1, 256), np.float32)})


def test_a_type_the_library_lacks_is_a_clear_error(library: kernels.KernelLibrary) -> None:
    raw = np.zeros((4, 64), np.uint8)
    node = helper.make_node("GgmlMatMul", ["X", "W"], ["Y"], domain=kernels.DOMAIN, type=19, K=256)  # IQ1_S
    with pytest.raises(Exception, match="type=19 is not a ggml type this library holds"):
        _session(
            [node],
            [helper.make_tensor_value_info("X", TensorProto.FLOAT, None)],
            [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
            [numpy_helper.from_array(raw, "W")],
        )


def test_a_token_id_outside_the_table_is_a_clear_error(library: kernels.KernelLibrary) -> None:
    raw = random_rows("Q8_0", 10, 64, np.random.default_rng(0))
    with pytest.raises(Exception, match="token id 10 is outside the embedding table's 10 rows"):
        gather("Q8_0", raw, 64).run(None, {"ids": np.array([[1, 10]], np.int64)})
