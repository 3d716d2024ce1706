"""A long English recording for benchmarks/whisper.py: espeak-ng speech with pauses, and its text.

    python benchmarks/whisper_audio.py --seconds 600          # -> benchmarks/work/whisper-speech-600s-seed0.wav + .json

Paragraphs of 2-6 sentences, made from templates and word lists under a fixed seed (varied
subjects, places, times, questions; no numbers, so the text has one spelling), each spoken by one espeak-ng call with one of four
English voices at 140-165 words per minute, resampled 22.05 -> 16 kHz (soxr VHQ) like
tools/real/whisper.py's clips.  Between paragraphs: 0.3-2.5 s of silence, and after every
fifth paragraph or so a long pause of 6-12 s (silence the decoder must not fill with text).
The last paragraph that fits ends the speech; silence pads the file to exactly ``--seconds``.
The JSON next to the WAV holds the full reference text and each paragraph's start, end, voice
and text.  A file made before with the same seconds, seed and ``VERSION`` is reused.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

WORK = Path(__file__).resolve().parent / "work"
SAMPLE_RATE = 16000
VERSION = 1  # bump when the text or the audio recipe changes: cached files are rebuilt
VOICES = ("en-us", "en-gb", "en-gb-x-rp", "en-us")  # en-us twice: the voice Whisper hears best
SPEEDS = (140, 150, 155, 165)

_NAMES = ("Anna", "Peter", "Maria", "the engineer", "our neighbour", "the doctor", "my brother", "the captain")
_PLACES = ("the harbour", "the library", "the train station", "the mountain village", "the market", "the old mill")
_THINGS = ("a red bicycle", "three apples", "the weekly report", "a wooden box", "an umbrella", "two tickets")
_TIMES = ("on Monday morning", "after lunch", "late in the evening", "before sunrise", "in the spring", "today")
_VERBS = ("carried", "found", "painted", "repaired", "borrowed", "ordered", "forgot", "sold")
_ADJ = ("quiet", "crowded", "cold", "bright", "narrow", "busy", "green", "famous")
_TEMPLATES = (
    "{name} {verb} {thing} {time}.",
    "{time}, {name} walked to {place} and {verb} {thing}.",
    "The {adj} street near {place} was full of people {time}.",
    "Why did {name} leave {thing} at {place}?",
    "There were many visitors at {place} {time}.",
    "If the weather stays {adj}, we will meet at {place} {time}.",
    "{name} said that {place} had become too {adj} for a quiet walk.",
    "The price of {thing} went up again {time}.",
    "Nobody expected {name} to arrive at {place} with {thing}.",
    "Please write down the address of {place} before you forget it.",
    "The train to {place} was late again, so {name} waited for an hour.",
    "In the end, {name} decided that {thing} was not worth the trouble.",
)


def sentence(rng: random.Random) -> str:
    text = rng.choice(_TEMPLATES).format(
        name=rng.choice(_NAMES),
        place=rng.choice(_PLACES),
        thing=rng.choice(_THINGS),
        time=rng.choice(_TIMES),
        verb=rng.choice(_VERBS),
        adj=rng.choice(_ADJ),
    )
    return text[0].upper() + text[1:]


def speak(text: str, voice: str, speed: int, espeak: str) -> np.ndarray:
    """espeak-ng's speech of ``text`` as float32 samples at 16 kHz."""
    import soundfile as sf
    import soxr

    with tempfile.TemporaryDirectory(prefix="whisper-audio-") as tmp:
        raw = Path(tmp) / "speech.wav"
        subprocess.run([espeak, "-v", voice, "-s", str(speed), "-w", str(raw), text], check=True)
        samples, rate = sf.read(str(raw), dtype="float32")
    if samples.ndim > 1:
        samples = samples.mean(axis=1)
    return soxr.resample(samples, rate, SAMPLE_RATE, quality="VHQ").astype(np.float32)


def paths(seconds: float, seed: int, work: Path = WORK) -> tuple[Path, Path]:
    stem = f"whisper-speech-{seconds:g}s-seed{seed}"
    return work / f"{stem}.wav", work / f"{stem}.json"


def make(seconds: float, seed: int = 0, work: Path = WORK, *, force: bool = False) -> tuple[Path, dict[str, Any]]:
    """The recording's WAV path and its description (``text``, ``seconds``, ``paragraphs``), made once."""
    import soundfile as sf

    wav, meta_path = paths(seconds, seed, work)
    if wav.is_file() and meta_path.is_file() and not force:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if meta.get("version") == VERSION:
            return wav, meta
    espeak = shutil.which("espeak-ng")
    if espeak is None:
        raise RuntimeError("espeak-ng is not installed: `apt-get install -y espeak-ng` (Debian), then rerun.")
    rng = random.Random(seed)
    total = int(round(seconds * SAMPLE_RATE))
    pieces: list[np.ndarray] = [np.zeros(int(0.5 * SAMPLE_RATE), dtype=np.float32)]  # a short lead-in
    used = pieces[0].size
    paragraphs: list[dict[str, Any]] = []
    misses = 0
    while misses < 3:
        n = rng.randint(2, 6) if misses == 0 else 1  # near the end: one sentence at a time
        text = " ".join(sentence(rng) for _ in range(n))
        voice, speed = rng.choice(VOICES), rng.choice(SPEEDS)
        speech = speak(text, voice, speed, espeak)
        long_pause = len(paragraphs) % 5 == 4
        pause = rng.uniform(6.0, 12.0) if long_pause else rng.uniform(0.3, 2.5)
        gap = np.zeros(int(pause * SAMPLE_RATE), dtype=np.float32)
        if used + speech.size > total:
            misses += 1
            continue
        paragraphs.append(
            {
                "start": round(used / SAMPLE_RATE, 3),
                "end": round((used + speech.size) / SAMPLE_RATE, 3),
                "voice": voice,
                "speed": speed,
                "pause_after": round(min(gap.size, total - used - speech.size) / SAMPLE_RATE, 3),
                "text": text,
            }
        )
        pieces += [speech, gap]
        used += speech.size + gap.size
        if used >= total:
            break
    audio = np.concatenate(pieces)[:total]
    audio = np.pad(audio, (0, total - audio.size))
    pcm = np.round(np.clip(audio, -1.0, 32767 / 32768) * 32768).astype(np.int16)
    work.mkdir(parents=True, exist_ok=True)
    sf.write(str(wav), pcm, SAMPLE_RATE, subtype="PCM_16")
    version = subprocess.run([espeak, "--version"], capture_output=True, text=True).stdout.strip()
    meta = {
        "generator": "benchmarks/whisper_audio.py",
        "version": VERSION,
        "espeak_ng": version,
        "seed": seed,
        "sample_rate": SAMPLE_RATE,
        "seconds": total / SAMPLE_RATE,
        "speech_seconds": round(sum(p["end"] - p["start"] for p in paragraphs), 3),
        "words": len(" ".join(p["text"] for p in paragraphs).split()),
        "text": " ".join(p["text"] for p in paragraphs),
        "paragraphs": paragraphs,
    }
    meta_path.write_text(json.dumps(meta, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return wav, meta


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=600.0, help="length of the recording (default 600)")
    ap.add_argument("--seed", type=int, default=0, help="text, voices and pauses (default 0)")
    ap.add_argument("--work", type=Path, default=WORK, help=f"output folder (default {WORK})")
    ap.add_argument("--force", action="store_true", help="remake the file even when it exists")
    args = ap.parse_args(argv)
    wav, meta = make(args.seconds, args.seed, args.work, force=args.force)
    print(
        f"{wav}: {meta['seconds']:.1f} s, {len(meta['paragraphs'])} paragraphs, "
        f"{meta['speech_seconds']:.1f} s of speech, {meta['words']} words"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
