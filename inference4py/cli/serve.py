"""``inference4py serve``: the OpenAI-compatible server (needs the ``serve`` extra).

FastAPI and uvicorn are imported inside the handler, so ``--help`` stays light.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from inference4py.cli.base import EXIT_OK, _read_text
from inference4py.kv_cache_types import KV_CACHE_TYPES  # no imports: --help stays light


def _add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        "-m",
        action="append",
        default=[],
        metavar="FOLDER_OR_REPO",
        help="a model folder, Hugging Face repo id, GGUF file or pip:PACKAGE holding a GGUF to serve, loaded at "
        "start and kept loaded (repeatable; needed unless --models-dir is given)",
    )
    parser.add_argument(
        "--models-dir",
        default=None,
        metavar="DIR",
        help="serve every model in DIR (*.gguf files, ONNX and genai model folders), each loaded when a request "
        "names it; GET /v1/models lists them with their status",
    )
    parser.add_argument(
        "--max-loaded-models",
        type=_positive_int,
        default=None,
        metavar="N",
        help="models kept loaded at once, --model ones included; loading one more unloads the least recently used "
        "idle one (default: no limit)",
    )
    parser.add_argument(
        "--idle-unload",
        type=_positive,
        default=None,
        metavar="SECONDS",
        help="unload a model loaded from --models-dir when no request has used it for this long (default: never)",
    )
    parser.add_argument(
        "--kv-cache",
        type=_kv_cache_choice,
        action="append",
        default=[],
        metavar="[NAME=]TYPE",
        help="how text generators keep their KV cache: float (the graph's type, default) or int8 (a quarter of "
        "float32's memory, scales calibrated once per model; GroupQueryAttention graphs: fused, GGUF, genai); "
        "TYPE sets every model's, NAME=TYPE one served model's (repeatable)",
    )
    parser.add_argument(
        "--chat-template",
        action="append",
        default=[],
        metavar="[NAME=]FILE",
        help="a Jinja chat template (e.g. one that renders tools) for the text model served as NAME, instead of "
        "its own; FILE alone with a single --model (repeatable)",
    )
    parser.add_argument(
        "--served-model-name",
        action="append",
        default=[],
        metavar="NAME",
        help="the name clients use for the model (one per --model; default: the folder's or repo's name)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1, this machine only)")
    parser.add_argument("--port", type=int, default=8000, help="port (default: 8000)")
    parser.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"))
    parser.add_argument(
        "--max-concurrent",
        type=_positive_int,
        default=8,
        metavar="N",
        help="sequences a text model decodes together (continuous batching; default: 8)",
    )
    parser.add_argument(
        "--kv-budget",
        type=_positive_int,
        default=None,
        metavar="TOKENS",
        help="positions (prompt + max_tokens, summed over running requests) a model's KV cache may reserve; "
        "a request that does not fit waits (default: no limit beyond --max-concurrent)",
    )
    parser.add_argument(
        "--max-queue",
        type=_positive_int,
        default=256,
        metavar="N",
        help="requests that may wait per model (default: 256)",
    )
    parser.add_argument(
        "--prefix-cache-mb",
        type=_non_negative,
        default=256,
        metavar="MB",
        help="memory per text model for reusing the KV of shared prompt prefixes (0 turns it off; default: 256)",
    )
    parser.add_argument(
        "--timeout",
        type=_positive,
        default=None,
        metavar="SECONDS",
        help="stop a request after this long (default: none)",
    )
    parser.add_argument(
        "--memory-gb",
        type=_positive,
        default=None,
        metavar="GB",
        help="one budget for every model's weights, KV caches and prefix caches (GiB): requests wait until "
        "their KV cache fits (default: none)",
    )
    parser.add_argument(
        "--shutdown-timeout",
        type=_non_negative,
        default=30.0,
        metavar="SECONDS",
        help="on SIGTERM or Ctrl-C: take no new requests and let running ones finish this long (default: 30)",
    )
    parser.add_argument(
        "--api-key",
        default=None,
        metavar="KEY",
        help="require 'Authorization: Bearer KEY' on every route but /health and the chat page "
        "(default: $INFERENCE4PY_API_KEY, else no key)",
    )
    parser.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="an origin browser pages may call the API from, besides pages on this machine (localhost, 127.0.0.1, "
        "[::1]: always allowed), as scheme://host[:port], e.g. https://app.example, or '*' for any page "
        "(repeatable; the API key, if set, is still required)",
    )
    parser.add_argument(
        "--max-body-mb", type=_positive, default=32, metavar="MB", help="larger request bodies get a 413 (default: 32)"
    )
    parser.add_argument(
        "--responses-store",
        type=_non_negative_int,
        default=256,
        metavar="N",
        help="finished /v1/responses answers kept in memory for previous_response_id (0 keeps none; default: 256)",
    )
    images = parser.add_argument_group("images (vision-language models)")
    images.add_argument(
        "--allow-image-domain",
        action="append",
        metavar="HOST",
        help="fetch http(s) image addresses from HOST and its subdomains (repeatable); by default none is fetched "
        "and images come inline as data URLs or base64",
    )
    images.add_argument(
        "--max-image-mb", type=_positive, default=20, metavar="MB", help="the most one image may take (default: 20)"
    )
    images.add_argument(
        "--image-fetch-timeout",
        type=_positive,
        default=10.0,
        metavar="SECONDS",
        help="the longest one image fetch may take (default: 10)",
    )
    ray = parser.add_argument_group('Ray Serve (pip install "inference4py[serve,ray]"; docs/scale-out.md)')
    ray.add_argument("--ray", action="store_true", help="serve from Ray Serve replicas, routed by conversation prefix")
    ray.add_argument("--replicas", type=_positive_int, default=1, metavar="N", help="replicas (default: 1)")
    ray.add_argument(
        "--autoscale",
        type=_min_max,
        metavar="MIN,MAX",
        help="let Serve scale between MIN and MAX replicas on ongoing requests (instead of --replicas)",
    )
    ray.add_argument(
        "--ray-address", metavar="ADDR", help="join a running cluster (ray start --head); default: a local Ray"
    )
    ray.add_argument(
        "--replica-cpus", type=_positive, default=1.0, metavar="N", help="CPUs each replica reserves (default: 1)"
    )
    ray.add_argument("--replica-memory-gb", type=_positive, metavar="GB", help="memory each replica reserves in Ray")
    ray.add_argument(
        "--no-prefix-routing", action="store_true", help="Serve's default router instead of prefix affinity"
    )


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be zero or more, got {text}")
    return value


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def _kv_cache_choice(text: str) -> tuple[str | None, str]:
    name, _, kind = text.rpartition("=")
    if kind not in KV_CACHE_TYPES or (_ and not name):
        raise argparse.ArgumentTypeError(
            f"give TYPE or NAME=TYPE with TYPE one of {', '.join(KV_CACHE_TYPES)}, got {text!r}"
        )
    return (name or None), kind


def _min_max(text: str) -> tuple[int, int]:
    low, sep, high = text.partition(",")
    try:
        pair = (int(low), int(high))
    except ValueError:
        pair = (0, -1)
    if not sep or not 0 < pair[0] <= pair[1]:
        raise argparse.ArgumentTypeError(f"give MIN,MAX with 0 < MIN <= MAX, e.g. 1,4; got {text!r}")
    return pair


def _non_negative(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be zero or more, got {text}")
    return value


def _chat_templates(given: list[str], models: list[str], names: list[str]) -> dict[str, str]:
    """``--chat-template [NAME=]FILE`` arguments as served name -> template text (files read here)."""
    from inference4py.errors import ConfigurationError
    from inference4py.serve import served_name

    templates: dict[str, str] = {}
    for text in given:
        name, sep, path = text.partition("=")
        if not sep or Path(text).expanduser().is_file():  # FILE alone (or a file name holding "=")
            if len(models) != 1:
                raise ConfigurationError(
                    f"--chat-template {text}: say which model it is for, as NAME=FILE with NAME a served name "
                    "(FILE alone is for a single --model)."
                )
            name, path = (names[0] if names else served_name(models[0])), text
        templates[name] = _read_text(path, "--chat-template")
    return templates


def _run_serve(args: argparse.Namespace) -> int:
    from inference4py.errors import ConfigurationError
    from inference4py.serve import ServerSettings, serve

    if not args.model and args.models_dir is None:
        raise ConfigurationError("Give a model to serve: --model FOLDER_OR_REPO_ID, or --models-dir DIR.")

    settings = ServerSettings(
        chat_templates=_chat_templates(args.chat_template, args.model, args.served_model_name),
        max_concurrent=args.max_concurrent,
        kv_budget=args.kv_budget,
        max_queue=args.max_queue,
        prefix_cache_mb=args.prefix_cache_mb,
        timeout=args.timeout,
        api_key=args.api_key,
        cors_origins=args.cors_origin or (),
        max_body_mb=args.max_body_mb,
        responses_store=args.responses_store,
        shutdown_timeout=args.shutdown_timeout,
        memory_gb=args.memory_gb,
        models_dir=args.models_dir,
        max_loaded_models=args.max_loaded_models,
        idle_unload=args.idle_unload,
        kv_cache=next((kind for name, kind in reversed(args.kv_cache) if name is None), "float"),
        model_kv_cache={name: kind for name, kind in args.kv_cache if name is not None},
        allow_image_domains=args.allow_image_domain or (),
        max_image_mb=args.max_image_mb,
        image_fetch_timeout=args.image_fetch_timeout,
    )
    if args.ray:
        from inference4py.serve.ray_serve import run_on_ray

        run_on_ray(
            args.model,
            names=args.served_model_name,
            settings=settings,
            host=args.host,
            port=args.port,
            replicas=args.replicas,
            autoscale=args.autoscale,
            address=args.ray_address,
            num_cpus=args.replica_cpus,
            memory_gb=args.replica_memory_gb,
            prefix_routing=not args.no_prefix_routing,
        )
        return EXIT_OK
    serve(
        args.model,
        names=args.served_model_name,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        settings=settings,
    )
    return EXIT_OK
