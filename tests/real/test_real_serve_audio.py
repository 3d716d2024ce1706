"""The audio routes on real Whisper checkpoints (base, tiny.en), driven by the `openai` client.

The server's answers must equal WhisperSpeechModel's on the same folder and clip (the library itself is
checked against transformers in test_real_whisper.py). The folders and the espeak-ng clips live in the
real-checkpoint cache, built by ``python tools/build_real.py --only whisper``.
"""

from __future__ import annotations

import pytest

from tests.real.conftest import REAL, not_built

pytestmark = [pytest.mark.real, pytest.mark.filterwarnings("ignore:deprecated:DeprecationWarning")]

pytest.importorskip("fastapi")
uvicorn = pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")

BASE, TINY_EN = "whisper-base-optimum", "whisper-tiny.en-optimum"


def _folder(name: str):
    folder = REAL / name
    if not folder.is_dir():
        not_built(name, only="whisper")
    return folder


def _clip(name: str):
    clip = REAL / "audio" / f"{name}.wav"
    if not clip.is_file():
        not_built(f"audio/{clip.name}", only="whisper")
    return clip


@pytest.fixture(scope="module")
def models():
    from inference4py import WhisperSpeechModel

    built = {name: WhisperSpeechModel.builder().model_path(_folder(name)).build() for name in (BASE, TINY_EN)}
    yield built
    for model in built.values():
        model.close()


@pytest.fixture(scope="module")
def client():
    from inference4py.serve import create_app, load_models
    from tests.serve.support import running

    app = create_app(load_models([str(_folder(BASE)), str(_folder(TINY_EN))]))
    with running(app) as url:
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=600)


def _segments(answer):
    return [(s.start, s.end, s.text, s.tokens) for s in answer.segments]


def _want_segments(result):
    from inference4py.speech.results import seconds  # verbose_json times are whole milliseconds

    return [(seconds(s.start), seconds(s.end), s.text, list(s.token_ids)) for s in result.segments]


@pytest.mark.parametrize("model", [BASE, TINY_EN])
def test_short_english_json_and_srt_equal_the_library(client, models, model):
    clip = _clip("en-short")
    answer = client.audio.transcriptions.create(model=model, file=clip)
    assert answer.text == models[model].transcribe(clip, task="transcribe").text
    srt = client.audio.transcriptions.create(model=model, file=clip, response_format="srt")
    assert srt == models[model].transcribe(clip, task="transcribe", timestamps=True).to_srt()


@pytest.mark.parametrize("model", [BASE, TINY_EN])
def test_long_form_verbose_json_equals_the_library(client, models, model):
    clip = _clip("en-long")  # 40 s: two windows, segments past 30 s
    from inference4py.speech.results import seconds

    want = models[model].transcribe(clip, task="transcribe", timestamps=True)
    answer = client.audio.transcriptions.create(model=model, file=clip, response_format="verbose_json")
    # verbose_json times are whole milliseconds (speech.results.seconds, as the library's to_dict)
    assert (answer.text, answer.language, answer.duration) == (want.text, "english", seconds(want.duration))
    assert _segments(answer) == _want_segments(want)
    assert answer.segments[-1].end > 30.0


def test_german_is_detected_and_translated(client, models):
    clip = _clip("de-short")
    answer = client.audio.transcriptions.create(model=BASE, file=clip, response_format="verbose_json")
    want = models[BASE].transcribe(clip, task="transcribe", timestamps=True)
    assert (answer.text, answer.language) == (want.text, "german")
    translated = client.audio.translations.create(model=BASE, file=clip, response_format="verbose_json")
    want = models[BASE].transcribe(clip, task="translate", timestamps=True)
    assert (translated.text, translated.language) == (want.text, "english")
    assert _segments(translated) == _want_segments(want)
    with pytest.raises(openai.BadRequestError, match="English-only Whisper model: it cannot translate"):
        client.audio.translations.create(model=TINY_EN, file=clip)
