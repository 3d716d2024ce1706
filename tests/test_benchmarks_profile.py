"""benchmarks/profile_prefill.py's summary of onnxruntime profiler events."""

from __future__ import annotations

import pytest

from benchmarks.profile_prefill import summarize


def _kernel(name: str, op: str, ts: int, dur: int) -> dict:
    return {"cat": "Node", "name": f"{name}_kernel_time", "ts": ts, "dur": dur, "args": {"op_name": op}}


def test_summarize_counts_only_the_last_runs_and_folds_layers() -> None:
    events = [
        {"cat": "Session", "name": "model_run", "ts": 0, "dur": 100},  # the warm-up: left out
        _kernel("/model/layers.0/mlp/up_proj/MatMul", "MatMul", 10, 500),
        {"cat": "Session", "name": "model_run", "ts": 1000, "dur": 100},
        _kernel("/model/layers.0/mlp/up_proj/MatMul", "MatMul", 1010, 30),
        _kernel("/model/layers.1/mlp/up_proj/MatMul", "MatMul", 1040, 30),
        _kernel("GroupQueryAttention_3", "GroupQueryAttention", 1070, 20),
        {"cat": "Session", "name": "model_run", "ts": 2000, "dur": 300},
        _kernel("/model/layers.0/mlp/up_proj/MatMul", "MatMul", 2010, 50),
        _kernel("/model/layers.1/mlp/up_proj/MatMul", "MatMul", 2060, 50),
        _kernel("GroupQueryAttention_3", "GroupQueryAttention", 2110, 100),
    ]
    s = summarize(events, runs=2)
    assert s["runs"] == 2
    assert s["run_ms"] == pytest.approx(0.2)  # (100 + 300) us / 2 runs
    assert s["kernel_ms"] == pytest.approx(0.14)  # (30 + 30 + 20 + 50 + 50 + 100) us / 2
    ops = {o["op"]: o for o in s["ops"]}
    assert ops["MatMul"]["ms"] == pytest.approx(0.08) and ops["MatMul"]["calls"] == 2
    assert ops["GroupQueryAttention"]["share"] == pytest.approx(120 / 280)
    (family,) = s["matmuls"]
    assert family["node"] == "/model/layers.N/mlp/up_proj/MatMul" and family["calls"] == 2


def test_summarize_refuses_a_profile_without_runs() -> None:
    with pytest.raises(ValueError, match="no model_run"):
        summarize([_kernel("x", "MatMul", 0, 1)], runs=1)
