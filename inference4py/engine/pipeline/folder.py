"""A model folder's own files: that it exists, its config.json, and its generation_config.json defaults."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from inference4py.engine.pipeline.spec import _TOKEN_KEYS, GENERATION_KEYS, _valid_generation_value
from inference4py.errors import ModelLoadError, ModelNotFoundError


def _existing_folder(folder: str | os.PathLike[str]) -> Path:
    root = Path(folder)
    if not root.is_dir():
        raise ModelNotFoundError(
            f"Model folder {root} does not exist. Pass an existing folder to model_path(...), or a Hugging Face "
            "model id to model_id(...)."
        )
    return root


def read_model_config(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """config.json of a folder (empty dict when absent)."""
    path = Path(folder) / "config.json"
    if not path.is_file():
        return {}
    return read_json_object(path, ModelLoadError, "Re-download the model or fix the file.")


def read_json_object(path: Path, error: type[Exception], fix: str) -> dict[str, Any]:
    """The JSON object in ``path``; ``error`` (with ``fix`` in its message) when it is unreadable or not an object."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except json.JSONDecodeError as exc:
        raise error(f"{path} is not valid JSON ({exc}). {fix}") from exc
    except OSError as exc:
        raise error(f"{path} cannot be read ({exc}). {fix}") from exc
    if not isinstance(data, dict):
        raise error(f"{path} must contain a JSON object. {fix}")
    return data


def _folder_generation_defaults(root: Path, config: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Tokens and generation defaults of generation_config.json (ids fall back to config.json),
    as transformers resolves them: the layer under what a description declares."""
    gen_path = root / "generation_config.json"
    if gen_path.is_file():
        data = read_json_object(gen_path, ModelLoadError, "Re-download the model or fix the file.")
        generation = {k: v for k, v in data.items() if k in GENERATION_KEYS and _valid_generation_value(k, v)}
        for hf_name in _TOKEN_KEYS.values():
            if data.get(hf_name) is None and config.get(hf_name) is not None:
                data[hf_name] = config[hf_name]
    else:
        data = dict(config)
        generation = {}
    tokens: dict[str, Any] = {}
    for key, hf_name in _TOKEN_KEYS.items():
        value = data.get(hf_name)
        if key == "eos":
            values = value if isinstance(value, list) else [value]
            if values and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
                tokens[key] = values
        elif isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            tokens[key] = value
    return tokens, generation
