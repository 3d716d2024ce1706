"""What the one-pass encoder tasks share (``OnnxEmbedder``, ``OnnxReranker``): the graph of a folder,
its tokenizer.json, and rows of token ids as one right-padded batch of the graph's inputs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from inference4py.engine.sessions import TensorInfo
from inference4py.errors import ModelFilesMissingError, UnsupportedModelError

if TYPE_CHECKING:
    from inference4py.tokenization.fast import FastTokenizer

__all__ = ["ENCODER_INPUTS", "encoder_graph", "fast_tokenizer", "padded_feeds"]

#: The inputs an encoder graph may take; all are made from the rows of ids.
ENCODER_INPUTS = frozenset({"input_ids", "attention_mask", "token_type_ids", "position_ids"})


def encoder_graph(folder: Path, variant: str | None, *, how_to_export: str) -> Path:
    """``model.onnx`` (or ``model_<variant>.onnx``) in the folder or its ``onnx/`` sub-folder.

    Raises:
        ModelFilesMissingError: neither exists; the message lists the ONNX files that do and ends
            with ``how_to_export`` (a sentence: which folder to pass, how to make one).
    """
    name = "model.onnx" if variant in (None, "", "fp32") else f"model_{variant}.onnx"
    for candidate in (folder / name, folder / "onnx" / name):
        if candidate.is_file():
            return candidate
    found = sorted(p.relative_to(folder).as_posix() for p in [*folder.glob("*.onnx"), *folder.glob("onnx/*.onnx")])
    listing = f"ONNX files found: {', '.join(found)}." if found else "The folder has no .onnx file at all."
    raise ModelFilesMissingError(
        f"No {name} in {folder} nor in {folder / 'onnx'}. {listing} {how_to_export}"
        + (", or choose an existing precision with variant=..." if found else "")
        + ".",
        [name],
    )


def fast_tokenizer(folder: Path, task: str) -> FastTokenizer:
    """The folder's tokenizer.json tokenizer.

    Raises:
        UnsupportedModelError: the folder has another kind of tokenizer (``task`` names who needs it).
    """
    from inference4py.tokenization import load_tokenizer
    from inference4py.tokenization.fast import FastTokenizer

    tokenizer = load_tokenizer(folder)
    if not isinstance(tokenizer, FastTokenizer):
        raise UnsupportedModelError(
            f"{folder} has no tokenizer.json; {task} reads the tokenizer from tokenizer.json. "
            "Save the model's tokenizer with a recent transformers (tokenizer.save_pretrained) into the folder."
        )
    return tokenizer


def padded_feeds(
    rows: Sequence[Sequence[int]],
    inputs: Mapping[str, TensorInfo],
    pad: int,
    type_rows: Sequence[Sequence[int]] | None = None,
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Rows of ids as the graph's inputs, right-padded to the longest: (feeds, attention mask).

    Only the inputs the graph takes are fed, in its dtypes; ``token_type_ids`` are ``type_rows``
    (zeros when None), ``position_ids`` count from 0 in every row.
    """
    width = max(len(r) for r in rows)
    ids = np.full((len(rows), width), pad, dtype=np.int64)  # [batch, seq]
    types = np.zeros((len(rows), width), dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
        if type_rows is not None:
            types[i, : len(row)] = type_rows[i]
    feeds: dict[str, np.ndarray] = {"input_ids": ids}
    if "attention_mask" in inputs:
        feeds["attention_mask"] = mask
    if "token_type_ids" in inputs:
        feeds["token_type_ids"] = types
    if "position_ids" in inputs:
        feeds["position_ids"] = np.broadcast_to(np.arange(width, dtype=np.int64), ids.shape).copy()
    return {k: v.astype(inputs[k].dtype, copy=False) for k, v in feeds.items()}, mask
