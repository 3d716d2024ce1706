"""transcribe(vad=...): only the speech Silero VAD finds is transcribed; times are the recording's.

The recording is tests/speech/test_vad.py's: clip A, 20 s of noise, clip B (espeak-ng speech).  The
tiny Whisper fixture's text is noise, so the checks are on what is decoded and where it is placed.
"""

from __future__ import annotations

import numpy as np
import pytest

from inference4py import WhisperSpeechModel
from inference4py.audio import SAMPLE_RATE, load_audio
from inference4py.errors import ConfigurationError
from inference4py.speech.vad import SileroVad, SpeechTimeMap, VadOptions
from tests.conftest import FIXTURES, MODELS
from tests.speech.test_vad import compose

VAD = FIXTURES / "vad"


@pytest.fixture(scope="module")
def asr():
    with WhisperSpeechModel.builder().model_path(MODELS / "whisper").build() as model:
        yield model


@pytest.fixture(scope="module")
def recording():
    import json

    reference = json.loads((VAD / "reference.json").read_text(encoding="utf-8"))
    audio, _ = compose(load_audio(VAD / "speech-a.flac"), load_audio(VAD / "speech-b.flac"), reference["recipe"])
    return audio


@pytest.fixture(scope="module")
def vad():
    return SileroVad(VAD / "silero_vad_v6.onnx")


def expected_start(time_map, want, region, started):
    """DTW's start of word ``want`` mapped back; for the first word of its region, the region's onset
    (when that is before the word's end and within MAX_ONSET_SHIFT of DTW's start)."""
    from inference4py.speech.speech_map import MAX_ONSET_SHIFT

    start = time_map.to_original_in(want.start, region)
    end = time_map.to_original_in(want.end, region)
    onset = time_map.onset_of(region)
    if region not in started:
        started.add(region)
        if onset is not None and onset < end and abs(onset - start) <= MAX_ONSET_SHIFT:
            return onset
    return start


@pytest.mark.parametrize("word_onsets", [True, False])
def test_only_the_speech_is_decoded_and_times_are_the_recordings(asr, vad, recording, word_onsets, monkeypatch):
    from inference4py.speech import speech_map

    # the tiny fixture's text is noise and DTW puts the second region's first word 2.6 s after its
    # onset, past the 1 s bound (MAX_ONSET_SHIFT): widened here so that the rule shows end to end
    monkeypatch.setattr(speech_map, "MAX_ONSET_SHIFT", 10.0)
    regions = vad.speech_regions(recording)
    assert len(regions) == 2  # the two sentences; the 20 s gap is not speech
    speech_map = vad.speech_map(recording)
    assert speech_map.regions == tuple(regions)
    assert all(s < o < s + 0.4 * SAMPLE_RATE + 1 for (s, _), o in zip(regions, speech_map.onsets))  # in the padding
    time_map = speech_map if word_onsets else SpeechTimeMap(regions)
    speech = time_map.extract(recording)
    kwargs = {"language": "en", "timestamps": True, "max_new_tokens": 24, "word_timestamps": True}
    direct = asr.transcribe((speech, SAMPLE_RATE), **kwargs)
    options = VadOptions(word_onsets=word_onsets)
    result = asr.transcribe((recording, SAMPLE_RATE), vad=vad, vad_options=options, **kwargs)
    assert result.token_ids == direct.token_ids and result.text == direct.text
    assert result.duration == pytest.approx(recording.size / SAMPLE_RATE)
    assert len(result.segments) == len(direct.segments) > 0
    started: set[int] = set()
    moved = 0
    for got, want in zip(result.segments, direct.segments):
        assert len(got.words) == len(want.words)
        for w_got, w_want in zip(got.words, want.words):
            # a word is placed in the region its middle lies in, both ends inside that region; the
            # first word of a region starts at the region's onset (with word_onsets)
            region = time_map.region_at((w_want.start + w_want.end) / 2)
            start = expected_start(time_map, w_want, region, started)
            moved += start != time_map.to_original_in(w_want.start, region)
            assert w_got.start == pytest.approx(start, abs=1e-3)
            assert w_got.end == pytest.approx(time_map.to_original_in(w_want.end, region), abs=1e-3)
            low, high = (r / SAMPLE_RATE for r in regions[region])
            assert low <= w_got.start <= w_got.end <= high
        # a segment keeps its times, unless one lies in another region than the word next to it
        start, end = time_map.to_original(want.start), time_map.to_original(want.end, is_end=True)
        if want.words:
            first, last = want.words[0], want.words[-1]
            if time_map.region_at(want.start) != time_map.region_at((first.start + first.end) / 2):
                start = got.words[0].start
            if time_map.region_at(want.end, is_end=True) != time_map.region_at((last.start + last.end) / 2):
                end = got.words[-1].end
            if got.words[0].start != time_map.to_original_in(
                first.start, time_map.region_at((first.start + first.end) / 2)
            ):
                start = min(start, got.words[0].start)  # a segment starts no later than its moved first word
        assert got.start == pytest.approx(start, abs=1e-3)
        assert got.end == pytest.approx(max(start, end), abs=1e-3)
    assert (moved > 0) == word_onsets  # the setting matters on this recording
    # a time in the second sentence is placed after the gap, within 0.1 s of where it was spoken
    first_len = (regions[0][1] - regions[0][0]) / SAMPLE_RATE
    later = first_len + 0.5
    assert time_map.to_original(later) == pytest.approx(regions[1][0] / SAMPLE_RATE + 0.5, abs=0.1)
    # nothing starts inside the gap
    gap = (regions[0][1] / SAMPLE_RATE, regions[1][0] / SAMPLE_RATE)
    assert not any(gap[0] < s.start < gap[1] for s in result.segments)
    assert not any(gap[0] < w.start < gap[1] for s in result.segments for w in s.words)


@pytest.mark.parametrize("word_onsets", [True, False])
def test_vad_chunks_in_a_batch_place_words_as_the_sequential_path(asr, vad, recording, word_onsets):
    from inference4py.speech.vad import chunk_speech

    kwargs = {"language": "en", "timestamps": True, "max_new_tokens": 24, "word_timestamps": True}
    options = VadOptions(word_onsets=word_onsets)
    alone = asr.transcribe((recording, SAMPLE_RATE), vad=vad, vad_options=options, **kwargs)
    (batched,) = asr.transcribe_batch(
        [(recording, SAMPLE_RATE)], parallel_chunks=True, vad=vad, vad_options=options, **kwargs
    )
    assert len(chunk_speech(recording, vad.speech_map(recording))) == 1  # one chunk: the same audio decoded
    assert batched.segments == alone.segments
    # three recordings' worth of speech: two chunks, each region's first word at its onset
    longer = np.concatenate([recording] * 3)
    (result,) = asr.transcribe_batch(
        [(longer, SAMPLE_RATE)], parallel_chunks=True, vad=vad, vad_options=options, **kwargs
    )
    speech = vad.speech_map(longer)
    chunks = chunk_speech(longer, speech if word_onsets else SpeechTimeMap(speech.regions))
    assert len(chunks) == 2 and all((c.time_map.onsets is not None) == word_onsets for c in chunks)
    got = [w for s in result.segments for w in s.words]
    want = []
    for chunk in chunks:
        started: set[int] = set()
        for s in asr.transcribe((chunk.audio, SAMPLE_RATE), **kwargs).segments:
            for w in s.words:
                region = chunk.time_map.region_at((w.start + w.end) / 2)
                want.append(
                    (expected_start(chunk.time_map, w, region, started), chunk.time_map.to_original_in(w.end, region))
                )
    assert len(got) == len(want) > 0
    for w, (start, end) in zip(got, want):
        assert (w.start, w.end) == (pytest.approx(start, abs=1e-3), pytest.approx(end, abs=1e-3))


def test_a_recording_without_speech_gives_no_text(asr, vad):
    silence = np.random.default_rng(0).standard_normal(10 * SAMPLE_RATE).astype(np.float32) * 0.001
    result = asr.transcribe((silence, SAMPLE_RATE), language="en", vad=vad)
    assert result.text == "" and result.segments == () and result.token_ids == ()
    assert result.duration == pytest.approx(10.0)


def test_vad_in_a_batch_and_from_a_path(asr, vad, recording):
    kwargs = {"language": "en", "timestamps": True, "max_new_tokens": 24}
    alone = asr.transcribe((recording, SAMPLE_RATE), vad=VAD / "silero_vad_v6.onnx", **kwargs)
    batch = asr.transcribe_batch(
        [(recording, SAMPLE_RATE), (recording[: 5 * SAMPLE_RATE], SAMPLE_RATE)], vad=vad, **kwargs
    )
    assert batch[0] == alone
    tight = asr.transcribe((recording, SAMPLE_RATE), vad=vad, vad_options=VadOptions(speech_pad_ms=30), **kwargs)
    assert tight.duration == alone.duration
    with pytest.raises(ConfigurationError, match="vad must be"):
        asr.transcribe((recording, SAMPLE_RATE), vad=3)


def test_cli_vad(tmp_path, capsys, recording):
    import soundfile as sf

    from inference4py.cli import main

    path = tmp_path / "meeting.wav"
    sf.write(str(path), recording, SAMPLE_RATE, subtype="FLOAT")
    args = ["transcribe", str(path), "-m", str(MODELS / "whisper"), "-l", "en", "--max-new-tokens", "24"]
    assert main([*args, "--format", "json", "--vad-model", str(VAD / "silero_vad_v6.onnx")]) == 0
    import json

    data = json.loads(capsys.readouterr().out)
    with WhisperSpeechModel.builder().model_path(MODELS / "whisper").timestamps().build() as asr:
        want = asr.transcribe(str(path), language="en", max_new_tokens=24, vad=VAD / "silero_vad_v6.onnx")
    assert data["text"] == want.text
    assert [(s["start"], s["end"]) for s in data["segments"]] == [(s.start, s.end) for s in want.segments]
