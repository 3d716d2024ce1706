"""The OpenAI server as a Ray Serve application: replicas, autoscaling and prefix-aware routing.

Two deployments, both Ray Serve's:

* ``Ingress`` (the HTTP entry, light): reads each request, names its conversation prefix and passes
  it on, streaming the answer back as it comes;
* ``ModelServer`` (``--replicas N`` or ``--autoscale MIN,MAX`` on ongoing requests): each replica
  loads the models and runs the same app as ``inference4py serve`` in process (its continuous
  batching scheduler, prefix cache, metrics), answering the forwarded request as uvicorn would.

Routing is Serve's: :class:`PrefixAffinityRouter` is a ``RequestRouter`` that sends the requests
sharing a prompt prefix (a conversation's turns, a shared system prompt with the same first
question) to the replica chosen for that prefix by rendezvous hashing (the same one while the
replicas stay the same, and only that prefix's share moves when one comes or goes), unless that
replica's queue is longer than the shortest by ``imbalance`` requests: then the least loaded one.
Each answer carries the replica that served it in ``x-inference4py-replica``.

A replica that dies mid-stream ends its open streams with an error event (an SSE ``error``
object; a plain response is cut short) and Ray restarts it; a replica that cannot load its model
fails its start and Serve retries it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from inference4py.errors import ConfigurationError
from inference4py.serve.forwarding import REPLICA_HEADER
from inference4py.serve.settings import ServerSettings

__all__ = ["REPLICA_HEADER", "app_builder", "build_app", "run_on_ray"]

_log = logging.getLogger("inference4py.serve")


def _require_ray() -> Any:
    try:
        from ray import serve
    except ImportError as exc:
        raise ConfigurationError(
            'inference4py serve --ray needs Ray Serve: pip install "inference4py[serve,ray]".'
        ) from exc
    return serve


def build_app(
    models: Sequence[str],
    *,
    names: Sequence[str] = (),
    settings: ServerSettings | None = None,
    replicas: int = 1,
    autoscale: tuple[int, int] | None = None,
    num_cpus: float = 1.0,
    memory_gb: float | None = None,
    prefix_routing: bool = True,
    max_ongoing_requests: int = 64,
) -> Any:
    """A Ray Serve application serving ``models`` over the OpenAI API from ``replicas`` replicas.

    Run it with ``ray.serve.run(app)`` (or from a Serve config file through an import path to a
    function returning it), on a local Ray or a cluster (``ray start --head`` / ``--address``).

    Args:
        models: model sources as for ``inference4py serve --model`` (folders, hub ids, GGUF files,
            ``pip:NAME``); GGUF and Whisper files are converted here, once, before any replica starts.
        names: served names, one per model (default: from the sources).
        settings: the server's limits, as for :func:`inference4py.serve.serve`.
        replicas: a fixed number of replicas (ignored with ``autoscale``).
        autoscale: (min, max) replicas, scaled by Serve on ongoing requests per replica.
        num_cpus: CPUs each replica reserves in Ray; its onnxruntime sessions run that many threads
            (at least one).
        memory_gb: memory each replica reserves in Ray (default: none declared).
        prefix_routing: route by conversation prefix (:class:`PrefixAffinityRouter`); False uses
            Serve's default (the less loaded of two random replicas).
        max_ongoing_requests: requests a replica takes at once (Serve queues the rest).

    Raises:
        ConfigurationError: Ray Serve is not installed, or bad counts.
    """
    serve = _require_ray()
    from ray.serve.config import AutoscalingConfig, RequestRouterConfig

    if not models and (settings is None or settings.models_dir is None):
        raise ConfigurationError("Give at least one model to serve: --model FOLDER_OR_REPO_ID.")
    if replicas < 1 or (autoscale is not None and not 0 < autoscale[0] <= autoscale[1]):
        raise ConfigurationError(
            f"replicas must be at least 1 and --autoscale MIN,MAX needs 0 < MIN <= MAX (got {replicas}, {autoscale})."
        )
    if names and len(names) != len(models):
        raise ConfigurationError("Give one --served-model-name per --model, or none.")
    sources = [_converted_once(m) for m in models]
    threads = {"INFERENCE4PY_NUM_THREADS": str(max(1, int(num_cpus)))}  # onnxruntime's threads: the CPUs reserved
    options: dict[str, Any] = {
        "ray_actor_options": {
            "num_cpus": num_cpus,
            "runtime_env": {"env_vars": threads},
            **({"memory": int(memory_gb * (1 << 30))} if memory_gb else {}),
        },
        "max_ongoing_requests": max_ongoing_requests,
        "health_check_period_s": 5,
        "health_check_timeout_s": 30,
    }
    if autoscale is not None:
        options["autoscaling_config"] = AutoscalingConfig(
            min_replicas=autoscale[0], max_replicas=autoscale[1], target_ongoing_requests=4
        )
    else:
        options["num_replicas"] = replicas
    if prefix_routing:
        options["request_router_config"] = RequestRouterConfig(
            request_router_class="inference4py.serve.ray_deployments.PrefixAffinityRouter",  # type: ignore[arg-type]
            request_router_kwargs={"imbalance": 4},
        )
    from inference4py.serve.ray_deployments import Ingress, ModelServer

    model_server = serve.deployment(ModelServer, name="ModelServer", **options)
    # the ingress only forwards: it takes every request at once (Serve's default of 5 would queue them there)
    ingress = serve.deployment(Ingress, name="Ingress", ray_actor_options={"num_cpus": 0}, max_ongoing_requests=4096)
    names_list = list(names) or [_served_name(m) for m in models]
    return ingress.bind(model_server.bind(sources, names_list, settings or ServerSettings()))


def app_builder(args: dict[str, Any]) -> Any:
    """The application of a Ray Serve config file (``import_path: inference4py.serve.ray_serve:app_builder``).

    ``args`` (the config's ``args:``): ``models`` (a list, or one source), and optionally ``names``,
    ``replicas``, ``autoscale`` (``[min, max]``), ``num_cpus``, ``memory_gb``, ``prefix_routing``,
    ``max_ongoing_requests`` and ``settings`` (:class:`ServerSettings` fields, e.g. ``max_queue``).

    Raises:
        ConfigurationError: an unknown key, or a value :func:`build_app` refuses.
    """
    known = {
        "models",
        "names",
        "replicas",
        "autoscale",
        "num_cpus",
        "memory_gb",
        "prefix_routing",
        "max_ongoing_requests",
        "settings",
    }
    unknown = sorted(set(args) - known)
    if unknown:
        raise ConfigurationError(f"Unknown args {unknown} in the Serve config; known: {sorted(known)}.")
    models = args.get("models") or []
    settings = ServerSettings(**dict(args.get("settings") or {}))
    autoscale = args.get("autoscale")
    return build_app(
        [models] if isinstance(models, str) else list(models),
        names=list(args.get("names") or ()),
        settings=settings,
        replicas=int(args.get("replicas", 1)),
        autoscale=(int(autoscale[0]), int(autoscale[1])) if autoscale else None,
        num_cpus=float(args.get("num_cpus", 1.0)),
        memory_gb=args.get("memory_gb"),
        prefix_routing=bool(args.get("prefix_routing", True)),
        max_ongoing_requests=int(args.get("max_ongoing_requests", 64)),
    )


def _served_name(model: str) -> str:
    from inference4py.serve import served_name

    return served_name(model)


def _converted_once(model: str) -> str:
    """The model found (downloaded, or converted for a GGUF or Whisper file) here, in the driver, before any replica
    starts: a bad source is a clear error now, and the replicas find the files in the cache.

    Raises:
        ModelNotFoundError, HubError, ModelLoadError, UnsupportedModelError: as the plain server's load.
    """
    from inference4py.gguf.sources import PIP_PREFIX, gguf_from_pip, is_gguf_source
    from inference4py.tasks.kinds import is_whisper_source, model_kind

    if is_whisper_source(model):
        from inference4py.speech.files import whisper_folder

        whisper_folder(model)
    elif is_gguf_source(model):
        from inference4py.gguf.convert import gguf_folder

        gguf_folder(gguf_from_pip(model) if model.startswith(PIP_PREFIX) else model)
    else:
        model_kind(model)
    return model


def run_on_ray(
    models: Sequence[str],
    *,
    names: Sequence[str] = (),
    settings: ServerSettings | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    address: str | None = None,
    replicas: int = 1,
    autoscale: tuple[int, int] | None = None,
    num_cpus: float = 1.0,
    memory_gb: float | None = None,
    prefix_routing: bool = True,
) -> None:
    """``inference4py serve --ray``: start (or join, ``address``) Ray and run :func:`build_app` (its other
    arguments) on ``host:port`` until Ctrl-C or SIGTERM."""
    import signal
    import threading

    serve = _require_ray()
    import ray

    app = build_app(  # bad options fail before Ray starts
        models,
        names=names,
        settings=settings,
        replicas=replicas,
        autoscale=autoscale,
        num_cpus=num_cpus,
        memory_gb=memory_gb,
        prefix_routing=prefix_routing,
    )
    ray.init(address=address, include_dashboard=False) if address else ray.init(include_dashboard=False)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())  # after ray.init, which installs a handler of its own
    try:
        serve.start(http_options={"host": host, "port": port})
        serve.run(app, name="inference4py", route_prefix="/")
        _log.warning("serving on http://%s:%d from Ray Serve (Ctrl-C or SIGTERM stops)", host, port)
        while not stop.wait(1.0):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        _log.warning("stopping the Ray Serve application")
        serve.shutdown()
        ray.shutdown()
