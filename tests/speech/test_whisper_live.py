"""WhisperSpeechModel.transcribe_stream: audio fed in chunks, each stretch of speech transcribed as it ends."""

from __future__ import annotations

import numpy as np
import pytest

from inference4py import WhisperSpeechModel
from inference4py.errors import AudioError, ConfigurationError
from inference4py.speech import TranscribeOptions
from inference4py.speech.live import LIVE_VAD_OPTIONS, ProbabilityStream
from inference4py.speech.vad import SileroVad, VadOptions
from inference4py.tasks.options import RequestOptions
from tests.conftest import FIXTURES, MODELS, load_reference
from tests.test_audio import _clips, assemble

VAD_FILE = FIXTURES / "vad" / "silero_vad_v6.onnx"


@pytest.fixture(scope="module")
def asr():
    with WhisperSpeechModel.builder().model_path(MODELS / "whisper").build() as model:
        yield model


@pytest.fixture(scope="module")
def vad():
    return SileroVad(VAD_FILE)


@pytest.fixture(scope="module")
def recording():
    """The long-form fixture: 43.5 s, four stretches of speech between silences."""
    return assemble(load_reference("whisper")["long_recipe"], _clips())


def _pieces(x: np.ndarray, size: int) -> list[np.ndarray]:
    return [x[i : i + size] for i in range(0, len(x), size)]


def test_the_window_stream_gives_the_whole_file_probabilities(vad, recording):
    stream = ProbabilityStream(vad)
    fed = np.concatenate([stream.feed(p) for p in _pieces(recording, 777)] + [stream.flush()])
    np.testing.assert_allclose(fed, vad.speech_probabilities(recording), atol=1e-5)


def test_the_same_segments_however_the_audio_is_chunked(asr, vad, recording):
    def run(size):
        return [
            (s.start, s.end, s.text, s.token_ids)
            for s in asr.transcribe_stream(_pieces(recording, size), vad=vad, max_new_tokens=16)
        ]

    whole = run(len(recording))
    assert whole == run(1600) == run(7 * 16000 + 333)  # 100 ms chunks, and odd ones
    starts = [s[0] for s in whole]
    assert starts == sorted(starts) and starts[0] >= 0 and whole[-1][1] <= len(recording) / 16000 + 0.05
    regions = vad.speech_regions(recording, LIVE_VAD_OPTIONS)
    assert len(regions) >= 4
    # every segment lies in a stretch the detector finds in the whole recording (its times were shifted right)
    for start, end, *_ in whole:
        assert any(a / 16000 - 0.1 <= start and end <= b / 16000 + 0.1 for a, b in regions), (start, end, regions)


def test_typed_options_give_the_segments_of_keywords(asr, vad, recording):
    chunks = _pieces(recording[: 12 * 16000], 16000)
    keywords = _times(asr, vad, chunks, language="en", best_of=2)
    typed = asr.transcribe_stream(
        chunks,
        vad=vad,
        language="en",
        options=TranscribeOptions(best_of=2, generation=RequestOptions(max_new_tokens=8)),
    )
    assert [(s.start, s.end, s.token_ids) for s in typed] == keywords and keywords


def _times(asr, vad, chunks, **kw):
    return [(s.start, s.end, s.token_ids) for s in asr.transcribe_stream(chunks, vad=vad, max_new_tokens=8, **kw)]


def test_speech_longer_than_the_limit_is_cut_the_same_however_it_is_chunked(asr, vad, recording):
    """No pause for 26 s: the 15 s limit cuts it; the cut, and the stretch after it, never move with the chunks."""
    a, b = vad.speech_regions(recording, LIVE_VAD_OPTIONS)[0]
    speech = np.tile(recording[a:b], 3)
    whole = _times(asr, vad, [speech])
    assert len(whole) >= 2 and whole == _times(asr, vad, _pieces(speech, 1600)) == _times(
        asr, vad, _pieces(speech, 48000)
    )


def test_a_burst_shorter_than_min_speech_is_kept_until_it_is_long_enough(asr, vad, recording):
    """Silero's own rules (250 ms of speech at least): the start of speech is never dropped as silence."""
    rules = VadOptions(min_speech_duration_ms=250, min_silence_duration_ms=100, speech_pad_ms=30)
    whole = _times(asr, vad, [recording], vad_options=rules)
    assert whole and whole == _times(asr, vad, _pieces(recording, 512), vad_options=rules)


def test_another_rate_is_resampled_as_one_signal(asr, vad, recording):
    """A 44.1 kHz stream in odd chunks gives what the whole 44.1 kHz signal gives: one streaming resampler."""
    soxr = pytest.importorskip("soxr")
    x = soxr.resample(recording, 16000, 44100, quality="HQ").astype(np.float32)
    whole = _times(asr, vad, [(x, 44100)])
    assert whole and whole == _times(asr, vad, [(p, 44100) for p in _pieces(x, 1024)])
    with pytest.raises(AudioError, match="keeps one sample rate"):
        _times(asr, vad, [(x[:44100], 44100), (recording[:16000], 16000)])


def test_a_stretch_is_yielded_before_the_stream_ends(asr, vad, recording):
    fed = 0

    def chunks():
        nonlocal fed
        for piece in _pieces(recording, 3200):
            fed += len(piece)
            yield piece

    first = next(iter(asr.transcribe_stream(chunks(), vad=vad, max_new_tokens=8)))
    assert fed < len(recording) / 2  # the first stretch's text came while the audio was still arriving
    assert first.end <= fed / 16000


def test_bad_streams_are_clear_errors(asr, vad):
    with pytest.raises(AudioError, match="held no samples"):
        list(asr.transcribe_stream(iter([]), vad=vad))
    with pytest.raises(AudioError, match="numpy array"):
        list(asr.transcribe_stream(["not audio"], vad=vad))
    with pytest.raises(ConfigurationError, match="needs a voice activity detector"):
        list(asr.transcribe_stream([np.zeros(1600, np.float32)], vad=False))
    with pytest.raises(ConfigurationError, match="sets timestamps itself"):
        list(asr.transcribe_stream([np.zeros(1600, np.float32)], vad=vad, timestamps=False))
    never_read = iter(["not audio"])  # options are typed before the first chunk is read
    with pytest.raises(ConfigurationError, match="max_new_tokns"):
        list(asr.transcribe_stream(never_read, vad=vad, max_new_tokns=8))
    with pytest.raises(ConfigurationError, match="sets vad itself"):
        list(asr.transcribe_stream(never_read, vad=vad, options=TranscribeOptions(vad=True)))
    assert next(never_read) == "not audio"
    bad = VadOptions(min_silence_duration_ms=100, speech_pad_ms=400)
    with pytest.raises(ConfigurationError, match="min_silence_duration_ms >= 2 \\* speech_pad_ms"):
        list(asr.transcribe_stream([np.zeros(1600, np.float32)], vad=vad, vad_options=bad))
    assert list(asr.transcribe_stream([np.zeros(16000, np.float32)] * 3, vad=vad)) == []  # silence: nothing
    stereo_44k = np.zeros((44100, 2), np.float32)  # other rates and channels are converted per chunk
    assert list(asr.transcribe_stream([(stereo_44k, 44100)], vad=vad)) == []
