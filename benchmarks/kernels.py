"""inference4py's compiled ggml operators alone: one GgmlMatMul at a real model's shapes, per kernel path.

    python benchmarks/kernels.py [--types Q4_K,Q6_K,Q8_0] [--rows 1,512] [--threads 2] [--isa avx2]

Per type and number of activation rows: milliseconds per call (median of ``--runs``), and for one
row the bytes of weights read per second (decode is a read of every weight once); for many rows
the multiply-adds per second. The weights are random blocks (speed does not depend on their
values) of twelve matrices of Qwen2.5-1.5B's MLP shape (8960 x 1536), more than the caches hold,
so one row reads them from memory as a decode step does.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import onnxruntime as ort  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from benchmarks.quality import cpu_flags  # noqa: E402
from inference4py.engine import kernels  # noqa: E402
from tests.kernels.blocks import random_rows, type_id  # noqa: E402


def session(kind: str, n: int, k: int, matrices: int, threads: int) -> ort.InferenceSession:
    rng = np.random.default_rng(0)
    nodes, inits, outputs = [], [], []
    for i in range(matrices):
        inits.append(numpy_helper.from_array(random_rows(kind, n, k, rng), f"W{i}"))
        nodes.append(
            helper.make_node("GgmlMatMul", ["X", f"W{i}"], [f"Y{i}"], domain=kernels.DOMAIN, type=type_id(kind), K=k)
        )
        outputs.append(helper.make_tensor_value_info(f"Y{i}", TensorProto.FLOAT, None))
    graph = helper.make_graph(
        nodes, "bench", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, k])], outputs, inits
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(kernels.DOMAIN, 1)]
    )
    model.ir_version = 10
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    kernels.register_kernels(options)
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--types", default="Q4_K,Q6_K,Q8_0,Q4_1,Q5_0")
    ap.add_argument("--rows", default="1,512")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--isa", default=None, help="force a kernel path (default: the best the CPU has)")
    args = ap.parse_args()
    if args.isa:
        kernels.set_isa(args.isa)
    library = kernels.kernel_library()
    print(f"# kernels: {library.isa}; threads {args.threads}; CPU flags: {cpu_flags()}")
    n, k = 8960, 1536
    for kind in args.types.split(","):
        for rows in (int(r) for r in args.rows.split(",")):
            matrices = 12 if rows == 1 else 2
            s = session(kind, n, k, matrices, args.threads)
            x = np.random.default_rng(1).normal(0, 1, (rows, k)).astype(np.float32)
            s.run(None, {"X": x})
            times = []
            for _ in range(args.runs):
                started = time.perf_counter()
                s.run(None, {"X": x})
                times.append(time.perf_counter() - started)
            seconds = statistics.median(times)
            row_bytes = random_rows(kind, 1, k, np.random.default_rng(0)).shape[1]
            total = matrices * n * row_bytes
            line = f"{kind:6s} rows {rows:4d}: {seconds / matrices * 1e3:8.3f} ms per matrix"
            if rows == 1:
                line += f", {total / seconds / 1e9:6.1f} GB/s of weights"
            else:
                line += f", {matrices * n * k * rows / seconds / 1e9:6.1f} G multiply-adds/s"
            print(line, flush=True)


if __name__ == "__main__":
    main()
