"""GgmlExpertMatMul: each token's products with the experts its router chose, on the file's blocks.

Against numpy references of llama.cpp's rounding, expert by expert: the shared input (gate/up) and one
row per chosen expert (down), with and without a gate, expert rows repacked (a multiple of eight) and
not, on every kernel path the CPU has; bad ids and shapes are clear errors.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from inference4py.engine import kernels
from tests.kernels.blocks import magnitude, random_rows, reference, type_id
from tests.kernels.test_ggml_ops import TOLERANCE, _session

E, K = 5, 512


def experts_session(weights: list[tuple[str, np.ndarray]], per_slot: bool, gate: int = 0, shape3: bool = True):
    names = [f"W{i}" for i in range(len(weights))]
    attrs = {("type" if i == 0 else f"type{i}"): type_id(kind) for i, (kind, _) in enumerate(weights)}
    if gate:
        attrs["gate"] = gate
    node = helper.make_node(
        "GgmlExpertMatMul", ["X", "ids", *names], ["Y"], domain=kernels.DOMAIN, K=K, experts=E, **attrs
    )
    x_shape = ["b", "s", "k", K] if per_slot else ["b", "s", K]
    inits = []
    for name, (_, raw) in zip(names, weights):
        inits.append(numpy_helper.from_array(raw.reshape(E, -1, raw.shape[-1]) if shape3 else raw, name))
    return _session(
        [node],
        [
            helper.make_tensor_value_info("X", TensorProto.FLOAT, x_shape),
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["b", "s", "k"]),
        ],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
        inits,
    )


def _expected(
    kind: str, raw: np.ndarray, x: np.ndarray, ids: np.ndarray, per_slot: bool
) -> tuple[np.ndarray, np.ndarray]:
    """[tokens, k, n] products and the magnitude each is compared at."""
    n = raw.shape[0] // E
    tokens, slots = ids.shape
    out = np.zeros((tokens, slots, n))
    scale = np.zeros_like(out)
    for t in range(tokens):
        for j in range(slots):
            rows = raw[ids[t, j] * n : (ids[t, j] + 1) * n]
            row = x[t, j] if per_slot else x[t]
            out[t, j] = reference(kind, rows, row[None])[0]
            scale[t, j] = magnitude(kind, rows, row[None])[0]
    return out, scale


@pytest.mark.parametrize("kind,n", [("Q4_K", 24), ("Q6_K", 16), ("Q8_0", 12), ("MXFP4", 8), ("Q4_K", 20)])
@pytest.mark.parametrize("per_slot", [False, True])
@pytest.mark.parametrize("tokens", [1, 13])
def test_each_token_gets_its_chosen_experts_products(kind: str, n: int, per_slot: bool, tokens: int, isa: str) -> None:
    rng = np.random.default_rng(type_id(kind) * 7 + n + tokens + per_slot)
    raw = random_rows(kind, E * n, K, rng)
    ids = np.stack([rng.choice(E, 2, replace=False) for _ in range(tokens)])  # two distinct experts a token
    x = rng.normal(0, 1, (tokens, 2, K) if per_slot else (tokens, K)).astype(np.float32)
    y = experts_session([(kind, raw)], per_slot).run(None, {"X": x[None], "ids": ids[None]})[0]
    assert y.shape == (1, tokens, 2, n)
    want, scale = _expected(kind, raw, x, ids, per_slot)
    assert (np.abs(y[0] - want) / scale).max() < TOLERANCE, f"{kind} on {isa}"


@pytest.mark.parametrize("shape3", [True, False])
def test_a_gated_product_is_silu_of_the_gate_times_up(shape3: bool, isa: str) -> None:
    rng = np.random.default_rng(3)
    n, tokens = 16, 9
    g_raw, u_raw = random_rows("Q4_K", E * n, K, rng), random_rows("Q4_K", E * n, K, rng)
    ids = rng.integers(0, E, (tokens, 3))
    x = rng.normal(0, 1, (tokens, K)).astype(np.float32)
    y = experts_session([("Q4_K", g_raw), ("Q4_K", u_raw)], False, gate=1, shape3=shape3)
    got = y.run(None, {"X": x[None], "ids": ids[None]})[0][0]
    g, _ = _expected("Q4_K", g_raw, x, ids, False)
    u, _ = _expected("Q4_K", u_raw, x, ids, False)
    want = g / (1 + np.exp(-g)) * u
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_an_expert_id_out_of_range_is_a_clear_error(library: kernels.KernelLibrary) -> None:
    raw = random_rows("Q4_K", E * 8, K, np.random.default_rng(0))
    session = experts_session([("Q4_K", raw)], False)
    with pytest.raises(Exception, match=r"expert id 5 is outside \[0, 5\)"):
        session.run(None, {"X": np.zeros((1, 1, K), np.float32), "ids": np.array([[[0, 5]]], np.int64)})


def test_an_input_of_the_wrong_shape_is_a_clear_error(library: kernels.KernelLibrary) -> None:
    raw = random_rows("Q4_K", E * 8, K, np.random.default_rng(0))
    session = experts_session([("Q4_K", raw)], True)
    with pytest.raises(Exception, match="GgmlExpertMatMul input X has shape"):
        session.run(None, {"X": np.zeros((1, 2, 3, K), np.float32), "ids": np.zeros((1, 2, 2), np.int64)})
