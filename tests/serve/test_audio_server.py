"""OpenAI's audio routes, for real: uvicorn on 127.0.0.1 and a free port, driven by the `openai` client.

Every answer is compared with what WhisperSpeechModel, built directly on the same folder, gives for
the same file. Bad requests must get OpenAI error objects with the right status, and the server must
keep answering.
"""

from __future__ import annotations

import json
import shutil
import wave
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("fastapi")
uvicorn = pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

from inference4py import WhisperSpeechModel  # noqa: E402
from inference4py.errors import ConfigurationError  # noqa: E402
from inference4py.serve import create_app, load_models  # noqa: E402
from inference4py.serve.audio import RESPONSE_FORMATS, load_speech_model  # noqa: E402
from inference4py.speech import WHISPER_LANGUAGES  # noqa: E402
from tests.conftest import MODELS, load_reference  # noqa: E402
from tests.serve.support import running  # noqa: E402

# openai's client marks its translations method deprecated; the route is what is tested here
pytestmark = pytest.mark.filterwarnings("ignore:deprecated:DeprecationWarning")

WHISPER = MODELS / "whisper"
QWEN = MODELS / "qwen2"
TIMESTAMPED = ("srt", "vtt", "verbose_json")


def _write_wav(path: Path, *, rate: int, seconds: float) -> Path:
    """A gliding tone gated on and off, with a quiet high tone under it: 16-bit PCM, mono."""
    t = np.arange(int(seconds * rate)) / rate
    signal = 0.3 * np.sin(2 * np.pi * (300 + 200 * t) * t) * (np.sin(2 * np.pi * 1.5 * t) > 0)
    signal += 0.05 * np.sin(2 * np.pi * 1200 * t)
    with wave.open(str(path), "wb") as fh:
        fh.setnchannels(1)
        fh.setsampwidth(2)
        fh.setframerate(rate)
        fh.writeframes((signal * 32767).astype("<i2").tobytes())
    return path


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """The Whisper fixture, and the same weights with an English-only generation_config.json (like whisper-*.en)."""
    english = tmp_path_factory.mktemp("whisper-en") / "whisper-en"
    shutil.copytree(WHISPER, english)
    config = load_reference("whisper")["generation_config_english_only"]
    (english / "generation_config.json").write_text(json.dumps(config), encoding="utf-8")
    return {"whisper": WHISPER, "whisper-en": english}


@pytest.fixture(scope="module")
def wav(tmp_path_factory):
    # 8 kHz, so the server's decoding resamples like the library's does
    return _write_wav(tmp_path_factory.mktemp("audio") / "glide.wav", rate=8000, seconds=3.2)


@pytest.fixture(scope="module")
def server(folders):
    app = create_app(load_models([str(folders["whisper"]), str(QWEN), str(folders["whisper-en"])]))
    with running(app) as url:
        yield url


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server}/v1", api_key="none", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def asr(folders):
    with WhisperSpeechModel.builder().model_path(folders["whisper"]).build() as model:
        yield model


@pytest.fixture(scope="module")
def asr_en(folders):
    with WhisperSpeechModel.builder().model_path(folders["whisper-en"]).build() as model:
        yield model


def _library(model, wav, response_format, **kwargs):
    return model.transcribe(wav, timestamps=response_format in TIMESTAMPED, **kwargs)


def _check_answer(answer, want, response_format, task):
    """The server's answer for ``response_format`` against the library's Transcription ``want``."""
    if response_format == "json":
        assert answer.text == want.text
    elif response_format == "text":
        assert answer == want.text
    elif response_format == "srt":
        assert answer == want.to_srt()
    elif response_format == "vtt":
        assert answer == want.to_vtt()
    else:
        language = "english" if task == "translate" else WHISPER_LANGUAGES[want.language]
        assert (answer.text, answer.language, answer.duration) == (want.text, language, want.duration)
        assert answer.model_extra["task"] == task
        got = [
            (
                s.id,
                s.start,
                s.end,
                s.text,
                s.tokens,
                s.temperature,
                s.avg_logprob,
                s.compression_ratio,
                s.no_speech_prob,
            )
            for s in answer.segments
        ]
        expected = [
            (i, s.start, s.end, s.text, list(s.token_ids), 0.0, s.avg_logprob, s.compression_ratio, s.no_speech_prob)
            for i, s in enumerate(want.segments)
        ]
        assert got == expected
        assert all(s.avg_logprob is not None and s.no_speech_prob is not None for s in answer.segments)


# ------------------------------------------------------------------------------- answers equal the library
def test_whisper_folders_are_served_as_speech_models(client, folders):
    assert sorted(m.id for m in client.models.list().data) == ["qwen2", "whisper", "whisper-en"]
    assert isinstance(load_speech_model(str(WHISPER)), WhisperSpeechModel)
    assert load_speech_model(str(QWEN)) is None  # not a speech model: served as a text generator
    with pytest.raises(ConfigurationError, match="onnxruntime-genai Whisper export"):
        load_speech_model(str(MODELS / "genai-whisper"))


@pytest.mark.parametrize("response_format", RESPONSE_FORMATS)
def test_transcriptions_equal_the_library(client, asr, wav, response_format):
    want = _library(asr, wav, response_format, task="transcribe")
    with wav.open("rb") as fh:
        answer = client.audio.transcriptions.create(model="whisper", file=fh, response_format=response_format)
    _check_answer(answer, want, response_format, "transcribe")


@pytest.mark.parametrize("response_format", RESPONSE_FORMATS)
def test_translations_equal_the_library(client, asr, wav, response_format):
    want = _library(asr, wav, response_format, task="translate")
    with wav.open("rb") as fh:
        answer = client.audio.translations.create(model="whisper", file=fh, response_format=response_format)
    _check_answer(answer, want, response_format, "translate")


def test_language_temperature_and_segment_granularity_come_through(client, asr, wav):
    want = _library(asr, wav, "verbose_json", task="transcribe", language="de", do_sample=False)
    answer = client.audio.transcriptions.create(
        model="whisper",
        file=wav.read_bytes(),  # bytes, without a file name
        language="de",
        temperature=0,
        response_format="verbose_json",
        timestamp_granularities=["segment"],
    )
    _check_answer(answer, want, "verbose_json", "transcribe")
    assert answer.language == "german"


def test_prompt_is_the_initial_prompt(client, asr, wav):
    want = _library(asr, wav, "verbose_json", task="transcribe", initial_prompt="Earlier in this meeting")
    plain = _library(asr, wav, "verbose_json", task="transcribe")
    assert want.token_ids != plain.token_ids  # the prompt changes what the model writes
    answer = client.audio.transcriptions.create(
        model="whisper", file=wav, prompt="Earlier in this meeting", response_format="verbose_json"
    )
    _check_answer(answer, want, "verbose_json", "transcribe")


def test_word_timestamps(client, asr, wav):
    want = _library(asr, wav, "verbose_json", task="transcribe", word_timestamps=True)
    words = [(w.word.strip(), w.start, w.end) for s in want.segments for w in s.words]
    assert words
    answer = client.audio.transcriptions.create(
        model="whisper", file=wav, response_format="verbose_json", timestamp_granularities=["word"]
    )
    assert [(w.word, w.start, w.end) for w in answer.words] == words
    assert answer.segments is None  # only what was asked for
    both = client.audio.transcriptions.create(
        model="whisper", file=wav, response_format="verbose_json", timestamp_granularities=["word", "segment"]
    )
    assert [(w.word, w.start, w.end) for w in both.words] == words
    _check_answer(both, want, "verbose_json", "transcribe")


def test_an_english_only_model_transcribes(client, asr_en, wav):
    want = _library(asr_en, wav, "verbose_json", task="transcribe")
    assert not asr_en.is_multilingual
    answer = client.audio.transcriptions.create(model="whisper-en", file=wav, response_format="verbose_json")
    _check_answer(answer, want, "verbose_json", "transcribe")
    assert answer.language == "english"


def test_content_types(client, wav):
    types = {}
    for response_format in RESPONSE_FORMATS:
        raw = client.audio.transcriptions.with_raw_response.create(
            model="whisper", file=wav, response_format=response_format
        )
        types[response_format] = raw.headers["content-type"]
    assert types == {
        "json": "application/json",
        "verbose_json": "application/json",
        "text": "text/plain; charset=utf-8",
        "srt": "application/x-subrip; charset=utf-8",
        "vtt": "text/vtt; charset=utf-8",
    }


def test_the_worker_counts_the_generated_tokens(server, client, asr, wav):
    def generated() -> int:
        for line in httpx.get(f"{server}/metrics").text.splitlines():
            if line.startswith('inference4py_generation_tokens_total{model="whisper"}'):
                return int(line.split()[-1])
        raise AssertionError("no generation counter for whisper")

    before = generated()
    client.audio.transcriptions.create(model="whisper", file=wav)
    assert generated() - before == len(_library(asr, wav, "json", task="transcribe").token_ids)


# ------------------------------------------------------------------------------- bad requests
def _error(call):
    with pytest.raises(openai.APIStatusError) as info:
        call()
    return info.value.status_code, info.value.body


def test_an_unknown_model_is_a_404(client, wav):
    status, body = _error(lambda: client.audio.transcriptions.create(model="nope", file=wav))
    assert status == 404
    assert body == {
        "message": "The model 'nope' does not exist here. Served models: whisper, qwen2, whisper-en.",
        "type": "not_found_error",
        "param": "model",
        "code": None,
    }


def test_a_text_model_is_refused_naming_the_speech_models(client, wav):
    status, body = _error(lambda: client.audio.translations.create(model="qwen2", file=wav))
    assert status == 400
    assert body == {
        "message": "The model 'qwen2' is not a speech model: /v1/audio/translations needs Whisper. "
        "Served speech models: whisper, whisper-en.",
        "type": "invalid_request_error",
        "param": "model",
        "code": None,
    }


def test_translation_on_an_english_only_model_is_refused(client, wav):
    status, body = _error(lambda: client.audio.translations.create(model="whisper-en", file=wav))
    assert (status, body["param"], body["type"]) == (400, "model", "invalid_request_error")
    assert body["message"].startswith("The model 'whisper-en' is an English-only Whisper model: it cannot translate.")


@pytest.mark.parametrize(
    "model,language,needle",
    [
        ("whisper-en", "de", "The model 'whisper-en' cannot take language 'de': it is English-only."),
        ("whisper", "klingon", "Unknown language 'klingon'."),
    ],
)
def test_a_language_the_model_cannot_take_is_refused(client, wav, model, language, needle):
    status, body = _error(lambda: client.audio.transcriptions.create(model=model, file=wav, language=language))
    assert (status, body["param"]) == (400, "language")
    assert body["message"].startswith(needle)


def test_a_bad_response_format_lists_the_valid_ones(client, wav):
    status, body = _error(lambda: client.audio.transcriptions.create(model="whisper", file=wav, response_format="xml"))
    assert status == 400
    assert body == {
        "message": "response_format must be one of json, text, srt, verbose_json, vtt; got 'xml'.",
        "type": "invalid_request_error",
        "param": "response_format",
        "code": None,
    }


@pytest.mark.parametrize(
    "content,filename,needle",
    [
        (b"these are meeting notes, not a recording\n" * 20, "notes.txt", "Cannot read 'notes.txt' as audio"),
        (b"", "empty.wav", "Audio file 'empty.wav' is empty (0 bytes)."),
        (b"RIFF\x10\x00\x00\x00WAVEfmt ", "cut.wav", "Cannot read 'cut.wav' as audio"),
    ],
)
def test_an_upload_that_is_not_audio_is_a_400_that_says_what_to_send(client, content, filename, needle):
    status, body = _error(lambda: client.audio.transcriptions.create(model="whisper", file=(filename, content)))
    assert (status, body["param"], body["type"]) == (400, "file", "invalid_request_error")
    message = body["message"]
    assert message.startswith("The uploaded file cannot be used as audio. ")
    assert needle in message
    assert message.endswith("Send a wav, flac, ogg or mp3 file as the 'file' part.")
    assert "/tmp" not in message and "inference4py-audio-" not in message  # the server's paths stay private


@pytest.mark.parametrize(
    "kwargs,param,needle",
    [
        ({"temperature": 1.5}, "temperature", "temperature must be a number from 0 to 1; got '1.5'."),
        (
            {"timestamp_granularities": ["phoneme"], "response_format": "verbose_json"},
            "timestamp_granularities",
            "timestamp_granularities takes 'segment' (or 'word'); got 'phoneme'.",
        ),
        (
            {"timestamp_granularities": ["segment"], "response_format": "json"},
            "timestamp_granularities",
            "timestamp_granularities needs response_format 'verbose_json' (got 'json').",
        ),
        (
            {"stream": True, "response_format": "srt"},
            "response_format",
            "stream=true answers with transcript.text.delta events and takes response_format json or text",
        ),
    ],
)
def test_unsupported_fields_are_refused_by_name(client, wav, kwargs, param, needle):
    status, body = _error(lambda: client.audio.transcriptions.create(model="whisper", file=wav, **kwargs))
    assert (status, body["param"]) == (400, param)
    assert body["message"].startswith(needle)


@pytest.fixture(scope="module")
def long_wav(tmp_path_factory):
    """The long-form fixture (several 30 s windows), as a 16 kHz wav."""
    import soundfile as sf

    from tests.test_audio import _clips, assemble

    path = tmp_path_factory.mktemp("long") / "long.wav"
    sf.write(path, assemble(load_reference("whisper")["long_recipe"], _clips()), 16000)
    return path


@pytest.mark.parametrize("response_format", ["json", "text"])
def test_a_streamed_transcription_is_the_whole_one_in_deltas(client, asr, long_wav, response_format):
    """OpenAI's events: transcript.text.delta pieces as they are decoded, then transcript.text.done."""
    want = asr.transcribe(long_wav)
    with long_wav.open("rb") as f:
        events = list(
            client.audio.transcriptions.create(model="whisper", file=f, stream=True, response_format=response_format)
        )
    kinds = [e.type for e in events]
    assert kinds[-1] == "transcript.text.done" and set(kinds[:-1]) == {"transcript.text.delta"} and len(kinds) >= 3
    assert "".join(e.delta for e in events[:-1]) == events[-1].text == want.text


def test_a_client_leaving_a_stream_frees_the_model(server, client, asr, long_wav):
    import httpx

    with httpx.Client(base_url=server, timeout=60) as http:
        files = {"file": ("long.wav", long_wav.read_bytes(), "audio/wav")}
        with http.stream(
            "POST", "/v1/audio/transcriptions", data={"model": "whisper", "stream": "true"}, files=files
        ) as r:
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
            first = next(line for line in r.iter_lines() if line.startswith("data: "))
            assert json.loads(first[6:])["type"] == "transcript.text.delta"
    with long_wav.open("rb") as f:  # the worker is free again: a whole answer, the library's text
        assert client.audio.transcriptions.create(model="whisper", file=f).text == asr.transcribe(long_wav).text


def test_a_stream_on_a_full_queue_is_a_503_before_any_event(folders, long_wav):
    from inference4py.serve import ServerSettings

    app = create_app(load_models([str(folders["whisper"])]), ServerSettings(max_queue=0))  # nothing may wait
    with running(app) as url, httpx.Client(base_url=url, timeout=60) as http:
        files = {"file": ("long.wav", long_wav.read_bytes(), "audio/wav")}
        r = http.post("/v1/audio/transcriptions", data={"model": "whisper", "stream": "true"}, files=files)
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        assert r.json()["error"]["code"] == "queue_full"
        assert http.get("/health").status_code == 200


def test_a_streamed_translation_is_refused(client, wav):
    status, body = _error(
        lambda: client.audio.translations.create(model="whisper", file=wav, extra_body={"stream": "true"})
    )
    assert (status, body["param"]) == (400, "stream")
    assert body["message"] == "stream is for /v1/audio/transcriptions: translations answer whole."


def _text_form(fields: dict[str, str]) -> tuple[bytes, dict[str, str]]:
    """A multipart body of text fields only (no file part)."""
    parts = [f'--b\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n' for k, v in fields.items()]
    return ("".join(parts) + "--b--\r\n").encode(), {"Content-Type": "multipart/form-data; boundary=b"}


FILE_REQUIRED = {
    "message": "file is required: send the audio as a file part named 'file' "
    "(e.g. client.audio.transcriptions.create(file=open('speech.wav', 'rb'), model=...)).",
    "type": "invalid_request_error",
    "param": "file",
    "code": None,
}


def test_malformed_forms_are_400s(server, wav):
    url = f"{server}/v1/audio/transcriptions"

    def post(**kwargs):
        answer = httpx.post(url, timeout=60, **kwargs)
        return answer.status_code, answer.json()["error"]

    content, headers = _text_form({"model": "whisper"})
    assert post(content=content, headers=headers) == (400, FILE_REQUIRED)
    content, headers = _text_form({"model": "whisper", "file": "speech.wav"})  # a text field is not an upload
    assert post(content=content, headers=headers) == (400, FILE_REQUIRED)
    status, error = post(files={"file": ("glide.wav", wav.read_bytes())})
    assert (status, error["param"]) == (400, "model")
    assert error["message"] == "model is required: the name of a served Whisper model (see GET /v1/models)."
    status, error = post(data={"model": "whisper"}, files={"audio": ("glide.wav", wav.read_bytes())})
    assert (status, error) == (400, FILE_REQUIRED)  # the upload under another name: 'file' is missing
    status, error = post(json={"model": "whisper", "file": "glide.wav"})
    assert status == 400
    assert error["message"] == (
        "/v1/audio/transcriptions takes a multipart/form-data body (got application/json): send the audio as a "
        "'file' part with 'model' beside it, as OpenAI's client does."
    )
    status, error = post(content=content, headers={"Content-Type": "multipart/form-data"})  # no boundary
    assert (status, error["message"]) == (
        400,
        "The multipart body cannot be read (Missing boundary in multipart). Send a well-formed form.",
    )


def test_the_server_still_answers_after_every_error(client, asr, wav):
    want = _library(asr, wav, "srt", task="transcribe")
    assert client.audio.transcriptions.create(model="whisper", file=wav, response_format="srt") == want.to_srt()


def test_an_unknown_field_name_is_ignored_with_a_warning(client, wav, caplog):
    import logging

    with caplog.at_level(logging.WARNING, logger="inference4py.serve"):
        text = client.audio.transcriptions.create(model="whisper", file=wav, extra_body={"beam_size": 5}).text
    assert isinstance(text, str) and any("beam_size" in m for m in caplog.messages)
