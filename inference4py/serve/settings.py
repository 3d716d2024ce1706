"""ServerSettings: how a server runs its models, typed once where it starts (the CLI, a Python caller)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from inference4py.errors import ConfigurationError
from inference4py.kv_cache_types import KV_CACHE_TYPES

__all__ = ["ServerSettings"]


@dataclass(frozen=True)
class ServerSettings:
    """The settings of an ``inference4py serve`` app (:func:`inference4py.serve.create_app`).

    Attributes:
        max_queue: Requests that may wait per model; one more is answered 503 with Retry-After.
        max_concurrent: Sequences a text generator decodes together (continuous batching).
        kv_budget: Positions (prompt + max_tokens, summed over a model's running requests) its KV
            cache may reserve; a request that does not fit waits. None: only ``max_concurrent`` bounds it.
        prefix_cache_mb: Memory per text generator for the automatic prefix cache (0: off).
        timeout: Seconds a request may run before it is stopped (408); None: no limit.
        api_key: When set, every route but /health and the chat page needs ``Authorization: Bearer KEY``.
        cors_origins: Origins browser pages may call the API from, as ``scheme://host[:port]``, besides
            pages on this machine (localhost, 127.0.0.1, [::1], any port) and the server's own page,
            which always may (:class:`~inference4py.serve.guard.Cors`); ``"*"`` lets any page call it
            (the API key, when one is set, still guards it: it travels in a header, never as a cookie).
        max_body_mb: Larger request bodies are answered 413.
        responses_store: Finished /v1/responses answers kept in memory, for ``previous_response_id``
            and ``GET /v1/responses/{id}`` (least recently used forgotten first; 0 keeps none).
        memory_gb: A budget for every model's weights, KV caches and prefix caches together (GiB): a
            request waits until its KV cache (prompt + max_tokens positions) fits, one that could never fit
            is answered 503, and a model that does not fit is refused at start. None: no byte budget.
        shutdown_timeout: On SIGTERM (or Ctrl-C) the server takes no new connections and gives the
            running requests this many seconds to finish before it stops (streams included).
        models_dir: A folder whose models (``*.gguf`` files, ONNX and genai model folders) are listed
            and loaded when a request names one (:mod:`~inference4py.serve.registry`); None: none.
        max_loaded_models: Models kept loaded at once, the ones given loaded counted; loading one
            more unloads the least recently used idle one. None: no bound.
        idle_unload: Seconds after its last request that a model loaded on demand is unloaded
            (ollama's ``keep_alive``); None: it stays until it makes room for another.
        kv_cache: How the text generators keep their KV cache: ``"float"`` (the graph's type) or
            ``"int8"`` (a quarter of float32's bytes, so ``memory_gb`` holds four times the positions;
            GroupQueryAttention graphs only: ``OnnxTextGenerator.builder().kv_cache``), for every model
            not named in ``model_kv_cache``.
        model_kv_cache: Served name -> its KV cache type, where one model differs from ``kv_cache``.
        chat_templates: Served name -> the Jinja chat template its text generator renders chats (and
            tools) with, instead of the one in its folder (``serve --chat-template NAME=FILE``).
        allow_image_domains: Hosts whose ``http(s)`` image addresses the server fetches for its
            vision-language models (a name allows its subdomains too); empty, the default: none, images
            come inline as data URLs or base64 (a server that fetches any address is a request forgery).
        max_image_mb: The most one image of a request may take, inline or fetched (MiB).
        max_image_pixels: The most pixels (width x height) one image may have.
        image_fetch_timeout: Seconds one image fetch may take, from connecting to its last byte.

    Raises:
        ConfigurationError: a limit below its minimum.
    """

    max_queue: int = 256
    max_concurrent: int = 8
    kv_budget: int | None = None
    prefix_cache_mb: float = 256
    timeout: float | None = None
    api_key: str | None = None
    cors_origins: Sequence[str] = ()
    max_body_mb: float = 32
    responses_store: int = 256
    shutdown_timeout: float = 30.0
    memory_gb: float | None = None
    models_dir: str | os.PathLike[str] | None = None
    max_loaded_models: int | None = None
    idle_unload: float | None = None
    kv_cache: str = "float"
    model_kv_cache: Mapping[str, str] = field(default_factory=dict)
    chat_templates: Mapping[str, str] = field(default_factory=dict)
    allow_image_domains: Sequence[str] = ()
    max_image_mb: float = 20
    max_image_pixels: int = 50_000_000
    image_fetch_timeout: float = 10.0

    def kv_cache_for(self, name: str) -> str:
        """The KV cache type of the model served as ``name``."""
        return self.model_kv_cache.get(name, self.kv_cache)

    def chat_template_for(self, name: str) -> str | None:
        """The chat template given for the model served as ``name``, or None (its folder's)."""
        return self.chat_templates.get(name)

    def __post_init__(self) -> None:
        if self.memory_gb is not None and not self.memory_gb > 0:
            raise ConfigurationError(f"memory_gb must be a positive number of GiB, got {self.memory_gb}.")
        if not self.shutdown_timeout >= 0:
            raise ConfigurationError(f"shutdown_timeout must be >= 0 seconds, got {self.shutdown_timeout}.")
        if isinstance(self.cors_origins, str):  # one origin, not its characters
            object.__setattr__(self, "cors_origins", (self.cors_origins,))
        object.__setattr__(self, "cors_origins", tuple(self.cors_origins))
        for origin in self.cors_origins:
            _check_origin(origin)
        if isinstance(self.allow_image_domains, str):  # one host, not its characters
            object.__setattr__(self, "allow_image_domains", (self.allow_image_domains,))
        object.__setattr__(self, "allow_image_domains", tuple(self.allow_image_domains))
        for host in self.allow_image_domains:
            if not isinstance(host, str) or not re.fullmatch(r"[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\]", host):
                raise ConfigurationError(
                    f"Image domain {host!r} is not a host name: give a name or address alone (img.example.com, "
                    "127.0.0.1), without scheme, port or path."
                )
        if not self.max_image_mb > 0 or self.max_image_pixels < 1 or not self.image_fetch_timeout > 0:
            raise ConfigurationError("max_image_mb, max_image_pixels and image_fetch_timeout must be > 0.")
        if self.max_queue < 0 or self.max_concurrent < 1:
            raise ConfigurationError(
                f"max_queue must be >= 0 and max_concurrent >= 1, got {self.max_queue} and {self.max_concurrent}."
            )
        if self.prefix_cache_mb < 0 or self.max_body_mb <= 0:
            raise ConfigurationError("prefix_cache_mb must be >= 0 and max_body_mb > 0.")
        if self.responses_store < 0:
            raise ConfigurationError(f"responses_store must be >= 0 (0 keeps none), got {self.responses_store}.")
        if self.max_loaded_models is not None and self.max_loaded_models < 1:
            raise ConfigurationError(f"max_loaded_models must be >= 1 (None: no bound), got {self.max_loaded_models}.")
        if self.idle_unload is not None and not self.idle_unload > 0:
            raise ConfigurationError(f"idle_unload must be > 0 seconds (None: never), got {self.idle_unload}.")
        object.__setattr__(self, "model_kv_cache", dict(self.model_kv_cache))
        object.__setattr__(self, "chat_templates", dict(self.chat_templates))
        for name, template in self.chat_templates.items():
            if not isinstance(template, str) or not template.strip():
                raise ConfigurationError(f"The chat template given for {name!r} is empty: give a Jinja template.")
        for kind in (self.kv_cache, *self.model_kv_cache.values()):
            if kind not in KV_CACHE_TYPES:
                raise ConfigurationError(f"kv_cache must be one of {', '.join(KV_CACHE_TYPES)}, got {kind!r}.")


_ORIGIN = re.compile(r"[a-z][a-z0-9+.-]*://[^/?#\s]+")


def _check_origin(origin: object) -> None:
    """An origin as browsers send it (scheme://host[:port]: no path, no trailing slash), or "*"."""
    if origin == "*" or (isinstance(origin, str) and _ORIGIN.fullmatch(origin)):
        return
    example = "http://localhost:3000"
    if isinstance(origin, str) and "://" in origin:
        scheme, rest = origin.split("://", 1)
        example = f"{scheme.lower()}://{rest.split('/', 1)[0]}"
    raise ConfigurationError(
        f"CORS origin {origin!r} is not an origin: give scheme://host[:port] as browsers send it (no path, no "
        f"trailing slash), e.g. {example}, or '*' for any origin."
    )
