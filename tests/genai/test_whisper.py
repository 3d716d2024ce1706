"""inference4py_genai.WhisperSpeechModel on the tiny genai Whisper, against transformers' ids.

models/genai-whisper was built by onnxruntime-genai's model builder from a tiny
random Whisper; models/genai-media/clip.wav is the 4 s clip the references in
references/genai.json were computed on (tools/fixtures/genai.py).
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.genai.conftest import folder, reference, require_genai

genai = require_genai()

from inference4py.errors import AudioError, ConfigurationError, ModelFilesMissingError, UnsupportedModelError  # noqa: E402
from inference4py.speech import Segment, Transcription  # noqa: E402
from inference4py_genai import WhisperSpeechModel  # noqa: E402

REF = reference("genai-whisper")
CASES = {c["name"]: c for c in REF["cases"]}
CLIP = folder("genai-media") / "clip.wav"
EOT = 1000

_models: dict[str, WhisperSpeechModel] = {}


def model(language: str | None = "en") -> WhisperSpeechModel:
    key = str(language)
    if key not in _models:
        b = WhisperSpeechModel.builder().model_path(folder("genai-whisper"))
        if language is not None:
            b = b.language(language)
        _models[key] = b.build()
    return _models[key]


def _without_eot(ids):
    return [t for t in ids if t != EOT]


def _long_audio(case) -> np.ndarray:
    import soundfile

    clip, rate = soundfile.read(str(CLIP), dtype="float32")
    assert rate == 16000
    return np.concatenate([clip * g for g in case["gains"]]).astype(np.float32)


def test_transcribe_matches_transformers_ids():
    case = CASES["clip-en"]
    result = model("en").transcribe(CLIP, max_new_tokens=case["max_new_tokens"])
    assert isinstance(result, Transcription)
    assert list(result.token_ids) == _without_eot(case["output_ids"])
    assert result.text == case["text"]
    assert result.language == "en"
    assert len(result.segments) == 1 and isinstance(result.segments[0], Segment)
    assert result.segments[0].start == 0.0
    assert result.duration == pytest.approx(4.0)


def test_language_and_task_per_call():
    case = CASES["clip-fr-translate"]
    result = model("en").transcribe(CLIP, language="fr", task="translate", max_new_tokens=case["max_new_tokens"])
    assert list(result.token_ids) == _without_eot(case["output_ids"]) and result.language == "fr"


def test_language_is_detected_when_not_given():
    case = CASES["clip-detect"]
    asr = model(None)
    assert asr.detect_language(CLIP) == case["detected_language"]
    # (the reference prompt has <|transcribe|>: without a task, no task token is added, as in inference4py)
    result = asr.transcribe(CLIP, task="transcribe", max_new_tokens=case["max_new_tokens"])
    assert result.language == case["detected_language"]
    assert list(result.token_ids) == _without_eot(case["output_ids"])


def test_beam_search_matches_transformers():
    case = CASES["clip-beam"]
    result = model("en").transcribe(CLIP, max_new_tokens=case["max_new_tokens"], num_beams=3)
    assert list(result.token_ids) == _without_eot(case["output_ids"])


def test_audio_longer_than_30_s_is_transcribed_window_by_window():
    case = CASES["long-en"]
    audio = _long_audio(case)
    assert len(audio) / 16000 > 60  # three windows
    result = model("en").transcribe(audio, sample_rate=16000, max_new_tokens=case["max_new_tokens"])
    windows = case["windows"]
    assert [s.start for s in result.segments] == [w["start"] for w in windows]
    assert [list(s.token_ids) for s in result.segments] == [_without_eot(w["output_ids"]) for w in windows]
    assert list(result.token_ids) == [t for w in windows for t in _without_eot(w["output_ids"])]
    assert result.text == "".join(w["text"] for w in windows)
    assert result.duration == pytest.approx(len(audio) / 16000)


def test_inputs_path_bytes_array_and_stream_agree():
    case = CASES["clip-en"]
    asr = model("en")
    expected = asr.transcribe(CLIP, max_new_tokens=case["max_new_tokens"])
    import soundfile

    samples, rate = soundfile.read(str(CLIP), dtype="float32")
    assert asr.transcribe((samples, rate), max_new_tokens=case["max_new_tokens"]).token_ids == expected.token_ids
    assert asr.transcribe(str(CLIP), max_new_tokens=case["max_new_tokens"]).token_ids == expected.token_ids
    seen = []
    asr.transcribe(CLIP, max_new_tokens=case["max_new_tokens"], on_token=seen.append)
    assert "".join(seen) == expected.text
    assert "".join(asr.stream(CLIP, max_new_tokens=case["max_new_tokens"])) == expected.text


def test_features_equal_the_native_backends():
    from inference4py import audio

    asr = model("en")
    samples = audio.load_audio(CLIP)
    np.testing.assert_array_equal(asr.features(CLIP), audio.log_mel_spectrogram(samples, 80))
    assert asr.n_mels == 80


def test_sampling_is_seeded():
    asr = model("en")
    a = asr.transcribe(CLIP, max_new_tokens=12, do_sample=True, temperature=1.5, seed=3)
    b = asr.transcribe(CLIP, max_new_tokens=12, do_sample=True, temperature=1.5, seed=3)
    greedy = asr.transcribe(CLIP, max_new_tokens=12)
    assert a.token_ids == b.token_ids != greedy.token_ids


def test_suppress_tokens_from_the_folder_run_on_genais_logits(tmp_path):
    import json
    import shutil

    case = CASES["clip-en"]
    copy = tmp_path / "whisper"
    shutil.copytree(folder("genai-whisper"), copy)
    banned = case["output_ids"][0]
    (copy / "generation_config.json").write_text(
        json.dumps({"suppress_tokens": [banned], "begin_suppress_tokens": [EOT]})
    )
    asr = WhisperSpeechModel.builder().model_path(copy).language("en").build()
    result = asr.transcribe(CLIP, max_new_tokens=case["max_new_tokens"])
    assert banned not in result.token_ids and result.token_ids


def test_errors():
    with pytest.raises(AudioError):
        model("en").transcribe(folder("genai-media") / "missing.wav")
    with pytest.raises(ConfigurationError, match="language"):
        WhisperSpeechModel.builder().language("klingon")
    with pytest.raises(UnsupportedModelError, match="whisper"):
        WhisperSpeechModel.builder().model_path(folder("genai-llama")).build()
    with pytest.raises(ModelFilesMissingError, match="genai_config.json"):
        WhisperSpeechModel.builder().model_path(folder("genai-media")).build()
    with pytest.raises(ConfigurationError, match="optimum export"):
        WhisperSpeechModel.whisperTiny()


def test_preset_and_builder_options():
    b = WhisperSpeechModel.whisperSmall()
    assert b._model_id == "inference4j/whisper-small-genai"
    b = b.language("english").task("transcribe").providers(["CPUExecutionProvider"]).intra_op_threads(1)
    assert "language='en'" in repr(b)
    built = (
        WhisperSpeechModel.builder()
        .model_path(folder("genai-whisper"))
        .language("en")
        .providers(["CPUExecutionProvider"])
        .intra_op_threads(1)
        .build()
    )
    with built:
        assert (
            list(built.transcribe(CLIP, max_new_tokens=4).token_ids) == _without_eot(CASES["clip-en"]["output_ids"])[:4]
        )
