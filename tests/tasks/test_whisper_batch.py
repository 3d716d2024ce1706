"""transcribe_batch: several recordings' windows encoded and decoded as batches, each exactly as alone."""

from __future__ import annotations

import pytest

from inference4py import WhisperSpeechModel
from inference4py.audio import SAMPLE_RATE
from inference4py.errors import ConfigurationError
from inference4py.tasks.whisper import FALLBACK_TEMPERATURES
from tests.conftest import MODELS
from tests.tasks.test_whisper import clips

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
    before = asr._runtime.encoder_runs
    asr.transcribe_batch(audios, batch_size=8, language="en", timestamps=True, max_new_tokens=24)
    batched = asr._runtime.encoder_runs - before
    windows = []
    for a in audios:
        before = asr._runtime.encoder_runs
        asr.transcribe(a, language="en", timestamps=True, max_new_tokens=24)
        windows.append(asr._runtime.encoder_runs - before)
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
