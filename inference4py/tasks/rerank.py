"""OnnxReranker and its builder: a cross-encoder scores (query, document) pairs, one run per padded batch.

A cross-encoder reads the query and a document together (``[CLS] query [SEP] document [SEP]``, or
the pair template of the folder's tokenizer.json) and its sequence-classification head gives one
logit: the document's relevance.  The scores are transformers'
``AutoModelForSequenceClassification`` logits on the same weights (tokenized as
``tokenizer(query, document, truncation=True)``: longest-first to the model's length), not passed
through a sigmoid; sentence-transformers' ``CrossEncoder.predict`` applies one for one-label models.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from inference4py.engine.sessions import TensorInfo, run_session
from inference4py.errors import ConfigurationError, InvalidInputError, ModelFilesMissingError, UnsupportedModelError
from inference4py.tasks.encoder import (
    EncoderBuilder,
    EncoderParts,
    EncoderTask,
    encoder_graph,
    int_in,
    padded_feeds,
    takes_encoder_inputs,
)
from inference4py.tasks.presets import Preset, PresetTable

__all__ = ["RERANKER_PRESETS", "OnnxReranker", "RankedDocument", "RerankerBuilder", "is_reranker_model"]

_SCORE_OUTPUT = "logits"

R = TypeVar("R", bound="RerankerBuilder")


@dataclass(frozen=True)
class RankedDocument:
    """One document of a ranking.

    Attributes:
        index: Its position in the documents given.
        score: The model's relevance logit (higher is more relevant).
        document: The document's text.
    """

    index: int
    score: float
    document: str


@dataclass(frozen=True)
class Pair:
    """A (query, document) pair as the model reads it: token ids and their segment (type) ids."""

    ids: tuple[int, ...]
    type_ids: tuple[int, ...]


class RerankerBuilder(EncoderBuilder):
    """Chainable, validated options of an :class:`OnnxReranker`; each setter returns the builder.

    Where the model comes from and how its session runs are :class:`ModelSourceBuilder`'s options
    (``model_id``, ``model_path``, ``revision``, ``token``, ``variant``, ``providers``...).
    """

    def __init__(self, *, preset: str | None = None, model_id: str | None = None) -> None:
        super().__init__(preset=preset, model_id=model_id)
        self._max_length: int | None = None

    def max_length(self: R, n: int) -> R:
        """Tokens per pair, special tokens included (default: the tokenizer's model_max_length, capped by
        the model's positions); longer pairs are cut longest-first, as transformers' tokenizer does."""
        if not int_in(n, 4):
            raise ConfigurationError(f"max_length must be an integer >= 4, got {n!r}.")
        self._max_length = n
        return self

    def build(self) -> OnnxReranker:
        """Load the model and return the reranker."""
        return OnnxReranker._from_builder(self)

    def __repr__(self) -> str:
        parts = self._source_parts()
        if self._variant is not None:
            parts.append(f"variant={self._variant!r}")
        if self._max_length is not None:
            parts.append(f"max_length={self._max_length}")
        parts += self._batch_parts()
        return f"{type(self).__name__}({', '.join(parts)})"


#: OnnxReranker's presets: the method name, the Hub repo.
RERANKER_PRESETS = PresetTable(
    RerankerBuilder,
    [
        Preset(
            "bgeRerankerBase",
            "BAAI/bge-reranker-base",
            "BAAI/bge-reranker-base: an XLM-RoBERTa cross-encoder, multilingual, 512 tokens (its onnx/model.onnx).",
        ),
        Preset(
            "msMarcoMiniLML6V2",
            "cross-encoder/ms-marco-MiniLM-L-6-v2",
            "cross-encoder/ms-marco-MiniLM-L-6-v2: a 6-layer MiniLM trained on MS MARCO passages (its onnx/model.onnx).",
        ),
    ],
)


class OnnxReranker(EncoderTask):
    """Relevance of documents to a query, from an ONNX cross-encoder (one-label sequence classifier).

    ``rerank(query, documents)`` returns the documents sorted by the model's score, equal to
    transformers' ``AutoModelForSequenceClassification`` logits on the same weights.

    Example:
        >>> with OnnxReranker.msMarcoMiniLML6V2().build() as reranker:          # doctest: +SKIP
        ...     best = reranker.rerank("How old is the universe?", ["13.8 billion years.", "Paris."])[0]
        ...     print(best.index, best.score)
    """

    _encoder_kind = "cross-encoder"

    def __init__(
        self, folder: Path, session: Any, tokenizer: Any, *, max_length: int, batch_size: int, name: str | None = None
    ) -> None:
        from tokenizers import Tokenizer as Backend

        super().__init__(folder, session, tokenizer, batch_size=batch_size, name=name)
        self.max_length = max_length
        # A copy of the backend with the truncation transformers applies to a pair, and no padding.
        backend = Backend.from_str(tokenizer.backend.to_str())
        backend.no_padding()
        backend.enable_truncation(max_length=max_length, strategy="longest_first")
        self._backend = backend

    # ------------------------------------------------------------------ presets
    builder = RERANKER_PRESETS.blank()
    bgeRerankerBase = RERANKER_PRESETS.method("bgeRerankerBase")
    msMarcoMiniLML6V2 = RERANKER_PRESETS.method("msMarcoMiniLML6V2")

    # ------------------------------------------------------------------ what the loader asks (EncoderTask)
    @classmethod
    def _find_graph(cls, folder: Path, variant: str | None) -> Path:
        return find_reranker_graph(folder, variant)

    @classmethod
    def _read_settings(cls, folder: Path) -> None:
        labels = _num_labels(folder)
        if labels not in (None, 1):
            raise UnsupportedModelError(
                f"{folder}/config.json has {labels} labels; a reranker scores with a one-label head (num_labels=1), "
                "as cross-encoder/ms-marco-* and BAAI/bge-reranker-* have."
            )

    @classmethod
    def _check_graph(cls, graph: str, inputs: Mapping[str, TensorInfo], outputs: Mapping[str, TensorInfo]) -> None:
        if not takes_encoder_inputs(inputs) or _SCORE_OUTPUT not in outputs:
            raise UnsupportedModelError(
                f"{graph} takes {', '.join(inputs)} and gives {', '.join(outputs)}; a cross-encoder takes "
                "input_ids (and optionally attention_mask, token_type_ids, position_ids) and gives logits. "
                "For sentence embeddings use OnnxEmbedder, for text generation OnnxTextGenerator."
            )

    @classmethod
    def _assemble(cls, parts: EncoderParts, builder: RerankerBuilder, settings: None) -> OnnxReranker:
        return cls(
            parts.folder,
            parts.session,
            parts.tokenizer,
            max_length=builder._max_length or _max_length(parts.folder, parts.tokenizer),
            batch_size=builder._batch_size,
            name=builder._model_id,
        )

    # ------------------------------------------------------------------ API
    def tokenize(self, query: str, documents: Sequence[str]) -> list[Pair]:
        """The pairs the model reads: the tokenizer's pair template, cut longest-first to ``max_length``.

        Raises:
            InvalidInputError: ``query`` is not a str, ``documents`` is empty or holds a non-str.
        """
        self._check_open()
        query, texts = _check_inputs(query, documents)
        encodings = self._backend.encode_batch([(query, text) for text in texts], add_special_tokens=True)
        return [Pair(tuple(enc.ids), tuple(enc.type_ids)) for enc in encodings]

    def score(self, query: str, documents: Sequence[str], *, batch_size: int | None = None) -> np.ndarray:
        """The model's relevance logit of each document for ``query``, in the documents' order: float32 ``(n,)``.

        Raises:
            InvalidInputError: as :meth:`tokenize`, or a bad ``batch_size``.
        """
        return self.score_pairs(self.tokenize(query, documents), batch_size=batch_size)

    def score_pairs(self, pairs: Sequence[Pair], *, batch_size: int | None = None) -> np.ndarray:
        """Scores of pairs from :meth:`tokenize` (of one query or several): float32 ``(len(pairs),)``.

        Pairs run longest first in padded batches of ``batch_size``; padding is masked, so a pair's
        score does not depend on the others in its batch.
        """
        self._check_open()
        return self._run_longest_first(pairs, [len(p.ids) for p in pairs], batch_size, self._run)

    def rerank(self, query: str, documents: Sequence[str], top_n: int | None = None) -> list[RankedDocument]:
        """The documents sorted by relevance to ``query``, best first (equal scores: the earlier document first).

        Args:
            query: The query.
            documents: A non-empty list of texts.
            top_n: Keep only the best ``top_n`` (None: all; more than there are: all).

        Raises:
            InvalidInputError: as :meth:`tokenize`, or ``top_n`` not an integer >= 1.
        """
        if top_n is not None and not int_in(top_n, 1):
            raise InvalidInputError(f"top_n must be an integer >= 1 (or None for all), got {top_n!r}.")
        scores = self.score(query, documents)
        return ranked(scores, list(documents), top_n)

    def _run(self, pairs: list[Pair]) -> np.ndarray:
        """One onnxruntime run over right-padded pairs -> their logits ``[rows]``."""
        feeds, _ = padded_feeds([p.ids for p in pairs], self._inputs, self._pad, [p.type_ids for p in pairs])
        (logits,) = run_session(self._session, feeds, [_SCORE_OUTPUT], what="cross-encoder")
        return np.asarray(logits, dtype=np.float32).reshape(len(pairs), -1)[:, 0]  # [batch, 1] -> [batch]

    def __repr__(self) -> str:
        return f"OnnxReranker(model={self.name!r}, max_length={self.max_length}, batch_size={self.batch_size})"


def ranked(scores: np.ndarray, documents: Sequence[str], top_n: int | None) -> list[RankedDocument]:
    """Documents and their scores as a ranking: best first, ties in the documents' order, ``top_n`` kept."""
    order = sorted(range(len(documents)), key=lambda i: (-float(scores[i]), i))
    return [RankedDocument(i, float(scores[i]), documents[i]) for i in order[:top_n]]


def find_reranker_graph(folder: Path, variant: str | None = None) -> Path:
    """``model.onnx`` (or ``model_<variant>.onnx``) in the folder or its ``onnx/`` sub-folder.

    Raises:
        ModelFilesMissingError: neither exists; the message lists the ONNX files that do.
    """
    return encoder_graph(
        folder,
        variant,
        how_to_export="Pass the folder of a cross-encoder exported to ONNX (e.g. `optimum-cli export onnx --model "
        "cross-encoder/ms-marco-MiniLM-L-6-v2 --task text-classification DIR`)",
    )


def is_reranker_model(folder: str | os.PathLike[str]) -> bool:
    """Whether a local folder holds a cross-encoder: config.json names a ``...ForSequenceClassification``
    architecture with one label, and the folder has its graph (nothing is loaded)."""
    path = Path(folder)
    config = _read_config(path)
    architectures = config.get("architectures") or []
    if not any(isinstance(a, str) and a.endswith("ForSequenceClassification") for a in architectures):
        return False
    if _num_labels(path) not in (None, 1):
        return False
    try:
        find_reranker_graph(path)
    except ModelFilesMissingError:
        return False
    return True


def _read_config(folder: Path) -> dict[str, Any]:
    try:
        data = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _num_labels(folder: Path) -> int | None:
    """config.json's number of labels (``id2label``'s size, or ``num_labels``), None when it says none."""
    config = _read_config(folder)
    labels = config.get("id2label")
    if isinstance(labels, dict) and labels:
        return len(labels)
    value = config.get("num_labels")
    return value if isinstance(value, int) else None


def _max_length(folder: Path, tokenizer: Any) -> int:
    """The tokenizer's model_max_length, capped by config.json's max_position_embeddings (RoBERTa-style
    models keep two positions for the padding offset: 514 positions hold 512 tokens)."""
    config = _read_config(folder)
    positions = config.get("max_position_embeddings")
    positions = positions if isinstance(positions, int) and positions > 0 else None
    if positions is not None and config.get("model_type") in ("roberta", "xlm-roberta", "camembert"):
        positions -= 2
    length = tokenizer.model_max_length
    if isinstance(length, int) and length > 0:
        return min(length, positions) if positions else length
    if positions:
        return positions
    raise UnsupportedModelError(
        f"{folder} says nothing about the longest input (no model_max_length in tokenizer_config.json, no "
        "max_position_embeddings in config.json): set it with .max_length(n)."
    )


def _check_inputs(query: Any, documents: Any) -> tuple[str, list[str]]:
    if not isinstance(query, str):
        raise InvalidInputError(f"query must be a str, got {type(query).__name__}.")
    if isinstance(documents, (str, bytes)) or not isinstance(documents, Sequence):
        raise InvalidInputError(f"documents must be a list of str, got {type(documents).__name__}.")
    if len(documents) == 0:
        raise InvalidInputError("documents is an empty list: give at least one document to rank.")
    for i, text in enumerate(documents):
        if not isinstance(text, str):
            raise InvalidInputError(f"documents[{i}] is of type {type(text).__name__}, not str.")
    return query, list(documents)
