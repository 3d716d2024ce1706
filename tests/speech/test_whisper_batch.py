"""transcribe_batch: several recordings' windows encoded and decoded as batches, each exactly as alone."""

from __future__ import annotations

import pytest

from inference4py import WhisperSpeechModel
from inference4py.audio import SAMPLE_RATE
from inference4py.errors import ConfigurationError
from inference4py.speech import FALLBACK_TEMPERATURES
from tests.conftest import MODELS
from tests.speech.test_whisper import clips

NAMES = ["tone", "long", "chirp", "noise", "bursts"]


@pytest.fixture(scope="module")
def asr():
    with WhisperSpeechModel.builder().model_path(MODELS / "whisper").build() as model:
        yield model


SETTINGS = {
    "timestamps": {"language": "en", "timestamps": True},
    "detected-language": {"timestamps": True},
    "no-timestamps": {"language": "en"},
    "context-words": {
        "language": "en",
        "timestamps": True,
        "word_timestamps": True,
        "condition_on_previous_text": True,
        "initial_prompt": "Glossary: ONNX.",
    },
    "fallback": {"language": "en", "timestamps": True, "temperature": FALLBACK_TEMPERATURES, "seed": 5},
    # sampled attempts keep the best of 3 candidates, each candidate a row of the batch
    "best-of-words": {
        "language": "en",
        "timestamps": True,
        "word_timestamps": True,
        "temperature": (0.0, 0.4, 1.0),
        "best_of": 3,
        "seed": 7,
    },
}


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_each_row_is_the_recording_alone(asr, name):
    kwargs = {**SETTINGS[name], "max_new_tokens": 24}
    audios = [(clips()[n], SAMPLE_RATE) for n in NAMES]
    alone = [asr.transcribe(a, **kwargs) for a in audios]
    for batch_size in (2, 8):
        batch = asr.transcribe_batch(audios, batch_size=batch_size, **kwargs)
        assert [b.token_ids for b in batch] == [a.token_ids for a in alone]
        assert batch == alone  # text, segments, their numbers and words too (elapsed is not compared)


def test_windows_share_encoder_runs(asr):
    audios = [(clips()[n], SAMPLE_RATE) for n in NAMES]
    before = asr._parts.backend.encoder_runs
    asr.transcribe_batch(audios, batch_size=8, language="en", timestamps=True, max_new_tokens=24)
    batched = asr._parts.backend.encoder_runs - before
    windows = []
    for a in audios:
        before = asr._parts.backend.encoder_runs
        asr.transcribe(a, language="en", timestamps=True, max_new_tokens=24)
        windows.append(asr._parts.backend.encoder_runs - before)
    assert batched == max(windows) < sum(windows)  # one encoder run per round of windows


def test_errors(asr):
    audio = (clips()["tone"], SAMPLE_RATE)
    with pytest.raises(ConfigurationError, match="batch_size"):
        asr.transcribe_batch([audio], batch_size=0)
    with pytest.raises(ConfigurationError, match="num_beams"):
        asr.transcribe_batch([audio], language="en", num_beams=2)
    with pytest.raises(ConfigurationError, match="list of recordings"):
        asr.transcribe_batch(audio)
    assert asr.transcribe_batch([]) == []


def test_parallel_chunks_are_each_chunk_alone(asr):
    """One long recording cut in fixed 30 s windows, all decoded as one batch: each window is itself alone."""
    long = clips()["long"]
    kwargs = {"language": "en", "timestamps": True, "max_new_tokens": 24, "word_timestamps": True}
    (result,) = asr.transcribe_batch([(long, SAMPLE_RATE)], parallel_chunks=True, **kwargs)
    window = 30 * SAMPLE_RATE
    pieces = [long[s : s + window] for s in range(0, long.size, window)]
    assert len(pieces) == 2
    alone = [asr.transcribe((p, SAMPLE_RATE), **kwargs) for p in pieces]
    assert result.token_ids == tuple(t for a in alone for t in a.token_ids)
    assert result.text == "".join(a.text for a in alone)
    assert result.duration == pytest.approx(long.size / SAMPLE_RATE)
    want = [(s.start + 30.0 * i, s.end + 30.0 * i, s.token_ids) for i, a in enumerate(alone) for s in a.segments]
    got = [(s.start, s.end, s.token_ids) for s in result.segments]
    assert [g[2] for g in got] == [w[2] for w in want]
    for (gs, ge, _), (ws, we, _) in zip(got, want):
        assert gs == pytest.approx(ws, abs=1e-3) and ge == pytest.approx(we, abs=1e-3)
    words = [w.start for s in result.segments for w in s.words]
    assert words and max(words) > 30.0  # the second window's words are placed in the recording too


def test_parallel_vad_chunks(asr):
    import json

    from inference4py.audio import load_audio
    from inference4py.speech.vad import SileroVad, chunk_speech
    from tests.conftest import FIXTURES
    from tests.speech.test_vad import compose

    vad_dir = FIXTURES / "vad"
    recipe = json.loads((vad_dir / "reference.json").read_text(encoding="utf-8"))["recipe"]
    recording, _ = compose(load_audio(vad_dir / "speech-a.flac"), load_audio(vad_dir / "speech-b.flac"), recipe)
    vad = SileroVad(vad_dir / "silero_vad_v6.onnx")
    kwargs = {"language": "en", "timestamps": True, "max_new_tokens": 24}
    two = [(recording, SAMPLE_RATE), (recording[: 8 * SAMPLE_RATE], SAMPLE_RATE)]
    results = asr.transcribe_batch(two, parallel_chunks=True, vad=vad, batch_size=4, **kwargs)
    chunks = chunk_speech(recording, vad.speech_regions(recording))
    alone = [asr.transcribe((c.audio, SAMPLE_RATE), **kwargs) for c in chunks]
    assert results[0].token_ids == tuple(t for a in alone for t in a.token_ids)
    want = [round(c.to_original(s.start), 3) for c, a in zip(chunks, alone) for s in a.segments]
    assert [s.start for s in results[0].segments] == want
    assert results[1].duration == pytest.approx(8.0)
