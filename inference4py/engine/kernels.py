"""inference4py's compiled onnxruntime operators for ggml blocks: found, checked and registered here.

The operators (``csrc/ggml_ops``, built by ``pip install`` when a C++ compiler is there) are a
shared library beside the package that onnxruntime loads with
``SessionOptions.register_custom_ops_library``; Python never imports it. :func:`kernel_library`
is the one place that finds it and says whether it can be used and, if not, why;
:func:`register_kernels` adds it to a session's options (the engine does so for every session).

Operators, domain :data:`DOMAIN`:

``GgmlMatMul(X, W0[, W1, W2]) -> Y``
    ``X`` float32 ``[..., K]``, each ``Wi`` uint8 ``[Ni, row bytes]`` (a GGUF tensor's rows of
    ggml blocks as the file stores them), ``Y`` ``[..., N0 + N1 + N2]``: ``X @ Wi.T`` side by side.
    Attributes ``type``/``type1``/``type2`` (ggml type ids), ``K``, and ``float_activations`` (0,
    the default, rounds ``X`` per block the way llama.cpp does for the type: q8_0 / q8_1 / q8_K,
    float16 for F16; 1 multiplies the float32 ``X`` with the dequantized weights).
``GgmlGather(W, ids) -> Y``
    Rows ``ids`` (int64, any shape) of ``W`` dequantized to float32, exactly as gguf's
    ``dequantize`` computes them: ``Y`` ``[*ids.shape, K]``. Attributes ``type``, ``K``.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.machinery
import logging
from dataclasses import dataclass
from pathlib import Path

import onnxruntime as ort

from inference4py import env
from inference4py.errors import ConfigurationError

__all__ = ["DOMAIN", "ISAS", "KernelLibrary", "kernel_library", "kernels_or", "register_kernels", "set_isa"]

DOMAIN = "ai.inference4py"
ISAS = ("scalar", "avx2", "avx512vnni")
_STEM = "_ggml_ops"
OPS_VERSION = 2  # csrc/ggml_ops/ops.cpp's inference4py_ggml_ops_version: 2 adds GgmlExpertMatMul
_log = logging.getLogger("inference4py.kernels")


@dataclass(frozen=True)
class KernelLibrary:
    """The compiled operators: where they are and which instruction set they run on, or why not.

    ``path`` is None when the library cannot be used; ``reason`` then says why and how to get it.
    """

    path: Path | None
    isa: str | None
    best_isa: str | None
    api_version: int | None
    reason: str | None

    @property
    def available(self) -> bool:
        return self.path is not None

    def describe(self) -> str:
        """One line for the CLI: which path GGUF files run on."""
        if self.path is None:
            return f"onnxruntime's MatMulNBits (inference4py's compiled ggml operators are not in use: {self.reason})"
        return f"inference4py's compiled ggml operators ({self.isa})"


_BUILD_HINT = 'reinstall with a C++ compiler present (pip install -e . builds them; no compiler: pip install ziglang and set CXX="python -m ziglang c++")'


def _library_file() -> Path | None:
    explicit = env.ggml_library()
    if explicit is not None:
        if not explicit.is_file():
            raise ConfigurationError(
                f"INFERENCE4PY_GGML_LIBRARY={explicit} is not a file: point it at a built library."
            )
        return explicit
    package = Path(__file__).resolve().parents[1]
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = package / f"{_STEM}{suffix}"
        if candidate.is_file():
            return candidate
    return None


def _runtime_api_version() -> int:
    """The C API version the installed onnxruntime serves (its minor version: 1.32 serves 32)."""
    parts = ort.__version__.split(".")
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


@functools.lru_cache(maxsize=4)
def _bound(path: Path) -> ctypes.CDLL:
    """The library loaded in this process (the very copy onnxruntime registers), its entry points typed."""
    lib = ctypes.CDLL(str(path))
    lib.inference4py_ggml_api_version.restype = ctypes.c_int
    if hasattr(lib, "inference4py_ggml_ops_version"):
        lib.inference4py_ggml_ops_version.restype = ctypes.c_int
    lib.inference4py_ggml_isa.restype = ctypes.c_char_p
    lib.inference4py_ggml_best_isa.restype = ctypes.c_char_p
    lib.inference4py_ggml_set_isa.argtypes = [ctypes.c_char_p]
    lib.inference4py_ggml_set_isa.restype = ctypes.c_int
    return lib


@functools.lru_cache(maxsize=1)
def _load() -> KernelLibrary:
    if not env.ggml_ops_enabled():
        return KernelLibrary(None, None, None, None, "INFERENCE4PY_GGML_OPS=0 turns them off")
    path = _library_file()
    if path is None:
        return KernelLibrary(None, None, None, None, f"the library was not built at install time: {_BUILD_HINT}")
    try:
        lib = _bound(path)
    except OSError as exc:
        return KernelLibrary(None, None, None, None, f"{path.name} does not load ({exc}): {_BUILD_HINT}")
    built = lib.inference4py_ggml_ops_version() if hasattr(lib, "inference4py_ggml_ops_version") else 1
    if built != OPS_VERSION:
        return KernelLibrary(
            None,
            None,
            None,
            None,
            f"{path} holds version {built} of the operators and this inference4py needs version {OPS_VERSION}: it "
            "was built from other sources; build it again (pip install -e .)",
        )
    needed, served = lib.inference4py_ggml_api_version(), _runtime_api_version()
    if served < needed:
        return KernelLibrary(
            None,
            None,
            None,
            needed,
            f"{path.name} needs onnxruntime's C API version {needed} (onnxruntime 1.{needed} or newer), and the "
            f"installed onnxruntime {ort.__version__} serves {served}: pip install -U onnxruntime",
        )
    best = lib.inference4py_ggml_best_isa().decode()
    forced = env.ggml_isa()
    if forced is not None and not lib.inference4py_ggml_set_isa(forced.encode()):
        raise ConfigurationError(
            f"INFERENCE4PY_GGML_ISA={forced} cannot run here: this CPU (or this build) has {best} at best. "
            f"Use one of {', '.join(ISAS[: ISAS.index(best) + 1])}, or unset it."
        )
    return KernelLibrary(path, lib.inference4py_ggml_isa().decode(), best, needed, None)


def kernel_library() -> KernelLibrary:
    """The compiled operators, loaded once per process (see :class:`KernelLibrary`)."""
    return _load()


def set_isa(isa: str) -> None:
    """Run the operators on ``isa`` (one of :data:`ISAS`) from now on, in this process (tests use it).

    Raises:
        ConfigurationError: the library is not available, or this CPU lacks ``isa``.
    """
    library = kernel_library()
    if library.path is None:
        raise ConfigurationError(f"inference4py's compiled ggml operators are not available: {library.reason}")
    if isa not in ISAS:
        raise ConfigurationError(f"{isa!r} is not a kernel path: use one of {', '.join(ISAS)}.")
    if not _bound(library.path).inference4py_ggml_set_isa(isa.encode()):
        raise ConfigurationError(f"this CPU (or this build) cannot run the {isa} kernels: it has {library.best_isa}.")


def kernels_or(instead: str) -> bool:
    """Whether the compiled operators are available; where not, says once per ``instead`` (what runs in their
    place, "GGUF files run on onnxruntime's MatMulNBits") why, with the fix."""
    library = kernel_library()
    if not library.available:
        _say_once(instead, library.reason or "")
    return library.available


@functools.cache
def _say_once(instead: str, reason: str) -> None:
    _log.warning("%s: inference4py's compiled ggml operators are not in use (%s)", instead, reason)


def register_kernels(options: ort.SessionOptions) -> bool:
    """Add the operators to ``options`` when they are available; False (nothing added) when not."""
    library = kernel_library()
    if library.path is None:
        return False
    options.register_custom_ops_library(str(library.path))
    return True
