"""The roof of CPU decoding: bytes read per generated token against this machine's memory bandwidth (issue 19).

    python benchmarks/roof.py benchmarks/results/sizes-TIME.json [benchmarks/results/smollm2-TIME.json ...]
    python benchmarks/roof.py RESULTS.json --markdown docs/performance.md   # fill <!-- bench:roof:start/end -->
    python benchmarks/roof.py --bandwidth-only                               # only the bandwidth measurement
    python benchmarks/roof.py RESULTS.json --bandwidth 11.2                  # reuse a measured GB/s

A decode step of a decoder reads every weight once (batch 1), except tables indexed by the
token or position (the embedding ``Gather``, rotary cos/sin caches), of which it reads one row,
and it reads the KV cache of every earlier position (a sliding-window layer: of the window).
So ``bytes/token x decode tok/s`` is the read bandwidth a row achieves, and its ratio to the
machine's measured read bandwidth says how close to the roof it runs (the rest is compute,
per-step overhead, or memory traffic other than these reads).

Bandwidth (``measure_bandwidth``): a STREAM-like read of a >= 1 GiB float32 buffer, split over
one thread per core, by two readers: numpy's ``max`` on each thread's slice (numpy releases the
GIL in reductions) and onnxruntime's ``ReduceMax`` over the whole buffer (its intra-op pool); the
best of ``--bandwidth-runs`` passes of each, and the larger of the two is the figure: a roof is what
the machine can reach, and on a shared host the median of a few passes reads low (a decode row
then seems to beat the roof).

Bytes per token, from the model files: ONNX (``onnx_weight_bytes``): the graph's initializers
(sizes from their shapes and types, so external data is never read); an initializer all of whose
uses are the data of a ``Gather`` on axis 0 (or ``GatherBlockQuantized`` data/scales/zero points,
``GroupQueryAttention`` / ``RotaryEmbedding`` cos/sin caches) counts one row.  A tied embedding
that is also the output projection is read whole.  GGUF (``gguf_weight_bytes``): the tensors'
stored sizes; ``token_embd.weight`` counts one row when the file has its own ``output.weight``
(else llama.cpp uses it as the output matrix: whole).  KV cache per token: layers x 2 (K, V) x
KV heads x head size x element bytes x the positions attended, at the mean context of the
decode (prompt + new tokens / 2); ONNX rows take the element type of the graph's
``past_key_values`` input, llama.cpp rows its default F16 cache.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python benchmarks/roof.py`: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

RESULTS = Path(__file__).resolve().parent / "results"
SECTION = "roof"

# (op type, input indices) whose constant input is read one row per token (the row picked by a token or position id)
ROW_INDEXED: dict[str, tuple[int, ...]] = {
    "Gather": (0,),
    "GatherBlockQuantized": (0, 1, 2),
    "GroupQueryAttention": (7, 8),
    "RotaryEmbedding": (2, 3),
}
_PACKED_4BIT = {21, 22, 23}  # onnx TensorProto UINT4, INT4, FLOAT4E2M1: two values per byte
LLAMA_CPP_KV_BYTES = 2  # llama.cpp's default KV cache type is F16 (type_k / type_v)


# ---------------------------------------------------------------------------------------------- weights
@dataclass(frozen=True)
class WeightBytes:
    """Weights of a model file: all of them, the row-indexed tables, and what one decode step reads."""

    total: int
    row_indexed: int  # bytes of the tables read one row per token
    per_token: int  # total - row_indexed + one row of each row-indexed table
    tables: tuple[str, ...]  # the row-indexed tables' names


def _tensor_bytes(tensor: Any) -> int:
    """Bytes of an ONNX TensorProto's values, from its shape and type (the data itself is never read)."""
    import onnx

    count = math.prod(tensor.dims)
    if tensor.data_type in _PACKED_4BIT:
        return (count + 1) // 2
    if tensor.data_type == onnx.TensorProto.STRING:
        return 0
    return count * onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize


def _consumers(graph: Any, out: dict[str, list[tuple[Any, int]]]) -> None:
    """Every (node, input index) reading each name, subgraphs (If / Loop bodies) included."""
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name:
                out.setdefault(name, []).append((node, i))
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                _consumers(sub, out)


def _gather_axis(node: Any) -> int:
    for attr in node.attribute:
        if attr.name in ("axis", "gather_axis"):
            return int(attr.i)
    return 0


def _row_indexed(uses: list[tuple[Any, int]]) -> bool:
    if not uses:
        return False
    for node, index in uses:
        if index not in ROW_INDEXED.get(node.op_type, ()):
            return False
        if node.op_type.startswith("Gather") and _gather_axis(node) != 0:
            return False
    return True


def onnx_weight_bytes(path: str | os.PathLike[str]) -> WeightBytes:
    """The weights an ONNX decoder graph holds, and the bytes one decode step reads of them (batch 1)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    uses: dict[str, list[tuple[Any, int]]] = {}
    _consumers(model.graph, uses)
    total = row_indexed = per_token = 0
    tables = []
    for tensor in model.graph.initializer:
        size = _tensor_bytes(tensor)
        total += size
        if len(tensor.dims) >= 1 and tensor.dims[0] > 0 and _row_indexed(uses.get(tensor.name, [])):
            row_indexed += size
            per_token += size // tensor.dims[0]
            tables.append(tensor.name)
        else:
            per_token += size
    return WeightBytes(total, row_indexed, per_token, tuple(tables))


def gguf_weight_bytes(path: str | os.PathLike[str]) -> WeightBytes:
    """The same for a GGUF file as llama.cpp runs it (tensor sizes as stored, quantized blocks included)."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    names = {t.name for t in reader.tensors}
    gathered = {"position_embd.weight"}
    if "output.weight" in names:  # else the token embedding is also the output matrix: read whole
        gathered.add("token_embd.weight")
    total = row_indexed = per_token = 0
    tables = []
    for t in reader.tensors:
        size = int(t.n_bytes)
        total += size
        if t.name in gathered:
            rows = int(t.n_elements) // int(t.shape[0])  # shape[0] is the row length (ggml's ne0)
            row_indexed += size
            per_token += size // rows
            tables.append(t.name)
        else:
            per_token += size
    return WeightBytes(total, row_indexed, per_token, tuple(tables))


def decoder_file(folder: Path) -> Path:
    """The decoder graph of a model folder (genai_config.json's, else the usual export names)."""
    config = folder / "genai_config.json"
    if config.is_file():
        return folder / json.loads(config.read_text(encoding="utf-8"))["model"]["decoder"]["filename"]
    for name in ("model.onnx", "decoder_model_merged.onnx", "decoder_with_past_model.onnx", "model_quantized.onnx"):
        if (folder / name).is_file():
            return folder / name
    raise FileNotFoundError(f"no decoder graph in {folder}")


# ---------------------------------------------------------------------------------------------- KV cache
@dataclass(frozen=True)
class KvGeometry:
    windows: tuple[int | None, ...]  # per layer: the sliding window, or None (attends to every position)
    kv_heads: int
    head_dim: int
    elem_bytes: int

    def bytes_per_token(self, context: float) -> float:
        """K and V of every layer over the positions a decode step attends to at this context length."""
        per_position = 2 * self.kv_heads * self.head_dim * self.elem_bytes
        return sum(per_position * (min(context, w) if w else context) for w in self.windows)


def kv_geometry(folder: Path, elem_bytes: int) -> KvGeometry:
    """From config.json (layer_types + sliding_window), else genai_config.json (sliding_window.layers)."""
    config = folder / "config.json"
    if config.is_file():
        c = json.loads(config.read_text(encoding="utf-8"))
        c = c.get("text_config", c)
        layers = int(c["num_hidden_layers"])
        heads = int(c["num_attention_heads"])
        kv_heads = int(c.get("num_key_value_heads") or heads)
        head_dim = int(c.get("head_dim") or c["hidden_size"] // heads)
        types = c.get("layer_types") or ["full_attention"] * layers
        window = c.get("sliding_window")
        windows = tuple(int(window) if t == "sliding_attention" and window else None for t in types)
        return KvGeometry(windows, kv_heads, head_dim, elem_bytes)
    d = json.loads((folder / "genai_config.json").read_text(encoding="utf-8"))["model"]["decoder"]
    sw = d.get("sliding_window") or {}
    local = set(sw.get("layers", [])) if sw else set()
    size = sw.get("window_size")
    windows = tuple(int(size) if size and i in local else None for i in range(int(d["num_hidden_layers"])))
    return KvGeometry(windows, int(d["num_key_value_heads"]), int(d["head_size"]), elem_bytes)


def onnx_kv_elem_bytes(path: Path) -> int:
    """Bytes per element of the graph's past_key_values inputs (float32: 4, float16: 2)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    for value in model.graph.input:
        if value.name.startswith("past_key_values"):
            return onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type).itemsize
    return 4


# ---------------------------------------------------------------------------------------------- bandwidth
def measure_bandwidth(gib: float = 1.0, threads: int | None = None, runs: int = 5) -> dict[str, Any]:
    """Read bandwidth in GB/s (1e9 bytes/s): numpy max per thread slice, and onnxruntime ReduceMax."""
    import numpy as np

    threads = threads or os.cpu_count() or 1
    n = int(gib * 2**30) // 4
    n -= n % (threads * 1024)
    buf = np.empty(n, dtype=np.float32)
    buf.fill(1.0)  # touch every page before timing
    nbytes = buf.nbytes
    slices = np.array_split(buf, threads)
    out: dict[str, Any] = {"buffer_bytes": nbytes, "threads": threads, "runs": runs}

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(np.max, slices))  # warm-up
        rates = []
        for _ in range(runs):
            t = time.perf_counter()
            list(pool.map(np.max, slices))
            rates.append(nbytes / (time.perf_counter() - t) / 1e9)
    out["numpy_gbps"] = rates

    try:
        import onnxruntime as ort
        from onnx import TensorProto, helper

        rows = threads * 64
        node = helper.make_node("ReduceMax", ["x"], ["y"], keepdims=0)
        graph = helper.make_graph(
            [node],
            "read",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, n // rows])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        x = buf.reshape(rows, n // rows)
        sess.run(None, {"x": x})
        rates = []
        for _ in range(runs):
            t = time.perf_counter()
            sess.run(None, {"x": x})
            rates.append(nbytes / (time.perf_counter() - t) / 1e9)
        out["onnxruntime_gbps"] = rates
    except Exception as exc:  # numpy's figure stands alone
        out["onnxruntime_error"] = f"{type(exc).__name__}: {exc}"
    best = {k: max(v) for k, v in out.items() if k.endswith("_gbps")}
    out["best"] = best
    out["method"] = max(best, key=lambda k: best[k])
    out["gbps"] = best[out["method"]]
    return out


# ---------------------------------------------------------------------------------------------- rows
@dataclass
class RoofRow:
    source: str  # results file
    model: str
    row: str
    precision: str
    path: str  # the file whose weights were counted
    prompt_tokens: int
    new_tokens: int
    context: float
    weight_bytes_total: int
    weight_bytes_per_token: int
    kv_bytes_per_token: float
    decode_tps: float
    achieved_gbps: float = 0.0
    fraction: float | None = None
    note: str = ""


_CACHE: dict[tuple[str, str], Any] = {}


def _cached(kind: str, path: Path, fn: Any) -> Any:
    key = (kind, str(path))
    if key not in _CACHE:
        _CACHE[key] = fn(path)
    return _CACHE[key]


def row_bytes(folder: Path, config_folder: Path | None, prompt_tokens: int, new_tokens: int) -> dict[str, Any]:
    """Weights read per decode step and KV bytes per token for one results row's folder (or GGUF file)."""
    context = prompt_tokens + new_tokens / 2  # mean context over tokens 2..n
    if folder.suffix == ".gguf":
        weights = _cached("gguf", folder, gguf_weight_bytes)
        if config_folder is None:
            raise FileNotFoundError(f"no config.json beside {folder} for the KV cache geometry")
        geometry = kv_geometry(config_folder, LLAMA_CPP_KV_BYTES)
        path = folder
    else:
        path = decoder_file(folder)
        weights = _cached("onnx", path, onnx_weight_bytes)
        geometry = kv_geometry(folder, _cached("kv", path, onnx_kv_elem_bytes))
    return {
        "path": str(path),
        "context": context,
        "weights": weights,
        "kv_per_token": geometry.bytes_per_token(context),
    }


def rows_from_results(path: Path) -> list[RoofRow | dict[str, Any]]:
    """Decode rows of a sizes-*.json (benchmarks/sizes.py) or <model>-*.json (benchmarks/run.py, greedy)."""
    saved = json.loads(path.read_text(encoding="utf-8"))
    items: list[tuple[str, str, dict[str, Any], Path, Path | None, int, int]] = []
    if "spec" in saved and "lengths" in saved.get("spec", {}):  # sizes.py
        for model, entry in saved["results"].items():
            config = next(
                (Path(r["folder"]) for r in entry["rows"].values() if (Path(r["folder"]) / "config.json").is_file()),
                None,
            )
            for length, rows in sorted(entry["results"].items(), key=lambda kv: int(kv[0])):
                for name, res in rows.items():
                    meta = entry["rows"].get(name, {})
                    folder = Path(meta.get("folder", ""))
                    loaded = (res.get("info") or {}).get("model_folder")
                    if folder.suffix == ".gguf" and loaded:  # inference4py on a GGUF: the graph it converted to
                        folder = Path(loaded)
                    res = {**res, "precision": meta.get("precision"), "folder": str(folder)}
                    items.append(
                        (
                            model,
                            name,
                            res,
                            folder,
                            config,
                            int(length),
                            saved["spec"]["new_tokens"],
                        )
                    )
    else:  # run.py
        for model, entry in saved["results"].items():
            greedy = (entry.get("speed") or {}).get("greedy", {})
            for name, res in greedy.items():
                items.append(
                    (
                        model,
                        name,
                        res,
                        Path(res.get("folder", "")),
                        None,
                        res.get("prompt_tokens", 0),
                        res.get("new_tokens", 0),
                    )
                )
    out: list[RoofRow | dict[str, Any]] = []
    for model, name, res, folder, config, prompt_tokens, new_tokens in items:
        base = {"source": path.name, "model": model, "row": name}
        if res.get("status") != "ok" or not res.get("decode_tps"):
            out.append({**base, "skipped": f"{res.get('status')}: {str(res.get('reason'))[:120]}"})
            continue
        try:
            b = row_bytes(folder, config, prompt_tokens, new_tokens)
        except (FileNotFoundError, KeyError, ValueError, OSError) as exc:
            out.append({**base, "skipped": f"bytes not computed: {type(exc).__name__}: {exc}"[:200]})
            continue
        precision = res.get("precision") or ""
        if precision == "gguf":
            precision = "gguf " + (saved["results"][model]["provenance"].get("gguf_info") or {}).get("file_type", "")
        out.append(
            RoofRow(
                source=path.name,
                model=model,
                row=name,
                precision=precision,
                path=b["path"],
                prompt_tokens=prompt_tokens,
                new_tokens=new_tokens,
                context=b["context"],
                weight_bytes_total=b["weights"].total,
                weight_bytes_per_token=b["weights"].per_token,
                kv_bytes_per_token=b["kv_per_token"],
                decode_tps=float(res["decode_tps"]),
            )
        )
    return out


def apply_bandwidth(rows: list[RoofRow | dict[str, Any]], gbps: float | None) -> None:
    for r in rows:
        if isinstance(r, RoofRow):
            r.achieved_gbps = (r.weight_bytes_per_token + r.kv_bytes_per_token) * r.decode_tps / 1e9
            r.fraction = r.achieved_gbps / gbps if gbps else None


# ---------------------------------------------------------------------------------------------- report
def _mb(n: float) -> str:
    return f"{n / 1e6:,.1f}"


def render(bandwidth: dict[str, Any] | None, rows: list[RoofRow | dict[str, Any]], command: str) -> str:
    lines = [f"Command: `{command}`", ""]
    if bandwidth and "best" in bandwidth:
        med = ", ".join(f"{k.removesuffix('_gbps')} {v:.1f}" for k, v in bandwidth["best"].items())
        lines.append(
            f"Measured read bandwidth: **{bandwidth['gbps']:.1f} GB/s** (best of {bandwidth['runs']} passes over "
            f"{bandwidth['buffer_bytes'] / 2**30:.2f} GiB with {bandwidth['threads']} threads: {med} GB/s; "
            f"load average at start {', '.join(f'{x:.1f}' for x in bandwidth.get('loadavg', ()))})."
        )
    elif bandwidth:
        lines.append(f"Read bandwidth (given): **{bandwidth['gbps']:.1f} GB/s**.")
    lines += [
        "",
        "| results | model | row | weights | N | weights MB total | weights MB read / token | KV MB / token "
        "| decode tok/s | achieved GB/s | of bandwidth |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    skipped = []
    for r in rows:
        if not isinstance(r, RoofRow):
            skipped.append(f"- {r['source']} {r['model']} {r['row']}: {r['skipped']}")
            continue
        frac = f"{100 * r.fraction:.0f}%" if r.fraction is not None else "-"
        lines.append(
            f"| {r.source} | {r.model} | {r.row} | {r.precision} `{Path(r.path).parent.name if Path(r.path).suffix != '.gguf' else Path(r.path).name}` "
            f"| {r.prompt_tokens} | {_mb(r.weight_bytes_total)} | {_mb(r.weight_bytes_per_token)} "
            f"| {_mb(r.kv_bytes_per_token)} | {r.decode_tps:.1f} | {r.achieved_gbps:.2f} | {frac} |"
        )
    if skipped:
        lines += ["", "Not computed:", *skipped]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("results", nargs="*", type=Path, help="sizes-*.json and/or run.py results JSON files")
    ap.add_argument("--bandwidth", type=float, default=None, help="use this GB/s instead of measuring")
    ap.add_argument("--bandwidth-only", action="store_true", help="measure the bandwidth, print it, stop")
    ap.add_argument("--gib", type=float, default=1.0, help="buffer size of the bandwidth measurement (>= 1 GiB)")
    ap.add_argument("--threads", type=int, default=0, help="bandwidth threads (default: all cores)")
    ap.add_argument("--bandwidth-runs", type=int, default=7, help="timed passes per reader (the best counts)")
    ap.add_argument("--out", type=Path, default=None, help="JSON (default: benchmarks/results/roof-<time>.json)")
    ap.add_argument("--no-save", action="store_true", help="do not write the JSON")
    ap.add_argument("--markdown", type=Path, default=None, help=f"page whose bench:{SECTION} section gets the table")
    args = ap.parse_args(argv)
    command = "python benchmarks/roof.py " + " ".join(sys.argv[1:] if argv is None else argv)
    if not args.results and not args.bandwidth_only:
        ap.error("give results JSON files (or --bandwidth-only)")

    if args.bandwidth is not None:
        bandwidth: dict[str, Any] = {"gbps": args.bandwidth, "given": True}
    else:
        load = os.getloadavg()
        bandwidth = measure_bandwidth(args.gib, args.threads or None, args.bandwidth_runs)
        bandwidth["loadavg"] = load
    print(f"read bandwidth: {bandwidth['gbps']:.2f} GB/s {bandwidth.get('best', '')}", file=sys.stderr)
    if args.bandwidth_only:
        return 0
    rows: list[RoofRow | dict[str, Any]] = []
    for path in args.results:
        rows += rows_from_results(path)
    apply_bandwidth(rows, bandwidth["gbps"])
    report = render(bandwidth, rows, command)
    print(report)
    from benchmarks.run import publish, save_json

    if not args.no_save:
        out = args.out or RESULTS / f"roof-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}.json"
        payload = {
            "command": command,
            "bandwidth": bandwidth,
            "results": [str(p) for p in args.results],
            "rows": [asdict(r) if isinstance(r, RoofRow) else r for r in rows],
        }
        save_json(out, payload)
    if args.markdown:
        publish(args.markdown, SECTION, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
