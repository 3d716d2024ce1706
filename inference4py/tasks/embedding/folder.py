"""What a sentence-transformers folder says: its graph, its modules, pooling and max_seq_length.

Read the way ``SentenceTransformer(folder)`` reads them: ``modules.json`` (Transformer, Pooling,
Normalize), the Pooling module's ``config.json`` in its current (``pooling_mode``) or older
(``pooling_mode_*`` booleans) format, and ``sentence_bert_config.json``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inference4py.engine.pipeline import DESCRIPTION_FILE, load_pipeline
from inference4py.errors import ModelFilesMissingError, ModelLoadError, UnsupportedModelError
from inference4py.tasks.embedding.pooling import POOLING_MODES
from inference4py.tasks.encoder import encoder_graph

__all__ = [
    "POOLED_OUTPUT",
    "TOKEN_OUTPUTS",
    "SentenceConfig",
    "find_graph",
    "is_embedding_model",
    "max_length",
    "pooling_modes",
    "read_sentence_config",
]

# the older pooling config's booleans -> mode names
_LEGACY_KEYS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
#: The output of a graph that pools itself, and the token-vector outputs pooled here (first found wins).
POOLED_OUTPUT = "sentence_embedding"
TOKEN_OUTPUTS = ("last_hidden_state", "token_embeddings")


@dataclass(frozen=True)
class SentenceConfig:
    """What the folder's sentence-transformers files say (None: the file does not say)."""

    pooling: tuple[str, ...] | None = None
    normalize: bool = False
    max_seq_length: int | None = None
    do_lower_case: bool = False
    unsupported: tuple[str, ...] = ()  # modules after pooling that are not run here (Dense, ...)


def _read_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"Cannot read {path}: {exc}. Download the file again.") from exc


def pooling_modes(config: dict[str, Any], where: str) -> tuple[str, ...]:
    """The pooling modes of a sentence-transformers Pooling config (current or older format).

    Raises:
        UnsupportedModelError: an unknown mode, or none switched on.
    """
    mode = config.get("pooling_mode")
    if mode is not None:
        modes = (mode,) if isinstance(mode, str) else tuple(mode)
    else:
        modes = tuple(name for key, name in _LEGACY_KEYS.items() if config.get(key))
    unknown = [m for m in modes if m not in POOLING_MODES]
    if unknown or not modes:
        raise UnsupportedModelError(
            f"{where} asks for pooling {list(unknown or modes)}; OnnxEmbedder pools with {', '.join(POOLING_MODES)}.",
            fix="pooling",
        )
    return modes


def read_sentence_config(folder: Path) -> SentenceConfig:
    """Read ``modules.json`` and the files it points to (see the module docstring)."""
    modules_file = folder / "modules.json"
    pooling: tuple[str, ...] | None = None
    normalize = False
    unsupported: list[str] = []
    transformer_dir = folder
    if modules_file.is_file():
        modules = _read_json(modules_file)
        if not isinstance(modules, list):
            raise ModelLoadError(f"{modules_file} must be a JSON list of modules; download it again.")
        for module in modules:
            kind = str(module.get("type", "")).rsplit(".", 1)[-1]
            path = folder / str(module.get("path", ""))
            if kind == "Transformer":
                transformer_dir = path
            elif kind == "Pooling":
                where = path / "config.json"
                if not where.is_file():
                    raise ModelFilesMissingError(
                        f"modules.json lists a Pooling module in {path.name or '.'}/ but {where} is missing. "
                        "Download the folder's sentence-transformers files again (modules.json and every "
                        "module's config.json).",
                        [f"{module.get('path', '')}/config.json"],
                    )
                pooling = pooling_modes(_read_json(where), str(where))
            elif kind == "Normalize":
                normalize = True
            else:
                unsupported.append(f"{kind} ({module.get('path') or '.'})")
    bert = transformer_dir / "sentence_bert_config.json"
    if not bert.is_file():
        bert = folder / "sentence_bert_config.json"
    settings = _read_json(bert) if bert.is_file() else {}
    length = settings.get("max_seq_length")
    return SentenceConfig(
        pooling=pooling,
        normalize=normalize,
        max_seq_length=int(length) if isinstance(length, int) and length > 0 else None,
        do_lower_case=bool(settings.get("do_lower_case", False)),
        unsupported=tuple(unsupported),
    )


def find_graph(folder: Path, variant: str | None = None) -> Path:
    """``model.onnx`` (or ``model_<variant>.onnx``) in the folder or its ``onnx/`` sub-folder.

    An ``inference4py.json`` describing a ``single-pass`` pipeline names the graph instead.

    Raises:
        ModelFilesMissingError: neither exists; the message lists the ONNX files that do.
        UnsupportedModelError: the folder's description is a generation pipeline.
    """
    if variant in (None, "", "fp32") and (folder / DESCRIPTION_FILE).is_file():
        spec = load_pipeline(folder)  # a description names the graph: a single-pass pipeline's session
        if spec.has("decoder"):
            raise UnsupportedModelError(
                f"{folder / DESCRIPTION_FILE} describes a generation pipeline ({spec.preset or 'with a decoder'}), "
                'not a sentence encoder: an embedder needs "extends": "single-pass" (one init session).'
            )
        return spec.path("encoder")
    return encoder_graph(
        folder,
        variant,
        how_to_export="Pass the folder of a sentence-transformers model exported to ONNX (e.g. `optimum-cli export "
        "onnx --model sentence-transformers/all-MiniLM-L6-v2 --task feature-extraction DIR`, then copy modules.json, "
        "sentence_bert_config.json and 1_Pooling/ into DIR)",
    )


def is_embedding_model(folder: str | os.PathLike[str]) -> bool:
    """Whether a local folder holds a sentence encoder: sentence-transformers files, or a
    ``model.onnx`` whose outputs are token or sentence embeddings (and no logits).

    Reads file names and the graph's header only (no session is created).
    """
    from inference4py.engine.graph_io import read_graph_io

    path = Path(folder)
    if (path / "modules.json").is_file() or (path / "sentence_bert_config.json").is_file():
        return True
    try:
        graph = find_graph(path)
    except ModelFilesMissingError:
        return False
    io = read_graph_io(graph)
    if io is None:
        return False
    outputs = set(io[1])
    return "logits" not in outputs and bool(outputs & {POOLED_OUTPUT, *TOKEN_OUTPUTS})


def max_length(folder: Path, config: SentenceConfig, tokenizer: Any) -> int:
    """sentence_bert_config.json's max_seq_length, else the tokenizer's, else the model's positions."""
    positions = None
    config_file = folder / "config.json"
    if config_file.is_file():
        data = _read_json(config_file)
        value = data.get("max_position_embeddings") if isinstance(data, dict) else None
        positions = value if isinstance(value, int) and value > 0 else None
    for length in (config.max_seq_length, tokenizer.model_max_length, positions):
        if isinstance(length, int) and length > 0:
            return min(length, positions) if positions else length
    raise UnsupportedModelError(
        f"{folder} says nothing about the longest input (no max_seq_length in sentence_bert_config.json, no "
        "model_max_length in tokenizer_config.json, no max_position_embeddings in config.json).",
        fix="max_seq_length",
    )
