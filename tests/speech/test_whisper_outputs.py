"""Transcription outputs (SRT / WebVTT per segment or per word, JSON) and the transcribe CLI over several files."""

from __future__ import annotations

import json

import pytest
import soundfile as sf

from inference4py import Segment, Transcription, WhisperSpeechModel
from inference4py.audio import SAMPLE_RATE
from inference4py.cli import main
from inference4py.errors import ConfigurationError
from inference4py.speech import Word
from tests.conftest import MODELS
from tests.speech.test_whisper import clips

T = Transcription(
    " Hello, world. Bye.",
    (
        Segment(
            0.0,
            2.5,
            " Hello, world.",
            (1, 2),
            -0.2,
            0.01,
            1.1,
            0.0,
            (Word(0.0, 1.0, " Hello,", 0.9), Word(1.2, 2.5, " world.", 0.8)),
        ),
        Segment(2.5, 3.0, " ", (3,)),
        Segment(3661.0, 3662.25, " Bye.", (4,), words=(Word(3661.0, 3662.25, " Bye.", 0.7),)),
    ),
    "en",
    (1, 2, 3, 4),
    duration=3700.0,
)


def test_srt_and_vtt_per_segment_and_per_word():
    assert T.to_srt() == ("1\n00:00:00,000 --> 00:00:02,500\nHello, world.\n\n2\n01:01:01,000 --> 01:01:02,250\nBye.\n")
    assert T.to_srt(words=True).splitlines()[:7] == [
        "1", "00:00:00,000 --> 00:00:01,000", "Hello,", "", "2", "00:00:01,200 --> 00:00:02,500", "world.",
    ]  # fmt: skip
    assert T.to_vtt(words=True).startswith("WEBVTT\n\n00:00:00.000 --> 00:00:01.000\nHello,\n")
    assert T.to_vtt().endswith("01:01:01.000 --> 01:01:02.250\nBye.\n")
    no_words = Transcription(" a", (Segment(0.0, 1.0, " a"),), "en", ())
    with pytest.raises(ConfigurationError, match="word_timestamps=True"):
        no_words.to_srt(words=True)


def test_json():
    data = json.loads(T.to_json())
    assert data["text"] == T.text and data["language"] == "en" and data["duration"] == 3700.0
    first = data["segments"][0]
    assert first["avg_logprob"] == -0.2 and first["no_speech_prob"] == 0.01
    assert first["compression_ratio"] == 1.1 and first["temperature"] == 0.0
    assert first["words"][1] == {"start": 1.2, "end": 2.5, "word": " world.", "probability": 0.8}
    assert first["token_ids"] == [1, 2]


def _write(tmp_path, name):
    path = tmp_path / f"{name}.wav"
    sf.write(str(path), clips()[name], SAMPLE_RATE, subtype="FLOAT")
    return str(path)


def test_cli_several_files_as_json(tmp_path, capsys):
    files = [_write(tmp_path, n) for n in ("tone", "chirp")]
    args = ["transcribe", *files, "-m", str(MODELS / "whisper"), "-l", "en", "--max-new-tokens", "24"]
    assert main([*args, "--format", "json", "--word-timestamps", "--batch-size", "2"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["file"] for d in data] == files
    with WhisperSpeechModel.builder().model_path(MODELS / "whisper").timestamps().build() as asr:
        alone = [asr.transcribe(f, language="en", max_new_tokens=24, word_timestamps=True) for f in files]
    for got, want in zip(data, alone):
        assert got["text"] == want.text
        assert [w["word"] for s in got["segments"] for w in s["words"]] == [
            w.word for s in want.segments for w in s.words
        ]


def test_cli_word_cues_to_files(tmp_path, capsys):
    files = [_write(tmp_path, n) for n in ("noise", "bursts")]
    out = tmp_path / "subs"
    args = ["transcribe", *files, "-m", str(MODELS / "whisper"), "-l", "en", "--max-new-tokens", "24"]
    assert main([*args, "--format", "srt", "--word-timestamps", "--output-dir", str(out)]) == 0
    printed = capsys.readouterr().out.split()
    assert printed == [str(out / "noise.srt"), str(out / "bursts.srt")]
    with WhisperSpeechModel.builder().model_path(MODELS / "whisper").timestamps().build() as asr:
        want = asr.transcribe(files[0], language="en", max_new_tokens=24, word_timestamps=True)
    assert (out / "noise.srt").read_text(encoding="utf-8") == want.to_srt(words=True)
    # several files printed: one header each; plain text without timestamps
    assert main([*args, "--temperature-fallback", "--condition-on-previous-text", "--initial-prompt", "hi"]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"==> {files[0]} <==\n") and f"\n==> {files[1]} <==\n" in text


def test_cli_best_of(tmp_path, capsys):
    from inference4py.speech import FALLBACK_TEMPERATURES

    path = _write(tmp_path, "noise")
    args = ["transcribe", path, "-m", str(MODELS / "whisper"), "-l", "en", "--max-new-tokens", "24", "--format", "json"]
    assert main([*args, "--temperature-fallback", "--best-of", "2", "--seed", "7"]) == 0
    data = json.loads(capsys.readouterr().out)
    with WhisperSpeechModel.builder().model_path(MODELS / "whisper").timestamps().build() as asr:
        options = {"language": "en", "max_new_tokens": 24, "temperature": FALLBACK_TEMPERATURES, "seed": 7}
        want = asr.transcribe(path, best_of=2, **options)
        other = asr.transcribe(path, best_of=1, **options)
    assert data["text"] == want.text
    assert want.text != other.text  # the random fixture falls back: best_of changes what is kept
    assert main([*args, "--temperature-fallback", "--best-of", "0"]) != 0
    assert "best_of" in capsys.readouterr().err


def test_cli_parallel_chunks(tmp_path, capsys):
    path = _write(tmp_path, "long")
    args = ["transcribe", path, "-m", str(MODELS / "whisper"), "-l", "en", "--max-new-tokens", "24"]
    assert main([*args, "--format", "json", "--parallel-chunks"]) == 0
    data = json.loads(capsys.readouterr().out)
    with WhisperSpeechModel.builder().model_path(MODELS / "whisper").timestamps().build() as asr:
        (want,) = asr.transcribe_batch([path], language="en", max_new_tokens=24, parallel_chunks=True)
    assert data["text"] == want.text and len(data["segments"]) == len(want.segments)


def test_progress(tmp_path, capsys):
    calls: list[tuple[float, float]] = []
    long = clips()["long"]
    with WhisperSpeechModel.builder().model_path(MODELS / "whisper").timestamps().build() as asr:
        asr.transcribe(
            (long, SAMPLE_RATE), language="en", max_new_tokens=24, on_progress=lambda d, t: calls.append((d, t))
        )
        total = long.size / SAMPLE_RATE
        assert len(calls) >= 2 and calls[-1] == (pytest.approx(total), pytest.approx(total))
        assert [d for d, _ in calls] == sorted(d for d, _ in calls) and calls[0][0] < total
        batched: list[tuple[float, float]] = []
        asr.transcribe_batch(
            [(long, SAMPLE_RATE), (clips()["tone"], SAMPLE_RATE)],
            language="en",
            max_new_tokens=24,
            on_progress=lambda d, t: batched.append((d, t)),
        )
        assert (
            batched[-1][0] == pytest.approx(batched[-1][1]) == pytest.approx(total + clips()["tone"].size / SAMPLE_RATE)
        )
    path = _write(tmp_path, "long")
    assert (
        main(["transcribe", path, "-m", str(MODELS / "whisper"), "-l", "en", "--max-new-tokens", "8", "--progress"])
        == 0
    )
    err = capsys.readouterr().err
    assert "\r[" in err and err.rstrip().endswith(f"100%  {total:.1f} s / {total:.1f} s")
