"""PipelineSpec: what sessions a model folder has, when they run, what state they carry.

The runtime knows HOW to run a pipeline, never WHAT model it runs: a spec names
ONNX sessions, a flow (``init`` runs once before the loop, ``step`` every token)
and the state to carry.  Specs are detected from the files present ("detect,
don't declare"); the KV layout and optional inputs are then read from the graphs
themselves by the step functions (decoder.py, seq2seq.py).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from inference4py.errors import ModelFilesMissingError, ModelLoadError, ModelNotFoundError, PipelineSpecError

__all__ = ["SessionSpec", "PipelineSpec", "detect_pipeline", "load_pipeline", "read_model_config", "PRESETS"]

PRESETS = ("autoregressive-decoder", "encoder-decoder", "speech-seq2seq")


@dataclass(frozen=True)
class SessionSpec:
    """One ONNX graph of a pipeline, relative to the model folder."""

    file: str
    provider: str | None = None


@dataclass(frozen=True)
class PipelineSpec:
    """A resolved pipeline description.

    ``sessions`` maps a role name to its graph.  Roles the runtime understands:
    ``decoder`` (every step; with the ``use_cache_branch`` input when merged),
    ``decoder_with_past`` (optional: steps after the first, inference4j's
    three-file layout) and ``encoder`` (``init``: once per generation).
    """

    preset: str
    folder: Path
    sessions: Mapping[str, SessionSpec]
    flow: Mapping[str, tuple[str, ...]]
    source: str = "detected"
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def path(self, role: str) -> Path:
        return self.folder / self.sessions[role].file

    def has(self, role: str) -> bool:
        return role in self.sessions

    def describe(self) -> dict[str, Any]:
        """The spec as a JSON-able dict (what ``inference4py inspect`` prints)."""
        return {
            "version": 1,
            "pipeline": {"extends": self.preset},
            "sessions": {k: {"file": v.file, **({"provider": v.provider} if v.provider else {})} for k, v in self.sessions.items()},
            "flow": {k: list(v) for k, v in self.flow.items()},
            "metadata": {**dict(self.metadata), "source": self.source},
        }


def read_model_config(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """config.json of a folder (empty dict when absent)."""
    path = Path(folder) / "config.json"
    if not path.is_file():
        return {}
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except json.JSONDecodeError as exc:
        raise ModelLoadError(f"{path} is not valid JSON ({exc}). Re-download the model or fix the file.") from exc
    if not isinstance(data, dict):
        raise ModelLoadError(f"{path} must contain a JSON object.")
    return data


_SUBFOLDERS = ("", "onnx")


def _find(folder: Path, name: str) -> str | None:
    for sub in _SUBFOLDERS:
        candidate = folder / sub / name if sub else folder / name
        if candidate.is_file():
            return f"{sub}/{name}" if sub else name
    return None


def detect_pipeline(folder: str | os.PathLike[str]) -> PipelineSpec:
    """Work out a folder's pipeline from the ONNX files it holds.

    Raises:
        ModelNotFoundError: the folder does not exist.
        ModelFilesMissingError: no known ONNX layout is present (the message lists
            what was found and what is expected).
    """
    root = Path(folder)
    if not root.is_dir():
        raise ModelNotFoundError(
            f"Model folder {root} does not exist. Pass an existing folder to model_path(...), or a Hugging Face "
            "model id to model_id(...)."
        )
    config = read_model_config(root)
    meta = {"model_type": config.get("model_type")} if config.get("model_type") else {}

    encoder = _find(root, "encoder_model.onnx")
    merged = _find(root, "decoder_model_merged.onnx")
    plain = _find(root, "decoder_model.onnx")
    with_past = _find(root, "decoder_with_past_model.onnx")
    single = _find(root, "model.onnx")

    if encoder:
        preset = "speech-seq2seq" if _is_speech(config) else "encoder-decoder"
        if merged:
            sessions = {"encoder": SessionSpec(encoder), "decoder": SessionSpec(merged)}
        elif plain:
            sessions = {"encoder": SessionSpec(encoder), "decoder": SessionSpec(plain)}
            if with_past:
                sessions["decoder_with_past"] = SessionSpec(with_past)
        else:
            raise _missing(root, "an encoder-decoder model", ["decoder_model_merged.onnx", "or decoder_model.onnx (+ decoder_with_past_model.onnx)"])
        return PipelineSpec(preset, root, sessions, {"init": ("encoder",), "step": ("decoder",)}, "detected", meta)

    decoder_file = single or merged or (plain if with_past is None else None)
    if decoder_file is None and plain and with_past:
        sessions = {"decoder": SessionSpec(plain), "decoder_with_past": SessionSpec(with_past)}
        return PipelineSpec("autoregressive-decoder", root, sessions, {"step": ("decoder",)}, "detected", meta)
    if decoder_file is None:
        raise _missing(root, "a model", ["model.onnx (decoder-only)", "decoder_model_merged.onnx",
                                         "encoder_model.onnx + decoder_model_merged.onnx (encoder-decoder)"])
    return PipelineSpec("autoregressive-decoder", root, {"decoder": SessionSpec(decoder_file)}, {"step": ("decoder",)}, "detected", meta)


def load_pipeline(folder: str | os.PathLike[str]) -> PipelineSpec:
    """Resolve a folder's pipeline (explicit description first, then detection)."""
    return detect_pipeline(folder)


def _is_speech(config: Mapping[str, Any]) -> bool:
    # A speech encoder is announced by its feature size, not by a model name.
    return "num_mel_bins" in config


def _missing(root: Path, what: str, expected: list[str]) -> ModelFilesMissingError:
    present = sorted(p.name for p in root.iterdir())[:30]
    onnx_sub = root / "onnx"
    if onnx_sub.is_dir():
        present += [f"onnx/{p.name}" for p in sorted(onnx_sub.iterdir())[:20]]
    return ModelFilesMissingError(
        f"{root} does not hold {what} in a layout inference4py knows. Expected one of: {'; '.join(expected)} "
        f"(at the top level or in onnx/). Found: {', '.join(present) or 'nothing'}. "
        "Download the complete model, or add an inference4py.json pipeline description.",
        expected,
    )
