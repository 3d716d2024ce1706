"""WhisperSpeechModel end to end on the tiny Whisper fixture, against transformers' generate()."""

from __future__ import annotations

import functools
import json
import shutil

import numpy as np
import pytest
import soundfile as sf

from inference4py import Segment, Transcription, WhisperSpeechModel
from inference4py.audio import SAMPLE_RATE, load_audio, log_mel_spectrogram
from inference4py.cli import main
from inference4py.errors import AudioError, ConfigurationError, InferenceError, UnsupportedModelError
from inference4py.speech import WhisperTimestampRules, language_code, split_segments
from inference4py.speech.prompt import decoder_prompt
from tests.conftest import FIXTURES, MODELS, load_reference
from tests.test_audio import assemble

REF = load_reference("whisper")
CASES = {c["name"]: c for c in REF["cases"]}
IDS = REF["special_ids"]
TB = IDS["timestamp_begin"]


@functools.cache
def clips() -> dict[str, np.ndarray]:
    out = {name: load_audio(FIXTURES / info["file"]) for name, info in REF["clips"].items()}
    out["long"] = assemble(REF["long_recipe"], out)
    return out


@pytest.fixture(scope="module")
def asr():
    with WhisperSpeechModel.builder().model_path(MODELS / "whisper").build() as model:
        yield model


@pytest.fixture(scope="module")
def asr_en(tmp_path_factory):
    """The same weights with an English-only generation_config.json (like whisper-*.en)."""
    folder = tmp_path_factory.mktemp("whisper-en") / "whisper-en"
    shutil.copytree(MODELS / "whisper", folder)
    (folder / "generation_config.json").write_text(json.dumps(REF["generation_config_english_only"]), encoding="utf-8")
    with WhisperSpeechModel.builder().model_path(folder).build() as model:
        yield model


def _run(model, case, audio=None, **extra):
    s = case["settings"]
    options = {k: s[k] for k in ("max_new_tokens", "num_beams") if k in s}
    pieces: list[str] = []
    result = model.transcribe(
        audio if audio is not None else (clips()[case["clip"]], SAMPLE_RATE),
        language=s.get("language"),
        task=s.get("task"),
        timestamps=s.get("return_timestamps", False),
        on_token=pieces.append,
        **options,
        **extra,
    )
    return result, pieces


def _check(result: Transcription, pieces: list[str], case: dict) -> None:
    assert list(result.token_ids) == case["token_ids"]
    assert result.text == case["text"]
    assert "".join(pieces) == result.text  # streaming gives exactly the final text
    assert len(result.segments) == len(case["segments"])
    for got, want in zip(result.segments, case["segments"]):
        # transformers' times, clipped to the audio: its segments may end past it (a 30 s window, a late timestamp)
        assert got.start == pytest.approx(min(want["start"], result.duration), abs=1e-6)
        assert got.end == pytest.approx(min(want["end"], result.duration), abs=1e-6)
        assert got.end <= result.duration
        assert list(got.token_ids) == want["token_ids"]
        assert got.text == want["text"]
    expected_language = case["language"] if case.get("generation_config") != "english_only" else "en"
    assert result.language == expected_language


# --------------------------------------------------------------------------- references


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c.get("generation_config") != "english_only"])
def test_matches_transformers(asr, name):
    case = CASES[name]
    result, pieces = _run(asr, case)
    _check(result, pieces, case)


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c.get("generation_config") == "english_only"])
def test_english_only_matches_transformers(asr_en, name):
    case = CASES[name]
    result, pieces = _run(asr_en, case)
    _check(result, pieces, case)
    assert not asr_en.is_multilingual and asr_en.languages == ("en",)


def test_file_inputs_give_the_same_result(asr, tmp_path):
    case = CASES["bursts-de-timestamps"]
    result, pieces = _run(asr, case, audio=FIXTURES / REF["clips"]["bursts"]["file"])
    _check(result, pieces, case)
    # the long clip as a 48 kHz-free float WAV file: read back bit for bit
    path = tmp_path / "long.wav"
    sf.write(str(path), clips()["long"], SAMPLE_RATE, subtype="FLOAT")
    case = CASES["long-timestamps"]
    result, pieces = _run(asr, case, audio=str(path))
    _check(result, pieces, case)


def test_decoder_prompts_match_transformers(asr, asr_en):
    for case in REF["cases"]:
        model = asr_en if case.get("generation_config") == "english_only" else asr
        s = case["settings"]
        prompt, detect_at = decoder_prompt(
            model._parts.vocab, s.get("language"), s.get("task"), bool(s.get("return_timestamps"))
        )
        want = case["windows"][0]["prompt"]
        if detect_at is not None:
            prompt[detect_at] = want[detect_at]  # the detected language
        assert prompt == want, case["name"]
        for window in case["windows"]:  # every window starts with the same prompt
            assert window["prompt"] == want


def test_long_audio_crosses_window_boundaries(asr):
    case = CASES["long-timestamps"]
    before = asr._parts.backend.encoder_runs
    result, _ = _run(asr, case)
    assert asr._parts.backend.encoder_runs - before == len(case["windows"]) >= 3  # one encoder run per window
    starts = [s.start for s in result.segments]
    assert starts == sorted(starts)
    assert any(s.start < 30.0 < s.end for s in result.segments) or any(s.start > 30.0 for s in result.segments)
    assert result.duration == pytest.approx(REF["long_samples"] / SAMPLE_RATE)
    # without timestamps: fixed 30 s windows, one segment each
    plain, _ = _run(asr, CASES["long-no-timestamps"])
    assert [(s.start, s.end) for s in plain.segments] == [(0.0, 30.0), (30.0, 43.5)]


def test_language_detection(asr):
    assert asr.detect_language((clips()["chirp"], SAMPLE_RATE)) == CASES["chirp-detect"]["language"]
    assert asr.detect_language(FIXTURES / REF["clips"]["tone"]["file"]) == CASES["tone-detect"]["language"]
    # detection reuses the first window's encoder output
    before = asr._parts.backend.encoder_runs
    _run(asr, CASES["tone-detect"])
    assert asr._parts.backend.encoder_runs - before == 1


def test_language_detection_chooses_through_choose_token(asr):
    vocab = asr._parts.vocab
    ids = list(vocab.lang_to_id.values())
    logits = np.zeros(max(ids) + 10, dtype=np.float32)
    logits[ids[3]] = 2.0
    logits[max(ids) + 5] = 9.0  # not a language: never chosen
    assert vocab.most_likely_language(logits) == ids[3]
    logits[ids[1]] = 2.0  # a tie: the lower id, as torch.argmax
    assert vocab.most_likely_language(logits) == min(ids[1], ids[3])
    logits[ids[7]] = np.nan
    with pytest.raises(InferenceError, match="NaN logits"):
        vocab.most_likely_language(logits)


def test_transcribe_options_are_typed_once_and_equal_the_keywords(asr):
    from inference4py.speech import LongformOptions, TranscribeOptions
    from inference4py.tasks.options import RequestOptions

    defaults, longform = TranscribeOptions(), LongformOptions()
    assert (defaults.compression_ratio_threshold, defaults.logprob_threshold, defaults.no_speech_threshold) == (
        longform.compression_ratio_threshold,
        longform.logprob_threshold,
        longform.no_speech_threshold,
    )
    assert defaults.best_of == longform.best_of
    options, rest = TranscribeOptions.from_keywords({"temperature": [0.0, 0.4], "best_of": 2, "seed": 1})
    assert options == TranscribeOptions(temperature=(0.0, 0.4), best_of=2, generation=RequestOptions(seed=1))
    assert rest is options.generation  # the generation options travel inside the one options object
    # the other keywords are typed at the same edge: an unknown name, drafts or constraints are refused there
    for bad, match in (
        ({"beams": 2}, "beams"),
        ({"speculative": "prompt_lookup"}, "This call"),
        ({"regex": "a"}, "This call"),
    ):
        with pytest.raises(ConfigurationError, match=match):
            TranscribeOptions.from_keywords(bad)
    audio = (clips()["chirp"], SAMPLE_RATE)
    by_keywords = asr.transcribe(audio, temperature=(0.0, 0.4), best_of=2, max_new_tokens=12, seed=1)
    typed = asr.transcribe(audio, options=options, max_new_tokens=12, seed=1)
    assert typed.token_ids == by_keywords.token_ids and typed.text == by_keywords.text
    over = asr.transcribe(
        audio, options=TranscribeOptions(temperature=1.0), temperature=(0.0, 0.4), best_of=2, max_new_tokens=12, seed=1
    )
    assert over.token_ids == by_keywords.token_ids  # a keyword wins over the options object
    generation = RequestOptions(max_new_tokens=12, seed=1)
    one_object = asr.transcribe(
        audio, options=TranscribeOptions(temperature=(0.0, 0.4), best_of=2, generation=generation)
    )
    assert one_object.token_ids == by_keywords.token_ids  # everything typed in one TranscribeOptions
    merged, request = TranscribeOptions.from_keywords({"max_new_tokens": 5}, TranscribeOptions(generation=generation))
    assert request == merged.generation == RequestOptions(max_new_tokens=5, seed=1)  # RequestOptions.of_call's rule
    for bad, match in (
        ({"initial_prompt": "a", "prompt_ids": [1]}, "not both"),
        ({"hallucination_silence_threshold": 2.0}, "word_timestamps"),
        ({"best_of": 0}, "best_of"),
        ({"temperature": "hot"}, "temperature"),
        ({"generation": {"seed": 1}}, "generation takes a RequestOptions"),
        ({"generation": RequestOptions(json_schema={"type": "object"})}, "This call"),
    ):
        with pytest.raises(ConfigurationError, match=match):
            TranscribeOptions(**bad)


def test_builder_settings_are_call_defaults(tmp_path):
    case = CASES["noise-translate-fr"]
    with (
        WhisperSpeechModel.builder()
        .model_path(MODELS / "whisper")
        .language("french")
        .task("translate")
        .max_new_tokens(case["settings"]["max_new_tokens"])
        .build()
    ) as model:
        result = model.transcribe((clips()["noise"], SAMPLE_RATE))
        assert list(result.token_ids) == case["token_ids"] and result.language == "fr"
        assert "language='fr'" in repr(model) and "task='translate'" in repr(model)
    case = CASES["tone-timestamps"]
    with (
        WhisperSpeechModel.builder()
        .model_path(MODELS / "whisper")
        .language("en")
        .timestamps()
        .max_new_tokens(case["settings"]["max_new_tokens"])
        .build()
    ) as model:
        assert list(model.transcribe((clips()["tone"], SAMPLE_RATE)).token_ids) == case["token_ids"]


def test_stream_and_sampling(asr):
    case = CASES["long-no-timestamps"]
    pieces = list(asr.stream((clips()["long"], SAMPLE_RATE), language="en", max_new_tokens=24))
    assert "".join(pieces) == case["text"] and len(pieces) > 1
    a = asr.transcribe((clips()["bursts"], SAMPLE_RATE), language="en", temperature=0.8, seed=3, max_new_tokens=16)
    b = asr.transcribe((clips()["bursts"], SAMPLE_RATE), language="en", temperature=0.8, seed=3, max_new_tokens=16)
    assert a.token_ids == b.token_ids


def test_features_method(asr):
    x = clips()["tone"]
    np.testing.assert_array_equal(asr.features((x, SAMPLE_RATE)), log_mel_spectrogram(x, 80))
    assert asr.n_mels == 80


# --------------------------------------------------------------------------- timestamp rules


def _rules(begin=4, max_initial=50):
    return WhisperTimestampRules(IDS["notimestamps"], IDS["eot"], begin, max_initial, timestamp_begin=TB)


def _scores(vocab=TB + 1501, fill=0.0):
    return np.full((1, vocab), fill, dtype=np.float32)


def test_first_token_is_an_early_timestamp():
    prompt = [IDS["sot"], 402, IDS["transcribe"]]
    s = _rules(begin=3)(np.array([prompt]), _scores())
    allowed = np.flatnonzero(np.isfinite(s[0]))
    assert allowed.min() == TB and allowed.max() == TB + 50


def test_timestamps_come_in_pairs_and_never_decrease():
    rules = _rules(begin=1)
    ids = lambda *t: np.array([[IDS["sot"], *t]])  # noqa: E731
    # after "<|1.00|> text <|2.00|>": text is masked, the twin <|2.00|> or later allowed, earlier not
    s = rules(ids(TB + 50, 10, TB + 100), _scores())
    assert np.isneginf(s[0, : IDS["eot"]]).all()
    assert np.isneginf(s[0, TB : TB + 100]).all() and np.isfinite(s[0, TB + 100 :]).all()
    # after a pair: no timestamp at all
    s = rules(ids(TB + 50, 10, TB + 100, TB + 100), _scores())
    assert np.isneginf(s[0, TB:]).all() and np.isfinite(s[0, : IDS["eot"]]).all()
    # after text following <|2.00|>: timestamps strictly later than 2.00
    s = rules(ids(TB + 100, 10), _scores(fill=-50.0))
    assert np.isneginf(s[0, TB : TB + 101]).all() and np.isfinite(s[0, TB + 101 :]).all()
    assert np.isneginf(s[0, IDS["notimestamps"]])


def test_timestamps_win_when_their_total_probability_beats_every_text_token():
    rules = _rules(begin=1)
    ids = np.array([[IDS["sot"], TB, 10]])
    s = _scores(fill=-10.0)
    s[0, 20] = 0.0  # best text token
    s[0, TB + 10 : TB + 1501] = -5.0  # 1491 timestamps: log(1491) - 5 > 0
    out = rules(ids, s.copy())
    assert np.isneginf(out[0, :TB]).all()
    s[0, TB + 10 :] = -20.0
    out = rules(ids, s.copy())
    assert out[0, 20] == 0.0


# --------------------------------------------------------------------------- segments


def test_segments_across_a_window_boundary():
    ts = lambda seconds: TB + int(round(seconds / 0.02))  # noqa: E731
    # window 1 (seek 0): two closed segments, then an unfinished one that is dropped
    window1 = [ts(0.0), 11, 12, ts(5.0), ts(5.0), 13, ts(12.0), ts(12.0), 14, 15]
    segs, advance = split_segments(window1, timestamp_begin=TB, seek=0, window_frames=3000)
    assert [(s.start, s.end) for s in segs] == [(0.0, 5.0), (5.0, 12.0)]
    assert segs[-1].tokens == (ts(5.0), 13, ts(12.0), ts(12.0))
    assert advance == 1200  # 12 s = 1200 mel frames: the next window starts at the last segment's end
    # window 2 starts at 12 s; a single timestamp before the end closes the last segment
    window2 = [ts(0.0), 16, ts(3.0), ts(3.5), 17, 18, ts(20.0)]
    segs, advance = split_segments(window2, timestamp_begin=TB, seek=advance, window_frames=3000)
    assert [(round(s.start, 6), round(s.end, 6)) for s in segs] == [(12.0, 15.0), (15.5, 32.0)]
    assert advance == 3000
    # last window of the audio: 8.5 s of audio left, no timestamps -> one segment to the audio's end
    segs, advance = split_segments([21, 22], timestamp_begin=TB, seek=3000 + 1200, window_frames=850)
    assert [(s.start, s.end) for s in segs] == [(42.0, 42.0 + 8.5)] and advance == 850
    # one timestamp without a pair: the segment ends there
    segs, _ = split_segments([ts(1.0), 23, ts(7.0)][1:], timestamp_begin=TB, seek=0, window_frames=3000)
    assert [(s.start, s.end) for s in segs] == [(0.0, 7.0)]
    # empty output (EOS first): one empty segment spanning the window
    segs, advance = split_segments([], timestamp_begin=TB, seek=0, window_frames=3000)
    assert [(s.start, s.end, s.tokens) for s in segs] == [(0.0, 30.0, ())] and advance == 3000


# --------------------------------------------------------------------------- results, options, errors


def test_subtitles():
    t = Transcription(
        " Hello there. General Kenobi.",
        (
            Segment(0.0, 2.5, " Hello there.", ()),
            Segment(2.5, 3.0, "", ()),
            Segment(62.25, 3725.5, " General Kenobi.", ()),
        ),
        "en",
        (),
    )
    assert t.to_srt() == (
        "1\n00:00:00,000 --> 00:00:02,500\nHello there.\n\n2\n00:01:02,250 --> 01:02:05,500\nGeneral Kenobi.\n"
    )
    assert t.to_vtt() == (
        "WEBVTT\n\n00:00:00.000 --> 00:00:02.500\nHello there.\n\n00:01:02.250 --> 01:02:05.500\nGeneral Kenobi.\n"
    )
    assert str(t) == t.text


def test_presets_point_at_onnx_community():
    assert WhisperSpeechModel.whisperTiny()._model_id == "onnx-community/whisper-tiny"
    assert WhisperSpeechModel.whisperBase()._model_id == "onnx-community/whisper-base"
    assert WhisperSpeechModel.whisperSmall()._model_id == "onnx-community/whisper-small"
    assert WhisperSpeechModel.whisperTinyEn()._model_id == "onnx-community/whisper-tiny.en"
    assert WhisperSpeechModel.whisperBaseEn()._model_id == "onnx-community/whisper-base.en"
    assert WhisperSpeechModel.whisperSmallEn()._model_id == "onnx-community/whisper-small.en"
    b = WhisperSpeechModel.whisperSmall().language("en").task("transcribe").timestamps()
    assert "whisperSmall" in repr(b) and "language='en'" in repr(b) and "timestamps=True" in repr(b)


def test_preset_methods_read_the_table():
    from inference4py.speech.presets import WHISPER_PRESETS, WhisperPreset

    methods = {n for n in dir(WhisperSpeechModel) if n.startswith("whisper")}
    assert methods == set(WHISPER_PRESETS) == set(WhisperSpeechModel.PRESETS)
    for name, preset in WHISPER_PRESETS.items():
        b = getattr(WhisperSpeechModel, name)()
        assert (b._preset, b._model_id, b._variant) == (name, preset.model_id, None)
    # a row's files and defaults reach the builder, under the user's setters
    row = WhisperPreset("org/whisper-x", variant="quantized", defaults={"num_beams": 2})

    class Custom(WhisperSpeechModel):
        PRESETS = {"whisperTiny": row}

    b = Custom.whisperTiny()
    assert (b._model_id, b._variant, b.generation_overrides()) == ("org/whisper-x", "quantized", {"num_beams": 2})
    assert Custom.whisperTiny().num_beams(3).generation_overrides() == {"num_beams": 3}
    with pytest.raises(ConfigurationError, match="no preset whisperBase"):
        Custom.whisperBase()


def test_language_names_and_codes():
    assert language_code("en") == language_code("English") == language_code("<|en|>") == "en"
    assert language_code("castilian") == "es"
    from inference4py import Language

    assert language_code(Language.DE) == "de"
    with pytest.raises(ConfigurationError, match="Unknown language"):
        language_code("klingon")
    with pytest.raises(ConfigurationError, match="transcribe"):
        WhisperSpeechModel.builder().task("summarize")


def test_errors_name_the_problem(asr, asr_en, tmp_path):
    with pytest.raises(AudioError, match="no samples"):
        asr.transcribe((np.zeros(0, np.float32), SAMPLE_RATE))
    not_audio = tmp_path / "notes.txt"
    not_audio.write_text("hello, not a sound\n", encoding="utf-8")
    with pytest.raises(AudioError, match="Cannot read"):
        asr.transcribe(not_audio)
    with pytest.raises(AudioError, match="does not exist"):
        asr.transcribe(tmp_path / "missing.mp3")
    with pytest.raises(UnsupportedModelError, match="English-only"):
        asr_en.transcribe((clips()["tone"], SAMPLE_RATE), language="fr")
    with pytest.raises(UnsupportedModelError, match="English-only"):
        asr_en.detect_language((clips()["tone"], SAMPLE_RATE))
    with pytest.raises(ConfigurationError, match="task"):
        asr.transcribe((clips()["tone"], SAMPLE_RATE), task="summarize")
    with pytest.raises(ConfigurationError, match="Unknown generation option"):
        asr.transcribe((clips()["tone"], SAMPLE_RATE), beam_width=3)
    # English-only models accept the obvious settings (transformers would raise)
    r = asr_en.transcribe((clips()["tone"], SAMPLE_RATE), language="en", task="transcribe", max_new_tokens=4)
    assert r.language == "en"


def test_not_a_speech_model():
    with pytest.raises(UnsupportedModelError, match="not a speech model"):
        WhisperSpeechModel.builder().model_path(MODELS / "bart").build()
    with pytest.raises(ConfigurationError, match="stop_sequence"):
        WhisperSpeechModel.builder().model_path(MODELS / "whisper").stop_sequence("x").build()


# --------------------------------------------------------------------------- CLI


def test_cli_transcribe(capsys):
    case = CASES["tone-en"]
    path = str(FIXTURES / REF["clips"]["tone"]["file"])
    assert (
        main(["transcribe", path, "--model", str(MODELS / "whisper"), "--language", "en", "--max-new-tokens", "24"])
        == 0
    )
    assert capsys.readouterr().out == case["text"] + "\n"
    case = CASES["tone-timestamps"]
    assert (
        main(
            ["transcribe", path, "-m", str(MODELS / "whisper"), "-l", "en", "--max-new-tokens", "24", "--format", "srt"]
        )
        == 0
    )
    out = capsys.readouterr().out
    texts = [s["text"].strip() for s in case["segments"] if s["text"].strip()]
    assert out.startswith("1\n00:00:00,380 --> ") and all(t in out for t in texts)
    assert main(["transcribe", path, "-m", str(MODELS / "whisper"), "--format", "vtt", "--max-new-tokens", "8"]) == 0
    assert capsys.readouterr().out.startswith("WEBVTT\n\n")


def test_cli_transcribe_error(capsys, tmp_path):
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"RIFF....WAVEjunk")
    assert main(["transcribe", str(bad), "--model", str(MODELS / "whisper")]) == 2
    assert "error: Cannot read" in capsys.readouterr().err


def test_cli_transcribe_without_the_audio_extra_names_it(capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "soundfile", None)  # as in a core install: no soundfile, no soxr
    monkeypatch.setitem(sys.modules, "soxr", None)
    path = str(FIXTURES / REF["clips"]["tone"]["file"])
    assert main(["transcribe", path, "--model", str(MODELS / "whisper")]) == 2
    assert 'needs the soundfile package: pip install "inference4py[audio]"' in capsys.readouterr().err
