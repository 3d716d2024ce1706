"""ONNX Runtime sessions: creation, error wrapping, graph introspection.

This is the boundary with onnxruntime: every exception it raises while loading
or running a graph is turned into one of ours here, with the original chained.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import onnxruntime as ort

from inference4py import _env
from inference4py.errors import ConfigurationError, InferenceError, ModelFilesMissingError, ModelLoadError

__all__ = ["SessionOptions", "TensorInfo", "create_session", "graph_inputs", "graph_outputs", "run_session", "ORT_TO_NUMPY"]

ORT_TO_NUMPY: dict[str, type] = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(bool)": np.bool_,
    "tensor(uint8)": np.uint8,
    "tensor(int8)": np.int8,
}


@dataclass(frozen=True)
class SessionOptions:
    """How sessions are created: execution providers and thread counts.

    Args:
        providers: onnxruntime execution providers in priority order
            (default: ``INFERENCE4PY_PROVIDERS`` or ``["CPUExecutionProvider"]``).
        intra_op_threads: threads inside one operator (default: ``INFERENCE4PY_NUM_THREADS``
            or onnxruntime's choice).
    """

    providers: tuple[str, ...] | None = None
    intra_op_threads: int | None = None

    def __post_init__(self) -> None:
        if self.intra_op_threads is not None and (not isinstance(self.intra_op_threads, int) or self.intra_op_threads < 0):
            raise ConfigurationError(
                f"intra_op_threads={self.intra_op_threads!r} is invalid: use an integer >= 0 (0 lets onnxruntime choose)."
            )
        if self.providers is not None:
            available = set(ort.get_available_providers())
            unknown = [p for p in self.providers if p not in available]
            if unknown:
                raise ConfigurationError(
                    f"Execution provider(s) {unknown} are not available in this onnxruntime build. "
                    f"Available: {sorted(available)}. Install the matching onnxruntime package "
                    "(e.g. onnxruntime-gpu) or choose one of the available providers."
                )

    def resolved_providers(self) -> list[str]:
        return list(self.providers or _env.default_providers() or ["CPUExecutionProvider"])

    def ort_options(self) -> ort.SessionOptions:
        opts = ort.SessionOptions()
        threads = self.intra_op_threads if self.intra_op_threads is not None else _env.default_num_threads()
        if threads:
            opts.intra_op_num_threads = threads
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 4  # errors reach the user wrapped in ours; keep onnxruntime's own log quiet
        return opts


@dataclass(frozen=True)
class TensorInfo:
    """Name, dtype and (possibly symbolic) shape of a graph input or output."""

    name: str
    dtype: Any  # numpy scalar type
    shape: tuple[int | str | None, ...]

    def dim(self, axis: int) -> int | None:
        d = self.shape[axis] if -len(self.shape) <= axis < len(self.shape) else None
        return d if isinstance(d, int) and d > 0 else None


def _tensor_infos(nodes: Sequence[Any]) -> dict[str, TensorInfo]:
    out: dict[str, TensorInfo] = {}
    for n in nodes:
        out[n.name] = TensorInfo(n.name, ORT_TO_NUMPY.get(n.type, np.float32), tuple(n.shape))
    return out


def graph_inputs(session: ort.InferenceSession) -> dict[str, TensorInfo]:
    return _tensor_infos(session.get_inputs())


def graph_outputs(session: ort.InferenceSession) -> dict[str, TensorInfo]:
    return _tensor_infos(session.get_outputs())


_OPTIMIZATION_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


def _providers(
    options: SessionOptions, provider: str | None, provider_options: Mapping[str, Any] | None
) -> tuple[list[str], list[dict[str, Any]] | None]:
    """Providers for one session: the caller's explicit choice, else the pipeline's per-session
    preference (with the CPU as fallback; skipped when this build lacks it), else the defaults."""
    if options.providers or not provider:
        return options.resolved_providers(), None
    chosen = [p for p in dict.fromkeys([provider, "CPUExecutionProvider"]) if p in ort.get_available_providers()]
    chosen = chosen or ["CPUExecutionProvider"]
    per = [dict(provider_options or {}) if p == provider else {} for p in chosen]
    return chosen, per


def create_session(
    path: str | os.PathLike[str],
    options: SessionOptions | None = None,
    *,
    provider: str | None = None,
    provider_options: Mapping[str, Any] | None = None,
    settings: Mapping[str, Any] | None = None,
) -> ort.InferenceSession:
    """Load one ONNX file into an inference session.

    Args:
        options: the caller's providers and threads; explicit ones win over the pipeline's.
        provider / provider_options: the pipeline description's execution provider for
            this session (``sessions.<name>.execution_provider``).
        settings: the description's ``session_options`` (see pipeline.SESSION_OPTION_KEYS).

    Raises:
        ModelFilesMissingError: the file (or its external-data file) does not exist.
        ModelLoadError: the file is not a loadable ONNX graph.
    """
    options = options or SessionOptions()
    path = Path(path)
    if not path.is_file():
        raise ModelFilesMissingError(
            f"ONNX file {path} does not exist. Check the model folder or re-download the model.", [path.name]
        )
    ort_options = options.ort_options()
    for key, value in (settings or {}).items():
        if key == "intra_op_num_threads" and options.intra_op_threads is not None:
            continue  # the caller's explicit choice wins
        if key == "graph_optimization_level":
            value = _OPTIMIZATION_LEVELS[value]
        setattr(ort_options, key, value)
    providers, per_provider = _providers(options, provider, provider_options)
    try:
        if per_provider is not None:
            return ort.InferenceSession(str(path), sess_options=ort_options, providers=providers,
                                        provider_options=per_provider)
        return ort.InferenceSession(str(path), sess_options=ort_options, providers=providers)
    except Exception as exc:  # onnxruntime raises several private exception types
        text = str(exc)
        if "external data" in text.lower() or "onnx_data" in text or "No such file" in text:
            raise ModelFilesMissingError(
                f"{path.name} refers to external weight data that could not be read ({text.strip()[:300]}). "
                "Make sure the .onnx_data / .onnx.data file sits beside the .onnx file (re-download the model).",
                [],
            ) from exc
        raise ModelLoadError(
            f"Could not load {path} as an ONNX model: {text.strip()[:300]}. The file is probably corrupt or "
            "incomplete: delete it and download the model again."
        ) from exc


def run_session(
    session: ort.InferenceSession,
    feeds: Mapping[str, Any],
    output_names: Sequence[str] | None = None,
    *,
    what: str = "model",
) -> list[Any]:
    """``session.run`` with onnxruntime errors wrapped in :class:`InferenceError`."""
    try:
        return session.run(list(output_names) if output_names else None, dict(feeds))
    except Exception as exc:
        raise InferenceError(f"onnxruntime failed while running the {what}: {str(exc).strip()[:500]}") from exc


def run_binding(session: ort.InferenceSession, binding: ort.IOBinding, *, what: str = "model") -> None:
    """``session.run_with_iobinding`` with onnxruntime errors wrapped."""
    try:
        session.run_with_iobinding(binding)
    except Exception as exc:
        raise InferenceError(f"onnxruntime failed while running the {what}: {str(exc).strip()[:500]}") from exc
