"""A GGUF weight runs as the file holds it: every block type, checked against the gguf package.

Each ggml block type is written into a small GGUF file as raw blocks (random codes, finite
scales), converted by the graph builder at the default width (``bits=None``), and the operator is
run on identity inputs: the weights onnxruntime applies must equal ``gguf.quants.dequantize`` of
the file's bytes exactly (bit for bit, but for the sign of a zero, which a sum of products loses).  ``MatMulNBits`` runs with float32 activations here (accuracy level
0): the converted graph's level 4 rounds the activations to 8 bits, never the weights.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402

from inference4py.errors import UnsupportedModelError  # noqa: E402
from inference4py.gguf.blocks import LAYOUTS, block_bytes, unpack  # noqa: E402
from inference4py.gguf.graph import Part, _Builder  # noqa: E402
from inference4py.gguf.reader import GGUFFile  # noqa: E402
from inference4py.gguf.store import ExternalData  # noqa: E402
from tests.kernels.blocks import SCALE_FIELDS as _F16_FIELDS  # noqa: E402  (byte offsets of the float16 scales)

ROWS, COLS = 48, 512


def random_blocks(kind: str, rows: int, cols: int, seed: int = 0) -> np.ndarray:
    """``[rows, bytes per row]`` of ``kind`` blocks: random codes, scales of magnitude ~1e-2 (some negative)."""
    rng = np.random.default_rng(seed)
    values, size = block_bytes(kind)
    raw = rng.integers(0, 256, size=(rows * cols // values, size), dtype=np.uint8)
    for offset in _F16_FIELDS.get(kind, ()):
        scales = (rng.uniform(0.002, 0.02, raw.shape[0]) * rng.choice([-1, 1], raw.shape[0])).astype(np.float16)
        raw[:, offset : offset + 2] = scales.view(np.uint8).reshape(-1, 2)
    if kind == "MXFP4":  # shared exponents near 2 ** -6
        raw[:, 0] = rng.integers(118, 124, raw.shape[0])
    return raw.reshape(rows, -1)


def write_tensor_file(path: Path, tensors: dict[str, tuple[str, np.ndarray, tuple[int, int]]]) -> Path:
    """A GGUF file holding ``name -> (ggml type, raw bytes or float array, (rows, cols) for the reader)``."""
    writer = gguf.GGUFWriter(str(path), "llama")
    for name, (kind, data, _shape) in tensors.items():
        qtype = gguf.GGMLQuantizationType[kind]
        if kind in ("F32", "F16"):
            writer.add_tensor(name, data)
        else:
            writer.add_tensor(name, data, raw_dtype=qtype)  # the element shape follows from the bytes
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def dequantized(kind: str, raw: np.ndarray, rows: int, cols: int) -> np.ndarray:
    return np.asarray(gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[kind]), np.float32).reshape(rows, cols)


def run_graph(b: _Builder, folder: Path, inputs: list, output: str, feeds: dict, *, float_activations: bool) -> Any:
    b.store.close()
    for node in b.nodes:
        if node.op_type == "MatMulNBits" and float_activations:
            for attr in node.attribute:
                if attr.name == "accuracy_level":
                    attr.i = 0
    graph = helper.make_graph(
        b.nodes, "t", inputs, [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)], b.initializers
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    )
    model.ir_version = 10
    (folder / "model.onnx").write_bytes(model.SerializeToString())
    session = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    return session.run([output], feeds)[0]


@pytest.mark.parametrize("kind", sorted(LAYOUTS))
def test_unpacked_blocks_equal_the_gguf_dequantization_bit_for_bit(kind):
    raw = random_blocks(kind, ROWS, COLS)
    blocks = unpack(kind, raw)
    weights = np.repeat(blocks.scales, blocks.block, axis=1) * blocks.codes.astype(np.float32)
    if blocks.minimums is not None:
        weights = weights + np.repeat(blocks.minimums, blocks.block, axis=1)
    reference = dequantized(kind, raw, ROWS, COLS)
    assert np.isfinite(reference).all()
    np.testing.assert_array_equal(weights.view(np.uint32), reference.view(np.uint32))
    layout = LAYOUTS[kind]
    stored = blocks.codes + layout.offset
    assert stored.min() >= 0 and stored.max() < 2**layout.bits  # the codes fit the operator's width


@pytest.mark.parametrize("kind", sorted(LAYOUTS))
def test_matmulnbits_applies_exactly_the_weights_the_file_holds(kind, tmp_path):
    raw = random_blocks(kind, ROWS, COLS, seed=1)
    path = write_tensor_file(tmp_path / "w.gguf", {"w": (kind, raw, (ROWS, COLS))})
    folder = tmp_path / "out"
    folder.mkdir()
    b = _Builder(GGUFFile(path), None, ExternalData(folder))
    y = b.linear("x", [Part("w")], "w")
    assert any(node.op_type == "MatMulNBits" for node in b.nodes)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, COLS, COLS])
    applied = run_graph(b, folder, [x], y, {"x": np.eye(COLS, dtype=np.float32)[None]}, float_activations=True)
    reference = dequantized(kind, raw, ROWS, COLS)
    # equal as numbers, bit for bit but for the sign of a zero weight (a sum of products cannot carry it)
    np.testing.assert_array_equal(applied[0].T, reference)


@pytest.mark.parametrize("kind", sorted(LAYOUTS))
def test_the_embedding_table_is_read_from_the_files_blocks_exactly(kind, tmp_path):
    raw = random_blocks(kind, ROWS, COLS, seed=2)
    path = write_tensor_file(tmp_path / "e.gguf", {"token_embd.weight": (kind, raw, (ROWS, COLS))})
    folder = tmp_path / "out"
    folder.mkdir()
    b = _Builder(GGUFFile(path), None, ExternalData(folder))
    table = b.quantized([Part("token_embd.weight")], kind, "embed")
    y = b.embedding(table, "ids", "/embed")
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, [1, ROWS])
    order = np.random.default_rng(3).permutation(ROWS)
    rows = run_graph(b, folder, [ids], y, {"ids": order[None].astype(np.int64)}, float_activations=True)
    reference = dequantized(kind, raw, ROWS, COLS)[order]
    np.testing.assert_array_equal(rows[0].view(np.uint32), reference.view(np.uint32))


def test_rows_of_two_types_become_two_products_side_by_side(tmp_path):
    """Q4_K_M keeps attn_v in Q6_K beside Q4_K q/k: each part keeps its own format."""
    q, v = random_blocks("Q4_K", 32, 256, seed=4), random_blocks("Q6_K", 16, 256, seed=5)
    path = write_tensor_file(tmp_path / "qv.gguf", {"q": ("Q4_K", q, (32, 256)), "v": ("Q6_K", v, (16, 256))})
    folder = tmp_path / "out"
    folder.mkdir()
    b = _Builder(GGUFFile(path), None, ExternalData(folder))
    y = b.linear("x", [Part("q"), Part("v")], "qv")
    assert sum(node.op_type == "MatMulNBits" for node in b.nodes) == 2
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256, 256])
    applied = run_graph(b, folder, [x], y, {"x": np.eye(256, dtype=np.float32)[None]}, float_activations=True)
    reference = np.concatenate([dequantized("Q4_K", q, 32, 256), dequantized("Q6_K", v, 16, 256)])
    np.testing.assert_array_equal(applied[0].T, reference)


def test_a_type_with_no_exact_operator_is_refused_with_the_ways_out(tmp_path):
    rng = np.random.default_rng(6)
    raw = rng.integers(0, 256, size=(4, 256 // 256 * 66), dtype=np.uint8)  # TQ2_0: 66 bytes per 256 values
    path = write_tensor_file(tmp_path / "t.gguf", {"w": ("TQ2_0", raw, (4, 256))})
    folder = tmp_path / "out"
    folder.mkdir()
    b = _Builder(GGUFFile(path), None, ExternalData(folder))
    with pytest.raises(UnsupportedModelError, match=r"TQ2_0.*Q4_K.*--bits 32"):
        b.linear("x", [Part("w")], "w")
    b.store.close()
    lossless = _Builder(GGUFFile(path), 32, ExternalData(tmp_path))  # an explicit float width reads it
    lossless.linear("x", [Part("w")], "w")
    lossless.store.close()


@pytest.mark.parametrize("bits", [4, 8])
def test_a_lossy_width_asked_for_rounds_each_block_once_symmetrically(bits, tmp_path):
    """bits=4 / 8 (only when asked): onnxruntime's symmetric blocks of 32 of the dequantized rows; the
    stored blocks are within a step of each weight, and the product uses exactly them."""
    rng = np.random.default_rng(7)
    weight = rng.normal(size=(48, 64)).astype(np.float32)  # [out, in]: 2 blocks of 32 per row
    path = write_tensor_file(tmp_path / "f.gguf", {"w": ("F32", weight, (48, 64))})
    folder = tmp_path / "out"
    folder.mkdir()
    b = _Builder(GGUFFile(path), bits, ExternalData(folder))
    y = b.linear("x", [Part("w")], "w")
    x = rng.normal(size=(1, 3, 64)).astype(np.float32)
    got = run_graph(
        b,
        folder,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 64])],
        y,
        {"x": x},
        float_activations=True,
    )
    model = onnx.load(str(folder / "model.onnx"))  # with its external data
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    packed, scales = inits[f"w.weight_Q{bits}"], inits["w.weight_scales"].reshape(48, 2)
    if bits == 4:
        q = np.stack([packed & 0x0F, packed >> 4], axis=-1).reshape(48, 2, 32).astype(np.float32) - 8
    else:
        q = packed.reshape(48, 2, 32).astype(np.float32) - 128
    stored = (q * scales[:, :, None]).reshape(48, 64)
    assert np.abs(stored - weight).max() <= np.abs(weight).max() / (2 ** (bits - 1) - 1)  # one step at most
    np.testing.assert_allclose(got[0], x[0] @ stored.T, rtol=1e-4, atol=1e-4)
