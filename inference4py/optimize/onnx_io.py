"""The onnx package, imported lazily, and graphs in and out of memory across protobuf's 2 GB limit.

onnx is an optional extra: nothing here imports it until a graph is read, run or written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inference4py.errors import ModelLoadError

__all__ = ["import_onnx", "save_model"]

_EXTERNAL_DATA_BYTES = 1_800_000_000  # protobuf's limit is 2 GB: larger graphs keep weights beside the file


def import_onnx() -> Any:
    """The onnx module (an optional extra), or a ModelLoadError naming the package to install."""
    try:
        import onnx
    except ImportError as exc:
        raise ModelLoadError(
            'Optimizing a graph needs the onnx package: pip install "inference4py[quantize]" (or pip install onnx).'
        ) from exc
    return onnx


def _session(model: Any) -> Any:
    """An onnxruntime session of an in-memory model (through a temporary file beyond protobuf's 2 GB)."""
    import tempfile

    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 4
    # summed per initializer: model.ByteSize() itself fails past 2 GB ("Failed to serialize proto")
    if _weight_bytes(model) < _EXTERNAL_DATA_BYTES:
        return ort.InferenceSession(model.SerializeToString(), sess_options=opts, providers=["CPUExecutionProvider"])
    onnx = import_onnx()
    from onnx.external_data_helper import load_external_data_for_model

    with tempfile.TemporaryDirectory(prefix="inference4py-fuse-") as tmp:
        path = Path(tmp) / "model.onnx"
        onnx.save(
            model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location="model.onnx_data"
        )
        try:
            # external data files are read when the session loads; the folder can go afterwards
            opts.add_session_config_entry("session.use_device_allocator_for_initializers", "1")
            return ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])
        finally:
            # onnx.save moved the weights out of ``model`` into the temporary file: bring them back,
            # or the caller's model would point at a file about to be deleted
            load_external_data_for_model(model, tmp)


def _weight_bytes(model: Any) -> int:
    """The serialized size of the graph's initializers (each is below 2 GB, unlike the whole model)."""
    return sum(t.ByteSize() for t in model.graph.initializer)


def save_model(model: Any, path: Path) -> None:
    """Write ``model`` to ``path`` (its folder made), the weights beside it past protobuf's 2 GB limit."""
    onnx = import_onnx()
    path.parent.mkdir(parents=True, exist_ok=True)
    if _weight_bytes(model) > _EXTERNAL_DATA_BYTES:
        data = path.name + "_data"
        (path.parent / data).unlink(missing_ok=True)
        onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location=data)
    else:
        onnx.save(model, str(path))
