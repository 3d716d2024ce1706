"""``inference4py transcribe``: an audio file to text (or English), or to SRT / WebVTT subtitles, with Whisper.

The library is imported inside the handler.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from inference4py.cli.base import EXIT_OK, _Echo

_DEFAULT_WHISPER = "onnx-community/whisper-base"


def _add_transcribe_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="audio file (wav, flac, mp3, ogg, ...)")
    parser.add_argument(
        "--model",
        "-m",
        default=None,
        metavar="ID_OR_PATH",
        help=f"Whisper repo id or local folder (default: {_DEFAULT_WHISPER})",
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
        "--format",
        "-f",
        choices=("text", "srt", "vtt"),
        default="text",
        help="text (default), or SRT / WebVTT subtitles (implies --timestamps)",
    )
    parser.add_argument("--max-new-tokens", type=int, metavar="N", help="at most N tokens per 30 s window")
    parser.add_argument("--num-beams", type=int, metavar="N", help="beam width (default: greedy)")


def _run_transcribe(args: argparse.Namespace) -> int:
    from inference4py import WhisperSpeechModel

    builder = WhisperSpeechModel.builder()
    model = args.model or _DEFAULT_WHISPER
    folder = Path(model).expanduser()
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
    timestamps = args.timestamps or args.format != "text"
    with builder.timestamps(timestamps).build() as asr:
        if args.format == "text" and not timestamps:
            echo = _Echo(sys.stdout)
            asr.transcribe(args.file, on_token=echo)
            echo.end_line()
            return EXIT_OK
        result = asr.transcribe(args.file)
    if args.format == "srt":
        sys.stdout.write(result.to_srt())
    elif args.format == "vtt":
        sys.stdout.write(result.to_vtt())
    else:
        for seg in result.segments:
            if seg.text.strip():
                print(f"[{_seconds(seg.start)} --> {_seconds(seg.end)}] {seg.text.strip()}")
    sys.stdout.flush()
    return EXIT_OK


def _seconds(t: float) -> str:
    minutes, seconds = divmod(max(t, 0.0), 60.0)
    return f"{int(minutes):02d}:{seconds:06.3f}"
