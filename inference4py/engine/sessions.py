"""ONNX Runtime sessions: creation, error wrapping, graph introspection.

This is the boundary with onnxruntime: every exception it raises while loading
or running a graph is turned into one of ours here, with the original chained.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from inference4py import env
from inference4py.engine import file_weights
from inference4py.engine.kernels import DOMAIN, kernel_library, register_kernels
from inference4py.errors import ConfigurationError, InferenceError, ModelFilesMissingError, ModelLoadError

__all__ = [
    "SessionOptions",
    "StepBinding",
    "TensorInfo",
    "create_session",
    "graph_inputs",
    "graph_outputs",
    "run_session",
    "run_binding",
    "shrinking_run",
    "value_from_array",
    "ORT_TO_NUMPY",
]

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
        if self.intra_op_threads is not None and (
            not isinstance(self.intra_op_threads, int) or self.intra_op_threads < 0
        ):
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
        return list(self.providers or env.default_providers() or ["CPUExecutionProvider"])

    def ort_options(self) -> ort.SessionOptions:
        opts = ort.SessionOptions()
        threads = self.intra_op_threads if self.intra_op_threads is not None else env.default_num_threads()
        if threads:
            opts.intra_op_num_threads = threads
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 4  # errors reach the user wrapped in ours; keep onnxruntime's own log quiet
        # Weights outside the arena: the copies onnxruntime makes while loading (pre-packed MatMul
        # weights, constant folding) are freed back to the system instead of staying in the arena.
        # SmolLM2-135M fp32: ~200 MB less resident after loading, same speed (docs/performance.md).
        opts.add_session_config_entry("session.use_device_allocator_for_initializers", "1")
        register_kernels(opts)  # inference4py's compiled ggml operators, where a graph names them
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
    source: str | bytes = str(path)
    weights = file_weights.weights_file(path)
    if weights is not None:  # the weights are another file's bytes: read from its folder, in place
        ort_options.add_session_config_entry(file_weights.FOLDER_CONFIG, str(weights.path.parent))
        source = path.read_bytes()
    try:
        if per_provider is not None:
            session = ort.InferenceSession(
                source, sess_options=ort_options, providers=providers, provider_options=per_provider
            )
        else:
            session = ort.InferenceSession(source, sess_options=ort_options, providers=providers)
        if weights is not None:
            _warm_up(session)
        return session
    except Exception as exc:  # onnxruntime raises several private exception types
        text = str(exc)
        if DOMAIN in text or "GgmlMatMul" in text or "GgmlGather" in text:
            raise ModelLoadError(
                f"{path} runs on inference4py's compiled ggml operators, which are not available here "
                f"({kernel_library().reason or text.strip()[:200]}). Convert the model file again (the conversion "
                "then uses onnxruntime's own operators), or reinstall inference4py with a C++ compiler."
            ) from exc
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


def _warm_up(session: ort.InferenceSession) -> None:
    """One step of one token through a decoder whose weights are a GGUF file's, in place, as part of loading.

    The compiled operators repack some block types on their first run (:mod:`inference4py.engine.kernels`);
    this makes that part of the load, not of the first request.  The inputs are the decoder's own:
    ``input_ids`` / ``position_ids`` ``[1, 1]``, ``attention_mask`` ``[1, 1]`` of ones, an empty cache
    (``[1, heads, 0, head_dim]``), one logit kept.
    """
    feeds: dict[str, np.ndarray] = {}
    for info in graph_inputs(session).values():
        if len(info.shape) == 0:
            feeds[info.name] = np.array(1, dtype=info.dtype)
        elif len(info.shape) == 4:  # a cache: no past tokens
            feeds[info.name] = np.zeros((1, info.dim(1) or 1, 0, info.dim(3) or 1), dtype=info.dtype)
        else:
            fill = 1 if info.name == "attention_mask" else 0
            feeds[info.name] = np.full([1] * len(info.shape), fill, dtype=info.dtype)
    session.run(None, feeds)


def shrinking_run() -> ort.RunOptions:
    """Run options that free the CPU arena's unused chunks when the run ends: a long prompt's pieces grow
    the arena, which would keep that peak for good (engine/heap.py then gives the C heap back)."""
    options = ort.RunOptions()
    options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    return options


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


def run_binding(
    session: ort.InferenceSession,
    binding: ort.IOBinding,
    *,
    what: str = "model",
    options: ort.RunOptions | None = None,
) -> None:
    """``session.run_with_iobinding`` with onnxruntime errors wrapped."""
    try:
        session.run_with_iobinding(binding, options)
    except Exception as exc:
        raise InferenceError(f"onnxruntime failed while running the {what}: {str(exc).strip()[:500]}") from exc


# numpy scalar type -> ONNX TensorProto element type, for inputs bound by address
_ONNX_ELEMENT_TYPES: dict[type, int] = {
    np.float32: 1,
    np.uint8: 2,
    np.int8: 3,
    np.int32: 6,
    np.int64: 7,
    np.bool_: 9,
    np.float16: 10,
    np.float64: 11,
}


def value_from_array(array: np.ndarray) -> ort.OrtValue:
    """An OrtValue over ``array`` that stays valid however long it is kept: C-contiguous, and over a copy
    when ``array`` is a view of another OrtValue's memory (sliced from ``OrtValue.numpy()``).

    ``OrtValue.numpy()`` is a view without a copy whose base is a capsule.  When that OrtValue was made
    by ``ortvalue_from_numpy`` (a reordered or trimmed cache), the capsule does not keep the numpy
    buffer alive: a slice of it wrapped again reads freed memory once the first OrtValue is dropped
    (a one-head cache cut along its positions is contiguous, so ``np.ascontiguousarray`` does not copy).
    Arrays that own their memory, or views of such arrays, are wrapped as they are.
    """
    array = np.ascontiguousarray(array)
    base = array.base
    while isinstance(base, np.ndarray):
        base = base.base
    if base is not None:  # the memory belongs to something other than a numpy array
        array = array.copy()
    return ort.OrtValue.ortvalue_from_numpy(array)


class StepBinding:
    """The IO binding of one session, with cheap calls for what a decode step rebinds.

    A decode step rebinds the attention mask and every KV tensor before each run.
    onnxruntime's Python ``IOBinding`` wrapper checks every bound OrtValue, builds an
    ``OrtDevice`` on each ``bind_output`` and wraps each output in a new Python
    ``OrtValue``; on a small model that is as much time as the forward pass.  So the
    step methods here (:meth:`bind_array`, :meth:`bind_view`, :meth:`bind_value`,
    :meth:`rebind_cache`, :meth:`outputs`) call the native binding behind the wrapper
    (``IOBinding._iobinding``) directly when it is there and the session is not a
    WebGPU one (whose graph capture tracks bindings in the wrapper); otherwise they
    use the public wrapper.  Set-up and prefill use :attr:`binding`, the public
    wrapper, as usual; :meth:`run` goes through the public ``run_with_iobinding``.

    Values returned by :meth:`outputs` are native OrtValues on the fast path and
    ``onnxruntime.OrtValue`` otherwise: both have ``.numpy()``, and both can be
    passed back to :meth:`bind_value` / :meth:`rebind_cache`.
    """

    def __init__(self, session: ort.InferenceSession) -> None:
        self.session = session
        self.binding: ort.IOBinding = session.io_binding()
        native = getattr(self.binding, "_iobinding", None)
        cpu = None
        if native is not None and not getattr(self.binding, "_is_webgpu_session", False):
            try:
                cpu = ort.OrtDevice.make("cpu", 0)._get_c_device()
            except (AttributeError, TypeError):  # an onnxruntime without these internals: public path
                native = None
        else:
            native = None
        self._native = native
        self._cpu = cpu
        self._view_base: np.ndarray | None = None  # bind_view's last base array, its address and ONNX type
        self._view_address = 0
        self._view_type: int | None = None
        # Objects whose memory a native binding reads (numpy arrays, OrtValues over them):
        # kept alive until rebound, as the wrapper's own bind_cpu_input does.
        self._keep: dict[str, Any] = {}

    def clear(self) -> None:
        """Unbind every input and output."""
        self.binding.clear_binding_inputs()
        self.binding.clear_binding_outputs()
        self._keep.clear()

    def bind_input(self, name: str, array: np.ndarray) -> None:
        """Bind a CPU array (made C-contiguous) as input ``name`` through the public wrapper, the way
        set-up and prefill bind; the array is kept alive while it is bound."""
        array = np.ascontiguousarray(array)
        self._keep[name] = array
        self.binding.bind_cpu_input(name, array)

    def bind_array(self, name: str, array: np.ndarray) -> None:
        """Bind a contiguous CPU array as input ``name``; the graph reads it in place at run time."""
        if self._native is None:
            self.binding.bind_cpu_input(name, array)
            return
        self._keep[name] = array
        self._native.bind_input(name, array)

    def bind_view(self, name: str, view: np.ndarray, base: np.ndarray) -> None:
        """Bind ``view`` as input ``name``: a C-contiguous view that starts at ``base``'s first element.

        Like :meth:`bind_array`, but the native call takes ``base``'s address (looked
        up once per base array) and the view's shape, instead of inspecting an array.
        """
        native = self._native
        if base is not self._view_base:
            self._view_base = base
            self._view_address = base.ctypes.data
            self._view_type = _ONNX_ELEMENT_TYPES.get(base.dtype.type)
        if native is None or self._view_type is None:
            self.bind_array(name, view)
            return
        self._keep[name] = base
        native.bind_input(name, self._cpu, self._view_type, view.shape, self._view_address)

    def bind_value(self, name: str, value: Any) -> None:
        """Bind an OrtValue (native or wrapped) as input ``name``."""
        if self._native is None:
            self.binding.bind_ortvalue_input(name, value if isinstance(value, ort.OrtValue) else ort.OrtValue(value))
            return
        if isinstance(value, ort.OrtValue):  # may own numpy memory: keep it while bound
            self._keep[name] = value
            value = value._ortvalue
        self._native.bind_ortvalue_input(name, value)

    def rebind_cache(self, names: Sequence[tuple[str, str]], values: Sequence[Any]) -> None:
        """Bind ``values`` as the past inputs and let onnxruntime allocate fresh present outputs.

        ``names`` are (past input, present output) pairs, aligned with ``values``.
        """
        native = self._native
        if native is None:
            binding = self.binding
            for (past, present), value in zip(names, values):
                binding.bind_ortvalue_input(past, value if isinstance(value, ort.OrtValue) else ort.OrtValue(value))
                binding.bind_output(present, "cpu")
            return
        keep, cpu = self._keep, self._cpu
        for (past, present), value in zip(names, values):
            if isinstance(value, ort.OrtValue):  # e.g. made by reorder: may own numpy memory
                keep[past] = value
                value = value._ortvalue
            native.bind_ortvalue_input(past, value)
            native.bind_output(present, cpu)

    def outputs(self, start: int = 0) -> list[Any]:
        """The outputs of the last run, in binding order, from index ``start``."""
        if self._native is None:
            return self.binding.get_outputs()[start:]
        vector = self._native.get_outputs()
        return [vector[i] for i in range(start, len(vector))]

    def run(self, *, what: str = "model", options: ort.RunOptions | None = None) -> None:
        """Run the session on this binding (errors wrapped, see :func:`run_binding`)."""
        run_binding(self.session, self.binding, what=what, options=options)
