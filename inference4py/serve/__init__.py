"""``inference4py serve``: an OpenAI-compatible local server (the ``serve`` extra: FastAPI, uvicorn).

- :func:`create_app` returns an ASGI app over already loaded models, to mount in your own app.
- :func:`load_models` loads ``--model`` arguments (folders or hub ids) under their served names.
- :func:`serve` loads the models and runs uvicorn. It binds 127.0.0.1 unless told otherwise.

The models of ``ServerSettings.models_dir`` are loaded on demand (:mod:`~inference4py.serve.registry`).

Routes live in :mod:`~inference4py.serve.app`, the OpenAI request models in
:mod:`~inference4py.serve.protocol`, Anthropic's Messages API in :mod:`~inference4py.serve.messages`
(its request models in :mod:`~inference4py.serve.messages_protocol`), and each model's single owner
thread in :mod:`~inference4py.serve.worker`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inference4py.errors import ConfigurationError
from inference4py.serve.settings import ServerSettings

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = ["ServerSettings", "create_app", "load_models", "serve", "serve_app", "served_name"]

_INSTALL = 'pip install "inference4py[serve]"'


def _require() -> None:
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise ConfigurationError(f"The server needs FastAPI and uvicorn: {_INSTALL}.") from exc


def create_app(models: Mapping[str, Any], settings: ServerSettings | None = None) -> FastAPI:
    """An ASGI app serving ``models`` (served name -> loaded model) over the OpenAI API, to run or mount.

    ``settings``: a :class:`ServerSettings` (queue, batch, memory, time and access limits).
    """
    _require()
    from inference4py.serve.app import create_app as _create

    return _create(models, settings)


def served_name(model: str) -> str:
    """The name a ``--model`` argument is served under: the folder's or the repo's last part.

    A GGUF file is served under its name without ``.gguf``, a ``pip:NAME`` package as NAME.
    """
    from inference4py.gguf.sources import PIP_PREFIX

    if model.startswith(PIP_PREFIX):
        return model[len(PIP_PREFIX) :] or model
    name = Path(model.rstrip("/")).name or model
    return name[: -len(".gguf")] if name.lower().endswith(".gguf") and len(name) > 5 else name


def load_models(
    models: Sequence[str],
    names: Sequence[str] = (),
    *,
    kv_cache: str | Callable[[str], str] = "float",
    chat_template: Callable[[str], str | None] | None = None,
) -> dict[str, Any]:
    """Load each model (a folder, a hub id, a GGUF file or ``pip:NAME``), keyed by its served name.

    A GGUF source is converted once (cached, docs/gguf.md) and served as a text generator.

    Whisper becomes a ``WhisperSpeechModel`` (the audio routes), another encoder-decoder model a
    ``Seq2SeqTask`` (``/v1/completions``), a sentence encoder an ``OnnxEmbedder`` (``/v1/embeddings``), a
    cross-encoder an ``OnnxReranker`` (``/v1/rerank``), a vision-language folder a ``VisionLanguageModel`` (chats
    with images), anything else an ``OnnxTextGenerator``, whose KV cache is ``kv_cache`` (``"float"`` or ``"int8"``,
    or a function of the served name giving one: ``ServerSettings.kv_cache_for``). ``chat_template``:
    a function of the served name giving a text generator's Jinja chat template, or None for its
    folder's (``ServerSettings.chat_template_for``).
    """
    from inference4py.serve.loading import load_model

    if not models:
        raise ConfigurationError("Give at least one model to serve: --model FOLDER_OR_REPO_ID.")
    if names and len(names) != len(models):
        raise ConfigurationError("Give one --served-model-name per --model, or none.")
    loaded: dict[str, Any] = {}
    for i, model in enumerate(models):
        name = names[i] if names else served_name(model)
        if name in loaded:
            raise ConfigurationError(f"Two models are served as {name!r}: give each one --served-model-name.")
        loaded[name] = load_model(
            model,
            kv_cache=kv_cache if isinstance(kv_cache, str) else kv_cache(name),
            chat_template=chat_template(name) if chat_template is not None else None,
        )
    return loaded


def serve(
    models: Sequence[str],
    *,
    names: Sequence[str] = (),
    host: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "info",
    settings: ServerSettings | None = None,
) -> None:
    """Load ``models`` and serve them until interrupted (uvicorn; ``host`` defaults to loopback only).

    With ``settings.models_dir``, its models are served too, loaded when asked for; ``models`` may
    then be empty. Without an ``api_key`` in ``settings``, ``INFERENCE4PY_API_KEY`` is used when set.
    """
    _require()
    import dataclasses

    from inference4py import env

    settings = settings if settings is not None else ServerSettings()
    if settings.api_key is None:
        settings = dataclasses.replace(settings, api_key=env.serve_api_key())
    loaded = (
        load_models(models, names, kv_cache=settings.kv_cache_for, chat_template=settings.chat_template_for)
        if models or settings.models_dir is None
        else {}
    )
    serve_app(create_app(loaded, settings), settings, host=host, port=port, log_level=log_level)


def serve_app(
    app: Any,
    settings: ServerSettings | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "info",
) -> None:
    """Serve an app made by :func:`create_app` until SIGTERM or Ctrl-C, then stop gracefully.

    On the signal the server takes no new connections, lets the running requests (streams
    included) finish within ``settings.shutdown_timeout`` seconds, closes the models' threads and
    returns: a process manager sees a clean exit.
    """
    import math
    import signal
    import threading

    import uvicorn

    grace = (settings if settings is not None else ServerSettings()).shutdown_timeout
    main = threading.current_thread() is threading.main_thread()
    # uvicorn stops gracefully on SIGTERM, then raises the signal again for the handler it found:
    # with the default one the process would die of it (-15) after a clean stop. A no-op handler
    # makes that last raise harmless, so the clean stop ends in exit status 0.
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: None) if main else None
    try:
        uvicorn.run(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=math.ceil(grace))
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
