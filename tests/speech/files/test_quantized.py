"""Whisper's quantized matrices on the compiled operators: whisper.cpp's q8_0 blocks and CTranslate2's int8 rows.

Three conversions of each quantized fixture are compared:

* ``ops``: the default where the operator library is built: ``GgmlMatMul`` over the blocks, activations
  rounded per block as whisper.cpp's CPU backend rounds them (q8_0 for these files);
* ``exact``: the same graph with ``float_activations=1`` on every product (float32 activations times the
  blocks' numbers), which must be the float graph up to float32 summation order;
* ``float``: the conversion without the operators (``INFERENCE4PY_GGML_OPS=0``), today's float32 graph,
  whose ids are transformers' on the file's numbers (tests/speech/files/test_ct2.py).

The fixtures are tiny random models (d_model 32): their logits have near ties (top-2 margins down to
2e-4), so rounding the activations changes some greedy choices.  Where the ``ops`` ids differ from the
float graph's, the test checks that the difference is such a near tie (see
:func:`test_where_rounding_changes_a_token_it_is_a_near_tie`), not that there is none.
"""

from __future__ import annotations

import contextlib
import functools
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from inference4py import WhisperSpeechModel  # noqa: E402
from inference4py.audio import SAMPLE_RATE, load_audio, log_mel_spectrogram  # noqa: E402
from inference4py.engine import kernels  # noqa: E402
from inference4py.engine.kernels import DOMAIN, kernel_library  # noqa: E402
from inference4py.engine.sessions import create_session  # noqa: E402
from inference4py.speech.files import convert_whisper, whisper_folder  # noqa: E402
from inference4py.speech.files.ct2 import read_ct2  # noqa: E402
from inference4py.speech.files.quantized import unit_q8_0  # noqa: E402
from tests.conftest import FIXTURES, load_reference  # noqa: E402

VARIANTS = load_reference("whisper_files")["variants"]
QUANTIZED = ("ct2-int8", "ggml-q8_0")
Q8_0_ROUNDING = 1 / 254  # q8_0 moves each activation by at most half a step of its block's max / 127


@pytest.fixture(scope="module", autouse=True)
def _library() -> None:
    import os

    if not kernel_library().available:
        if os.environ.get("INFERENCE4PY_NO_COMPILE"):
            pytest.skip(f"built without the compiled operators: {kernel_library().reason}")
        pytest.fail(f"the compiled ggml operators are not available: {kernel_library().reason}")


@contextlib.contextmanager
def float_path() -> Iterator[None]:
    """Conversions and sessions as on an install without the operator library."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("INFERENCE4PY_GGML_OPS", "0")
        kernels._load.cache_clear()
        try:
            yield
        finally:
            kernels._load.cache_clear()
    kernels._load.cache_clear()


@functools.cache
def clips() -> dict[str, np.ndarray]:
    return {name: load_audio(FIXTURES / info["file"]) for name, info in load_reference("whisper")["clips"].items()}


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    """(variant, "ops" | "exact" | "float") -> a converted folder with the fixture's generation config."""
    root = tmp_path_factory.mktemp("quantized")
    made: dict[tuple[str, str], Path] = {}
    for variant in QUANTIZED:
        source = FIXTURES / VARIANTS[variant]["path"]
        made[variant, "ops"] = convert_whisper(source, root / f"{variant}-ops")
        with float_path():
            made[variant, "float"] = convert_whisper(source, root / f"{variant}-float")
        exact = made[variant, "exact"] = root / f"{variant}-exact"
        shutil.copytree(made[variant, "ops"], exact)
        for file in ("encoder_model.onnx", "decoder_model_merged.onnx"):
            model = onnx.load(str(exact / file), load_external_data=False)
            for node in model.graph.node:
                if node.op_type == "GgmlMatMul":
                    node.attribute.append(onnx.helper.make_attribute("float_activations", 1))
            (exact / file).write_bytes(model.SerializeToString())
        for kind in ("ops", "float", "exact"):  # the fixture's suppress list (see test_ct2.py)
            (made[variant, kind] / "generation_config.json").write_text(
                json.dumps(VARIANTS[variant]["generation_config"])
            )
    return made


def _graph(folder: Path, file: str, *, data: bool = False):
    return onnx.load(str(folder / file), load_external_data=data).graph


def _array(graph, name: str) -> np.ndarray:
    (init,) = [i for i in graph.initializer if i.name == name]
    return onnx.numpy_helper.to_array(init)


class _Runner:
    """The encoder and decoder of one folder, run directly: encoder outputs and one position's logits."""

    def __init__(self, folder: Path) -> None:
        self.encoder = create_session(folder / "encoder_model.onnx")
        self.decoder = create_session(folder / "decoder_model_merged.onnx")
        self.n_mels = json.loads((folder / "preprocessor_config.json").read_text())["feature_size"]
        self._encoded: dict[str, dict[str, np.ndarray]] = {}

    def encode(self, clip: str) -> dict[str, np.ndarray]:
        if clip not in self._encoded:
            features = log_mel_spectrogram(clips()[clip], self.n_mels)[None].astype(np.float32)
            names = [o.name for o in self.encoder.get_outputs()]
            self._encoded[clip] = dict(zip(names, self.encoder.run(None, {"input_features": features})))
        return self._encoded[clip]

    def logits(self, clip: str, ids: list[int]) -> np.ndarray:
        """The logits after ``ids`` (the whole prefix fed at once, no cache) ``[vocab]``."""
        encoded = self.encode(clip)
        feeds: dict[str, np.ndarray] = {"input_ids": np.asarray([ids], dtype=np.int64)}
        for info in self.decoder.get_inputs()[1:]:
            if ".encoder." in info.name:
                feeds[info.name] = encoded[info.name.replace("past_key_values", "present")]
            else:  # no past tokens
                feeds[info.name] = np.zeros((1, info.shape[1], 0, info.shape[3]), dtype=np.float32)
        return self.decoder.run(["logits"], feeds)[0][0, -1]


def _prompt(variant: str, language: str, timestamps: bool) -> list[int]:
    g = VARIANTS[variant]["generation_config"]
    ids = [g["decoder_start_token_id"], g["lang_to_id"][f"<|{language}|>"], g["task_to_id"]["transcribe"]]
    return ids if timestamps else [*ids, g["no_timestamps_token_id"]]


def _bounds(folder: Path) -> tuple[float, float]:
    """How far activation rounding may move the encoder's output and the logits, relative to their largest value.

    Each product's input moves by at most 1/254 of its block's largest value; to first order those
    relative errors add along the longest chain of products: 4 per encoder layer (q/k/v, out, fc1, fc2)
    to the encoder's output; then the cross keys/values, 6 per decoder layer and the head to the logits.
    """
    config = json.loads((folder / "config.json").read_text())
    encoder = 4 * config["encoder_layers"]
    return encoder * Q8_0_ROUNDING, (encoder + 1 + 6 * config["decoder_layers"] + 1) * Q8_0_ROUNDING


def _transcribe(model: WhisperSpeechModel, case: dict):
    s = case["settings"]
    return model.transcribe(
        (clips()[case["clip"]], SAMPLE_RATE),
        language=s.get("language"),
        timestamps=s.get("return_timestamps", False),
        max_new_tokens=s["max_new_tokens"],
    )


# --------------------------------------------------------------------------- the graphs


def test_a_ggml_files_quantized_matrices_are_its_own_blocks(folders):
    folder = folders["ggml-q8_0", "ops"]
    blob = (FIXTURES / VARIANTS["ggml-q8_0"]["path"]).read_bytes()

    def stored(name: str, rows: int, cols: int) -> bytes:  # a tensor's bytes follow its name in the file
        start = blob.index(name.encode()) + len(name)
        return blob[start : start + rows * cols // 32 * 34]

    d = json.loads((folder / "config.json").read_text())["d_model"]
    for file in ("encoder_model.onnx", "decoder_model_merged.onnx"):
        graph = _graph(folder, file, data=True)
        types = {i.name: i.data_type for i in graph.initializer}
        products = [n for n in graph.node if n.op_type == "GgmlMatMul"]
        assert products and all(n.domain == DOMAIN for n in products)
        for node in products:
            assert types[node.input[1]] == onnx.TensorProto.UINT8, node.name
            attrs = {a.name: a.i for a in node.attribute}
            assert attrs["type"] == 8 and "float_activations" not in attrs  # Q8_0, activations rounded
        # no float copy: the float path's Cast / Mul of the blocks' codes is gone, only the conv weights (f16) remain
        assert {n.input[0] for n in graph.node if n.op_type == "Cast"} <= {
            "encoder.conv1.weight",
            "encoder.conv2.weight",
        }
        assert not [t for t in graph.initializer if t.data_type == onnx.TensorProto.INT8]
    graph = _graph(folder, "decoder_model_merged.onnx", data=True)
    fc1 = _array(graph, "decoder.layers.0.fc1.weight")
    assert fc1.dtype == np.uint8 and fc1.tobytes() == stored("decoder.blocks.0.mlp.0.weight", fc1.shape[0], d)
    qkv = _array(graph, "decoder.layers.1.attn.qkv.weight")
    parts = [stored(f"decoder.blocks.1.attn.{p}.weight", d, d) for p in ("query", "key", "value")]
    assert qkv.shape == (3 * d, d // 32 * 34) and qkv.tobytes() == b"".join(parts)
    # the embedding table: one initializer, the lookup's and the tied head's
    table = [i for i in graph.initializer if i.name.startswith("decoder.embeddings")]
    assert [t.name for t in table] == ["decoder.embeddings"]
    vocab = json.loads((folder / "config.json").read_text())["vocab_size"]
    assert _array(graph, "decoder.embeddings").tobytes() == stored("decoder.token_embedding.weight", vocab, d)
    users = {n.op_type for n in graph.node if "decoder.embeddings" in n.input}
    assert users == {"GgmlGather", "GgmlMatMul"}
    marker = json.loads((folder / "inference4py-whisper.json").read_text())
    assert marker["operators"].startswith("inference4py ggml")


def test_ctranslate2_int8_rows_are_q8_0_blocks_of_scale_one_then_divided(folders):
    folder = folders["ct2-int8", "ops"]
    ct2 = read_ct2(FIXTURES / VARIANTS["ct2-int8"]["path"] / "model.bin")
    graph = _graph(folder, "decoder_model_merged.onnx", data=True)
    for ours, theirs in (
        ("decoder.layers.0.fc1.weight", "decoder/layer_0/ffn/linear_0/weight"),
        ("decoder.layers.1.attn.qkv.weight", "decoder/layer_1/self_attention/linear_0/weight"),
        ("decoder.embeddings", "decoder/embeddings/weight"),
        ("decoder.projection", "decoder/projection/weight"),
    ):
        codes = ct2.variables[theirs]
        blocks = _array(graph, ours).reshape(codes.shape[0], -1, 34)
        assert (blocks[:, :, :2].view("<f2") == 1.0).all() and blocks[0, 0, :2].tobytes() == b"\x00\x3c"
        assert np.array_equal(blocks[:, :, 2:].view(np.int8).reshape(codes.shape), codes)
        divisor = _array(graph, f"{ours}/divisor")
        assert np.array_equal(divisor, ct2.variables[theirs + "_scale"])
    fc1 = next(n for n in graph.node if n.op_type == "GgmlMatMul" and n.input[1] == "decoder.layers.0.fc1.weight")
    (div,) = [n for n in graph.node if fc1.output[0] in n.input]
    assert div.op_type == "Div" and div.input[1] == "decoder.layers.0.fc1.weight/divisor"
    gather = next(n for n in graph.node if n.op_type == "GgmlGather")
    assert gather.input[0] == "decoder.embeddings"
    (div,) = [n for n in graph.node if gather.output[0] in n.input]  # the lookup's rows divided by their divisors
    assert div.op_type == "Div"
    assert not [t for t in graph.initializer if t.data_type == onnx.TensorProto.INT8]


def test_the_d_one_trick_is_exact_with_float_activations(tmp_path):
    """GgmlMatMul over codes in Q8_0 blocks of scale 1.0, then Div by the row divisors, is ``(codes / divisor) @ x``."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(7)
    rows, cols = 40, 96
    codes = rng.integers(-127, 128, size=(rows, cols), dtype=np.int8)
    divisor = rng.uniform(20.0, 400.0, size=rows).astype(np.float32)
    x = rng.standard_normal((3, 5, cols)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("GgmlMatMul", ["x", "w"], ["y"], domain=DOMAIN, type=8, K=cols, float_activations=1),
            helper.make_node("Div", ["y", "divisor"], ["out"]),
        ],
        "d_one",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5, cols])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [3, 5, rows])],
        initializer=[
            onnx.numpy_helper.from_array(unit_q8_0(codes), "w"),
            onnx.numpy_helper.from_array(divisor, "divisor"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(DOMAIN, 1)])
    model.ir_version = 10
    onnx.save(model, str(tmp_path / "d_one.onnx"))
    (out,) = create_session(tmp_path / "d_one.onnx").run(None, {"x": x})
    want = x.astype(np.float64) @ (codes.astype(np.float64) / divisor.astype(np.float64)[:, None]).T
    # float32 sums of 96 products of |x| <~ 4 and |code / divisor| <~ 6: a few ulp of the row's magnitude
    scale = np.abs(x).astype(np.float64) @ np.abs(codes.astype(np.float64) / divisor[:, None]).T
    assert np.all(np.abs(out - want) <= 1e-6 * scale + 1e-7)


@pytest.mark.parametrize("variant", ["ggml-f16", "ct2-float16"])
def test_a_file_with_no_quantized_matrix_records_no_need_for_the_operators(variant, tmp_path):
    """The marker's ``operators`` (the model card's "loads only where ... built") says what the graphs need."""
    folder = convert_whisper(FIXTURES / VARIANTS[variant]["path"], tmp_path / variant)
    for file in ("encoder_model.onnx", "decoder_model_merged.onnx"):
        assert not [n for n in _graph(folder, file).node if n.domain == DOMAIN]
    assert json.loads((folder / "inference4py-whisper.json").read_text())["operators"] == "onnxruntime"


# --------------------------------------------------------------------------- the numbers


@pytest.mark.parametrize("variant", QUANTIZED)
def test_with_float_activations_the_operator_graph_is_the_float_graph(variant, folders):
    """Everything but the activation rounding is the float graph's arithmetic: ids are transformers' own."""
    exact, floating = _Runner(folders[variant, "exact"]), _Runner(folders[variant, "float"])
    for clip in clips():
        ours, theirs = exact.encode(clip), floating.encode(clip)
        for name, want in theirs.items():
            np.testing.assert_allclose(ours[name], want, rtol=0, atol=2e-5 * np.abs(want).max(), err_msg=name)
        prompt = _prompt(variant, "en", timestamps=False)
        want = floating.logits(clip, prompt)
        np.testing.assert_allclose(exact.logits(clip, prompt), want, rtol=0, atol=2e-5 * np.abs(want).max())
    with WhisperSpeechModel.builder().model_path(folders[variant, "exact"]).build() as model:
        for case in VARIANTS[variant]["cases"]:
            assert list(_transcribe(model, case).token_ids) == case["token_ids"], case["name"]


@pytest.mark.parametrize("variant", QUANTIZED)
def test_activation_rounding_moves_the_numbers_within_its_bound(variant, folders):
    """Encoder output and logits (along each case's reference tokens) of the default graph against the float one."""
    ops, floating = _Runner(folders[variant, "ops"]), _Runner(folders[variant, "float"])
    encoder_bound, logits_bound = _bounds(folders[variant, "float"])
    worst = {"encoder": 0.0, "logits": 0.0}
    for clip in clips():
        want = floating.encode(clip)["last_hidden_state"]
        moved = np.abs(ops.encode(clip)["last_hidden_state"] - want).max() / np.abs(want).max()
        worst["encoder"] = max(worst["encoder"], moved)
    for case in VARIANTS[variant]["cases"]:
        if "language" not in case["settings"]:
            continue  # the detected language's prompt: test_where_rounding_changes_a_token_it_is_a_near_tie
        ids = _prompt(variant, "en", case["settings"].get("return_timestamps", False)) + case["token_ids"]
        for end in range(4, min(len(ids), 12) + 1):
            want = floating.logits(case["clip"], ids[:end])
            moved = np.abs(ops.logits(case["clip"], ids[:end]) - want).max() / np.abs(want).max()
            worst["logits"] = max(worst["logits"], moved)
    print(f"{variant}: {worst}")
    assert worst["encoder"] <= encoder_bound and worst["logits"] <= logits_bound, (worst, encoder_bound, logits_bound)
    assert worst["encoder"] > 0 and worst["logits"] > 0  # the activations are rounded: not the float graph


@pytest.mark.parametrize("variant", QUANTIZED)
def test_where_rounding_changes_a_token_it_is_a_near_tie(variant, folders):
    """Transcriptions with the default graph against the float one: equal ids, or, at the first difference,
    both graphs' logits within the rounding bound and (without timestamps, where only suppress lists act)
    the float graph's own margin between the two choices within twice that bound.

    With timestamps the choice also passes through the timestamp rule (the timestamps' total probability
    against the best text token), whose flip this test does not recompute; the logits are still held to
    the bound there.
    """
    g = VARIANTS[variant]["generation_config"]
    ops, floating = _Runner(folders[variant, "ops"]), _Runner(folders[variant, "float"])
    _, bound = _bounds(folders[variant, "float"])
    differing = []
    with (
        WhisperSpeechModel.builder().model_path(folders[variant, "ops"]).build() as ours,
        WhisperSpeechModel.builder().model_path(folders[variant, "float"]).build() as theirs,
    ):
        for case in VARIANTS[variant]["cases"]:
            timestamps = case["settings"].get("return_timestamps", False)
            a, b = ([], [])
            for seq, model in ((a, ours), (b, theirs)):  # prompt, generated ids, <|endoftext|> if it ended so
                result = _transcribe(model, case)
                seq += _prompt(variant, result.language, timestamps) + list(result.token_ids)
                seq += [g["eos_token_id"]] if len(result.token_ids) < case["settings"]["max_new_tokens"] else []
            if a == b:
                continue
            at = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
            differing.append(f"{case['name']}@{at}")
            want = floating.logits(case["clip"], b[:at])
            got = ops.logits(case["clip"], b[:at])
            scale = np.abs(want).max()
            assert np.abs(got - want).max() <= bound * scale, case["name"]
            if not timestamps or at == 1:  # at 1: the language, an argmax over the language tokens
                assert 0 <= want[b[at]] - want[a[at]] <= 2 * bound * scale, case["name"]
    print(f"{variant}: ids differ from the float graph's in {differing or 'no case'}")


# --------------------------------------------------------------------------- without the library


def test_without_the_library_the_graphs_are_todays_and_it_is_said_once(tmp_path, caplog):
    kernels._say_once.cache_clear()
    with float_path(), caplog.at_level("WARNING", logger="inference4py.kernels"):
        folders = [whisper_folder(FIXTURES / VARIANTS[v]["path"]) for v in QUANTIZED]
        again = whisper_folder(FIXTURES / VARIANTS["ggml-q8_0"]["path"])
        assert again == folders[1]
        case = VARIANTS["ct2-int8"]["cases"][0]
        with WhisperSpeechModel.builder().model_path(folders[0]).build() as model:
            assert list(_transcribe(model, case).token_ids) == case["token_ids"]
    said = [r.getMessage() for r in caplog.records if "widened to float32" in r.getMessage()]
    assert len(said) == 1 and "INFERENCE4PY_GGML_OPS=0" in said[0]
    for folder in folders:
        assert folder.name.endswith("-file")
        for file in ("encoder_model.onnx", "decoder_model_merged.onnx"):
            model = onnx.load(str(folder / file), load_external_data=False)
            assert not [n for n in model.graph.node if n.domain == DOMAIN]
            assert DOMAIN not in {o.domain for o in model.opset_import}
        graph = _graph(folder, "decoder_model_merged.onnx")
        types = {i.name: i.data_type for i in graph.initializer}
        assert types["decoder.layers.0.fc1.weight"] == onnx.TensorProto.INT8  # codes, widened at load
        marker = json.loads((folder / "inference4py-whisper.json").read_text())
        assert marker["operators"] == "onnxruntime"
    # with the library, the same file has another cache folder: neither is ever loaded where it cannot run
    with_ops = whisper_folder(FIXTURES / VARIANTS["ggml-q8_0"]["path"])
    assert with_ops.name.endswith("-file-ggml") and with_ops.parent == folders[1].parent and with_ops != folders[1]
