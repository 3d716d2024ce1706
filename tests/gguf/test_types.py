"""Every ggml block type kept as stored runs a whole decoder with the file's exact weights.

For each type of :data:`inference4py.gguf.blocks.LAYOUTS`, tools/random_gguf.py writes a tiny random
model with every matrix (token embedding, attention, MLP, output) in that type (run as a script, as a
user would): ``tiny`` (qwen2 layout, tied head reading the embedding's blocks) for every other type in
sorted order, ``tiny-llama`` (llama layout, separate output matrix) for the rest.  It is converted as
the file holds it (``bits=None``) and to float32 (``bits=32``, ``gguf.quants.dequantize`` of every
tensor), and:

- with float32 activations (a copy at MatMulNBits accuracy level 0) the default conversion computes
  the float32 conversion's logits (to summation order) and its greedy ids: its weights are the file's;
- its graph holds every projection on MatMulNBits at the type's width and block, the embedding as a
  gather of the table's own blocks and scales, and a tied head on those very bytes and scales;
- at the converted graph's own level 4 (int8 activations, as llama.cpp's dot products) the number of
  greedy steps agreeing with float32 is recorded (``agreement_steps_level4``), not asserted: tiny random
  models have top-2 logit margins of a few 1e-3, which int8 activations (logit errors of 1-4e-2) flip.

These are the conversions onnxruntime's own operators hold (an install without inference4py's
compiled operators: ``INFERENCE4PY_GGML_OPS=0`` here); tests/gguf/test_ggml_types.py holds the same
files on the compiled operators.

The prompt was picked among random ones so that the float32 conversions' top-2 logit margins along
their 16 greedy steps are at least 3.5e-3 for every type (the float-activation graphs' logits differ
from float32's by at most 3.1e-6) while most models still generate varied tokens.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from inference4py import OnnxTextGenerator  # noqa: E402
from inference4py.gguf.blocks import LAYOUTS  # noqa: E402
from inference4py.gguf.convert import convert_gguf  # noqa: E402
from tests.gguf.test_graph import float_activations  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "random_gguf.py"
KINDS = sorted(LAYOUTS)
SHAPE = {kind: ("tiny", "tiny-llama")[i % 2] for i, kind in enumerate(KINDS)}
TIED = {"tiny": True, "tiny-llama": False}
LAYERS = 2
PROMPT = [823, 629, 441, 514, 266, 496, 379, 247]
NEW_TOKENS = 16
LOGIT_TOLERANCE = 1e-4  # float-activation graph against float32: summation order only (seen: <= 3.1e-6)


@pytest.fixture(scope="module", autouse=True)
def onnxruntime_operators():
    """This module converts onto onnxruntime's MatMulNBits layout, as an install without a compiler does."""
    from inference4py.engine import kernels

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("INFERENCE4PY_GGML_OPS", "0")
        kernels._load.cache_clear()
        yield
    kernels._load.cache_clear()


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """``kind -> .gguf`` written by the tool, all at once (one process per file)."""
    folder = tmp_path_factory.mktemp("gguf-types")
    paths = {kind: folder / f"{SHAPE[kind]}-{kind}.gguf" for kind in KINDS}
    procs = {
        kind: subprocess.Popen(
            [sys.executable, str(SCRIPT), "--quiet", "--shape", SHAPE[kind], "--mix", kind, str(path)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for kind, path in paths.items()
    }
    for kind, proc in procs.items():
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, f"{kind}: {err}"
    return paths


class Converted:
    """One type's conversions (built on first use, once per module) and their greedy ids."""

    def __init__(self, source: Path, root: Path) -> None:
        self.source, self.root = source, root
        self._folders: dict[str, Path] = {}
        self._ids: dict[str, list[int]] = {}

    def float_activation_copy(self, folder: Path, out: Path) -> Path:
        """A copy of the default conversion whose products take float32 activations (MatMulNBits level 0)."""
        return float_activations(folder, out)

    def folder(self, which: str) -> Path:
        """``file`` (bits=None), ``float32`` (bits=32) or ``float_act`` (the file's, float32 activations)."""
        if which not in self._folders:
            if which == "float_act":
                self._folders[which] = self.float_activation_copy(self.folder("file"), self.root / "float_act")
            else:
                bits = None if which == "file" else 32
                self._folders[which] = convert_gguf(self.source, self.root / which, bits=bits)
        return self._folders[which]

    def greedy(self, which: str) -> list[int]:
        if which not in self._ids:
            with OnnxTextGenerator.builder().model_path(self.folder(which)).build() as generator:
                result = generator.generate(PROMPT, max_new_tokens=NEW_TOKENS, do_sample=False)
            self._ids[which] = [int(t) for t in result.token_ids]
        return self._ids[which]


@pytest.fixture(scope="module")
def converted(files, tmp_path_factory):
    cache: dict[str, Converted] = {}

    def get(kind: str) -> Converted:
        if kind not in cache:
            cache[kind] = Converted(files[kind], tmp_path_factory.mktemp(f"{kind}-converted"))
        return cache[kind]

    return get


def all_logits(folder: Path, ids: list[int]) -> np.ndarray:
    """``[len(ids), vocab]`` logits of one prefill of ``ids`` (every position kept)."""
    from inference4py.engine.sessions import create_session

    session = create_session(folder / "model.onnx")  # the engine's: a GGUF file's bytes read in place
    batch = np.array([ids], dtype=np.int64)
    feeds = {"input_ids": batch, "attention_mask": np.ones_like(batch), "num_logits_to_keep": np.array(0, np.int64)}
    for i in session.get_inputs():
        if i.name.startswith("past_key_values."):
            feeds[i.name] = np.zeros((1, i.shape[1], 0, i.shape[3]), np.float32)
    return session.run(["logits"], feeds)[0][0]


def agreeing_steps(got: list[int], want: list[int]) -> int:
    return next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))


@pytest.mark.parametrize("kind", KINDS)
def test_every_matrix_of_the_file_is_in_the_type(converted, kind):
    marker = json.loads((converted(kind).folder("file") / "inference4py-gguf.json").read_text())
    matrices = 7 * LAYERS + 1 + (0 if TIED[SHAPE[kind]] else 1)  # q, k, v, o, gate, up, down; embedding; output
    assert marker["tensor_types"] == {kind: matrices, "F32": marker["tensor_types"]["F32"]}
    assert marker["bits"] is None


@pytest.mark.parametrize("kind", KINDS)
def test_float_activations_compute_the_float32_conversion(converted, kind):
    """The file's blocks as stored, with float32 activations, give the dequantized model's logits and ids."""
    c = converted(kind)
    want = c.greedy("float32")
    reference = all_logits(c.folder("float32"), PROMPT + want)
    got_logits = all_logits(c.folder("float_act"), PROMPT + want)
    difference = float(np.abs(got_logits - reference).max())
    assert difference < LOGIT_TOLERANCE, f"{kind}: logits differ from float32 by {difference:.3g}"

    got = c.greedy("float_act")
    steps = reference[len(PROMPT) - 1 : len(PROMPT) - 1 + len(want)]
    top = np.sort(steps, axis=1)
    margins = top[:, -1] - top[:, -2]
    n = agreeing_steps(got, want)
    detail = f"step {n}: margin {margins[n]:.3g}" if n < len(margins) else f"lengths {len(got)} / {len(want)}"
    assert got == want, f"{kind}: greedy ids differ from float32's at {detail} (min margin {margins.min():.3g})"


@pytest.mark.parametrize("kind", KINDS)
def test_the_graph_holds_every_matrix_as_the_file_does(converted, kind):
    layout = LAYOUTS[kind]
    c = converted(kind)
    model = onnx.load(str(c.folder("file") / "model.onnx"), load_external_data=False)
    nodes = list(model.graph.node)

    def attrs(node) -> dict:
        return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}

    nbits = [n for n in nodes if n.op_type == "MatMulNBits"]
    projections = {f"model.layers.{i}.{p}" for i in range(LAYERS) for p in ("attn.qkv_proj", "attn.o_proj")}
    projections |= {f"model.layers.{i}.mlp.{p}_proj" for i in range(LAYERS) for p in ("gate_up", "down")}
    assert {n.name.removesuffix("/MatMulNBits") for n in nbits} == projections | {"lm_head"}
    assert len(nbits) == len(projections) + 1
    for node in nbits:
        a = attrs(node)
        assert (a["bits"], a["block_size"], a["accuracy_level"]) == (layout.bits, layout.block, 4), node.name
    # plain MatMuls only for the per-block minimums' small products, one per projection of a type with minimums
    minimum_products = [n.name for n in nodes if n.op_type == "MatMul"]
    assert all("/minimums/" in name for name in minimum_products), minimum_products
    assert len(minimum_products) == (len(nbits) if layout.minimum else 0)
    assert not [n.name for n in nodes if n.op_type == "Gemm"]

    # no float table: Gathers of input_ids pick the rows' blocks (uint8 codes), their scales (the very
    # initializer the head reads) and, for types that have them, the rows' per-block minimums
    row_gathers = {n.name: n for n in nodes if n.op_type == "Gather" and "input_ids" in n.input}
    expected = {"/model/embed_tokens/Gather", "/model/embed_tokens/scales/Gather"}
    expected |= {"/model/embed_tokens/minimums/Gather"} if layout.minimum else set()
    assert set(row_gathers) == expected
    codes = row_gathers["/model/embed_tokens/Gather"].input[0]
    assert codes == f"model.embed_tokens.weight_Q{layout.bits}" or codes.endswith(f"weight_Q{layout.bits}")
    scales = next(n for n in nodes if n.name == "/model/embed_tokens/scales/Gather").input[0]
    assert not [n for n in nodes if n.op_type == "GatherBlockQuantized"]
    head = next(n for n in nbits if n.name == "lm_head/MatMulNBits")
    tied = TIED[SHAPE[kind]]
    assert (head.input[1] == codes and head.input[2] == scales) is tied  # a tied head reads the embedding's bytes

    float32 = onnx.load(str(c.folder("float32") / "model.onnx"), load_external_data=False)
    assert not {n.op_type for n in float32.graph.node} & {"MatMulNBits", "GatherBlockQuantized"}


@pytest.mark.parametrize("kind", KINDS)
def test_int8_activations_agreement_is_recorded(converted, kind, record_property):
    """The converted graph as written (accuracy level 4): greedy steps agreeing with float32, and the largest
    logit difference along float32's sequence, recorded."""
    c = converted(kind)
    got, want = c.greedy("file"), c.greedy("float32")
    assert got
    error = np.abs(all_logits(c.folder("file"), PROMPT + want) - all_logits(c.folder("float32"), PROMPT + want))
    record_property("shape", SHAPE[kind])
    record_property("agreement_steps_level4", agreeing_steps(got, want))
    record_property("steps", len(want))
    record_property("max_logit_error_level4", round(float(error.max()), 4))
