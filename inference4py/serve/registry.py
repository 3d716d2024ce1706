"""The models a server knows and which of them are loaded: loads on demand, least recently used and idle unloads.

A :class:`ModelRegistry` has one entry per served name. The models given loaded (``create_app``'s
mapping, the CLI's ``--model``) are pinned: loaded from the start, never unloaded. The models of
``--models-dir`` (:func:`~inference4py.serve.loading.scan_models_dir`) start unloaded; the folder is
scanned again when it has changed, so a model copied in later is served too. A route asks
for a worker with ``await models.worker(name, request)``, and the rules are kept here:

- A load runs in a thread, so the event loop and the other models keep serving. Requests that
  arrive for a model while it loads wait for that one load, and share its outcome.
- ``max_loaded_models`` counts loaded, loading and unloading models, the pinned ones included.
  Loading one more first unloads the least recently used idle model. When every other model is
  busy, the request is answered 503 with ``Retry-After: 1`` (code ``model_slots_busy``): it
  waits for no one, and a client retries.
- A model is in use from the moment a request asks for it until that request's answer has been
  sent, stream included (:class:`ModelLeases`). An idle model has no such request.
- With ``idle_unload``, a model loaded on demand is unloaded once no request has used it for that
  long (a sweep started with the app, :meth:`ModelRegistry.start`).
- A load that fails is answered 500 (code ``model_load_failed``) with a message that names the
  source and the reason. The model is listed as ``failed``, and the next request tries again.
- Unloading closes the model's worker (its scheduler thread) and the model's sessions, so their
  memory is freed.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import time
from collections.abc import Coroutine, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from inference4py.errors import ConfigurationError, Inference4pyError
from inference4py.generation.memory import MemoryBudget
from inference4py.serve.asgi import ASGIApp, Receive, Scope, Send
from inference4py.serve.errors import reason as server_reason
from inference4py.serve.loading import kind_of, load_model, scan_models_dir
from inference4py.serve.protocol import ApiError, now, unknown_model
from inference4py.serve.settings import ServerSettings
from inference4py.serve.worker import ModelWorker, source_bytes, weights_bytes
from inference4py.tasks.kinds import Kind, capabilities

if TYPE_CHECKING:
    from starlette.requests import Request

__all__ = ["ModelLeases", "ModelRegistry", "Status"]

_log = logging.getLogger("inference4py.serve")

Status = Literal["loaded", "unloaded", "loading", "unloading", "failed"]
_HOLDING: frozenset[Status] = frozenset({"loaded", "loading", "unloading"})  # what takes a slot
_USES = "inference4py.models"  # the scope key of the models a request holds


@dataclass(eq=False)
class _Entry:
    """One served name: where it comes from, its state, and the numbers /metrics reads by name."""

    name: str
    kind: Kind
    source: str | None  # None: given loaded (pinned)
    status: Status = "unloaded"
    worker: ModelWorker | None = None
    error: str | None = None
    users: int = 0  # requests that asked for the model and are not answered yet
    last_used: float = 0.0
    loads: int = 0
    unloads: int = 0
    load_failures: int = 0
    loading: asyncio.Task[None] | None = None
    closing: asyncio.Task[None] | None = None

    @property
    def pinned(self) -> bool:
        return self.source is None

    @property
    def loaded(self) -> int:
        return int(self.status == "loaded")


class ModelRegistry:
    """The served models, by name: the pinned ones, and the ones loaded when asked for.

    Args:
        pinned: Served name -> a model loaded already; it stays loaded.
        settings: The server's settings: the workers' limits, ``models_dir``, ``max_loaded_models``
            and ``idle_unload``.

    Raises:
        ConfigurationError: ``models_dir`` is not a folder, or ``max_loaded_models`` is below the
            number of pinned models (or equal to it while ``models_dir`` has models to load).
    """

    def __init__(self, pinned: Mapping[str, Any], settings: ServerSettings) -> None:
        self._settings = settings
        self._max = settings.max_loaded_models
        found = scan_models_dir(settings.models_dir) if settings.models_dir is not None else {}
        on_demand = {name: found[name] for name in found.keys() - pinned.keys()}
        for name in sorted(found.keys() & pinned.keys()):
            _log.warning("models dir: %s is not served: %r is the name of a --model", found[name][0], name)
        if self._max is not None and (len(pinned) > self._max or (on_demand and len(pinned) >= self._max)):
            raise ConfigurationError(
                f"max_loaded_models is {self._max}, and the {len(pinned)} models given with --model stay loaded "
                f"and count{', leaving no room for the models of --models-dir' if on_demand else ''}. Raise "
                "--max-loaded-models, or serve fewer models with --model."
            )
        for flag, named in (("--kv-cache", settings.model_kv_cache), ("--chat-template", settings.chat_templates)):
            unknown = sorted(named.keys() - pinned.keys() - on_demand.keys())
            if unknown:
                raise ConfigurationError(
                    f"{flag} names {', '.join(map(repr, unknown))}, which no model is served as; served: "
                    f"{', '.join(sorted(pinned.keys() | on_demand.keys()))}. Give NAME= with a served name."
                )
        # one byte budget for every model: weights charged as each loads, the KV caches as requests run
        self._memory = MemoryBudget(int(settings.memory_gb * (1 << 30))) if settings.memory_gb is not None else None
        if self._memory is not None:  # the given models first: one that does not fit is refused at start
            for name, model in pinned.items():
                self._memory.hold(name, weights_bytes(model))
        self._entries: dict[str, _Entry] = {}
        for name, model in pinned.items():
            self._entries[name] = _Entry(name, kind_of(model), None, "loaded", self._new_worker(name, model))
        for name, (source, kind) in sorted(on_demand.items()):
            self._entries[name] = _Entry(name, kind, source)
        self._dir_stamp = _stamp(settings.models_dir)  # the folder as scanned: a later change is looked at again
        self._tasks: set[asyncio.Task[Any]] = set()
        self._sweeper: asyncio.Task[None] | None = None
        _log.info(
            "serving %d models (%d loaded, %d on demand)",
            len(self._entries),
            len(pinned),
            len(on_demand),
        )

    # ------------------------------------------------------------------ what is served
    def names(self, *kinds: Kind) -> list[str]:
        """The served names (of ``kinds`` only, when given), loaded or not."""
        return [name for name, entry in self._entries.items() if not kinds or entry.kind in kinds]

    def kind(self, name: str) -> Kind:
        """The kind of model ``name`` (known without loading it).

        Raises:
            ApiError: 404, no model is served under ``name``.
        """
        return self._entry(name).kind

    def cards(self) -> list[dict[str, Any]]:
        """Each served model as /v1/models lists it: OpenAI's fields, plus ``status`` (and ``error`` when it failed)
        and ``capabilities`` (:func:`~inference4py.tasks.kinds.capabilities`: "chat", "completion"...)."""
        self._rescan()
        return [self.card(name) for name in self._entries]

    def card(self, name: str) -> dict[str, Any]:
        """Model ``name`` as /v1/models lists it. Raises ApiError (404) for a name not served."""
        entry = self._entry(name)
        card: dict[str, Any] = {"id": name, "object": "model", "created": now(), "owned_by": "inference4py"}
        card["status"] = entry.status
        card["capabilities"] = capabilities(entry.kind)  # the chat page lists the chat models only
        if entry.status == "failed":
            card["error"] = entry.error
        return card

    def workers(self) -> dict[str, ModelWorker]:
        """The loaded models' workers (what /metrics counts)."""
        return {name: e.worker for name, e in self._entries.items() if e.worker is not None}

    def states(self) -> dict[str, object]:
        """Every served name's ``loaded`` (0 or 1), ``loads``, ``unloads`` and ``load_failures``, for /metrics."""
        return dict(self._entries)

    # ------------------------------------------------------------------ requests
    async def worker(self, name: str, request: Request) -> ModelWorker:
        """The worker of model ``name``, loaded first when it is not; the model is held until ``request`` is answered.

        Raises:
            ApiError: 404 for a name not served, 500 when the model cannot be loaded, 503 when no
                model can be unloaded to make room for it.
        """
        entry = self._entry(name)
        entry.users += 1  # from now on: not idle, so not unloaded while this request waits for it
        try:
            worker = await self._loaded(entry)
        except BaseException:
            self._release(entry)
            raise
        uses: list[_Entry] | None = request.scope.get(_USES)
        if uses is None:  # no ModelLeases around the app: held only while asked for
            self._release(entry)
        else:
            uses.append(entry)
        return worker

    def release(self, entries: Iterable[_Entry]) -> None:
        """A request has been answered: the models it held may become idle."""
        for entry in entries:
            self._release(entry)

    def _release(self, entry: _Entry) -> None:
        entry.users -= 1
        entry.last_used = time.monotonic()

    # ------------------------------------------------------------------ admin
    async def load(self, name: str) -> None:
        """Load model ``name`` now (nothing when it is loaded). Raises as :meth:`worker`."""
        entry = self._entry(name)
        await self._loaded(entry)
        entry.last_used = time.monotonic()

    async def unload(self, name: str) -> None:
        """Unload model ``name`` now (nothing when it is not loaded; a failure is forgotten).

        Raises:
            ApiError: 404 for a name not served; 409 when the model is pinned, loading, or answering
                requests (it is not waited for).
        """
        entry = self._entry(name)
        if entry.pinned:
            raise ApiError(
                409,
                f"The model {name!r} was given loaded when the server started (--model) and stays loaded. "
                "Serve it from --models-dir to load and unload it on demand.",
                "name",
                code="model_pinned",
            )
        if entry.status == "loading":
            raise ApiError(
                409, f"The model {name!r} is loading; unload it once it is loaded.", "name", code="model_busy"
            )
        if entry.status == "loaded":
            if not self._idle(entry):
                raise ApiError(
                    409,
                    f"The model {name!r} is answering {max(entry.users, 1)} requests; unload it when they are done.",
                    "name",
                    code="model_busy",
                )
            self._start_unload(entry, f"asked for (POST /admin/models/{name}/unload)")
        if entry.closing is not None:
            await asyncio.shield(entry.closing)
        if entry.status == "failed":
            entry.status, entry.error = "unloaded", None

    # ------------------------------------------------------------------ the app's life
    def start(self) -> None:
        """Start the idle sweep (when ``idle_unload`` is set); call it on the app's event loop."""
        after = self._settings.idle_unload
        if after is not None and self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep(after))

    async def close(self) -> None:
        """Stop the sweep and the loads under way, and close every model (the server is stopping)."""
        pending = [t for t in (self._sweeper, *(e.loading for e in self._entries.values())) if t is not None]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        closing = [e.closing for e in self._entries.values() if e.closing is not None]
        await asyncio.gather(*closing, return_exceptions=True)
        for entry in self._entries.values():
            if entry.worker is not None:
                entry.worker.close()
                entry.worker, entry.status = None, "unloaded"

    # ------------------------------------------------------------------ loading and unloading
    def _entry(self, name: str) -> _Entry:
        entry = self._entries.get(name)
        if entry is None and self._rescan():
            entry = self._entries.get(name)
        if entry is None:
            raise unknown_model(name, self._entries)
        return entry

    def _rescan(self) -> bool:
        """Serve the models added to ``models_dir`` since it was last scanned; True when the folder changed.

        The modification times of the folder and of its subfolders tell (an entry added, removed or
        renamed changes them), so /v1/models and a request for an unknown name look again only after a
        change. A model seen half-copied gets its kind again while it is not loaded; one removed from
        the folder stays listed, and its source is refused when it is next loaded.
        """
        folder = self._settings.models_dir
        stamp = _stamp(folder)
        if folder is None or stamp == self._dir_stamp:
            return False
        self._dir_stamp = stamp
        try:
            found = scan_models_dir(folder)
        except ConfigurationError as exc:  # the folder went away: serve what is known
            _log.warning("models dir: %s", exc)
            return False
        for name, (source, kind) in sorted(found.items()):
            entry = self._entries.get(name)
            if entry is None:
                self._entries[name] = _Entry(name, kind, source)
                _log.info("models dir: %s appeared, served as %r", source, name)
            elif entry.source is not None and entry.status in ("unloaded", "failed") and entry.kind != kind:
                entry.kind = kind  # seen half-copied before: its files tell its kind now
        return True

    def _idle(self, entry: _Entry) -> bool:
        worker = entry.worker
        return entry.users == 0 and (worker is None or worker.waiting + worker.running == 0)

    async def _loaded(self, entry: _Entry) -> ModelWorker:
        """The entry's worker, once loaded: by the load under way, or by one started here."""
        while entry.status != "loaded" or entry.worker is None:
            if entry.closing is not None:  # unloading: its memory is given back before it loads again
                await asyncio.shield(entry.closing)
                continue
            if entry.loading is None:
                entry.loading = self._spawn(self._load(entry))
            await asyncio.shield(entry.loading)  # a waiter that leaves does not stop the load
        return entry.worker

    async def _load(self, entry: _Entry) -> None:
        try:
            await self._make_room(entry)
            started = time.perf_counter()
            _log.info("loading model %r from %s", entry.name, entry.source)
            try:
                worker = await asyncio.to_thread(self._open, entry.name, str(entry.source))
            except asyncio.CancelledError:
                _log.warning("the load of %r was abandoned: the server is stopping", entry.name)
                entry.status = "unloaded"
                raise
            except Exception as exc:
                raise self._failed(entry, exc) from exc
            entry.worker, entry.status, entry.error = worker, "loaded", None
            entry.loads += 1
            entry.last_used = time.monotonic()
            _log.info("loaded model %r in %.1f s", entry.name, time.perf_counter() - started)
        finally:
            entry.loading = None

    def _open(self, name: str, source: str) -> ModelWorker:
        """Load the model and start its worker (on a loading thread); its weights are charged to the budget."""
        model = load_model(
            source, kv_cache=self._settings.kv_cache_for(name), chat_template=self._settings.chat_template_for(name)
        )
        try:
            if self._memory is not None:
                self._memory.hold(name, weights_bytes(model))
            return self._new_worker(name, model)
        except BaseException:
            if self._memory is not None:
                self._memory.drop(name)
            model.close()
            raise

    def _new_worker(self, name: str, model: Any) -> ModelWorker:
        s = self._settings
        return ModelWorker(
            name,
            model,
            max_queue=s.max_queue,
            max_concurrent=s.max_concurrent,
            kv_budget=s.kv_budget,
            prefix_cache_mb=s.prefix_cache_mb,
            timeout=s.timeout,
            memory=self._memory,
        )

    def _failed(self, entry: _Entry, exc: Exception) -> ApiError:
        """Mark the entry failed; the 500 its waiting requests are answered with."""
        reason = server_reason(exc) if isinstance(exc, Inference4pyError) else f"{type(exc).__name__}: {exc}"
        entry.status, entry.error = "failed", f"cannot be loaded from {entry.source}: {reason}"
        entry.load_failures += 1
        _log.error("model %r %s", entry.name, entry.error, exc_info=not isinstance(exc, Inference4pyError))
        return ApiError(
            500,
            f"The model {entry.name!r} {entry.error} The other models are still served; the next request for "
            f"{entry.name!r} tries to load it again.",
            "model",
            "server_error",
            "model_load_failed",
        )

    async def _make_room(self, entry: _Entry) -> None:
        """Take a slot for the entry (it becomes ``loading``), unloading the least recently used idle model if needed.

        Raises:
            ApiError: 503, every other slot holds a busy model.
        """
        while True:
            taken = [e for e in self._entries.values() if e is not entry and e.status in _HOLDING]
            short = self._memory is not None and self._memory.free < source_bytes(entry.source)
            if (self._max is None or len(taken) < self._max) and not short:
                entry.status = "loading"  # no await since the count: the slot is ours
                return
            idle = [e for e in taken if e.status == "loaded" and not e.pinned and self._idle(e)]
            if idle:
                victim = min(idle, key=lambda e: e.last_used)
                limit = "--memory-gb" if short else f"--max-loaded-models {self._max}"
                why = f"least recently used, to make room for {entry.name!r} ({limit})"
                await asyncio.shield(self._start_unload(victim, why))
                continue
            closing = [e.closing for e in taken if e.closing is not None]
            if closing:
                await asyncio.wait(closing)
                continue
            if short and (self._max is None or len(taken) < self._max):
                entry.status = "loading"  # nothing idle to unload: the load itself says if it does not fit
                return
            busy = ", ".join(e.name for e in taken)
            raise ApiError(
                503,
                f"The model {entry.name!r} cannot be loaded now: --max-loaded-models is {self._max} and every "
                f"loaded model is busy or stays loaded ({busy}). Retry shortly.",
                "model",
                "server_error",
                "model_slots_busy",
                headers={"Retry-After": "1"},
            )

    def _start_unload(self, entry: _Entry, why: str) -> asyncio.Task[None]:
        worker, entry.worker, entry.status = entry.worker, None, "unloading"
        _log.info("unloading model %r: %s", entry.name, why)
        held = [worker] if worker is not None else []
        entry.closing = self._spawn(self._close(entry, held))
        return entry.closing

    async def _close(self, entry: _Entry, held: list[ModelWorker]) -> None:
        try:
            await asyncio.to_thread(_close_worker, held)
        except Exception:
            _log.exception("closing model %r failed", entry.name)
        finally:
            entry.closing, entry.status = None, "unloaded"
            entry.unloads += 1
            if self._memory is not None:
                self._memory.drop(entry.name)  # its weights; its caches were given back as it closed

    async def _sweep(self, after: float) -> None:
        """Unload, every so often, the models loaded on demand that nobody asked for in ``after`` seconds."""
        while True:
            await asyncio.sleep(min(after / 4, 1.0))
            now = time.monotonic()
            for entry in list(self._entries.values()):
                if (
                    entry.status == "loaded"
                    and not entry.pinned
                    and self._idle(entry)
                    and now - entry.last_used >= after
                ):
                    self._start_unload(entry, f"unused for {after:g} s (--idle-unload)")

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """A task kept referenced until it ends (the loop keeps only weak references)."""
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()  # the waiters got it; retrieved so asyncio does not log it again


def _close_worker(held: list[ModelWorker]) -> None:
    """Close the worker and its model, and drop the last reference to them (on a thread)."""
    worker = held.pop() if held else None
    if worker is None:
        return
    worker.close()
    del worker
    gc.collect()  # finished requests' closures may hold the model in reference cycles


class ModelLeases:
    """Holds each model a request asked for (:meth:`ModelRegistry.worker`) until the request has been answered.

    Plain ASGI around the routes: a streamed answer is answered when its last event is sent (or
    its client has left), so a model is never unloaded under a stream.
    """

    def __init__(self, app: ASGIApp, *, models: ModelRegistry) -> None:
        self.app = app
        self.models = models

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        uses: list[_Entry] = []
        scope[_USES] = uses
        try:
            await self.app(scope, receive, send)
        finally:
            self.models.release(uses)


def _stamp(folder: str | os.PathLike[str] | None) -> tuple[int, tuple[tuple[str, int], ...]] | None:
    """A folder's modification time (ns) and its subfolders' (a model copied in fills its own folder
    after making it), None when there is none to look at."""
    if folder is None:
        return None
    try:
        with os.scandir(folder) as entries:
            subfolders = tuple(sorted((e.name, e.stat().st_mtime_ns) for e in entries if e.is_dir()))
        return os.stat(folder).st_mtime_ns, subfolders
    except OSError:
        return None
