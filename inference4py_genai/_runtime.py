"""The boundary with onnxruntime-genai: loading, providers, threads, error wrapping.

Every exception onnxruntime-genai raises is turned into one of
:mod:`inference4py.errors` here (re-raised ``from`` the original), so callers of
inference4py_genai catch the same exception types as callers of inference4py.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from inference4py import env
from inference4py.errors import (
    ConfigurationError,
    Inference4pyError,
    ModelFilesMissingError,
    ModelLoadError,
)

__all__ = ["og", "load_genai_config", "open_model", "raising", "provider_name"]

_GENAI_CONFIG = "genai_config.json"

# onnxruntime's provider names -> the names og.Config.append_provider knows.  Names
# not listed here are passed as they are (onnxruntime-genai accepts both forms for
# DML, QNN, OpenVINO, WebGPU, ... and reports unknown ones).
_PROVIDER_ALIASES = {
    "CUDAExecutionProvider": "cuda",
    "ROCMExecutionProvider": "rocm",
    "CPUExecutionProvider": "cpu",
}

# Sections of genai_config.json's "model" object that create an onnxruntime session.
_SESSION_SECTIONS = ("decoder", "encoder", "vision", "embedding", "speech")


def og() -> Any:
    """The onnxruntime_genai module (imported on first use)."""
    try:
        import onnxruntime_genai
    except ImportError as exc:  # installed but broken (e.g. a missing native library)
        from inference4py_genai import INSTALL_HINT

        raise ModuleNotFoundError(
            f"onnxruntime-genai cannot be imported ({exc}). Reinstall it: {INSTALL_HINT}", name="onnxruntime_genai"
        ) from exc
    return onnxruntime_genai


@contextlib.contextmanager
def raising(error: type[Inference4pyError], what: str, hint: str = "") -> Iterator[None]:
    """Turn an onnxruntime-genai exception raised inside the block into ``error``.

    Our own errors pass through unchanged.
    """
    try:
        yield
    except Inference4pyError:
        raise
    except Exception as exc:  # onnxruntime-genai raises RuntimeError and a few private types
        text = " ".join(str(exc).split())[:500]
        message = f"onnxruntime-genai failed while {what}: {text}"
        raise error(message + (f". {hint}" if hint else "")) from exc


def load_genai_config(folder: Path) -> dict[str, Any]:
    """The parsed genai_config.json of a genai model folder.

    Raises:
        ModelFilesMissingError: the folder has no genai_config.json.
        ModelLoadError: the file is not a JSON object with a "model" section.
    """
    path = Path(folder) / _GENAI_CONFIG
    if not path.is_file():
        raise ModelFilesMissingError(
            f"{folder} has no {_GENAI_CONFIG}: it is not an onnxruntime-genai model folder. Export the model "
            "with onnxruntime-genai's model builder (python -m onnxruntime_genai.models.builder), or run an "
            "ONNX export from optimum with inference4py.OnnxTextGenerator instead.",
            [_GENAI_CONFIG],
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"{path} is not valid JSON ({exc}). Re-download the model or fix the file.") from exc
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        raise ModelLoadError(f"{path} has no 'model' section; it is not a genai_config.json. Re-download the model.")
    return data


def provider_name(name: str) -> str:
    """The onnxruntime-genai name of an execution provider given by either naming scheme."""
    if not isinstance(name, str) or not name.strip():
        raise ConfigurationError(f"Execution provider names must be non-empty strings, got {name!r}.")
    return _PROVIDER_ALIASES.get(name.strip(), name.strip())


def open_model(
    folder: Path,
    genai_config: dict[str, Any],
    *,
    providers: Sequence[str] | None = None,
    threads: int | None = None,
) -> Any:
    """Load a genai folder into an ``og.Model``.

    Args:
        folder: The model folder.
        genai_config: Its parsed genai_config.json (to know which sessions exist).
        providers: Execution providers in priority order (onnxruntime or
            onnxruntime-genai names); None keeps ``INFERENCE4PY_PROVIDERS`` or the
            folder's own choice.  ``["CPUExecutionProvider"]`` forces CPU.
        threads: Intra-op threads of every session (None: ``INFERENCE4PY_NUM_THREADS``
            or onnxruntime's choice).

    Raises:
        ConfigurationError: an unknown or unavailable execution provider.
        ModelLoadError: onnxruntime-genai cannot load the folder.
    """
    genai = og()
    if providers is None:
        providers = env.default_providers()
    if threads is None:
        threads = env.default_num_threads()
    with raising(ModelLoadError, f"reading {folder / _GENAI_CONFIG}", "Re-download or re-export the model."):
        config = genai.Config(str(folder))
    if providers is not None:
        names = [provider_name(p) for p in providers]
        with raising(
            ConfigurationError,
            f"selecting the execution providers {list(providers)}",
            "Use names such as 'cuda', 'DML', 'CPUExecutionProvider'.",
        ):
            config.clear_providers()
            for name in names:
                if name.lower() != "cpu":  # CPU is what remains once the list is cleared
                    config.append_provider(name)
    # Quiet onnxruntime's own log (as inference4py does): its errors reach the user wrapped in ours.
    session_options: dict[str, Any] = {"log_severity_level": 4}
    if threads:
        session_options["intra_op_num_threads"] = int(threads)
    sections = [s for s in _SESSION_SECTIONS if isinstance(genai_config["model"].get(s), dict)]
    with raising(ConfigurationError, "applying the session options"):
        config.overlay(json.dumps({"model": {s: {"session_options": session_options} for s in sections}}))
    try:
        return genai.Model(config)
    except Exception as exc:
        text = " ".join(str(exc).split())[:500]
        if providers is not None and ("interface not available" in text or "provider" in text.lower()):
            raise ConfigurationError(
                f"The execution providers {list(providers)} cannot be used: {text}. Install the onnxruntime-genai "
                "package built for them (e.g. onnxruntime-genai-cuda), or choose CPUExecutionProvider."
            ) from exc
        raise ModelLoadError(
            f"onnxruntime-genai failed while loading the model in {folder}: {text}. Check that every file named "
            "in genai_config.json is in the folder (re-download or re-export the model)."
        ) from exc
