"""Voice activity detection (inference4py.speech.vad) on the real Silero VAD model.

Fixtures in tests/fixtures/vad/, made by tools/vad_reference.py: faster-whisper's bundled
Silero VAD (``silero_vad_v6.onnx``, MIT), two sentences spoken by espeak-ng, and
faster-whisper's own probabilities and regions on the test recording (clip A, 20 s of
noise, clip B) under several option sets.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

from inference4py.audio import load_audio
from inference4py.errors import (
    AudioError,
    ConfigurationError,
    HubError,
    InferenceError,
    ModelFilesMissingError,
    ModelLoadError,
    UnsupportedModelError,
)
from inference4py.speech.vad import (
    DEFAULT_FILENAME,
    DEFAULT_REPO,
    SAMPLE_RATE,
    WINDOW_SAMPLES,
    SileroVad,
    SpeechTimeMap,
    VadOptions,
    chunk_speech,
    regions_from_probabilities,
    time_map_from_probabilities,
)
from tests.conftest import FIXTURES, MODELS
from tests.hubserver import FakeHub, hub_client_online, populate_cache, reset_hub_client

VAD = FIXTURES / "vad"
MODEL = VAD / "silero_vad_v6.onnx"
RATE = SAMPLE_RATE
TOLERANCE = 0.1  # seconds: how far region boundaries and mapped times may be from the speech


def compose(a: np.ndarray, b: np.ndarray, recipe: dict) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """The recording of tools/vad_reference.py's compose(): noise, clip A, 20 s of noise, clip B, noise."""
    lead, gap, tail = (int(recipe[k] * RATE) for k in ("lead_s", "gap_s", "tail_s"))
    audio = np.zeros(lead + a.size + gap + b.size + tail, dtype=np.float32)
    audio[lead : lead + a.size] = a
    b_start = lead + a.size + gap
    audio[b_start : b_start + b.size] = b
    rng = np.random.default_rng(recipe["seed"])
    audio += (rng.standard_normal(audio.size) * recipe["noise_rms"]).astype(np.float32)
    return audio, [(lead, lead + a.size), (b_start, b_start + b.size)]


def speech_extent(samples: np.ndarray, level: float = 0.02) -> tuple[int, int]:
    """First and one past the last sample louder than ``level`` (the noise floor is 0.001 RMS)."""
    loud = np.flatnonzero(np.abs(samples) > level)
    return int(loud[0]), int(loud[-1]) + 1


@pytest.fixture(scope="module")
def reference() -> dict:
    return json.loads((VAD / "reference.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def vad() -> SileroVad:
    return SileroVad(MODEL)


@pytest.fixture(scope="module")
def recording(reference) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """The test recording, and where the speech (not the clips' own silence) is in it, in samples."""
    a, b = load_audio(VAD / "speech-a.flac"), load_audio(VAD / "speech-b.flac")
    audio, placed = compose(a, b, reference["recipe"])
    assert [list(p) for p in placed] == reference["clip_positions"]
    speech = []
    for (offset, _), clip in zip(placed, (a, b)):
        start, end = speech_extent(clip)
        speech.append((offset + start, offset + end))
    return audio, speech


# --------------------------------------------------------------------------- against faster-whisper


def test_the_fixture_model_is_the_one_the_reference_was_made_with(reference):
    assert hashlib.sha256(MODEL.read_bytes()).hexdigest() == reference["model_sha256"]


def test_probabilities_equal_faster_whispers(vad, recording, reference):
    audio, _ = recording
    probabilities = vad.speech_probabilities(audio)
    expected = np.array(reference["probabilities"], dtype=np.float32)
    assert probabilities.dtype == np.float32
    assert probabilities.shape == (math.ceil(audio.size / WINDOW_SAMPLES),) == expected.shape
    assert audio.size / WINDOW_SAMPLES > 1024  # more than one run of the sequence layout
    np.testing.assert_allclose(probabilities, expected, atol=1e-5)


@pytest.mark.parametrize("name", ["faster_whisper_defaults", "silero_defaults", "max_speech_2s", "no_padding"])
def test_regions_equal_faster_whispers(vad, recording, reference, name):
    audio, _ = recording
    expected = reference["regions"][name]
    options = VadOptions(**expected["options"])
    if name == "faster_whisper_defaults":  # ours differ from faster-whisper's only in the 30 s cap
        options = VadOptions(max_speech_duration_s=math.inf)
    assert vad.speech_regions(audio, options) == [tuple(r) for r in expected["regions"]]


def test_default_options_are_faster_whispers_with_a_30_s_cap():
    options = VadOptions()
    assert (options.threshold, options.neg_threshold, options.effective_neg_threshold) == (0.5, None, 0.35)
    assert (options.min_speech_duration_ms, options.min_silence_duration_ms, options.speech_pad_ms) == (0, 2000, 400)
    assert options.max_speech_duration_s == 30.0
    assert VadOptions(threshold=0.1).effective_neg_threshold == 0.01


# --------------------------------------------------------------------------- speech, 20 s of silence, speech


def test_regions_start_and_end_where_the_speech_does(vad, recording):
    audio, speech = recording
    regions = vad.speech_regions(audio, VadOptions(speech_pad_ms=0))
    assert len(regions) == 2
    for (start, end), (speech_start, speech_end) in zip(regions, speech):
        assert abs(start - speech_start) / RATE <= TOLERANCE
        assert abs(end - speech_end) / RATE <= TOLERANCE


def test_default_regions_are_the_speech_padded_by_400_ms(vad, recording):
    audio, speech = recording
    regions = vad.speech_regions(audio)
    assert len(regions) == 2
    pad = 0.4 * RATE
    for (start, end), (speech_start, speech_end) in zip(regions, speech):
        assert abs(start - max(0, speech_start - pad)) / RATE <= TOLERANCE
        assert abs(end - min(audio.size, speech_end + pad)) / RATE <= TOLERANCE


@pytest.mark.parametrize("pad_ms", [0, 30, 400])
def test_the_silent_part_is_in_no_region(vad, recording, pad_ms):
    audio, speech = recording
    silent = (
        speech[0][1] + int((pad_ms / 1000 + TOLERANCE) * RATE),
        speech[1][0] - int((pad_ms / 1000 + TOLERANCE) * RATE),
    )
    assert (silent[1] - silent[0]) / RATE > 19
    for start, end in vad.speech_regions(audio, VadOptions(speech_pad_ms=pad_ms, min_silence_duration_ms=100)):
        assert end <= silent[0] or start >= silent[1], (start / RATE, end / RATE)


def test_silence_and_noise_alone_have_no_speech(vad):
    rng = np.random.default_rng(1)
    assert vad.speech_regions(np.zeros(10 * RATE, np.float32)) == []
    assert vad.speech_regions((rng.standard_normal(10 * RATE) * 0.001).astype(np.float32)) == []
    assert vad.speech_regions(np.zeros(0, np.float32)) == []
    assert vad.speech_probabilities(np.zeros(0, np.float32)).shape == (0,)


def test_later_speech_is_found_at_its_original_time_after_chunking(vad, recording):
    """Issue 17: only speech goes to Whisper, and times in the chunk map back to the recording."""
    audio, speech = recording
    chunks = chunk_speech(audio, vad.speech_regions(audio))
    assert len(chunks) == 1  # 11 s of speech in one 30 s window, the 20 s of silence cut out
    chunk = chunks[0]
    assert chunk.duration < 15
    # where clip B's speech starts and ends in the chunk's audio, found there by its loudness
    first_region_length = chunk.time_map.regions[0][1] - chunk.time_map.regions[0][0]
    start, end = speech_extent(chunk.audio[first_region_length:])
    start_in_chunk, end_in_chunk = (first_region_length + start) / RATE, (first_region_length + end) / RATE
    assert abs(chunk.to_original(start_in_chunk) - speech[1][0] / RATE) <= TOLERANCE
    assert abs(chunk.to_original(end_in_chunk, is_end=True) - speech[1][1] / RATE) <= TOLERANCE
    # and clip A's, before the cut
    start, end = speech_extent(chunk.audio[:first_region_length])
    assert abs(chunk.to_original(start / RATE) - speech[0][0] / RATE) <= TOLERANCE
    assert abs(chunk.to_original(end / RATE, is_end=True) - speech[0][1] / RATE) <= TOLERANCE


def test_a_chunk_holds_exactly_its_regions_samples(vad, recording):
    audio, _ = recording
    regions = vad.speech_regions(audio)
    (chunk,) = chunk_speech(audio, regions)
    assert chunk.time_map.regions == tuple(regions)
    np.testing.assert_array_equal(chunk.audio, np.concatenate([audio[s:e] for s, e in regions]))
    assert chunk.start == regions[0][0] / RATE and chunk.end == regions[-1][1] / RATE
    # with the pauses kept the two regions span 30.5 s: too long for one chunk
    spanned = chunk_speech(audio, regions, keep_gaps=True)
    assert [c.time_map.regions for c in spanned] == [(regions[0],), (regions[1],)]
    merged = chunk_speech(audio, regions, keep_gaps=True, max_duration_s=31)
    assert len(merged) == 1 and merged[0].time_map.regions == ((regions[0][0], regions[1][1]),)
    np.testing.assert_array_equal(merged[0].audio, audio[regions[0][0] : regions[1][1]])
    assert merged[0].to_original(3.0) == pytest.approx(regions[0][0] / RATE + 3.0)


# --------------------------------------------------------------------------- regions from probabilities


def _probabilities(pattern: str) -> np.ndarray:
    """One window per character: '#' speech (0.9), '-' silence (0.05), '~' in between (0.4)."""
    return np.array([{"#": 0.9, "-": 0.05, "~": 0.4}[c] for c in pattern])


def test_hysteresis_between_the_two_thresholds():
    w = WINDOW_SAMPLES
    no_pad = VadOptions(speech_pad_ms=0, min_silence_duration_ms=0)
    # '~' (0.4: under threshold 0.5, over neg_threshold 0.35) neither starts nor ends speech
    assert regions_from_probabilities(_probabilities("--~~###~~~--"), 12 * w, no_pad) == [(4 * w, 10 * w)]
    assert regions_from_probabilities(_probabilities("~~~~"), 4 * w, no_pad) == []


def test_short_pauses_do_not_end_a_region_and_long_ones_do():
    w = WINDOW_SAMPLES
    options = VadOptions(speech_pad_ms=0, min_silence_duration_ms=5 * w * 1000 / RATE)
    assert regions_from_probabilities(_probabilities("##---##------"), 13 * w, options) == [(0, 7 * w)]
    assert regions_from_probabilities(_probabilities("##------##"), 10 * w, options) == [(0, 2 * w), (8 * w, 10 * w)]
    # the audio ends before the pause is long enough: the region runs to the end
    assert regions_from_probabilities(_probabilities("##---"), 5 * w, options) == [(0, 5 * w)]


def test_short_regions_are_dropped_and_speech_at_the_end_runs_to_the_last_sample():
    w = WINDOW_SAMPLES
    options = VadOptions(speech_pad_ms=0, min_silence_duration_ms=0, min_speech_duration_ms=3 * w * 1000 / RATE)
    assert regions_from_probabilities(_probabilities("-##-####-"), 9 * w, options) == [(4 * w, 8 * w)]
    assert regions_from_probabilities(_probabilities("-####"), 5 * w - 100, options) == [(w, 5 * w - 100)]


def test_padding_meets_halfway_between_close_regions_and_stays_inside_the_audio():
    w = WINDOW_SAMPLES
    pad_ms = 2 * w * 1000 / RATE  # two windows
    options = VadOptions(speech_pad_ms=pad_ms, min_silence_duration_ms=0)
    regions = regions_from_probabilities(_probabilities("-##---##--------##-"), 19 * w, options)
    assert regions == [(0, 3 * w + 3 * w // 2), (3 * w + 3 * w // 2, 10 * w), (14 * w, 19 * w)]


def test_onsets_are_where_the_speech_starts_even_when_the_padding_is_clipped_or_halved():
    w = WINDOW_SAMPLES
    options = VadOptions(speech_pad_ms=2 * w * 1000 / RATE, min_silence_duration_ms=0)  # two windows of padding
    probabilities = _probabilities("-##---##--------##-")
    time_map = time_map_from_probabilities(probabilities, 19 * w, options)
    assert list(time_map.regions) == regions_from_probabilities(probabilities, 19 * w, options)
    # padded starts: 0 (clipped at the audio start: 1 window, not 2), 4.5 windows (halfway: 1.5), 14 (2)
    assert [s for s, _ in time_map.regions] == [0, 3 * w + 3 * w // 2, 14 * w]
    assert time_map.onsets == (w, 6 * w, 16 * w)  # the speech itself, not start + pad
    assert [time_map.onset_of(i) for i in range(3)] == [w / RATE, 6 * w / RATE, 16 * w / RATE]
    # a region cut at max_speech_duration_s: the second part's onset is where the speech resumed
    one_window = VadOptions(
        speech_pad_ms=w * 1000 / RATE, min_silence_duration_ms=1000, max_speech_duration_s=12 * w / RATE
    )
    cut = time_map_from_probabilities(_probabilities("#####-----#####"), 15 * w, one_window)
    assert cut.regions == ((0, 6 * w), (9 * w, 15 * w)) and cut.onsets == (0, 10 * w)


def test_max_speech_duration_cuts_at_the_last_pause_or_hard():
    w = WINDOW_SAMPLES
    seconds = 10 * w / RATE  # regions of at most 10 windows (9 once the check's window is taken off)
    options = VadOptions(speech_pad_ms=0, min_silence_duration_ms=1000, max_speech_duration_s=seconds)
    # a pause of 5 windows (its start is more than 98 ms before its last window): cut there,
    # and the speech after it starts a new region
    assert regions_from_probabilities(_probabilities("#####-----#####"), 15 * w, options) == [
        (0, 5 * w),
        (10 * w, 15 * w),
    ]
    # a pause of 4 windows is too short to cut at: cut hard when the limit is passed
    assert regions_from_probabilities(_probabilities("#####----######"), 15 * w, options) == [
        (0, 10 * w),
        (11 * w, 15 * w),
    ]
    # no pause: cut hard where the limit is passed
    assert regions_from_probabilities(_probabilities("#" * 25), 25 * w, options) == [
        (0, 10 * w),
        (11 * w, 21 * w),
        (22 * w, 25 * w),
    ]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"threshold": 0},
        {"threshold": 1},
        {"threshold": "0.5"},
        {"neg_threshold": 0.6},
        {"neg_threshold": -0.1},
        {"min_speech_duration_ms": -1},
        {"min_silence_duration_ms": math.inf},
        {"speech_pad_ms": True},
        {"max_speech_duration_s": 0.5},  # not more than one window + 2 * 400 ms padding
        {"max_speech_duration_s": math.nan},
        {"word_onsets": 1},
        {"word_onsets": None},
    ],
)
def test_invalid_options_are_configuration_errors(kwargs):
    with pytest.raises(ConfigurationError, match=next(iter(kwargs))):
        VadOptions(**kwargs)


def test_unlimited_max_speech_duration_is_allowed():
    assert VadOptions(max_speech_duration_s=math.inf).max_speech_duration_s == math.inf


# --------------------------------------------------------------------------- chunks and time maps


def _random_regions(rng: np.random.Generator, count: int, longest_s: float) -> list[tuple[int, int]]:
    regions, position = [], int(rng.integers(0, RATE))
    for _ in range(count):
        position += int(rng.integers(1, 3 * RATE))  # a pause
        length = int(rng.integers(1, int(longest_s * RATE)))
        regions.append((position, position + length))
        position += length
    return regions


@pytest.mark.parametrize("keep_gaps", [False, True])
@pytest.mark.parametrize("seed", range(5))
def test_chunks_never_exceed_30_s_and_keep_every_speech_sample_once(seed, keep_gaps):
    rng = np.random.default_rng(seed)
    regions = _random_regions(rng, 15, longest_s=45)  # some regions longer than a chunk; < 2**24 samples (float32)
    audio = np.arange(regions[-1][1] + RATE, dtype=np.float32)  # each sample tells where it came from
    chunks = chunk_speech(audio, regions, keep_gaps=keep_gaps)
    assert all(len(c.audio) <= 30 * RATE for c in chunks)
    assert any(len(c.audio) > 29 * RATE for c in chunks)
    taken = np.concatenate([c.audio for c in chunks]).astype(np.int64)
    speech = np.concatenate([np.arange(s, e) for s, e in regions])
    if keep_gaps:
        assert np.isin(speech, taken).all()  # every speech sample, plus the short pauses between
        assert np.all(np.diff(taken) > 0)
    else:
        np.testing.assert_array_equal(taken, speech)  # exactly the speech, in order
    for chunk in chunks:  # and each chunk's time map sends its samples home
        for i in rng.integers(0, len(chunk.audio), 20):
            assert chunk.to_original(i / RATE) * RATE == pytest.approx(chunk.audio[i], abs=1e-3)


def test_regions_fitting_together_share_a_chunk():
    audio = np.zeros(100 * RATE, np.float32)
    regions = [(0, 10 * RATE), (20 * RATE, 30 * RATE), (40 * RATE, 50 * RATE), (60 * RATE, 61 * RATE)]
    assert [len(c.time_map.regions) for c in chunk_speech(audio, regions)] == [3, 1]  # 30 s fits exactly
    assert [len(c.audio) / RATE for c in chunk_speech(audio, regions, keep_gaps=True)] == [30.0, 21.0]
    assert [c.duration for c in chunk_speech(audio, regions, max_duration_s=15)] == [10.0, 10.0, 11.0]
    assert chunk_speech(audio, []) == []


@pytest.mark.parametrize(
    ("regions", "message"),
    [([(10, 5)], "sorted"), ([(0, 10), (5, 20)], "disjoint"), ([(0, 10 * RATE + 1)], "ends after the audio")],
)
def test_bad_regions_are_refused(regions, message):
    with pytest.raises(ConfigurationError, match=message):
        chunk_speech(np.zeros(10 * RATE, np.float32), regions)


@pytest.mark.parametrize("max_duration_s", [0, -1, math.inf, 1e-6])
def test_bad_chunk_length_is_refused(max_duration_s):
    with pytest.raises(ConfigurationError, match="max_duration_s"):
        chunk_speech(np.zeros(RATE, np.float32), [(0, 100)], max_duration_s=max_duration_s)


def test_time_map_round_trips():
    rng = np.random.default_rng(7)
    regions = _random_regions(rng, 30, longest_s=8)
    time_map = SpeechTimeMap(regions)
    assert time_map.num_samples == sum(e - s for s, e in regions)
    for start, end in regions:
        for original in rng.uniform(start, end, 10) / RATE:
            concatenated = time_map.to_concatenated(original)
            assert time_map.to_original(concatenated) == pytest.approx(original, abs=1e-9)
        # boundaries: a region's start is a start, its end is an end
        assert time_map.to_original(time_map.to_concatenated(start / RATE)) == pytest.approx(start / RATE)
        assert time_map.to_original(time_map.to_concatenated(end / RATE), is_end=True) == pytest.approx(end / RATE)
    for concatenated in rng.uniform(0, time_map.duration, 200):
        assert time_map.to_concatenated(time_map.to_original(concatenated)) == pytest.approx(concatenated, abs=1e-9)


def test_time_map_at_the_edges():
    time_map = SpeechTimeMap([(RATE, 2 * RATE), (4 * RATE, 5 * RATE)])  # 1-2 s, 4-5 s
    assert time_map.to_original(1.0) == 4.0  # where the regions meet: the start of the later one
    assert time_map.to_original(1.0, is_end=True) == 2.0  # ... or the end of the earlier one
    assert time_map.to_original(0.3) == pytest.approx(1.3)
    assert time_map.to_original(-1.0) == 1.0 and time_map.to_original(99.0) == 5.0  # clamped
    assert time_map.to_concatenated(3.0) == 1.0  # in the cut pause: where the next region starts
    assert time_map.to_concatenated(0.0) == 0.0 and time_map.to_concatenated(9.0) == 2.0
    with pytest.raises(ConfigurationError, match="no regions"):
        SpeechTimeMap([]).to_original(0.0)


# --------------------------------------------------------------------------- errors


def test_time_map_onsets():
    regions = [(RATE, 2 * RATE), (4 * RATE, 5 * RATE)]
    plain = SpeechTimeMap(regions)
    assert plain.onsets is None and plain.onset_of(1) is None and "onsets" not in repr(plain)
    time_map = SpeechTimeMap(regions, onsets=[RATE + 800, None])
    assert time_map.onsets == (RATE + 800, None) and time_map.onset_of(0) == 1.05 and time_map.onset_of(1) is None
    assert "onsets=[16800, None]" in repr(time_map)
    with pytest.raises(ConfigurationError, match="2 regions"):
        time_map.onset_of(2)
    for onsets in ([RATE], [RATE, 3 * RATE], [RATE - 1, None], [2 * RATE, None]):  # one per region, inside it
        with pytest.raises(ConfigurationError, match="onsets"):
            SpeechTimeMap(regions, onsets=onsets)


def test_chunks_carry_the_onsets_of_their_regions():
    audio = np.zeros(100 * RATE, np.float32)
    regions = [(0, 10 * RATE), (20 * RATE, 30 * RATE), (40 * RATE, 50 * RATE), (60 * RATE, 95 * RATE)]
    onsets = [RATE // 4, 20 * RATE + 6400, 40 * RATE + 6400, 60 * RATE + 6400]
    speech = SpeechTimeMap(regions, onsets=onsets)
    chunks = chunk_speech(audio, speech)
    assert [c.time_map.regions for c in chunks] == [
        tuple(regions[:3]),
        ((60 * RATE, 90 * RATE),),
        ((90 * RATE, 95 * RATE),),
    ]
    # the region longer than a chunk: its onset goes with the piece it lies in, the other piece has none
    assert [c.time_map.onsets for c in chunks] == [tuple(onsets[:3]), (onsets[3],), (None,)]
    (spanned, *_) = chunk_speech(audio, speech, keep_gaps=True)
    assert spanned.time_map.regions == ((0, 30 * RATE),) and spanned.time_map.onsets == (onsets[0],)
    assert all(c.time_map.onsets is None for c in chunk_speech(audio, regions))  # plain regions: no onsets


def test_the_first_word_of_each_region_starts_at_its_onset():
    from inference4py.speech.results import Segment, Word
    from inference4py.speech.speech_map import map_segment, map_segments

    regions = [(RATE, 3 * RATE), (20 * RATE, 23 * RATE)]  # 1-3 s, 20-23 s; the join at 2.0 s of the chunk
    segments = (
        Segment(0.0, 0.6, " Some", (), words=(Word(0.1, 0.6, " Some", 0.9),)),  # 1.1-1.6 s
        Segment(0.6, 1.8, " speech.", (), words=(Word(0.6, 1.9, " speech.", 0.9),)),  # 1.6-2.9 s
        # DTW squeezes the word after the join: 20.7-20.72 s
        Segment(1.8, 3.2, " After a", (), words=(Word(2.7, 2.72, " After", 0.8), Word(2.72, 3.1, " a", 0.9))),
    )

    def times(mapped):
        return [[(w.start, w.end) for w in s.words] for s in mapped]

    dtw = [[(1.1, 1.6)], [(1.6, 2.9)], [(20.7, 20.72), (20.72, 21.1)]]
    assert times(map_segments(segments, SpeechTimeMap(regions))) == dtw  # no onsets: DTW's times
    with_onsets = SpeechTimeMap(regions, onsets=[int(1.4 * RATE), int(20.4 * RATE)])
    mapped = map_segments(segments, with_onsets)
    # "Some" and "After" start where Silero found speech; "speech." (first of its segment, not of
    # its region) and "a" keep DTW's times
    assert times(mapped) == [[(1.4, 1.6)], [(1.6, 2.9)], [(20.4, 20.72), (20.72, 21.1)]]
    assert (mapped[0].start, mapped[0].end) == (1.0, 1.6)  # a segment keeps its own times ...
    assert (mapped[2].start, mapped[2].end) == (20.4, 21.2)  # ... unless it starts with its first word: it follows
    # an onset after the word's end: the word stays where DTW put it
    late = SpeechTimeMap(regions, onsets=[int(1.7 * RATE), int(20.8 * RATE)])
    assert times(map_segments(segments, late)) == dtw
    # a region whose onset is not known (a piece of a long region) keeps DTW's times
    assert times(map_segments(segments, SpeechTimeMap(regions, onsets=[None, int(20.4 * RATE)])))[0] == dtw[0]
    # one segment alone does not know whether its first word is its region's first: no onset
    assert [(w.start, w.end) for w in map_segment(segments[2], with_onsets).words] == dtw[2]
    # an onset more than MAX_ONSET_SHIFT before DTW's start: the decoder left out the speech before
    # the word (moving it would make one 1.2 s "After"); within it, the word moves
    later = (*segments[:2], Segment(1.8, 4.0, " After", (), words=(Word(3.5, 3.9, " After", 0.8),)))  # 21.5 s
    assert times(map_segments(later, with_onsets))[2] == [(21.5, 21.9)]  # 1.1 s after the onset at 20.4 s
    near = SpeechTimeMap(regions, onsets=[int(1.4 * RATE), int(20.6 * RATE)])  # 0.9 s before it
    assert times(map_segments(later, near))[2] == [(20.6, 21.9)]


def test_a_segment_starts_no_later_than_its_moved_first_word():
    from inference4py.speech.results import Segment, Word
    from inference4py.speech.speech_map import map_segments

    regions = [(RATE, 3 * RATE)]  # 1-3 s
    # the timestamp token says 0.8 s into the chunk (1.8 s); DTW's first word at 0.9 s (1.9 s)
    segments = (Segment(0.8, 1.6, " Hello", (), words=(Word(0.9, 1.5, " Hello", 0.9),)),)
    (mapped,) = map_segments(segments, SpeechTimeMap(regions, onsets=[int(1.5 * RATE)]))
    assert (mapped.words[0].start, mapped.start, mapped.end) == (1.5, 1.5, 2.6)
    (kept,) = map_segments(segments, SpeechTimeMap(regions))  # no onset: the segment keeps its own start
    assert (kept.words[0].start, kept.start) == (1.9, 1.8)


def test_time_map_places_a_time_in_a_given_region():
    time_map = SpeechTimeMap([(RATE, 2 * RATE), (4 * RATE, 5 * RATE)])  # 1-2 s, 4-5 s
    assert [time_map.region_at(t) for t in (-1.0, 0.0, 0.99, 1.0, 1.5, 9.0)] == [0, 0, 0, 1, 1, 1]
    assert time_map.to_original_in(0.5, 0) == pytest.approx(1.5)
    assert time_map.to_original_in(1.3, 0) == 2.0  # past the region's end in the chunk: its end, not 4.3 s
    assert time_map.to_original_in(1.3, 1) == pytest.approx(4.3)
    assert time_map.to_original_in(0.7, 1) == 4.0  # before the region's start: its start
    with pytest.raises(ConfigurationError, match="2 regions"):
        time_map.to_original_in(0.5, 2)


def test_a_word_across_a_join_stays_in_the_region_of_its_middle():
    from inference4py.speech.results import Segment, Word
    from inference4py.speech.speech_map import map_segment

    time_map = SpeechTimeMap([(RATE, 3 * RATE), (20 * RATE, 23 * RATE)])  # 1-3 s, 20-23 s; the join at 2.0 s
    words = (Word(1.2, 2.4, " speech.", 0.9), Word(2.7, 2.72, " After", 0.8), Word(2.72, 3.1, " a", 0.9))
    first = map_segment(Segment(0.0, 1.8, " speech.", (), words=words[:1]), time_map)
    assert [(w.start, w.end) for w in first.words] == [(2.2, 3.0)]  # not to 20.4 s, over the 17 s pause
    assert (first.start, first.end) == (1.0, 2.8)  # its own times: in the region of its words
    # the segment's timestamp token (<|1.80|>) lies in the first region: the segment starts with its words
    second = map_segment(Segment(1.8, 3.2, " After a", (), words=words[1:]), time_map)
    assert [(w.start, w.end) for w in second.words] == [(20.7, 20.72), (20.72, 21.1)]
    assert (second.start, second.end) == (20.7, 21.2)
    plain = map_segment(Segment(1.8, 3.2, " After a", ()), time_map)  # no words: its own times
    assert (plain.start, plain.end) == (2.8, 21.2)
    # a segment ending (<|2.10|>) in the region after its last word's ends with that word
    late = map_segment(Segment(1.0, 2.1, " speech.", (), words=(Word(1.2, 1.9, " speech.", 0.9),)), time_map)
    assert (late.start, late.end) == (2.0, 2.9)


def test_missing_model_file_is_model_files_missing(tmp_path):
    with pytest.raises(ModelFilesMissingError, match="does not exist.*from_pretrained") as info:
        SileroVad(tmp_path / "silero_vad.onnx")
    assert isinstance(info.value, FileNotFoundError)
    with pytest.raises(ModelFilesMissingError, match="is a folder"):
        SileroVad(tmp_path)


def test_unreadable_model_file_is_model_load_error(tmp_path):
    broken = tmp_path / "silero_vad.onnx"
    broken.write_bytes(MODEL.read_bytes()[:5000])
    with pytest.raises(ModelLoadError, match="silero_vad.onnx"):
        SileroVad(broken)


def test_another_onnx_model_is_unsupported():
    with pytest.raises(UnsupportedModelError, match="not a Silero VAD model.*input_ids"):
        SileroVad(MODELS / "gpt2" / "model.onnx")


@pytest.mark.parametrize(
    ("audio", "kwargs", "message"),
    [
        (np.zeros(RATE, np.float32), {"sampling_rate": 8000}, "16000 Hz.*sampling_rate=8000"),
        (np.zeros((2, RATE), np.float32), {}, r"shape \(2, 16000\).*mono"),
        (np.zeros(RATE, np.int16), {}, "dtype int16"),
        (np.full(RATE, np.nan, np.float32), {}, "NaN"),
        ([0.0] * RATE, {}, "numpy array"),
    ],
)
def test_bad_audio_is_an_audio_error(vad, audio, kwargs, message):
    with pytest.raises(AudioError, match=message) as info:
        vad.speech_regions(audio, **kwargs)
    assert isinstance(info.value, ValueError)


def test_float64_audio_is_accepted(vad, recording):
    audio, _ = recording
    assert vad.speech_regions(audio.astype(np.float64)) == vad.speech_regions(audio)


# --------------------------------------------------------------------------- the Hub


def test_from_pretrained_offline_uses_the_cache():
    populate_cache(os.environ["HF_HUB_CACHE"], DEFAULT_REPO, {DEFAULT_FILENAME: MODEL})
    vad = SileroVad.from_pretrained()
    assert vad.path.name == "model.onnx" and vad.layout == "sequence"
    assert vad.speech_regions(np.zeros(RATE, np.float32)) == []


def test_from_pretrained_offline_without_the_file_is_a_hub_error():
    with pytest.raises(HubError, match=DEFAULT_REPO):
        SileroVad.from_pretrained()


def test_from_pretrained_downloads_the_one_file(monkeypatch):
    hub_client_online(monkeypatch)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    files = {DEFAULT_FILENAME: MODEL.read_bytes(), "onnx/model_fp16.onnx": b"not wanted", "README.md": b"# vad"}
    try:
        with FakeHub({DEFAULT_REPO: files}) as hub:
            monkeypatch.setenv("HF_ENDPOINT", hub.url)
            vad = SileroVad.from_pretrained()
            assert hub.downloaded(DEFAULT_REPO) == {DEFAULT_FILENAME}
        assert vad.path.read_bytes() == MODEL.read_bytes()
        assert Path(os.environ["HF_HUB_CACHE"], "models--onnx-community--silero-vad") in vad.path.parents
    finally:
        reset_hub_client()


# --------------------------------------------------------------------------- the streaming layout


def _streaming_graph(path: Path, output: str, *, with_rate: bool) -> None:
    """A stand-in with the I/O of Silero's own v5/v6 export (input [1, 576], state [2, 1, 128], sr).

    ``output="counter"``: the probability is state[0, 0, 0] / 1000 and stateN = state + 1, so the
    probabilities count the windows only if the state is carried from run to run.
    ``output="context"``: the probability is the first sample the window is fed with (its context).
    """
    import onnx
    from onnx import TensorProto, helper

    def const(name: str, values: list[int]) -> onnx.NodeProto:
        return helper.make_node(
            "Constant", [], [name], value=helper.make_tensor(name, TensorProto.INT64, [len(values)], values)
        )

    nodes = [
        const("zero3", [0, 0, 0]),
        const("one3", [1, 1, 1]),
        const("zero2", [0, 0]),
        const("one2", [1, 1]),
        const("shape", [1, 1]),
    ]
    if output == "counter":
        nodes += [
            helper.make_node("Slice", ["state", "zero3", "one3"], ["first"]),
            helper.make_node(
                "Constant", [], ["milli"], value=helper.make_tensor("milli", TensorProto.FLOAT, [], [1e-3])
            ),
            helper.make_node("Mul", ["first", "milli"], ["scaled"]),
            helper.make_node("Reshape", ["scaled", "shape"], ["output"]),
            helper.make_node("Constant", [], ["unit"], value=helper.make_tensor("unit", TensorProto.FLOAT, [], [1.0])),
            helper.make_node("Add", ["state", "unit"], ["stateN"]),
        ]
    else:
        nodes += [
            helper.make_node("Slice", ["input", "zero2", "one2"], ["output"]),
            helper.make_node("Identity", ["state"], ["stateN"]),
        ]
    inputs = [
        helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", "samples"]),
        helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, "batch", 128]),
    ]
    if with_rate:
        inputs.append(helper.make_tensor_value_info("sr", TensorProto.INT64, []))
    graph = helper.make_graph(
        nodes,
        "silero_standin",
        inputs,
        [
            helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 1]),
            helper.make_tensor_value_info("stateN", TensorProto.FLOAT, [2, "batch", 128]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


@pytest.mark.parametrize("with_rate", [True, False])
def test_streaming_layout_carries_the_state_from_window_to_window(tmp_path, with_rate):
    path = tmp_path / "model.onnx"
    _streaming_graph(path, "counter", with_rate=with_rate)
    vad = SileroVad(path)
    assert vad.layout == "streaming" and "streaming" in repr(vad)
    probabilities = vad.speech_probabilities(np.zeros(5 * WINDOW_SAMPLES + 1, np.float32))
    np.testing.assert_allclose(probabilities, np.arange(6) / 1000, atol=1e-7)


def test_streaming_layout_feeds_each_window_with_the_end_of_the_previous_one(tmp_path):
    path = tmp_path / "model.onnx"
    _streaming_graph(path, "context", with_rate=True)
    audio = np.arange(4 * WINDOW_SAMPLES, dtype=np.float32) / 10000
    probabilities = SileroVad(path).speech_probabilities(audio)
    expected = [0.0] + [audio[i * WINDOW_SAMPLES - 64] for i in range(1, 4)]  # 64 samples before each window
    np.testing.assert_allclose(probabilities, expected)


def test_onnxruntime_failures_are_inference_errors(tmp_path):
    path = tmp_path / "model.onnx"
    _streaming_graph(path, "counter", with_rate=True)
    vad = SileroVad(path)
    vad._state_dtype = np.float64  # a feed of the wrong type: onnxruntime refuses the run
    with pytest.raises(InferenceError, match="Silero VAD"):
        vad.speech_probabilities(np.zeros(WINDOW_SAMPLES, np.float32))
