"""Latency of live transcription (``WhisperSpeechModel.transcribe_stream``) on a recording fed in real time.

    python benchmarks/whisper_live.py                      # 60 s espeak-ng recording, whisper-base, 100 ms chunks
    python benchmarks/whisper_live.py --seconds 120 --chunk-ms 500

The recording is benchmarks/whisper_audio.py's (espeak-ng paragraphs with pauses, cached under
benchmarks/work/); the model is the real tier's whisper-base optimum export (tools/build_real.py),
English, greedy; the VAD is the fixture's Silero v6 (``tests/fixtures/vad/silero_vad_v6.onnx``).
Chunks of ``--chunk-ms`` are handed to the stream no sooner than a microphone would deliver them
(the feeding sleeps until each chunk's end time). For every segment: when it came, measured from
the start of the stream, and its latency: that time minus the segment's end in the recording.
Also: the first text's time, the word error rate against the script, and the same recording
transcribed whole (``transcribe()``) for comparison. JSON to benchmarks/results/whisper-live-<time>.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.peers.common import cpu_flags  # noqa: E402
from benchmarks.run import machine, save_json  # noqa: E402
from benchmarks.whisper import wer  # noqa: E402
from benchmarks.whisper_audio import make  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="length of the recording (default 60)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--chunk-ms", type=float, default=100.0, help="audio per chunk, as a microphone delivers it")
    ap.add_argument("--model", type=Path, default=Path.home() / ".cache/inference4py/real/whisper-base-optimum")
    ap.add_argument("--vad", type=Path, default=ROOT / "tests/fixtures/vad/silero_vad_v6.onnx")
    args = ap.parse_args(argv)

    from inference4py import WhisperSpeechModel
    from inference4py.audio import SAMPLE_RATE, load_audio
    from inference4py.speech.vad import SileroVad

    wav, meta = make(args.seconds, args.seed)
    audio = load_audio(wav)
    vad = SileroVad(args.vad)
    step = int(SAMPLE_RATE * args.chunk_ms / 1000)
    with WhisperSpeechModel.builder().model_path(args.model).language("en").build() as asr:
        asr.transcribe((audio[: 10 * SAMPLE_RATE], SAMPLE_RATE))  # warm-up
        started = time.perf_counter()

        def chunks():
            for i in range(0, audio.size, step):
                time.sleep(max(0.0, started + (i + step) / SAMPLE_RATE - time.perf_counter()))
                yield audio[i : i + step]

        rows: list[dict[str, Any]] = []
        for seg in asr.transcribe_stream(chunks(), vad=vad):
            at = time.perf_counter() - started
            rows.append({"start": seg.start, "end": seg.end, "at": at, "latency": at - seg.end, "text": seg.text})
            print(f"[{seg.start:7.2f} - {seg.end:7.2f}] at {at:7.2f} s, latency {at - seg.end:5.2f} s:{seg.text}")
        whole = asr.transcribe((audio, SAMPLE_RATE)).text
    live_text = "".join(r["text"] for r in rows)
    latencies = [r["latency"] for r in rows]
    summary = {
        "segments": len(rows),
        "first_text_s": rows[0]["at"] if rows else None,
        "first_speech_end_s": rows[0]["end"] if rows else None,
        "latency_median_s": statistics.median(latencies) if latencies else None,
        "latency_max_s": max(latencies) if latencies else None,
        "wer_live": wer(meta["text"], live_text),
        "wer_whole": wer(meta["text"], whole),
    }
    print(
        f"\n{args.seconds:g} s recording, {args.chunk_ms:g} ms chunks: first text at {summary['first_text_s']:.2f} s "
        f"(its speech ended at {summary['first_speech_end_s']:.2f} s); latency after each segment's end: median "
        f"{summary['latency_median_s']:.2f} s, max {summary['latency_max_s']:.2f} s; word error rate live "
        f"{summary['wer_live']:.3f}, whole {summary['wer_whole']:.3f}"
    )
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = ROOT / "benchmarks" / "results" / f"whisper-live-{stamp}.json"
    save_json(
        out,
        {
            "machine": machine(),
            "cpu_flags": cpu_flags(),
            "args": vars(args) | {"model": str(args.model), "vad": str(args.vad)},
            "summary": summary,
            "segments": rows,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
