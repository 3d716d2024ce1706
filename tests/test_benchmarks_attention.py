"""benchmarks/attention.py: its GroupQueryAttention step and its standard-op step compute the same attention, and the
table it renders."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from benchmarks.attention import MAX_POSITIONS, Row, Shape, gqa_session, ops_session, render

SHAPE = Shape("toy", heads=4, kv_heads=2, head_size=16, layers=1)


def _attention(q: np.ndarray, key: np.ndarray, value: np.ndarray, scale: float) -> np.ndarray:
    """q [kv, group, d] against key / value [kv, t, d]: softmax(q k^T * scale) v, per KV head."""
    scores = np.einsum("hgd,htd->hgt", q, key) * scale
    probs = np.exp(scores - scores.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    return np.einsum("hgt,htd->hgd", probs, value)


def test_gqa_step_and_standard_op_step_give_the_same_attention() -> None:
    s, past, capacity = SHAPE, 7, 12
    rng = np.random.default_rng(3)
    q = rng.standard_normal((s.heads, s.head_size), dtype=np.float32)
    new_k = rng.standard_normal((s.kv_heads, s.head_size), dtype=np.float32)
    new_v = rng.standard_normal((s.kv_heads, s.head_size), dtype=np.float32)
    key = np.zeros((1, s.kv_heads, capacity, s.head_size), np.float32)
    value = np.zeros_like(key)
    key[0, :, :past] = rng.standard_normal((s.kv_heads, past, s.head_size), dtype=np.float32)
    value[0, :, :past] = rng.standard_normal((s.kv_heads, past, s.head_size), dtype=np.float32)

    # GQA with an identity rotary (cos 1, sin 0): the step attends to the cache plus its own key / value
    qkv = np.concatenate([q.reshape(-1), new_k.reshape(-1), new_v.reshape(-1)])[None, None, :]
    half = s.head_size // 2
    ones, zeros = np.ones((MAX_POSITIONS, half), np.float32), np.zeros((MAX_POSITIONS, half), np.float32)
    gqa = gqa_session(s, threads=1)
    k_value, v_value = ort.OrtValue.ortvalue_from_numpy(key), ort.OrtValue.ortvalue_from_numpy(value)
    binding = gqa.io_binding()
    binding.bind_cpu_input("qkv", np.ascontiguousarray(qkv, dtype=np.float32))
    binding.bind_ortvalue_input("past_key", k_value)
    binding.bind_ortvalue_input("past_value", v_value)
    binding.bind_ortvalue_output("present_key", k_value)
    binding.bind_ortvalue_output("present_value", v_value)
    binding.bind_cpu_input("seqlens_k", np.array([past], np.int32))
    binding.bind_cpu_input("total_length", np.array(past + 1, np.int32))
    binding.bind_cpu_input("cos", ones)
    binding.bind_cpu_input("sin", zeros)
    binding.bind_output("out")
    gqa.run_with_iobinding(binding)
    gqa_out = binding.get_outputs()[2].numpy().reshape(s.kv_heads, s.group, s.head_size)
    np.testing.assert_array_equal(key[0, :, past], new_k)  # written into the shared buffer in place

    grouped = q.reshape(s.kv_heads, s.group, s.head_size)
    cache_k, cache_v = key[0, :, : past + 1], value[0, :, : past + 1]
    expected = _attention(grouped, cache_k, cache_v, s.head_size**-0.5)
    np.testing.assert_allclose(gqa_out, expected, rtol=1e-5, atol=1e-5)

    ops = ops_session(s, threads=1)
    (ops_out,) = ops.run(
        None,
        {
            "q": grouped[None],
            "key": np.ascontiguousarray(cache_k[None]),
            "value": np.ascontiguousarray(cache_v[None]),
            "mask": np.zeros((1, 1, 1, past + 1), np.float32),
        },
    )
    np.testing.assert_allclose(ops_out[0], expected, rtol=1e-5, atol=1e-5)


def test_render_gives_one_table_per_shape_with_the_step_growth() -> None:
    rows = [
        Row("smollm2", 32, prefill_ms=2.0, decode_ms=0.5, decode_ops_ms=0.4),
        Row("smollm2", 1024, prefill_ms=450.0, decode_ms=6.0, decode_ops_ms=5.5, torch_prefill_ms=400.0),
        Row("qwen2.5-coder", 32, prefill_ms=3.0, decode_ms=0.7, decode_ops_ms=0.5),
    ]
    env = {"nproc": 2, "cpu": "AMD EPYC", "loadavg_start": [0.1, 0.2, 0.3], "threads": 2, "repeats": 7}
    page = render(rows, env, "python benchmarks/attention.py")
    assert page.count("| context T |") == 2
    assert "**smollm2** (9 heads, 3 KV heads, head size 64, 30 layers)" in page
    assert "| 1024 | 450.0 | 400.0 | 6.00 | 12.0x | 5.50 | - |" in page
    assert "| 32 | 3.0 | - | 0.70 | 1.0x | 0.50 | - |" in page
