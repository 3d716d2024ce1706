"""``inference4py transcribe``: audio files to text (or English), SRT / WebVTT subtitles or JSON, with Whisper.

Several files are transcribed as batches of 30 s windows (``--batch-size``).  The library is
imported inside the handler, so ``--help`` stays free of onnxruntime.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from inference4py.cli.base import EXIT_OK, _Echo

_DEFAULT_WHISPER = "onnx-community/whisper-base"
_SUFFIX = {"text": ".txt", "srt": ".srt", "vtt": ".vtt", "json": ".json"}


def _add_transcribe_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", nargs="+", help="audio file(s) (wav, flac, mp3, ogg, ...)")
    parser.add_argument(
        "--model",
        "-m",
        default=None,
        metavar="ID_OR_PATH",
        help="Whisper repo id, local ONNX folder, faster-whisper (CTranslate2) folder, whisper.cpp ggml-*.bin "
        f"file, or pip:PACKAGE holding one (default: {_DEFAULT_WHISPER})",
    )
    parser.add_argument("--revision", metavar="R", help="branch, tag or commit of the hub repo (default: main)")
    parser.add_argument("--language", "-l", metavar="XX", help="spoken language, e.g. en or french (default: detect)")
    parser.add_argument(
        "--task",
        choices=("transcribe", "translate"),
        default=None,
        help="transcribe (default) or translate into English",
    )
    parser.add_argument("--timestamps", action="store_true", help="print time-stamped segments")
    parser.add_argument(
        "--word-timestamps", action="store_true", help="time every word (SRT / VTT: one cue per word; JSON: words)"
    )
    parser.add_argument(
        "--format",
        "-f",
        choices=("text", "srt", "vtt", "json"),
        default="text",
        help="text (default), SRT / WebVTT subtitles or JSON with segments and words (implies --timestamps)",
    )
    parser.add_argument(
        "--output-dir",
        "-o",
        metavar="DIR",
        help="write FILE's result to DIR/<name>.txt|.srt|.vtt|.json instead of printing it",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        metavar="N",
        default=None,
        help="decode the windows of N files as one batch (default: 8 with several files, else one file at a time)",
    )
    parser.add_argument(
        "--parallel-chunks",
        action="store_true",
        help="cut each file into independent chunks (VAD speech chunks with --vad, else 30 s windows) and decode "
        "them all as batches: the fastest way through long recordings",
    )
    parser.add_argument(
        "--temperature-fallback",
        action="store_true",
        help="retry a window that loops or is unlikely at temperatures 0.2 ... 1.0 (openai-whisper's default)",
    )
    parser.add_argument(
        "--best-of",
        type=int,
        metavar="N",
        help="with --temperature-fallback: candidates sampled per window at a temperature above 0, the likeliest "
        "kept (default 5)",
    )
    parser.add_argument(
        "--seed", type=int, metavar="N", help="seed of the sampled fallback windows (reproducible runs)"
    )
    parser.add_argument(
        "--condition-on-previous-text", action="store_true", help="give each window the text so far as context"
    )
    parser.add_argument("--initial-prompt", metavar="TEXT", help="context for the first window: names, spellings")
    parser.add_argument(
        "--hallucination-silence-threshold",
        type=float,
        metavar="SECONDS",
        help="with --word-timestamps: skip silences longer than this around text that looks hallucinated",
    )
    parser.add_argument(
        "--vad",
        action="store_true",
        help="transcribe only the speech Silero VAD finds (onnx-community/silero-vad, fetched once)",
    )
    parser.add_argument("--vad-model", metavar="PATH", help="a local Silero VAD .onnx file for --vad (implies --vad)")
    parser.add_argument(
        "--progress", action="store_true", help="show a progress bar over the audio's duration on stderr"
    )
    parser.add_argument("--max-new-tokens", type=int, metavar="N", help="at most N tokens per 30 s window")
    parser.add_argument("--num-beams", type=int, metavar="N", help="beam width (default: greedy)")


def _run_transcribe(args: argparse.Namespace) -> int:
    from inference4py import WhisperSpeechModel
    from inference4py.speech import FALLBACK_TEMPERATURES, TranscribeOptions

    builder = WhisperSpeechModel.builder()
    model = args.model or _DEFAULT_WHISPER
    from inference4py.tasks.kinds import is_whisper_source

    folder = Path(model).expanduser()
    if is_whisper_source(model):  # converted once into the cache
        builder = builder.model_path(model if not folder.exists() else folder)
    else:
        builder = builder.model_path(folder) if folder.is_dir() else builder.model_id(model)
    if args.revision:
        builder = builder.revision(args.revision)
    if args.language:
        builder = builder.language(args.language)
    if args.task:
        builder = builder.task(args.task)
    if args.max_new_tokens is not None:
        builder = builder.max_new_tokens(args.max_new_tokens)
    if args.num_beams is not None:
        builder = builder.num_beams(args.num_beams)
    if args.seed is not None:  # the sampled fallback windows' seed
        builder = builder.seed(args.seed)
    timestamps = args.timestamps or args.format != "text"
    options = TranscribeOptions(  # the flags typed once, here at the edge
        word_timestamps=bool(args.word_timestamps),
        temperature=FALLBACK_TEMPERATURES if args.temperature_fallback else None,
        condition_on_previous_text=bool(args.condition_on_previous_text),
        initial_prompt=args.initial_prompt or None,
        hallucination_silence_threshold=args.hallucination_silence_threshold,
        vad=args.vad_model or bool(args.vad),
        best_of=args.best_of if args.best_of is not None else TranscribeOptions.best_of,
    )
    files: list[str] = list(args.file)
    bar = _Progress(sys.stderr) if args.progress else None
    out_dir = Path(args.output_dir).expanduser() if args.output_dir else None
    with builder.timestamps(timestamps).build() as asr:
        streamed = len(files) == 1 and args.batch_size is None and not args.parallel_chunks
        if streamed and out_dir is None and args.format == "text" and not timestamps:
            echo = _Echo(sys.stdout)  # one file of plain text: streamed as it is decoded
            asr.transcribe(files[0], on_token=echo, on_progress=bar, options=options)
            echo.end_line()
            if bar is not None:
                bar.close()
            return EXIT_OK
        if len(files) == 1 and args.batch_size is None and not args.parallel_chunks:
            results = [asr.transcribe(files[0], on_progress=bar, options=options)]
        else:
            results = asr.transcribe_batch(
                files,
                batch_size=args.batch_size or 8,
                parallel_chunks=args.parallel_chunks,
                on_progress=bar,
                options=options,
            )
    if bar is not None:
        bar.close()
    if args.format == "json" and out_dir is None:
        data = [r.to_dict() | {"file": f} for f, r in zip(files, results)]
        sys.stdout.write(json.dumps(data[0] if len(data) == 1 else data, ensure_ascii=False, indent=2) + "\n")
        return EXIT_OK
    for i, (name, result) in enumerate(zip(files, results)):
        text = _render(result, args.format, args.word_timestamps, args.timestamps)
        if out_dir is not None:
            out_dir.mkdir(parents=True, exist_ok=True)
            target = out_dir / (Path(name).stem + _SUFFIX[args.format])
            target.write_text(text, encoding="utf-8")
            print(target)
            continue
        if len(files) > 1:
            sys.stdout.write(("\n" if i else "") + f"==> {name} <==\n")
        sys.stdout.write(text)
    sys.stdout.flush()
    return EXIT_OK


class _Progress:
    """``[#####.....]  42%  12.6 s / 30.0 s`` on one line of ``stream``, redrawn after each window."""

    def __init__(self, stream: Any, width: int = 30) -> None:
        self._stream = stream
        self._width = width
        self._drawn = False

    def __call__(self, done: float, total: float) -> None:
        share = 1.0 if total <= 0 else min(max(done / total, 0.0), 1.0)
        filled = int(round(share * self._width))
        bar = "#" * filled + "." * (self._width - filled)
        self._stream.write(f"\r[{bar}] {share * 100:3.0f}%  {done:.1f} s / {total:.1f} s")
        self._stream.flush()
        self._drawn = True

    def close(self) -> None:
        if self._drawn:
            self._stream.write("\n")
            self._stream.flush()


def _render(result: Any, fmt: str, words: bool, timed: bool) -> str:
    if fmt == "srt":
        return str(result.to_srt(words=words))
    if fmt == "vtt":
        return str(result.to_vtt(words=words))
    if fmt == "json":
        return str(result.to_json()) + "\n"
    if not timed and not words:
        return str(result.text).strip() + "\n"
    lines = []
    for seg in result.segments:
        if not seg.text.strip():
            continue
        lines.append(f"[{_seconds(seg.start)} --> {_seconds(seg.end)}] {seg.text.strip()}")
        if words:
            lines.extend(f"    [{_seconds(w.start)} --> {_seconds(w.end)}] {w.word.strip()}" for w in seg.words)
    return "".join(line + "\n" for line in lines)


def _seconds(t: float) -> str:
    minutes, seconds = divmod(max(t, 0.0), 60.0)
    return f"{int(minutes):02d}:{seconds:06.3f}"
