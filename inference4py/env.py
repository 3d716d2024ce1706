"""The one place where inference4py reads environment variables.

Every value is read **at call time**, never at import: a process (or a test) may
change the environment after ``import inference4py`` and the next call sees it.
(huggingface_hub, by contrast, freezes its settings in ``huggingface_hub.constants``
when it is first imported; :mod:`inference4py.hub` therefore passes the values
read here -- cache folder, offline mode, endpoint -- explicitly to every
huggingface_hub call.)

Variables
---------
``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE`` / ``INFERENCE4PY_OFFLINE``
    ``1``/``true``/``yes``/``on`` (any case) turns on offline mode: models given
    by hub id are only looked up in the local Hugging Face cache, never
    downloaded.  ``INFERENCE4PY_OFFLINE`` affects inference4py only; the
    ``HF_*`` variables are shared with transformers and huggingface_hub.
``HF_HUB_CACHE`` / ``HUGGINGFACE_HUB_CACHE`` / ``HF_HOME`` / ``XDG_CACHE_HOME``
    Where the shared Hugging Face cache lives, resolved like huggingface_hub
    does: ``$HF_HUB_CACHE``, else ``$HUGGINGFACE_HUB_CACHE``, else
    ``$HF_HOME/hub``, else ``$XDG_CACHE_HOME/huggingface/hub``, else
    ``~/.cache/huggingface/hub``.
``HF_ENDPOINT``
    Base URL of the Hub (a mirror or a private Hub), e.g.
    ``https://hf-mirror.example``.  Unset: huggingface_hub's default.
``HF_TOKEN``
    Access token for private and gated repositories.  inference4py never reads
    it: huggingface_hub does, when no ``token=`` is passed.  Documented here so
    that all the variables that matter are listed in one place.
``INFERENCE4PY_CACHE``
    Where inference4py keeps what it derives from models (fused graphs of
    ``fuse_attention()``): default ``$XDG_CACHE_HOME/inference4py``, else
    ``~/.cache/inference4py``.
``INFERENCE4PY_NUM_THREADS``
    Default number of onnxruntime intra-op threads (a positive integer) when a
    builder does not set one.  Unset or empty: onnxruntime's default.
``INFERENCE4PY_PROVIDERS``
    Default onnxruntime execution providers, a comma-separated list in priority
    order, e.g. ``CUDAExecutionProvider,CPUExecutionProvider``.  Unset or
    empty: CPU.  Names are not validated here (that would import onnxruntime);
    session creation checks them against the installed onnxruntime.
``INFERENCE4PY_GGML_OPS``
    ``0``/``false``/``no``/``off`` turns inference4py's compiled ggml operators off: GGUF files
    then convert onto onnxruntime's MatMulNBits layout, and the quantized matrices of Whisper files
    (whisper.cpp, CTranslate2 int8) are widened to float32 at load, as on an install built without a
    compiler.
``INFERENCE4PY_GGML_ISA``
    Forces the compiled operators' instruction set: ``scalar``, ``avx2`` or ``avx512vnni`` (the
    best the CPU has when unset). A path the CPU lacks is an error.
``INFERENCE4PY_GGML_REPACK``
    Read by the compiled operators: ``0`` keeps Q4_K, Q6_K, Q4_0, Q4_1, Q5_0, Q8_0 and MXFP4 weights in the
    file's own row layout instead of repacking them eight rows at a time when an operator first runs
    (slower; for comparisons).
``INFERENCE4PY_GGML_HUGEPAGES``
    Read by the compiled operators: ``1`` puts the repacked weights in 2 MB pages where the system
    gives them (decode 4-7 % faster on an 8B model; on a host that backs its memory lazily, as some
    VMs do, loading takes seconds longer). Unset: 4 KB pages.
``INFERENCE4PY_GGML_LIBRARY``
    The path of a compiled operator library to load instead of the one built beside the package
    (a developer's build of ``csrc/ggml_ops``).
``INFERENCE4PY_NO_COMPILE``
    Read by the build (setup.py), not the library: ``1`` installs without building the compiled
    operators, as on a machine with no C++ compiler.
``INFERENCE4PY_API_KEY``
    The key ``inference4py serve`` requires (``Authorization: Bearer KEY``) on
    every route but ``/health`` and the chat page, when ``--api-key`` is not
    given.  Unset or empty: no key is required.
"""

from __future__ import annotations

import os
from pathlib import Path

from inference4py.errors import ConfigurationError

__all__ = [
    "offline",
    "offline_setting",
    "hf_hub_cache",
    "hf_endpoint",
    "inference4py_cache",
    "default_num_threads",
    "default_providers",
    "serve_api_key",
    "ggml_ops_enabled",
    "ggml_isa",
    "ggml_library",
]

_TRUE_VALUES = frozenset({"1", "ON", "YES", "TRUE"})
_FALSE_VALUES = frozenset({"0", "OFF", "NO", "FALSE"})
_OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "INFERENCE4PY_OFFLINE")


def _is_true(value: str | None) -> bool:
    return value is not None and value.strip().upper() in _TRUE_VALUES


def _get(name: str) -> str | None:
    """The variable's value, with empty or blank values treated as unset."""
    value = os.environ.get(name)
    if value is None or not value.strip():
        return None
    return value.strip()


def offline() -> bool:
    """True when offline mode is on (see the module docstring for the variables)."""
    return offline_setting() is not None


def offline_setting() -> str | None:
    """The setting that turned offline mode on, e.g. ``"HF_HUB_OFFLINE=1"``, or None."""
    for name in _OFFLINE_VARIABLES:
        value = os.environ.get(name)
        if _is_true(value):
            return f"{name}={value}"
    return None


def hf_hub_cache() -> Path:
    """The Hugging Face hub cache folder, resolved like huggingface_hub does."""
    explicit = _get("HF_HUB_CACHE") or _get("HUGGINGFACE_HUB_CACHE")
    if explicit is not None:
        return Path(os.path.expandvars(explicit)).expanduser()
    home = _get("HF_HOME")
    if home is None:
        cache_home = _get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
        home = os.path.join(cache_home, "huggingface")
    return Path(os.path.expandvars(home)).expanduser() / "hub"


def hf_endpoint() -> str | None:
    """``HF_ENDPOINT`` without a trailing slash, or None for huggingface_hub's default."""
    value = _get("HF_ENDPOINT")
    return value.rstrip("/") if value is not None else None


def inference4py_cache() -> Path:
    """``$INFERENCE4PY_CACHE``, else ``$XDG_CACHE_HOME/inference4py``, else ``~/.cache/inference4py``."""
    explicit = _get("INFERENCE4PY_CACHE")
    if explicit is not None:
        return Path(os.path.expandvars(explicit)).expanduser()
    return Path(os.path.expandvars(_get("XDG_CACHE_HOME") or os.path.join("~", ".cache"))).expanduser() / "inference4py"


def default_num_threads() -> int | None:
    """``INFERENCE4PY_NUM_THREADS`` as a positive int, or None when unset.

    Raises:
        ConfigurationError: the value is not a positive integer.
    """
    value = _get("INFERENCE4PY_NUM_THREADS")
    if value is None:
        return None
    try:
        threads = int(value)
    except ValueError:
        threads = 0
    if threads < 1:
        raise ConfigurationError(
            f"INFERENCE4PY_NUM_THREADS={value!r} is not a positive integer; "
            "set it to the number of intra-op threads (e.g. 4) or unset it."
        )
    return threads


def default_providers() -> list[str] | None:
    """``INFERENCE4PY_PROVIDERS`` split on commas, or None when unset.

    Raises:
        ConfigurationError: the list contains an empty name (e.g. ``"CUDA,,CPU"``).
    """
    value = _get("INFERENCE4PY_PROVIDERS")
    if value is None:
        return None
    providers = [name.strip() for name in value.split(",")]
    if not all(providers):
        raise ConfigurationError(
            f"INFERENCE4PY_PROVIDERS={value!r} contains an empty provider name; use a "
            "comma-separated list such as 'CUDAExecutionProvider,CPUExecutionProvider'."
        )
    return providers


def serve_api_key() -> str | None:
    """``INFERENCE4PY_API_KEY``, or None when unset or empty."""
    return _get("INFERENCE4PY_API_KEY")


def ggml_ops_enabled() -> bool:
    """False when ``INFERENCE4PY_GGML_OPS`` turns the compiled ggml operators off."""
    value = _get("INFERENCE4PY_GGML_OPS")
    return value is None or value.upper() not in _FALSE_VALUES


def ggml_isa() -> str | None:
    """``INFERENCE4PY_GGML_ISA`` in lower case (the kernels' instruction set to force), or None."""
    value = _get("INFERENCE4PY_GGML_ISA")
    return value.lower() if value is not None else None


def ggml_library() -> Path | None:
    """``INFERENCE4PY_GGML_LIBRARY``: a compiled operator library to load instead of the package's, or None."""
    value = _get("INFERENCE4PY_GGML_LIBRARY")
    return Path(os.path.expandvars(value)).expanduser() if value is not None else None
