"""Transcribe an audio file with Whisper: streamed text, then time-stamped segments.

Reading audio files needs the audio extra: pip install -e ".[audio]".

    python examples/transcribe.py meeting.mp3                          # whisper-base from the Hub
    python examples/transcribe.py talk.flac --language fr --translate  # French speech -> English text
    python examples/transcribe.py tests/fixtures/references/whisper/bursts.flac \\
        --model tests/fixtures/models/whisper --max-new-tokens 12      # offline, tiny random model
"""

import argparse
import sys
from pathlib import Path

from inference4py import WhisperSpeechModel


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("audio", help="audio file: wav, flac, mp3, ogg, ...")
    parser.add_argument("--model", default=None, help="hub id or local folder (default: the whisperBase preset)")
    parser.add_argument("--language", default=None, help="spoken language (default: detected)")
    parser.add_argument("--translate", action="store_true", help="translate into English")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="tokens per 30 s window")
    args = parser.parse_args()

    builder = WhisperSpeechModel.whisperBase()
    if args.model:
        builder = builder.model_path(args.model) if Path(args.model).is_dir() else builder.model_id(args.model)
    if args.language:
        builder = builder.language(args.language)
    if args.translate:
        builder = builder.task("translate")
    if args.max_new_tokens:
        builder = builder.max_new_tokens(args.max_new_tokens)

    with builder.build() as asr:
        # 1. plain text, printed while it is decoded
        result = asr.transcribe(args.audio, on_token=lambda piece: print(piece, end="", flush=True))
        print(f"\n[language: {result.language}, {result.duration:.1f} s of audio in {result.elapsed:.1f} s]")

        # 2. segments with timestamps (and the same as SRT subtitles)
        timed = asr.transcribe(args.audio, timestamps=True)
        for seg in timed.segments:
            print(f"{seg.start:7.2f} -> {seg.end:7.2f}  {seg.text.strip()}")
        sys.stdout.write(timed.to_srt())


if __name__ == "__main__":
    main()
