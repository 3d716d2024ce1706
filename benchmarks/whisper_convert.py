"""The torch-free conversion of a Whisper model file at real size: time, memory, and the converted model's speed.

    python benchmarks/whisper_convert.py SOURCE [SOURCE ...]        # CTranslate2 folders / model.bin / ggml files
    python benchmarks/whisper_convert.py ~/models/faster-whisper-large-v3-turbo --tokens 64 --json out.json
    python benchmarks/whisper_convert.py --make-turbo OUT_FOLDER    # a random-weight large-v3-turbo (torch, ct2)

For each SOURCE, three steps, each in a fresh process (this file with ``--worker``), one after the other:

* ``convert``: ``inference4py.speech.files.convert_whisper(SOURCE, OUT)`` into a fresh folder: wall
  time, peak RSS (``VmHWM``; also the peaks of ``RssAnon`` and ``RssFile`` polled every few ms: the
  model file is memory-mapped, so its pages that were read count as file-backed RSS), the folder's
  size against the model file's, and the largest tensor written (the converter should hold little
  more than that besides the mapping).  Page cache as found: run it twice for a warm file.
* ``load``: ``WhisperSpeechModel.builder().model_path(OUT).intra_op_threads(T).build()``: time,
  RSS after the load (onnxruntime widens the stored float16 / int8 / blocks to float32 once, here)
  and its peak.
* ``window``: one 30 s window of real speech (the espeak clip of tools/real: ``--audio``): the
  encoder alone (``backend.encode`` on the log-mel window; one warm-up, then the median of 3), then
  ``transcribe(language="en", max_new_tokens=N, temperature=0, no thresholds)`` once to warm up
  (8 tokens) and once timed, each generated token time-stamped as the decoder yields it: the first
  token (prompt prefill + cross keys / values), then ms per token over the rest.  A random-weight
  model does not stop by itself, so it makes all N tokens; a real one may stop earlier (the table
  says how many).

``--make-turbo OUT`` (needs torch, transformers and ctranslate2 4.x, benchmark-only) writes a
large-v3-turbo-shaped model with random weights (std 0.02) as faster-whisper holds it: transformers'
``WhisperForConditionalGeneration`` at turbo's dimensions, saved in float16, with Whisper base's
tokenizer.json plus large-v3's ``<|yue|>`` after ``<|su|>`` (every later special id one higher), a
generation_config.json in the shape of the Hub's large-v3-turbo and a 128-bin preprocessor_config.json,
converted by CTranslate2's own ``TransformersConverter`` (quantization float16).  Conversion speed and
memory do not depend on the weights' values.

Threads: ``--threads`` (2) for onnxruntime, and OMP / MKL / OpenBLAS in each worker's environment.
Set ``INFERENCE4PY_CACHE`` to keep what the library caches out of ~/.cache; the converted folders
go under ``--work`` (a temporary folder by default) and are deleted unless ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python benchmarks/whisper_convert.py`: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.whisper import thread_env  # noqa: E402 - one set of thread variables for both scripts

ROOT = Path(__file__).resolve().parent.parent
REAL = Path(os.environ.get("INFERENCE4PY_REAL_DIR", Path.home() / ".cache" / "inference4py" / "real"))
AUDIO = REAL / "audio" / "en-long.wav"
BASE_CT2 = REAL / "downloads" / "whisper" / "ct2-whisper-base"
STEPS = ("convert", "load", "window")
SAMPLE_RATE = 16000
WARMUP_TOKENS = 8


# ---------------------------------------------------------------------------------------------- memory
def _status() -> dict[str, float]:
    """VmRSS, VmHWM, RssAnon, RssFile of this process in MB (10^6 bytes, as the file sizes)."""
    out: dict[str, float] = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
            out[key] = int(value.split()[0]) * 1024 / 1e6  # kB
    return out


class Peaks:
    """Polls /proc/self/status while active: the peaks of RssAnon and RssFile (VmHWM is only their sum's)."""

    def __init__(self, every: float = 0.005) -> None:
        self.every = every
        self.peak: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        for key, value in _status().items():
            self.peak[key] = max(self.peak.get(key, 0.0), value)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self._sample()

    def __enter__(self) -> Peaks:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()


def _dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _largest_initializer(folder: Path) -> tuple[str, int]:
    """The largest tensor written into the converted folder's graphs (name, bytes as stored)."""
    import onnx

    best = ("", 0)
    for graph in sorted(folder.glob("*.onnx")):
        model = onnx.load(str(graph), load_external_data=False)
        for tensor in model.graph.initializer:
            info = {e.key: e.value for e in tensor.external_data}
            size = int(info.get("length", 0)) or len(tensor.raw_data)
            if size > best[1]:
                best = (f"{graph.name}:{tensor.name}", size)
    return best


# ---------------------------------------------------------------------------------------------- workers
def _worker_convert(task: dict[str, Any]) -> dict[str, Any]:
    import onnx  # noqa: F401  (imported before the clock: the baseline includes it)

    from inference4py.speech.files import convert_whisper, find_whisper_file

    source = find_whisper_file(task["source"])
    before = _status()
    with Peaks() as peaks:
        t = time.perf_counter()
        out = convert_whisper(task["source"], task["out"])
        seconds = time.perf_counter() - t
    after = _status()
    name, largest = _largest_initializer(out)
    return {
        "format": source.format,
        "file": str(source.path),
        "file_mb": source.path.stat().st_size / 1e6,
        "folder_mb": _dir_size(out) / 1e6,
        "files": {p.name: p.stat().st_size for p in sorted(out.iterdir())},
        "convert_s": seconds,
        "rss_before_mb": before["VmRSS"],
        "rss_after_mb": after["VmRSS"],
        "peak_rss_mb": after["VmHWM"],
        "peak_anon_mb": peaks.peak.get("RssAnon"),
        "peak_file_mb": peaks.peak.get("RssFile"),
        "anon_before_mb": before["RssAnon"],
        "file_before_mb": before["RssFile"],
        "largest_tensor": name,
        "largest_tensor_mb": largest / 1e6,
    }


def _build(task: dict[str, Any]) -> Any:
    from inference4py import WhisperSpeechModel

    return WhisperSpeechModel.builder().model_path(task["out"]).intra_op_threads(task["threads"]).build()


def _worker_load(task: dict[str, Any]) -> dict[str, Any]:
    import onnxruntime  # noqa: F401

    import inference4py  # noqa: F401

    before = _status()
    with Peaks() as peaks:
        t = time.perf_counter()
        asr = _build(task)
        seconds = time.perf_counter() - t
    after = _status()
    asr.close()
    return {
        "load_s": seconds,
        "rss_before_mb": before["VmRSS"],
        "rss_loaded_mb": after["VmRSS"],
        "anon_loaded_mb": after["RssAnon"],
        "file_loaded_mb": after["RssFile"],
        "peak_rss_mb": after["VmHWM"],
        "peak_anon_mb": peaks.peak.get("RssAnon"),
    }


def _worker_window(task: dict[str, Any]) -> dict[str, Any]:
    from inference4py.audio import load_audio

    samples = load_audio(task["audio"], target_rate=SAMPLE_RATE)[: int(task["seconds"] * SAMPLE_RATE)]
    asr = _build(task)
    rss_loaded = _status()["VmRSS"]
    backend = asr._parts.backend  # the window backend: its encode / decode are what transcribe() runs
    window = asr.features((samples, SAMPLE_RATE))
    backend.encode(window)  # warm-up
    encodes = []
    for _ in range(3):
        t = time.perf_counter()
        backend.encode(window)
        encodes.append(time.perf_counter() - t)

    stamps: list[list[float]] = []
    decode = backend.decode

    def timed_decode(*args: Any, **kwargs: Any) -> Any:
        times = [time.perf_counter()]
        stamps.append(times)
        for token in decode(*args, **kwargs):
            times.append(time.perf_counter())
            yield token

    backend.decode = timed_decode
    settings = {
        "language": "en",
        "temperature": 0.0,
        "compression_ratio_threshold": None,
        "logprob_threshold": None,
        "no_speech_threshold": None,
    }
    asr.transcribe((samples, SAMPLE_RATE), max_new_tokens=WARMUP_TOKENS, **settings)
    stamps.clear()
    t = time.perf_counter()
    result = asr.transcribe((samples, SAMPLE_RATE), max_new_tokens=task["tokens"], **settings)
    transcribe_s = time.perf_counter() - t
    if len(stamps) != 1:
        raise RuntimeError(f"expected one decoded window, got {len(stamps)}")
    times = stamps[0]
    n = len(times) - 1
    steps = [b - a for a, b in zip(times[1:], times[2:])]
    asr.close()
    return {
        "audio_s": samples.size / SAMPLE_RATE,
        "rss_loaded_mb": rss_loaded,
        "encoder_s": statistics.median(encodes),
        "encoder_runs_s": encodes,
        "transcribe_s": transcribe_s,
        "tokens": n,
        "token_ids": len(result.token_ids),
        "text": result.text[:120],
        "first_token_ms": (times[1] - times[0]) * 1000 if n else None,
        "ms_per_token": (times[-1] - times[1]) / (n - 1) * 1000 if n > 1 else None,
        "median_step_ms": statistics.median(steps) * 1000 if steps else None,
        "peak_rss_mb": _status()["VmHWM"],
    }


WORKERS = {"convert": _worker_convert, "load": _worker_load, "window": _worker_window}


def worker_main(step: str, task_path: str, out_path: str) -> int:
    import traceback

    task = json.loads(Path(task_path).read_text(encoding="utf-8"))
    try:
        result = {"status": "ok", **WORKERS[step](task)}
    except Exception as exc:  # reported in the table, the driver goes on
        result = {"status": "error", "reason": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
    Path(out_path).write_text(json.dumps(result), encoding="utf-8")
    return 0


# ---------------------------------------------------------------------------------------------- driver
def run_step(step: str, task: dict[str, Any], timeout: float) -> dict[str, Any]:
    from benchmarks.run import run_worker

    t = time.perf_counter()
    env = thread_env(task["threads"])
    result = run_worker(task, timeout, module="benchmarks.whisper_convert", flags=("--worker", step), env_extra=env)
    if result.get("status") != "error":
        result["process_s"] = time.perf_counter() - t
    return result


def _fmt(value: Any, spec: str = ".0f") -> str:
    return "-" if value is None else format(value, spec)


def table(results: list[dict[str, Any]]) -> str:
    rows = [
        "| model | model file MB | convert s | convert peak RSS MB (anon / file) | largest tensor MB | "
        "folder MB (x file) | load s | RSS after load MB | encoder s / 30 s window | first token ms | "
        "ms / token (tokens) | window peak RSS MB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        c, ld, w = r["convert"], r.get("load", {}), r.get("window", {})
        if c.get("status") != "ok":
            rows.append(f"| {r['name']} | conversion failed: {c.get('reason')} |" + " |" * 10)
            continue
        rows.append(
            f"| {r['name']} | {c['file_mb']:.0f} | {c['convert_s']:.1f} | {c['peak_rss_mb']:.0f} "
            f"({_fmt(c['peak_anon_mb'])} / {_fmt(c['peak_file_mb'])}) | {c['largest_tensor_mb']:.0f} | "
            f"{c['folder_mb']:.0f} ({c['folder_mb'] / c['file_mb']:.2f}) | "
            + (
                f"{ld['load_s']:.1f} | {ld['rss_loaded_mb']:.0f} | "
                if ld.get("status") == "ok"
                else f"failed: {ld.get('reason')} | | "
            )
            + (
                f"{w['encoder_s']:.2f} | {_fmt(w['first_token_ms'])} | {_fmt(w['ms_per_token'], '.1f')} "
                f"({w['tokens']}) | {w['peak_rss_mb']:.0f} |"
                if w.get("status") == "ok"
                else f"failed: {w.get('reason')} | | | |"
            )
        )
    return "\n".join(rows)


def main_bench(args: argparse.Namespace) -> int:
    from benchmarks.peers.common import cpu_flags
    from benchmarks.run import machine

    env = {**machine(), "cpu_flags": cpu_flags(), "threads": args.threads}
    work_root = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="whisper-convert-"))
    work_root.mkdir(parents=True, exist_ok=True)
    results = []
    try:
        for i, source in enumerate(args.sources):
            src = Path(source).expanduser()
            name = src.name if src.name != "model.bin" else src.parent.name
            out = work_root / f"{i}-{name}"
            if out.exists():
                shutil.rmtree(out)
            task = {
                "source": str(src),
                "out": str(out),
                "threads": args.threads,
                "audio": str(args.audio),
                "seconds": args.seconds,
                "tokens": args.tokens,
            }
            entry: dict[str, Any] = {"name": name, "source": str(src)}
            for step in STEPS:
                print(f"[whisper_convert] {name}: {step}", file=sys.stderr, flush=True)
                entry[step] = run_step(step, task, args.timeout)
                if entry[step].get("status") != "ok":
                    print(f"[whisper_convert] {name} {step}: {entry[step].get('reason')}", file=sys.stderr)
                    print(entry[step].get("traceback", ""), file=sys.stderr)
                    break
                print(f"[whisper_convert] {json.dumps(entry[step])}", file=sys.stderr, flush=True)
            results.append(entry)
            if not args.keep:
                shutil.rmtree(out, ignore_errors=True)
    finally:
        if not args.keep and not args.work:
            shutil.rmtree(work_root, ignore_errors=True)
    print(table(results))
    print(
        f"\n{env['cpu']}, {env['nproc']} cores ({', '.join(env['cpu_flags'])}), {env['mem_total_mb']} MiB; "
        f"{args.threads} threads; onnxruntime {env['versions'].get('onnxruntime')}, numpy {env['versions'].get('numpy')}"
    )
    if args.json:
        record = {
            "time": datetime.now(timezone.utc).isoformat(),
            "machine": env,
            "args": vars(args),
            "results": results,
        }
        Path(args.json).write_text(json.dumps(record, indent=1, default=str), encoding="utf-8")
    return 0 if all(all(r.get(s, {}).get("status") == "ok" for s in STEPS) for r in results) else 1


# ---------------------------------------------------------------------------------------------- a random large-v3-turbo
TURBO = {  # openai/whisper-large-v3-turbo's config.json
    "d_model": 1280,
    "encoder_layers": 32,
    "encoder_attention_heads": 20,
    "decoder_layers": 4,
    "decoder_attention_heads": 20,
    "encoder_ffn_dim": 5120,
    "decoder_ffn_dim": 5120,
    "num_mel_bins": 128,
    "vocab_size": 51866,
    "max_source_positions": 1500,
    "max_target_positions": 448,
    "tie_word_embeddings": True,
}
TURBO_ALIGNMENT_HEADS = [[2, 4], [2, 11], [3, 3], [3, 6], [3, 11], [3, 14]]  # its generation_config.json
_AFTER_LANGUAGES = ("translate", "transcribe", "startoflm", "startofprev", "nocaptions", "notimestamps")


def v3_tokenizer(base: dict[str, Any]) -> dict[str, Any]:
    """Whisper base's tokenizer.json with large-v3's ``<|yue|>`` after ``<|su|>``: every later special id + 1."""
    added = base["added_tokens"]
    su = next(t["id"] for t in added if t["content"] == "<|su|>")
    if any(t["content"] == "<|yue|>" for t in added):
        raise ValueError("the tokenizer already has <|yue|>")
    shifted = [{**t, "id": t["id"] + 1} if t["id"] > su else dict(t) for t in added]
    at = next(i for i, t in enumerate(shifted) if t["id"] == su) + 1
    shifted.insert(at, {**shifted[at - 1], "id": su + 1, "content": "<|yue|>"})
    out = {**base, "added_tokens": shifted}
    post = json.loads(json.dumps(base.get("post_processor") or {}))
    for special in (post.get("special_tokens") or {}).values():
        special["ids"] = [i + 1 if i > su else i for i in special["ids"]]
    out["post_processor"] = post or base.get("post_processor")
    return out


def v3_generation_config(tokenizer: dict[str, Any], base_config: dict[str, Any]) -> dict[str, Any]:
    """generation_config.json in the Hub's large-v3-turbo shape (the keys of tools/fixtures/whisper.py's
    ``_generation_config``); the suppress list is Whisper base's (CTranslate2's config.json) with v3's ids."""
    ids = {t["content"]: t["id"] for t in tokenizer["added_tokens"]}
    sot, eot, translate = ids["<|startoftranscript|>"], ids["<|endoftext|>"], ids["<|translate|>"]
    languages = {c: i for c, i in ids.items() if sot < i < translate}
    su_base = ids["<|su|>"]  # base's ids above <|su|> are one lower than v3's
    suppress = [i + 1 if i > su_base else i for i in base_config["suppress_ids"]]
    special = {k: ids[f"<|{k}|>"] for k in _AFTER_LANGUAGES}
    return {
        "alignment_heads": TURBO_ALIGNMENT_HEADS,
        "begin_suppress_tokens": [220, eot],
        "bos_token_id": eot,
        "decoder_start_token_id": sot,
        "eos_token_id": eot,
        "forced_decoder_ids": [[1, None], [2, special["transcribe"]]],
        "is_multilingual": True,
        "lang_to_id": languages,
        "max_initial_timestamp_index": 50,
        "max_length": TURBO["max_target_positions"],
        "no_timestamps_token_id": special["notimestamps"],
        "pad_token_id": eot,
        "prev_sot_token_id": special["startofprev"],
        "return_timestamps": False,
        "suppress_tokens": suppress,
        "task_to_id": {"transcribe": special["transcribe"], "translate": special["translate"]},
    }


def make_turbo(out: Path, base: Path, seed: int = 0) -> None:
    """Write the random-weight large-v3-turbo CTranslate2 folder ``out`` (see the module docstring)."""
    import ctranslate2
    import torch
    from ctranslate2.converters import TransformersConverter
    from transformers import (
        AutoTokenizer,
        GenerationConfig,
        WhisperConfig,
        WhisperFeatureExtractor,
        WhisperForConditionalGeneration,
    )

    if not ctranslate2.__version__.startswith("4."):
        raise RuntimeError(f"ctranslate2 {ctranslate2.__version__}: this writer expects 4.x")
    torch.set_num_threads(2)
    torch.manual_seed(seed)
    tokenizer = v3_tokenizer(json.loads((base / "tokenizer.json").read_text(encoding="utf-8")))
    generation = v3_generation_config(tokenizer, json.loads((base / "config.json").read_text(encoding="utf-8")))
    eot, sot = generation["eos_token_id"], generation["decoder_start_token_id"]
    config = WhisperConfig(
        **TURBO,
        init_std=0.02,
        bos_token_id=eot,
        eos_token_id=eot,
        pad_token_id=eot,
        decoder_start_token_id=sot,
        begin_suppress_tokens=generation["begin_suppress_tokens"],
        suppress_tokens=None,
    )
    with tempfile.TemporaryDirectory(prefix="whisper-turbo-hf-", dir=out.parent) as tmp:
        hf = Path(tmp)
        t = time.perf_counter()
        model = WhisperForConditionalGeneration(config).eval()
        if model.proj_out.weight.data_ptr() != model.model.decoder.embed_tokens.weight.data_ptr():
            raise RuntimeError("proj_out is not tied to the embeddings")
        model.generation_config = GenerationConfig(**generation)
        model = model.half()  # what quantization float16 stores: the same numbers, half the disk
        print(
            f"[make-turbo] {sum(p.numel() for p in model.parameters()) / 1e6:.0f}M parameters, "
            f"{time.perf_counter() - t:.0f} s",
            flush=True,
        )
        model.save_pretrained(hf)
        del model
        (hf / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False), encoding="utf-8")
        specials = [t["content"] for t in tokenizer["added_tokens"] if t["id"] > eot]
        tokenizer_config = {
            "tokenizer_class": "WhisperTokenizer",
            "bos_token": "<|endoftext|>",
            "eos_token": "<|endoftext|>",
            "unk_token": "<|endoftext|>",
            "pad_token": "<|endoftext|>",
            "additional_special_tokens": specials,
            "model_max_length": 1024,
            "errors": "replace",
        }
        (hf / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=1), encoding="utf-8")
        WhisperFeatureExtractor(feature_size=TURBO["num_mel_bins"]).save_pretrained(hf)
        tok = AutoTokenizer.from_pretrained(hf)
        for text, want in (("<|yue|>", sot + 100), ("<|notimestamps|>", generation["no_timestamps_token_id"])):
            if tok.convert_tokens_to_ids(text) != want:
                raise RuntimeError(f"{text} has id {tok.convert_tokens_to_ids(text)}, not {want}")
        t = time.perf_counter()
        TransformersConverter(str(hf), copy_files=["tokenizer.json", "preprocessor_config.json"]).convert(
            str(out), quantization="float16", force=True
        )
        print(f"[make-turbo] CTranslate2 conversion {time.perf_counter() - t:.0f} s -> {out}", flush=True)
    written = json.loads((out / "config.json").read_text(encoding="utf-8"))
    if len(written.get("lang_ids", ())) != 100 or written.get("alignment_heads") != TURBO_ALIGNMENT_HEADS:
        raise RuntimeError(f"{out}/config.json: {len(written.get('lang_ids', ()))} languages, unexpected heads")
    print(f"[make-turbo] {_dir_size(out) / 1e6:.0f} MB: {sorted(p.name for p in out.iterdir())}", flush=True)


# ---------------------------------------------------------------------------------------------- CLI
def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        return worker_main(*sys.argv[2:5])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sources", nargs="*", help="CTranslate2 folders, model.bin or ggml files")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=64, help="max_new_tokens of the timed window")
    parser.add_argument("--seconds", type=float, default=30.0, help="audio taken from --audio")
    parser.add_argument("--audio", type=Path, default=AUDIO)
    parser.add_argument("--work", help="where the converted folders go (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the converted folders")
    parser.add_argument("--timeout", type=float, default=3600.0, help="per step, seconds")
    parser.add_argument("--json", help="also write every number to this JSON file")
    parser.add_argument("--make-turbo", type=Path, metavar="OUT", help="write the random large-v3-turbo folder")
    parser.add_argument("--base", type=Path, default=BASE_CT2, help="--make-turbo: Whisper base's CTranslate2 folder")
    args = parser.parse_args()
    if args.make_turbo:
        make_turbo(args.make_turbo.expanduser(), args.base.expanduser())
        return 0
    if not args.sources:
        parser.error("give at least one model file or folder (or --make-turbo OUT)")
    return main_bench(args)


if __name__ == "__main__":
    sys.exit(main())
