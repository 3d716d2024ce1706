"""The int8 KV cache (``kv_cache("int8")``) on GroupQueryAttention graphs.

First what onnxruntime's GroupQueryAttention does with a quantized cache (one node against its
float32 twin), then the rewritten fixtures: they load and run with int8 buffers, agree with the
float cache on most greedy tokens (random weights make near-ties, so agreement is measured, not
ids), and batched rows, the prefix cache and a lone request give the same ids.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper  # noqa: E402

from inference4py import OnnxTextGenerator  # noqa: E402
from inference4py.errors import ConfigurationError  # noqa: E402
from inference4py.optimize.kv_int8 import quantize_kv_graph  # noqa: E402
from tests.conftest import FIXTURES  # noqa: E402

MODELS = FIXTURES / "models"
TOOLS = Path(__file__).parents[2] / "tools"
PROMPTS = ["The old house", "Once upon a time there was a little girl who lived", "Hi"]

# ------------------------------------------------------------------ onnxruntime's semantics

B, S, H, KVH, D = 2, 5, 4, 2, 8


def _gqa(quant: str | None, scale_shape: list[int] | None = None) -> ort.InferenceSession:
    cache = TensorProto.INT8 if quant else TensorProto.FLOAT
    inputs = [
        helper.make_tensor_value_info("q", TensorProto.FLOAT, [B, None, H * D]),
        helper.make_tensor_value_info("k", TensorProto.FLOAT, [B, None, KVH * D]),
        helper.make_tensor_value_info("v", TensorProto.FLOAT, [B, None, KVH * D]),
        helper.make_tensor_value_info("past_k", cache, [B, KVH, None, D]),
        helper.make_tensor_value_info("past_v", cache, [B, KVH, None, D]),
        helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, [B]),
        helper.make_tensor_value_info("total", TensorProto.INT32, []),
    ]
    names = ["q", "k", "v", "past_k", "past_v", "seqlens_k", "total"]
    attrs: dict = {"num_heads": H, "kv_num_heads": KVH}
    if quant:
        inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, scale_shape) for n in ("ks", "vs")]
        names += ["", "", "", "", "", "ks", "vs"]
        attrs.update(k_quant_type=quant, v_quant_type=quant, kv_cache_bit_width=8)
    node = helper.make_node("GroupQueryAttention", names, ["out", "pres_k", "pres_v"], domain="com.microsoft", **attrs)
    outputs = [helper.make_tensor_value_info(n, t, None) for n, t in (("out", 1), ("pres_k", cache), ("pres_v", cache))]
    model = helper.make_model(
        helper.make_graph([node], "gqa", inputs, outputs),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
    )
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _feeds(seed: int, n: int, past: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "q": rng.standard_normal((B, n, H * D), dtype=np.float32),
        "k": rng.standard_normal((B, n, KVH * D), dtype=np.float32) * 3,
        "v": rng.standard_normal((B, n, KVH * D), dtype=np.float32),
        "seqlens_k": np.full(B, past + n - 1, np.int32),
        "total": np.array(past + n, np.int32),
    }


@pytest.mark.parametrize(("quant", "shape"), [("PER_TENSOR", [1]), ("PER_CHANNEL", [1, KVH, 1, D])])
def test_onnxruntime_quantizes_the_appended_cache_with_dequantization_scales(quant, shape):
    empty = np.zeros((B, KVH, 0, D), np.float32)
    prompt = _feeds(0, S, 0)
    out, key, value = _gqa(None).run(None, {**prompt, "past_k": empty, "past_v": empty})
    axes = (0, 2) if quant == "PER_CHANNEL" else None
    ks = (np.abs(key).max(axis=axes, keepdims=True) / 127).astype(np.float32).reshape(shape)
    vs = (np.abs(value).max(axis=axes, keepdims=True) / 127).astype(np.float32).reshape(shape)
    session = _gqa(quant, shape)
    e8 = np.zeros((B, KVH, 0, D), np.int8)
    out8, key8, value8 = session.run(None, {**prompt, "past_k": e8, "past_v": e8, "ks": ks, "vs": vs})
    assert key8.dtype == value8.dtype == np.int8  # presents take the past's type
    # x ~ q * scale; the kernel rounds half to even and saturates
    assert np.array_equal(key8, np.clip(np.rint(key / ks), -128, 127).astype(np.int8))
    assert np.array_equal(value8, np.clip(np.rint(value / vs), -128, 127).astype(np.int8))
    assert np.abs(out8 - out).max() < 0.1

    # the shared buffer (past and present one int8 tensor) gives the growing cache's numbers exactly
    step = _feeds(1, 1, S)
    grown = session.run(None, {**step, "past_k": key8, "past_v": value8, "ks": ks, "vs": vs})
    buffers = [np.zeros((B, KVH, 16, D), np.int8) for _ in range(2)]
    values = [ort.OrtValue.ortvalue_from_numpy(b) for b in buffers]
    for feeds in (prompt, step):
        binding = session.io_binding()
        for name, array in {**feeds, "ks": ks, "vs": vs}.items():
            binding.bind_cpu_input(name, array)
        binding.bind_output("out", "cpu")
        for (past, present), value in zip((("past_k", "pres_k"), ("past_v", "pres_v")), values):
            binding.bind_ortvalue_input(past, value)
            binding.bind_ortvalue_output(present, value)
        session.run_with_iobinding(binding)
        shared = binding.get_outputs()[0].numpy()
    assert np.array_equal(shared, grown[0])
    assert np.array_equal(buffers[0][:, :, : S + 1], grown[1]) and not buffers[0][:, :, S + 1 :].any()


@pytest.mark.parametrize(
    ("quant", "shape", "ok"),
    [
        ("PER_TENSOR", [1], True),
        ("PER_TENSOR", [1, 1, 1, 1], True),
        ("PER_TENSOR", [1, KVH, 1, D], False),
        ("PER_CHANNEL", [1, KVH, 1, D], True),
        ("PER_CHANNEL", [KVH, D], True),  # only the element count is checked
        ("PER_CHANNEL", [1, KVH, 1, 1], False),  # no per-head mode
    ],
)
def test_onnxruntime_checks_the_scale_element_count(quant, shape, ok):
    scale = np.full(shape, 0.05, np.float32)
    e8 = np.zeros((B, KVH, 0, D), np.int8)
    feeds = {**_feeds(0, S, 0), "past_k": e8, "past_v": e8, "ks": scale, "vs": scale}
    if ok:
        _gqa(quant, shape).run(None, feeds)
    else:
        with pytest.raises(Exception, match="k_scale shape mismatch"):
            _gqa(quant, shape).run(None, feeds)


# ------------------------------------------------------------------ the rewritten fixtures

_models: dict[tuple[str, str], OnnxTextGenerator] = {}


@pytest.fixture(scope="module")
def gguf_folder(tmp_path_factory) -> Path:
    """tools/random_gguf.py's tiny qwen2 file, converted (a GroupQueryAttention graph of its own writer)."""
    pytest.importorskip("gguf")
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    code = "import sys; sys.path.insert(0, sys.argv[1]); import random_gguf as r; r.write_random_gguf(sys.argv[2], 'tiny', 'q8_0')"
    subprocess.run([sys.executable, "-c", code, str(TOOLS), str(path)], check=True)
    return path


def _model(source: str | Path, kv: str) -> OnnxTextGenerator:
    key = (str(source), kv)
    if key not in _models:
        path = source if isinstance(source, Path) else MODELS / source
        _models[key] = OnnxTextGenerator.builder().model_path(str(path)).kv_cache(kv).build()
    return _models[key]


def _agreement(float_gen: OnnxTextGenerator, int8_gen: OnnxTextGenerator, prompt: str, n: int) -> float:
    """Share of the float model's greedy tokens the int8 model predicts too, fed the float model's tokens."""
    ids = float_gen.encode_prompt(prompt)
    greedy = list(float_gen.generate(prompt, max_new_tokens=n, do_sample=False).token_ids)
    state = int8_gen.runtime.new_state(1, capacity=len(ids) + n + 1)
    logits = state.prefill(np.array([ids]))
    same = 0
    for token in greedy:
        same += int(logits.argmax()) == token
        logits = state.step(np.array([token]))
    return same / max(1, len(greedy))


FOLDERS = ["genai-llama", "genai-qwen2", "genai-gemma3", "genai-mistral", "genai-llama-int4", "llama", "qwen3"]


@pytest.mark.parametrize("name", [*FOLDERS, "gguf"])
def test_int8_cache_loads_runs_and_agrees_with_float(name, request):
    source: str | Path = request.getfixturevalue("gguf_folder") if name == "gguf" else name
    float_gen, int8_gen = _model(source, "float"), _model(source, "int8")
    runtime = int8_gen.runtime
    assert runtime.shared_kv
    assert {e.dtype for e in runtime.layout.self_entries} == {np.int8}
    assert runtime.layout.position_bytes * np.dtype(float_gen.runtime.layout.dtype).itemsize == (
        float_gen.runtime.layout.position_bytes
    )
    state = runtime.new_state(1, capacity=16)
    state.prefill(np.array([[1, 2, 3]]))
    assert {arr.dtype for arr, _ in state._kv.values()} == {np.dtype(np.int8)}
    scores = [_agreement(float_gen, int8_gen, p, 24) for p in PROMPTS]
    assert np.mean(scores) >= 0.9, scores


@pytest.mark.parametrize("name", ["genai-llama", "genai-gemma3", "llama", "gguf"])
def test_a_first_prompt_runs_on_the_float_twin_and_fills_the_int8_cache_as_the_kernel_would(name, request):
    """The float graph's logits to the bit; the first layer's int8 cache equal to what the int8 kernel writes.

    Later layers differ from the int8 graph's own prompt pass (their inputs went through unrounded
    attention), which is the point; genai-gemma3 has a sliding window (a buffer at least its size).
    """
    source: str | Path = request.getfixturevalue("gguf_folder") if name == "gguf" else name
    float_gen, int8_gen = _model(source, "float"), _model(source, "int8")
    runtime = int8_gen.runtime
    assert runtime.float_prompt is not None
    ids = np.random.default_rng(0).integers(3, 60, size=(2, 20))
    mask = np.ones_like(ids)
    mask[1, :5] = 0  # a left-padded row
    want = float_gen.runtime.new_state(2, capacity=24).prefill(ids, mask)
    twin = runtime.new_state(2, capacity=24)
    np.testing.assert_array_equal(twin.prefill(ids, mask), want)
    prompt, runtime.float_prompt = runtime.float_prompt, None
    try:
        own = runtime.new_state(2, capacity=24)
        own.prefill(ids, mask)
    finally:
        runtime.float_prompt = prompt
    first = runtime.layout.self_entries[:2]  # layer 0's keys and values
    for entry in first:
        for row, count in enumerate(mask.sum(axis=1)):
            np.testing.assert_array_equal(
                twin._kv[entry.input][0][row, :, :count], own._kv[entry.input][0][row, :, :count]
            )
    tokens = np.array([7, 9])
    assert twin.step(tokens).shape == own.step(tokens).shape  # decoding goes on in int8 on the same buffers
    assert {arr.dtype for arr, _ in twin._kv.values()} == {np.dtype(np.int8)}


def test_the_float_twin_is_checked_and_counted():
    from inference4py.engine.float_prompt import FLOAT_GRAPH, SCALES, quantize_int8
    from inference4py.serve.worker import weights_bytes

    model = _model("genai-llama", "int8")
    assert (model.folder / FLOAT_GRAPH).is_file() and (model.folder / SCALES).is_file()
    once = weights_bytes(_model("genai-llama", "float"))
    assert weights_bytes(model) >= 2 * once - 4096  # two sessions hold the weights: the budget counts both
    scale = np.float32(0.5)
    assert quantize_int8(np.array([0.25, 0.75, -0.25, 100.0, -100.0], np.float32), scale).tolist() == [
        0,
        2,
        0,
        127,
        -128,
    ]


def test_batched_rows_equal_each_request_alone():
    model = _model("genai-llama", "int8")
    alone = [model.generate(p, max_new_tokens=12, do_sample=False).token_ids for p in PROMPTS]
    assert model.generate_batch(PROMPTS, max_new_tokens=12, do_sample=False)[0].token_ids == alone[0]
    assert [r.token_ids for r in model.generate_batch(PROMPTS, max_new_tokens=12, do_sample=False)] == alone


def test_a_cached_prefix_is_held_in_int8_and_answers_as_without_cache():
    """Held int8 and reused.  With the cache off the whole second prompt runs on the float twin, with it
    on the held part went through int8 attention: equal here, though only close in general."""
    model = _model("genai-llama", "int8")
    turn1 = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say something"}]
    with model.batched(prefix_cache_mb=64) as cached, model.batched(prefix_cache_mb=0) as plain:
        first = cached.generate(turn1, max_new_tokens=12, do_sample=False)
        turn2 = [*turn1, {"role": "assistant", "content": first.text}, {"role": "user", "content": "More please"}]
        second = cached.generate(turn2, max_new_tokens=12, do_sample=False)
        assert cached.prefix_cache.hits == 1
        held = next(iter(cached.prefix_cache._entries.values()))
        assert {a.dtype for a in held.arrays} == {np.dtype(np.int8)}
        reference = plain.generate(turn2, max_new_tokens=12, do_sample=False)
    assert second.token_ids == reference.token_ids


def test_the_rewritten_folder_is_calibrated_once_and_cached():
    builder = OnnxTextGenerator.builder().model_path(MODELS / "genai-qwen2").kv_cache("int8")
    with builder.build() as first:
        marker = first.folder / ".inference4py-fused"
        stamp = marker.stat().st_mtime_ns
        heads, size = first.runtime.layout.num_kv_heads, first.runtime.layout.head_dim
    with builder.build() as again:
        assert again.folder == first.folder and marker.stat().st_mtime_ns == stamp
    graph = onnx.load(str(first.folder / "model.onnx"), load_external_data=False).graph
    node = next(n for n in graph.node if n.op_type == "GroupQueryAttention")
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["k_quant_type"] == attrs["v_quant_type"] == b"PER_CHANNEL" and attrs["kv_cache_bit_width"] == 8
    past = next(i for i in graph.input if i.name == node.input[3]).type.tensor_type
    scales = {i.name: list(i.dims) for i in graph.initializer}
    assert scales[node.input[12]] == scales[node.input[13]] == [1, heads, 1, size]
    assert past.elem_type == TensorProto.INT8


def test_a_graph_without_group_query_attention_is_refused():
    with pytest.raises(ConfigurationError, match="int8 KV needs a GroupQueryAttention graph"):
        OnnxTextGenerator.builder().model_path(MODELS / "gpt2").fuse_attention(False).kv_cache("int8").build()
    with pytest.raises(ConfigurationError, match="kv_cache takes one of"):
        OnnxTextGenerator.builder().kv_cache("int4")


def test_per_tensor_scales_have_one_element():
    model = onnx.load(str(MODELS / "genai-llama" / "model.onnx"), load_external_data=False)
    absmax = {i.name: np.ones((2, 4), np.float32) for i in model.graph.input if i.name.startswith("past_")}
    assert quantize_kv_graph(model, absmax, granularity="tensor") == 2
    node = next(n for n in model.graph.node if n.op_type == "GroupQueryAttention")
    scale = next(i for i in model.graph.initializer if i.name == node.input[12])
    assert list(scale.dims) == [1]
    assert next(i for i in model.graph.input if i.name == node.input[3]).type.tensor_type.elem_type == TensorProto.INT8
