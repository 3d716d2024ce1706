"""OpenAI's audio routes for served Whisper models: ``POST /v1/audio/transcriptions`` and ``/v1/audio/translations``.

A request is a multipart form, as OpenAI's client sends it: ``file`` (the audio), ``model`` and the
optional ``language``, ``prompt``, ``response_format``, ``temperature`` and
``timestamp_granularities[]``. The upload is decoded off the model's thread with the library's own
reader (:func:`inference4py.audio.load_audio`: wav, flac, ogg, mp3, ...), then the model's worker
runs :meth:`WhisperSpeechModel.transcribe` on it. The answer has OpenAI's shape for the requested
format: ``{"text"}``, plain text, SubRip, WebVTT, or verbose JSON with time-stamped segments.

``json`` and ``text`` are transcribed without timestamp tokens, the subtitle formats and
``verbose_json`` with them, as ``inference4py transcribe`` does for ``--format text`` and for
subtitles. ``prompt`` is the library's ``initial_prompt`` (context for the first window);
``timestamp_granularities[]=word`` turns on word timestamps (verbose JSON's ``words``). ``stream=true``
on transcriptions (json or text) answers with OpenAI's ``transcript.text.delta`` events as the model
writes, then ``transcript.text.done``. Every refusal is an OpenAI error object
(:class:`~inference4py.serve.protocol.ApiError`).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import tempfile
import threading
from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData, UploadFile
from starlette.exceptions import HTTPException as StarletteHTTPException

from inference4py import audio as _audio
from inference4py.errors import AudioError, ConfigurationError, Inference4pyError
from inference4py.serve.dispatch import require_kind
from inference4py.serve.errors import reason
from inference4py.serve.loading import load_speech_model, speech_model
from inference4py.serve.protocol import ApiError, error_body
from inference4py.serve.registry import ModelRegistry
from inference4py.serve.sse import sse
from inference4py.serve.worker import ModelWorker
from inference4py.speech import (
    WHISPER_LANGUAGES,
    TranscribeOptions,
    Transcription,
    WhisperSpeechModel,
    language_code,
)
from inference4py.speech.results import seconds

__all__ = ["RESPONSE_FORMATS", "add_audio_routes", "load_speech_model", "speech_model"]

RESPONSE_FORMATS = ("json", "text", "srt", "verbose_json", "vtt")
_TIMESTAMPED = frozenset({"srt", "vtt", "verbose_json"})  # the formats that need segment times
_STREAMED = frozenset({"json", "text"})  # the formats stream=true takes (OpenAI's rule)
_MEDIA_TYPES = {
    "text": "text/plain; charset=utf-8",
    "srt": "application/x-subrip; charset=utf-8",
    "vtt": "text/vtt; charset=utf-8",
}
# The form fields each route reads; the client sends a list as repeated "name[]" parts.
_FIELDS = {
    "transcribe": frozenset(
        {"file", "model", "language", "prompt", "response_format", "temperature", "timestamp_granularities[]", "stream"}
    ),
    # language is not in OpenAI's translation API; here it names the spoken language instead of detecting it
    "translate": frozenset({"file", "model", "language", "prompt", "response_format", "temperature", "stream"}),
}
_ROUTES = {"transcribe": "/v1/audio/transcriptions", "translate": "/v1/audio/translations"}
_SUFFIX = re.compile(r"^\.[A-Za-z0-9]{1,8}$")


def add_audio_routes(app: FastAPI, models: ModelRegistry) -> None:
    """Add ``POST /v1/audio/transcriptions`` and ``POST /v1/audio/translations`` to ``app``."""

    @app.post(_ROUTES["transcribe"], response_model=None)
    async def transcriptions(request: Request) -> Response:
        return await _answer(models, request, "transcribe")

    @app.post(_ROUTES["translate"], response_model=None)
    async def translations(request: Request) -> Response:
        return await _answer(models, request, "translate")


async def _answer(models: ModelRegistry, request: Request, task: str) -> Response:
    form = await _read_form(request)
    try:
        fields = _fields(form, task)
        ignored = _unknown(form, task)
        if ignored:  # an unknown name is no bad value: ignored, and said once in the log
            why = f"not a field {_ROUTES[task]} reads (accepted: {', '.join(sorted(_FIELDS[task]))})"
            request.app.state.field_warnings.warn(_ROUTES[task], {name: why for name in ignored})
        worker = await _speech_worker(models, fields["model"], task, request)
        model: WhisperSpeechModel = worker.model
        language = _language(model, fields.get("language"), fields["model"])
        if task == "translate" and not model.is_multilingual:
            raise ApiError(
                400,
                f"The model {fields['model']!r} is an English-only Whisper model: it cannot translate. "
                "Serve a multilingual Whisper model (e.g. onnx-community/whisper-base) for /v1/audio/translations.",
                "model",
            )
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise ApiError(
                400,
                "file is required: send the audio as a file part named 'file' "
                "(e.g. client.audio.transcriptions.create(file=open('speech.wav', 'rb'), model=...)).",
                "file",
            )
        samples = await run_in_threadpool(_decode, upload)
    finally:
        await form.close()
    response_format = fields["response_format"]
    granularities = fields["granularities"]
    options = TranscribeOptions(  # checked here, at the edge (a bad value is a 400)
        temperature=fields.get("temperature"),  # one temperature, 0 greedy: the model's own rule decides
        initial_prompt=fields.get("prompt") or None,
        word_timestamps="word" in granularities,
    )

    def job(on_token: Any = None) -> Transcription:
        return model.transcribe(
            (samples, _audio.SAMPLE_RATE),
            language=language,
            task=task,
            timestamps=response_format in _TIMESTAMPED,
            on_token=on_token,
            options=options,
        )

    if fields["stream"]:  # admitted before the status line: a full queue is still a 503
        return sse(_TranscriptStream(worker, job).events(), request)
    result = await worker.run(job)
    worker.count(0, len(result.token_ids))
    return _response(result, response_format, task, granularities)


class _Gone(Exception):
    """The streaming client went away: the transcription stops at its next piece of text."""


class _TranscriptStream:
    """OpenAI's transcription stream: a ``transcript.text.delta`` per piece of text as the model writes it,
    then ``transcript.text.done`` with the whole text (the deltas joined); a failure ends it with an error event.

    The job is queued on the model's thread when the stream is made, before the status line: a full
    queue is a 503. A client that leaves stops the job at its next piece of text, or takes it off the
    queue when it has not started.
    """

    def __init__(self, worker: ModelWorker, job: Callable[[Any], Transcription]) -> None:
        self._worker = worker
        self._loop = asyncio.get_running_loop()
        self._pieces: asyncio.Queue[str | None] = asyncio.Queue()
        self._gone = threading.Event()
        self._job = job
        self._running = worker.submit(self._run)  # QueueFullError here
        self._running.add_done_callback(lambda _: self._pieces.put_nowait(None))  # however it ends

    def _run(self) -> Transcription | None:  # on the model's thread
        return None if self._gone.is_set() else self._job(self._on_token)

    def _on_token(self, piece: str) -> None:  # on the model's thread
        if self._gone.is_set():
            raise _Gone
        self._loop.call_soon_threadsafe(self._pieces.put_nowait, piece)

    async def events(self) -> AsyncGenerator[tuple[None, Any], None]:
        running = self._running
        try:
            while (piece := await self._pieces.get()) is not None:
                yield None, {"type": "transcript.text.delta", "delta": piece}
            try:
                result = running.result()
            except Exception as exc:  # the status line went out already: the error is an event
                kind = "invalid_request_error" if isinstance(exc, Inference4pyError) else "server_error"
                yield None, {"type": "error", **error_body(reason(exc), kind)}
                return
            if result is not None:
                self._worker.count(0, len(result.token_ids))
                yield None, {"type": "transcript.text.done", "text": result.text}
        finally:
            if not running.done():  # the client left: the job stops at its next piece, or never starts
                self._gone.set()
                running.cancel()
                running.add_done_callback(lambda f: f.cancelled() or f.exception())  # retrieved, not logged


# ------------------------------------------------------------------------------- request -> arguments
async def _read_form(request: Request) -> FormData:
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "multipart/form-data":
        raise ApiError(
            400,
            f"{request.url.path} takes a multipart/form-data body (got {kind or 'no content type'}): "
            "send the audio as a 'file' part with 'model' beside it, as OpenAI's client does.",
        )
    try:
        return await request.form()
    except StarletteHTTPException as exc:  # a malformed multipart body
        detail = str(exc.detail).rstrip(".")
        raise ApiError(400, f"The multipart body cannot be read ({detail}). Send a well-formed form.") from exc


def _unknown(form: FormData, task: str) -> list[str]:
    """The form's field names this route does not read."""
    names = {name for name, _ in form.multi_items()}
    if "timestamp_granularities" in names:  # clients that send the list without brackets
        names = (names - {"timestamp_granularities"}) | {"timestamp_granularities[]"}
    return sorted(names - _FIELDS[task])


def _fields(form: FormData, task: str) -> dict[str, Any]:
    """The form's known fields, checked: a bad value is a 400 (unknown names are ignored by the caller)."""
    out: dict[str, Any] = {}
    for name in ("model", "language", "prompt", "response_format", "temperature", "stream"):
        value = form.get(name)
        if value is None:
            continue
        if not isinstance(value, str):
            raise ApiError(400, f"{name} must be a text field, not a file.", name)
        out[name] = value.strip()
    if not out.get("model"):
        raise ApiError(400, "model is required: the name of a served Whisper model (see GET /v1/models).", "model")
    response_format = out.get("response_format") or "json"
    if response_format not in RESPONSE_FORMATS:
        raise ApiError(
            400,
            f"response_format must be one of {', '.join(RESPONSE_FORMATS)}; got {response_format!r}.",
            "response_format",
        )
    out["response_format"] = response_format
    if "temperature" in out:
        out["temperature"] = _temperature(out["temperature"])
    stream = out.get("stream", "false").lower()
    if stream not in ("false", "0", "", "true", "1"):
        raise ApiError(400, f"stream must be true or false; got {out['stream']!r}.", "stream")
    out["stream"] = stream in ("true", "1")
    if out["stream"] and task != "transcribe":
        raise ApiError(400, "stream is for /v1/audio/transcriptions: translations answer whole.", "stream")
    if out["stream"] and response_format not in _STREAMED:
        raise ApiError(
            400,
            "stream=true answers with transcript.text.delta events and takes response_format json or text "
            f"(got {response_format!r}); subtitles and verbose_json answer whole.",
            "response_format",
        )
    granularities = [
        str(g) for g in form.getlist("timestamp_granularities[]") + form.getlist("timestamp_granularities")
    ]
    _check_granularities(granularities, response_format)
    out["granularities"] = frozenset(granularities) or frozenset({"segment"})
    return out


def _temperature(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.0 <= value <= 1.0:  # also refuses nan
        raise ApiError(400, f"temperature must be a number from 0 to 1; got {text!r}.", "temperature")
    return value


def _check_granularities(granularities: list[str], response_format: str) -> None:
    for g in granularities:
        if g not in ("segment", "word"):
            raise ApiError(
                400, f"timestamp_granularities takes 'segment' (or 'word'); got {g!r}.", "timestamp_granularities"
            )
    if granularities and response_format != "verbose_json":
        raise ApiError(
            400,
            f"timestamp_granularities needs response_format 'verbose_json' (got {response_format!r}).",
            "timestamp_granularities",
        )


async def _speech_worker(models: ModelRegistry, name: str, task: str, request: Request) -> ModelWorker:
    require_kind(
        models,
        name,
        "speech",
        refusal=f"The model {name!r} is not a speech model: {_ROUTES[task]} needs Whisper.",
        served="Served speech models",
        none_served="No speech model is served: start the server with a Whisper --model (e.g. onnx-community/whisper-base).",
    )
    return await models.worker(name, request)


def _language(model: WhisperSpeechModel, value: str | None, name: str) -> str | None:
    if not value:
        return None  # detected from the first 30 s (English for English-only models)
    try:
        code = language_code(value)
    except ConfigurationError as exc:
        raise ApiError(400, reason(exc), "language") from exc
    if code not in model.languages:
        known = "it is English-only" if not model.is_multilingual else f"it knows {', '.join(model.languages)}"
        raise ApiError(400, f"The model {name!r} cannot take language {value!r}: {known}.", "language")
    return code


def _decode(upload: UploadFile) -> Any:
    """The upload's samples (mono float32 at 16 kHz), read by the library from a temporary copy."""
    name = os.path.basename(upload.filename or "") or "the upload"
    suffix = Path(name).suffix
    # the suffix lets librosa's fallback pick a decoder; anything odd is left out of the temporary name
    suffix = suffix if _SUFFIX.match(suffix) else ""
    with tempfile.TemporaryDirectory(prefix="inference4py-audio-") as tmp:
        path = Path(tmp) / f"upload{suffix}"
        with path.open("wb") as fh:
            shutil.copyfileobj(upload.file, fh)
        try:
            return _audio.load_audio(path)
        except AudioError as exc:
            why = reason(exc).replace(str(path), repr(name))
            raise ApiError(
                400,
                f"The uploaded file cannot be used as audio. {why} "
                "Send a wav, flac, ogg or mp3 file as the 'file' part.",
                "file",
            ) from exc


# ------------------------------------------------------------------------------- result -> response
def _response(result: Transcription, response_format: str, task: str, granularities: frozenset[str]) -> Response:
    if response_format == "json":
        return JSONResponse({"text": result.text})
    if response_format == "verbose_json":
        return JSONResponse(_verbose(result, task, granularities))
    body = {"text": result.text, "srt": result.to_srt(), "vtt": result.to_vtt()}[response_format]
    return Response(body, media_type=_MEDIA_TYPES[response_format])


def _verbose(result: Transcription, task: str, granularities: frozenset[str]) -> dict[str, Any]:
    """OpenAI's verbose JSON: segments (with the window's avg_logprob, compression_ratio, no_speech_prob and
    temperature) when segment times are asked for, words when word times are. ``seek`` is left out (OpenAI's
    client leaves a missing key unset)."""
    code = "en" if task == "translate" else result.language  # a translation's language is its output's
    language = WHISPER_LANGUAGES.get(code, code) if code else None
    out: dict[str, Any] = {
        "task": task,
        "language": language,
        "duration": seconds(result.duration),
        "text": result.text,
    }
    if "segment" in granularities:
        out["segments"] = [
            {
                "id": i,
                "start": seconds(s.start),
                "end": seconds(s.end),
                "text": s.text,
                "tokens": list(s.token_ids),
                "temperature": s.temperature,
                "avg_logprob": s.avg_logprob,
                "compression_ratio": s.compression_ratio,
                "no_speech_prob": s.no_speech_prob,
            }
            for i, s in enumerate(result.segments)
        ]
    if "word" in granularities:
        out["words"] = [
            {"word": w.word.strip(), "start": seconds(w.start), "end": seconds(w.end)}
            for s in result.segments
            for w in s.words
        ]
    return out
