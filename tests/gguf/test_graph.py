"""The GGUF graph builder (inference4py.gguf.graph): greedy parity with transformers on tiny GGUFs.

tools/fixtures/gguf_models.py writes tiny llama / qwen2 / qwen3 / mistral / gemma3 decoders as
llama.cpp files in F32, F16 and Q8_0 and records transformers' greedy ids on each (transformers
loads the GGUF, dequantized).  Each file is converted here, saved as an ordinary model folder
(model.onnx + external data, config.json, the fixture's tokenizer) and run through the library's
normal load path; the ids must equal the reference up to its first near-tie (every case has none).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("gguf")
onnx = pytest.importorskip("onnx")

from inference4py import OnnxTextGenerator  # noqa: E402
from inference4py.engine.pipeline import load_pipeline  # noqa: E402
from inference4py.errors import ConfigurationError, UnsupportedModelError  # noqa: E402
from inference4py.gguf.graph import unpermute, write_decoder  # noqa: E402
from inference4py.gguf.reader import GGUFFile  # noqa: E402
from tests.conftest import FIXTURES  # noqa: E402

GGUF_DIR = FIXTURES / "gguf"
REF = json.loads((GGUF_DIR / "graph-references.json").read_text(encoding="utf-8"))
MODELS: dict[str, Any] = REF["models"]
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model")


def build(name: str, bits: int | None, folder: Path) -> tuple[Any, dict[str, Any]]:
    """Write ``name``'s decoder at ``bits`` into ``folder``: (its graph without the weights, config)."""
    folder.mkdir(parents=True, exist_ok=True)
    config = write_decoder(GGUFFile(GGUF_DIR / name), folder, bits)
    return onnx.load(str(folder / "model.onnx"), load_external_data=False), config


def write_folder(name: str, bits: int | None, folder: Path, entry: dict[str, Any]) -> Path:
    """A model folder as the converter writes it: graph with external data, config, tokenizer."""
    _, config = build(name, bits, folder)
    (folder / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    eos = entry["eos_token_id"]
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": eos, "pad_token_id": eos[0]}))
    source = FIXTURES / entry["tokenizer_folder"]
    for name in _TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copy(source / name, folder / name)
    return folder


_cache: dict[tuple[str, int | None], Path] = {}


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """``converted(file, bits)`` -> the folder of that conversion (built once per module)."""

    def get(name: str, bits: int | None) -> Path:
        key = (name, bits)
        if key not in _cache:
            _cache[key] = write_folder(name, bits, tmp_path_factory.mktemp(f"{name}-{bits}"), MODELS[name])
        return _cache[key]

    return get


_generators: dict[Path, OnnxTextGenerator] = {}


def generator(folder: Path) -> OnnxTextGenerator:
    if folder not in _generators:
        _generators[folder] = OnnxTextGenerator.builder().model_path(folder).build()
    return _generators[folder]


def greedy(folder: Path, case: dict[str, Any]) -> list[int]:
    result = generator(folder).generate(case["prompt_ids"], max_new_tokens=case["max_new_tokens"], do_sample=False)
    return list(result.token_ids)


def cases(types: tuple[str, ...] = ("F32", "F16", "Q8_0")):
    for name, entry in MODELS.items():
        if entry["type"] in types:
            for case in entry["cases"]:
                yield pytest.param(name, case, id=f"{name.removeprefix('model-').removesuffix('.gguf')}-{case['name']}")


def test_the_fixtures_cover_every_architecture_and_type():
    assert {(m["architecture"], m["type"]) for m in MODELS.values()} == {
        (a, t)
        for a in ("llama", "qwen2", "qwen3", "mistral", "phi3", "gemma2", "gemma3")
        for t in ("F32", "F16", "Q8_0")
    }
    for name, entry in MODELS.items():
        assert (GGUF_DIR / name).stat().st_size < 500_000
        for case in entry["cases"]:
            assert case["stable_prefix"] == len(case["output_ids"]), f"{name} {case['name']} has a near-tie"
    for gemma in ("model-gemma2-F32.gguf", "model-gemma3-F32.gguf"):
        long = next(c for c in MODELS[gemma]["cases"] if c["name"] == "long")
        assert long["window_acts"] and long["full_attention_ids"] != long["output_ids"]


@pytest.mark.parametrize("name,case", list(cases()))
def test_bits32_greedy_ids_equal_transformers_on_the_gguf(converted, name, case):
    assert greedy(converted(name, 32), case) == case["output_ids"]


@pytest.mark.parametrize("name,case", list(cases(("F16",))))
def test_bits16_of_an_f16_file_is_exact(converted, name, case):
    assert greedy(converted(name, 16), case) == case["output_ids"]


@pytest.mark.parametrize("name", [n for n, m in MODELS.items() if m["type"] == "F32"])
def test_bits16_of_an_f32_file_stays_close(converted, name):
    """float16 rounding of float32 weights: the same ids on these margins (>= 1e-3 each step)."""
    for case in MODELS[name]["cases"]:
        got = greedy(converted(name, 16), case)
        assert got[:5] == case["output_ids"][:5], case["name"]


def _agreement(folder: Path, entry: dict[str, Any]) -> float:
    agree = total = 0
    for case in entry["cases"]:
        got, want = greedy(folder, case), case["output_ids"]
        n = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        agree, total = agree + n, total + len(want)
    return agree / total


def _logits(folder: Path, prompt_ids: list[int], keep: int = 0) -> np.ndarray:
    """``[kept, vocab]`` logits of a prefill (``keep``: the graph's num_logits_to_keep, 0 for all)."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    ids = np.array([prompt_ids], dtype=np.int64)
    feeds: dict[str, np.ndarray] = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    feeds["num_logits_to_keep"] = np.array(keep, dtype=np.int64)
    for i in session.get_inputs():
        if i.name.startswith("past_key_values."):
            feeds[i.name] = np.zeros((1, i.shape[1], 0, i.shape[3]), np.float32)
    return session.run(["logits"], feeds)[0][0]


def _last_logits(folder: Path, prompt_ids: list[int]) -> np.ndarray:
    return _logits(folder, prompt_ids)[-1]


@pytest.mark.parametrize("name,bits", [("F32", 32), ("F32", 16), ("F32", 8), ("F32", 4), ("Q8_0", None)])
def test_the_head_computes_the_positions_asked_for_with_the_same_last_logits(name, bits, tmp_path):
    """num_logits_to_keep = 1 gives the whole prompt's last logits bit for bit; a MatMulNBits head
    (whose one-row kernel differs) keeps two rows, a float head one."""
    name = next(n for n, m in MODELS.items() if m["type"] == name)
    build(name, bits, tmp_path)
    model = tmp_path
    prompt = MODELS[name]["cases"][0]["prompt_ids"]
    assert len(prompt) > 2
    every = _logits(model, prompt)
    last = _logits(model, prompt, keep=1)
    assert every.shape[0] == len(prompt)
    assert last.shape[0] == (1 if bits in (16, 32) else 2)
    assert np.array_equal(last[-1], every[-1])
    assert np.array_equal(_logits(model, prompt, keep=3), every[-3:])


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("name", [n for n, m in MODELS.items() if m["type"] == "F32"])
def test_bits8_and_bits4_run_and_their_agreement_is_recorded(converted, name, bits, record_property):
    """MatMulNBits (blocks of 32, requantized from the dequantized weights).

    These tiny random models (weights of std 0.3, margins of 0.01-0.2 between the two best
    tokens) amplify weight noise: 8 bits moves their logits by 2-5% of their range, 4 bits by far
    more, so greedy ids are not compared step by step here (the real-tier test compares them on
    real checkpoints).  Recorded: the share of reference steps agreeing before the first
    difference.  8 bits must stay within 10% of the logits' range.
    """
    folder = converted(name, bits)
    entry = MODELS[name]
    rate = _agreement(folder, entry)
    record_property(f"agreement_bits{bits}", rate)
    if bits == 8:
        prompt = entry["cases"][0]["prompt_ids"]
        exact = _last_logits(converted(name, 32), prompt)
        approx = _last_logits(converted(name, 8), prompt)
        assert np.abs(approx - exact).max() < 0.1 * np.abs(exact).max()


def test_the_folder_loads_as_a_shared_buffer_genai_layout(converted):
    folder = converted("model-gemma3-F32.gguf", 32)
    spec = load_pipeline(folder)
    assert spec.has("decoder")
    runtime = generator(folder)._runtime
    assert runtime.shared_kv  # GroupQueryAttention: one pre-allocated past/present buffer
    graph = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    names = [i.name for i in graph.graph.input]
    assert names[:2] == ["input_ids", "attention_mask"] and "past_key_values.5.value" in names
    gqa = [n for n in graph.graph.node if n.op_type == "GroupQueryAttention"]
    windows = [next(a.i for a in n.attribute if a.name == "local_window_size") for n in gqa]
    assert windows == [48, 48, 48, 48, 48, -1]  # llama.cpp's Gemma 3: five local layers, one global
    caches = [n.input[7] for n in gqa]
    assert caches == ["cos_cache_local"] * 5 + ["cos_cache"]


def test_gemma2_soft_caps_attention_and_logits(tmp_path):
    model, config = build("model-gemma2-F32.gguf", 32, tmp_path)
    assert (config["attn_logit_softcapping"], config["final_logit_softcapping"]) == (50.0, 30.0)
    gqa = [n for n in model.graph.node if n.op_type == "GroupQueryAttention"]
    assert [next(a.f for a in n.attribute if a.name == "softcap") for n in gqa] == [50.0] * 4
    assert [next(a.i for a in n.attribute if a.name == "local_window_size") for n in gqa] == [48, -1, 48, -1]
    assert [n.op_type for n in model.graph.node][-3:] == ["Div", "Tanh", "Mul"]
    assert model.graph.node[-1].output[0] == "logits"


def test_config_describes_the_graph(tmp_path):
    _, config = build("model-gemma3-Q8_0.gguf", 32, tmp_path / "gemma3")
    assert config["model_type"] == "gemma3_text" and config["architectures"] == ["Gemma3ForCausalLM"]
    assert (config["num_hidden_layers"], config["num_attention_heads"], config["num_key_value_heads"]) == (6, 2, 1)
    assert (config["head_dim"], config["sliding_window"], config["tie_word_embeddings"]) == (16, 48, True)
    assert config["rope_local_base_freq"] == 10_000.0 and config["query_pre_attn_scalar"] == 16
    _, config = build("model-qwen2-F32.gguf", 32, tmp_path / "qwen2")
    assert config["model_type"] == "qwen2" and config["tie_word_embeddings"] is False
    assert config["vocab_size"] == GGUFFile(GGUF_DIR / "model-qwen2-F32.gguf").info("token_embd.weight").shape[0]


def test_int4_graph_uses_matmulnbits_and_keeps_the_embedding_float(tmp_path):
    model, _ = build("model-llama-Q8_0.gguf", 4, tmp_path)
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("MatMulNBits") == 4 * 2 + 1  # qkv, o_proj, gate + up, down in each of 2 layers + lm_head
    assert "MatMul" not in ops
    embed = next(t for t in model.graph.initializer if t.name == "model.embed_tokens.weight")
    assert embed.data_type == onnx.TensorProto.FLOAT


def test_unpermute_inverts_llama_cpps_permutation():
    w = np.arange(2 * 8 * 3, dtype=np.float32).reshape(16, 3)
    heads = 2
    permuted = w.reshape(heads, 2, 16 // heads // 2, 3).swapaxes(1, 2).reshape(w.shape)
    assert np.array_equal(unpermute(permuted, heads), w)


def _tiny_gguf(path: Path, arch: str) -> Path:
    import gguf

    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(1)
    writer.add_embedding_length(4)
    writer.add_tensor("token_embd.weight", np.zeros((8, 4), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_an_unsupported_architecture_names_the_supported_ones(tmp_path):
    with pytest.raises(UnsupportedModelError, match="llama, mistral, qwen2, qwen3, phi3, gemma2, gemma3"):
        write_decoder(GGUFFile(_tiny_gguf(tmp_path / "gpt2.gguf", "gpt2")), tmp_path)


def test_bits_must_be_none_4_8_16_or_32(tmp_path):
    with pytest.raises(ConfigurationError, match="bits=3"):
        write_decoder(GGUFFile(GGUF_DIR / "model-llama-F32.gguf"), tmp_path, 3)


def set_float_activations(folder: Path) -> None:
    """Make a converted folder's MatMulNBits nodes take float32 activations (accuracy level 0), in place."""
    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    for node in model.graph.node:
        for attr in node.attribute:
            if node.op_type == "MatMulNBits" and attr.name == "accuracy_level":
                attr.i = 0
    (folder / "model.onnx").write_bytes(model.SerializeToString())


def float_activations(folder: Path, into: Path) -> Path:
    """A copy of a converted folder whose MatMulNBits nodes take float32 activations (accuracy level 0)."""
    if not into.exists():
        shutil.copytree(folder, into)
        set_float_activations(into)
    return into


@pytest.mark.parametrize("name,case", list(cases(("Q8_0",))))
def test_a_q8_0_file_as_it_holds_it_computes_with_its_exact_weights(converted, name, case, tmp_path_factory):
    """The default width keeps Q8_0's blocks (8-bit MatMulNBits with the file's scales).  With float32
    activations it gives the greedy ids of the float32 conversion, which equal transformers' on the
    dequantized file: the weights are exact.  The converted graph's int8 activations (accuracy level 4,
    as llama.cpp's q8 dot products) are what the real-tier perplexity table measures."""
    folder = converted(name, None)
    exact = float_activations(folder, tmp_path_factory.getbasetemp() / f"{name}-file-f32act")
    assert greedy(exact, case) == case["output_ids"]
