"""Attention alone: what onnxruntime's GroupQueryAttention costs per prompt and per token, by context length.

    python benchmarks/attention.py [--shapes smollm2,qwen2.5-coder] [--contexts 32,256,1024,2048]
                                   [--repeats 7] [--threads 2] [--markdown docs/performance.md]

The fused graphs (and onnxruntime-genai's) run every layer's attention in one
``GroupQueryAttention`` node: rotary embedding, the write into the shared KV buffer, scores,
softmax and the weighted sum.  This script times that node alone, on the shapes of the real
checkpoints (heads, KV heads, head size, layers), for a context of T tokens:

- ``prefill``: one run over a T-token prompt (packed QKV, rotary inside, a KV buffer of T + 128
  positions as the engine allocates for 128 new tokens), times the layers: the attention share
  of a T-token prefill;
- ``decode``: one step after T cached tokens, times the layers (each layer its own buffers, so
  the caches are read from memory as in a model): the attention share of one decode step;
- ``decode, standard ops``: the same step as FusedMatMul(Q, K^T) + Add(mask) + Softmax +
  MatMul(P, V) on the same cache, what a graph without GroupQueryAttention would run;
- with torch installed, ``torch.nn.functional.scaled_dot_product_attention`` on the same shapes
  (causal for the prompt, grouped KV heads for the step): a fused attention kernel on the same
  CPU, for reference.  Rotary and the cache write are not in it (they are in the GQA rows).

Each number is the best of ``--repeats`` passes (a pass runs every layer), in this process, with
``--threads`` onnxruntime / torch threads.  Results: ``results/attention-<time>.json`` and, with
``--markdown``, the table between ``<!-- bench:attention:start/end -->`` in the page.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python benchmarks/attention.py`: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
SECTION = "attention"
NEW_TOKENS = 128  # the KV buffer's room beyond the prompt (the engine: prompt + max_new_tokens)
MAX_POSITIONS = 8192  # rows of the rotary tables


@dataclass(frozen=True)
class Shape:
    """One model's attention: query heads, KV heads, head size, layers (its config.json)."""

    name: str
    heads: int
    kv_heads: int
    head_size: int
    layers: int

    @property
    def group(self) -> int:
        return self.heads // self.kv_heads


SHAPES = {
    "smollm2": Shape("smollm2", heads=9, kv_heads=3, head_size=64, layers=30),  # SmolLM2-135M
    "qwen2.5-coder": Shape("qwen2.5-coder", heads=14, kv_heads=2, head_size=64, layers=24),  # Qwen2.5-Coder-0.5B
}


@dataclass
class Row:
    shape: str
    context: int
    prefill_ms: float | None = None  # GQA over the whole prompt, all layers
    decode_ms: float | None = None  # one GQA step after `context` tokens, all layers
    decode_ops_ms: float | None = None  # the same step in standard ops
    torch_prefill_ms: float | None = None
    torch_decode_ms: float | None = None


def best_ms(fn: Callable[[], None], repeats: int) -> float:
    """The fastest of ``repeats`` calls of ``fn`` (after one untimed call), in milliseconds."""
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times) * 1000.0


def rotary_tables(head_size: int, positions: int = MAX_POSITIONS) -> tuple[np.ndarray, np.ndarray]:
    inv = 1.0 / (10000.0 ** (np.arange(0, head_size, 2, dtype=np.float64) / head_size))
    angles = np.arange(positions, dtype=np.float64)[:, None] * inv[None, :]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def gqa_session(shape: Shape, threads: int) -> Any:
    """A session of one GroupQueryAttention node as the fused graphs use it (packed QKV, rotary, shared buffer)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    h, kv, d = shape.heads, shape.kv_heads, shape.head_size
    node = helper.make_node(
        "GroupQueryAttention",
        ["qkv", "", "", "past_key", "past_value", "seqlens_k", "total_length", "cos", "sin"],
        ["out", "present_key", "present_value"],
        domain="com.microsoft",
        num_heads=h,
        kv_num_heads=kv,
        do_rotary=1,
        scale=float(d**-0.5),
    )
    f32, i32 = TensorProto.FLOAT, TensorProto.INT32
    inputs = [
        helper.make_tensor_value_info("qkv", f32, [1, "s", (h + 2 * kv) * d]),
        helper.make_tensor_value_info("past_key", f32, [1, kv, "c", d]),
        helper.make_tensor_value_info("past_value", f32, [1, kv, "c", d]),
        helper.make_tensor_value_info("seqlens_k", i32, [1]),
        helper.make_tensor_value_info("total_length", i32, []),
        helper.make_tensor_value_info("cos", f32, [MAX_POSITIONS, d // 2]),
        helper.make_tensor_value_info("sin", f32, [MAX_POSITIONS, d // 2]),
    ]
    outputs = [
        helper.make_tensor_value_info("out", f32, [1, "s", h * d]),
        helper.make_tensor_value_info("present_key", f32, [1, kv, "c", d]),
        helper.make_tensor_value_info("present_value", f32, [1, kv, "c", d]),
    ]
    model = helper.make_model(
        helper.make_graph([node], "gqa", inputs, outputs),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
    )
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def ops_session(shape: Shape, threads: int) -> Any:
    """One decode step's attention in standard ops: FusedMatMul(Q, K^T) + Add(mask) + Softmax + MatMul(P, V)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    kv, g, d = shape.kv_heads, shape.group, shape.head_size
    nodes = [
        helper.make_node("FusedMatMul", ["q", "key"], ["scores"], domain="com.microsoft", transB=1, alpha=d**-0.5),
        helper.make_node("Add", ["scores", "mask"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["probs"], axis=-1),
        helper.make_node("MatMul", ["probs", "value"], ["out"]),
    ]
    f32 = TensorProto.FLOAT
    inputs = [
        helper.make_tensor_value_info("q", f32, [1, kv, g, d]),  # a KV head's query heads as rows
        helper.make_tensor_value_info("key", f32, [1, kv, "t", d]),
        helper.make_tensor_value_info("value", f32, [1, kv, "t", d]),
        helper.make_tensor_value_info("mask", f32, [1, 1, 1, "t"]),
    ]
    outputs = [helper.make_tensor_value_info("out", f32, [1, kv, g, d])]
    model = helper.make_model(
        helper.make_graph(nodes, "attention", inputs, outputs),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
    )
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


class GqaRunner:
    """Bound GQA runs of one shape: a T-token prompt, or one step after T tokens, for every layer."""

    def __init__(self, shape: Shape, threads: int, seed: int = 0) -> None:
        self.shape = shape
        self.session = gqa_session(shape, threads)
        self.cos, self.sin = rotary_tables(shape.head_size)
        self.rng = np.random.default_rng(seed)

    def _bind(self, qkv: np.ndarray, key: np.ndarray, value: np.ndarray, past: int) -> tuple[Any, list[Any]]:
        import onnxruntime as ort

        n = qkv.shape[1]
        binding = self.session.io_binding()
        k, v = ort.OrtValue.ortvalue_from_numpy(key), ort.OrtValue.ortvalue_from_numpy(value)
        keep = [qkv, np.array([past + n - 1], np.int32), np.array(past + n, np.int32), k, v]
        binding.bind_cpu_input("qkv", qkv)
        binding.bind_ortvalue_input("past_key", k)
        binding.bind_ortvalue_input("past_value", v)
        binding.bind_ortvalue_output("present_key", k)  # the engine's shared buffer: written in place
        binding.bind_ortvalue_output("present_value", v)
        binding.bind_cpu_input("seqlens_k", keep[1])
        binding.bind_cpu_input("total_length", keep[2])
        binding.bind_cpu_input("cos", self.cos)
        binding.bind_cpu_input("sin", self.sin)
        binding.bind_output("out")
        return binding, keep

    def _cache(self, capacity: int, fill: int) -> tuple[np.ndarray, np.ndarray]:
        s = self.shape
        key = np.zeros((1, s.kv_heads, capacity, s.head_size), np.float32)
        value = np.zeros_like(key)
        key[:, :, :fill] = self.rng.standard_normal((1, s.kv_heads, fill, s.head_size), dtype=np.float32)
        value[:, :, :fill] = self.rng.standard_normal((1, s.kv_heads, fill, s.head_size), dtype=np.float32)
        return key, value

    def prefill(self, context: int) -> Callable[[], None]:
        s = self.shape
        width = (s.heads + 2 * s.kv_heads) * s.head_size
        qkv = self.rng.standard_normal((1, context, width), dtype=np.float32)
        key, value = self._cache(context + NEW_TOKENS, 0)
        binding, keep = self._bind(qkv, key, value, 0)

        def run() -> None:
            for _ in range(s.layers):  # one layer's buffers: each layer's prompt pass is the same work
                self.session.run_with_iobinding(binding)

        run.keep = keep  # type: ignore[attr-defined]
        return run

    def decode(self, context: int) -> Callable[[], None]:
        s = self.shape
        width = (s.heads + 2 * s.kv_heads) * s.head_size
        bound = []
        for _ in range(s.layers):  # every layer its own cache: read from memory, as in a model
            key, value = self._cache(context + NEW_TOKENS, context)
            qkv = self.rng.standard_normal((1, 1, width), dtype=np.float32)
            bound.append(self._bind(qkv, key, value, context))

        def run() -> None:
            for binding, _ in bound:  # the second item keeps the bound arrays alive
                self.session.run_with_iobinding(binding)

        return run


def ops_decode(shape: Shape, threads: int, context: int, seed: int = 0) -> Callable[[], None]:
    session = ops_session(shape, threads)
    rng = np.random.default_rng(seed)
    kv, g, d = shape.kv_heads, shape.group, shape.head_size
    bound = []
    for _ in range(shape.layers):
        feeds = {
            "q": rng.standard_normal((1, kv, g, d), dtype=np.float32),
            "key": rng.standard_normal((1, kv, context, d), dtype=np.float32),
            "value": rng.standard_normal((1, kv, context, d), dtype=np.float32),
            "mask": np.zeros((1, 1, 1, context), np.float32),
        }
        binding = session.io_binding()
        for name, value in feeds.items():
            binding.bind_cpu_input(name, value)
        binding.bind_output("out")
        bound.append((binding, feeds))

    def run() -> None:
        for binding, _ in bound:
            session.run_with_iobinding(binding)

    return run


def torch_runs(shape: Shape, threads: int, context: int) -> tuple[Callable[[], None], Callable[[], None]] | None:
    """torch's fused attention on the same shapes (prompt: causal; step: grouped KV heads), or None without torch."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(threads)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    h, kv, d = shape.heads, shape.kv_heads, shape.head_size
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, h, context, d, generator=gen)
    k = torch.randn(1, kv, context, d, generator=gen)
    v = torch.randn(1, kv, context, d, generator=gen)
    caches = [
        (torch.randn(1, kv, context, d, generator=gen), torch.randn(1, kv, context, d, generator=gen))
        for _ in range(shape.layers)
    ]
    step = torch.randn(1, h, 1, d, generator=gen)

    def prefill() -> None:
        with torch.inference_mode():
            for _ in range(shape.layers):
                sdpa(q, k, v, is_causal=True, enable_gqa=True)

    def decode() -> None:
        with torch.inference_mode():
            for key, value in caches:
                sdpa(step, key, value, enable_gqa=True)

    return prefill, decode


def measure(shape: Shape, contexts: list[int], threads: int, repeats: int, with_torch: bool = True) -> list[Row]:
    runner = GqaRunner(shape, threads)
    rows = []
    for context in contexts:
        row = Row(shape.name, context)
        row.prefill_ms = best_ms(runner.prefill(context), repeats)
        row.decode_ms = best_ms(runner.decode(context), repeats)
        row.decode_ops_ms = best_ms(ops_decode(shape, threads, context), repeats)
        runs = torch_runs(shape, threads, context) if with_torch else None
        if runs is not None:
            row.torch_prefill_ms = best_ms(runs[0], repeats)
            row.torch_decode_ms = best_ms(runs[1], repeats)
        print(
            f"{shape.name} T={context}: prefill {row.prefill_ms:.1f} ms, decode {row.decode_ms:.2f} ms/token "
            f"(standard ops {row.decode_ops_ms:.2f})",
            file=sys.stderr,
            flush=True,
        )
        rows.append(row)
    return rows


def _ms(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def render(rows: list[Row], env: dict[str, Any], command: str) -> str:
    """The markdown section: machine line, command, one table per shape."""
    versions = ", ".join(f"{k} {v}" for k, v in env.get("versions", {}).items() if v)
    load = ", ".join(f"{x:.1f}" for x in env.get("loadavg_start", ()))
    lines = [
        f"Machine: {env.get('nproc')} cores, {env.get('cpu')}; load average at start {load}; "
        f"{env.get('threads')} threads, best of {env.get('repeats')}. {versions}.",
        "",
        f"Command: `{command}`",
    ]
    for shape in dict.fromkeys(r.shape for r in rows):
        mine = [r for r in rows if r.shape == shape]
        s = SHAPES.get(shape)
        geometry = f" ({s.heads} heads, {s.kv_heads} KV heads, head size {s.head_size}, {s.layers} layers)" if s else ""
        base = mine[0].decode_ms
        lines += [
            "",
            f"**{shape}**{geometry}: milliseconds for all layers",
            "",
            "| context T | GQA prompt of T tokens | torch SDPA prompt (causal) | GQA step after T | "
            "step vs T = " + str(mine[0].context) + " | standard ops step | torch SDPA step |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in mine:
            ratio = "-" if not base or r.decode_ms is None else f"{r.decode_ms / base:.1f}x"
            lines.append(
                f"| {r.context} | {_ms(r.prefill_ms)} | {_ms(r.torch_prefill_ms)} | {_ms(r.decode_ms, 2)} | {ratio} | "
                f"{_ms(r.decode_ops_ms, 2)} | {_ms(r.torch_decode_ms, 2)} |"
            )
    return "\n".join(lines) + "\n"


def environment(threads: int, repeats: int) -> dict[str, Any]:
    """run.py's machine record (cores, CPU, load, package versions), with this run's threads and repeats."""
    from benchmarks.run import machine

    env = machine()
    env["versions"] = {k: env["versions"].get(k) for k in ("onnxruntime", "numpy", "torch")}
    env.update(threads=threads, repeats=repeats)
    return env


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--shapes", default="smollm2,qwen2.5-coder", help=f"comma-separated, of: {', '.join(SHAPES)}")
    ap.add_argument("--contexts", default="32,256,1024,2048", help="context lengths T, comma-separated")
    ap.add_argument("--threads", type=int, default=2, help="onnxruntime (and torch) threads")
    ap.add_argument("--repeats", type=int, default=7, help="timed passes per number (the best counts)")
    ap.add_argument("--no-torch", action="store_true", help="leave out torch's SDPA rows")
    ap.add_argument("--out", type=Path, default=None, help="JSON (default: benchmarks/results/attention-<time>.json)")
    ap.add_argument("--no-save", action="store_true", help="do not write the JSON")
    ap.add_argument("--markdown", type=Path, default=None, help=f"page whose bench:{SECTION} section gets the tables")
    ap.add_argument("--render", type=Path, default=None, help="re-render a saved results JSON (no measuring)")
    args = ap.parse_args(argv)
    command = " ".join(["python benchmarks/attention.py", *(sys.argv[1:] if argv is None else argv)])

    if args.render is not None:
        saved = json.loads(args.render.read_text(encoding="utf-8"))
        rows = [Row(**r) for r in saved["rows"]]
        env, command = saved["environment"], saved["command"].strip()
    else:
        unknown = [s for s in args.shapes.split(",") if s not in SHAPES]
        if unknown:
            ap.error(f"unknown shape(s) {', '.join(unknown)}; known: {', '.join(SHAPES)}")
        try:
            contexts = [int(c) for c in args.contexts.split(",")]
        except ValueError:
            ap.error(f"--contexts takes integers separated by commas, got {args.contexts!r}")
        if any(c < 1 or c + NEW_TOKENS > MAX_POSITIONS for c in contexts):
            ap.error(f"context lengths must be between 1 and {MAX_POSITIONS - NEW_TOKENS}")
        env = environment(args.threads, args.repeats)
        rows = []
        for name in args.shapes.split(","):
            rows += measure(SHAPES[name], contexts, args.threads, args.repeats, with_torch=not args.no_torch)
    report = render(rows, env, command)
    print(report)
    from benchmarks.run import publish, save_json

    if args.render is None and not args.no_save:
        out = args.out or RESULTS / f"attention-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}.json"
        save_json(out, {"command": command, "environment": env, "rows": [asdict(r) for r in rows]})
    if args.markdown:
        publish(args.markdown, SECTION, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
