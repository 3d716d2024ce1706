"""OnnxEmbedder and its builder: tokenize, one encoder run per padded batch, pool, normalize."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from inference4py.engine.sessions import TensorInfo, graph_outputs, run_session
from inference4py.errors import ConfigurationError, InvalidInputError, PromptTooLongError, UnsupportedModelError
from inference4py.tasks.embedding.folder import (
    POOLED_OUTPUT,
    TOKEN_OUTPUTS,
    SentenceConfig,
    find_graph,
    max_length,
    read_sentence_config,
)
from inference4py.tasks.embedding.pooling import check_modes, l2_normalize, pool
from inference4py.tasks.encoder import EncoderBuilder, EncoderParts, EncoderTask, int_in, padded_feeds
from inference4py.tasks.presets import Preset, PresetTable

__all__ = ["EMBEDDER_PRESETS", "EmbedderBuilder", "OnnxEmbedder"]

_log = logging.getLogger("inference4py.embedding")

B = TypeVar("B", bound="EmbedderBuilder")


class EmbedderBuilder(EncoderBuilder):
    """Chainable, validated options of an :class:`OnnxEmbedder`; each setter returns the builder.

    Where the model comes from and how its session runs are :class:`ModelSourceBuilder`'s options
    (``model_id``, ``model_path``, ``revision``, ``variant``, ``providers``...); the rest, when not
    set, comes from the model folder (pooling, normalization, max_seq_length).
    """

    def __init__(self, *, preset: str | None = None, model_id: str | None = None) -> None:
        super().__init__(preset=preset, model_id=model_id)
        self._pooling: tuple[str, ...] | None = None
        self._normalize: bool | None = None
        self._max_seq_length: int | None = None
        self._truncate = True

    # ------------------------------------------------------------------ embedding options
    def pooling(self: B, modes: str | Sequence[str]) -> B:
        """Pool with these modes instead of the folder's (several: concatenated). See :data:`POOLING_MODES`."""
        self._pooling = check_modes(modes)
        return self

    def normalize(self: B, value: bool = True) -> B:
        """L2-normalize the vectors (default: when the folder's modules.json has a Normalize module)."""
        self._normalize = bool(value)
        return self

    def max_seq_length(self: B, n: int) -> B:
        """Tokens per text, special tokens included (default: the folder's max_seq_length)."""
        if not int_in(n, 2):
            raise ConfigurationError(f"max_seq_length must be an integer >= 2, got {n!r}.")
        self._max_seq_length = n
        return self

    def truncate(self: B, value: bool = True) -> B:
        """Cut texts longer than max_seq_length (default); False makes them an error instead."""
        self._truncate = bool(value)
        return self

    # ------------------------------------------------------------------ build
    def build(self) -> OnnxEmbedder:
        """Load the model and return the embedder."""
        return OnnxEmbedder._from_builder(self)

    def __repr__(self) -> str:
        parts = self._source_parts()
        for name in ("variant", "pooling", "normalize", "max_seq_length"):
            value = getattr(self, "_" + name)
            if value is not None:
                parts.append(f"{name}={value!r}")
        if not self._truncate:
            parts.append("truncate=False")
        parts += self._batch_parts()
        return f"{type(self).__name__}({', '.join(parts)})"


#: OnnxEmbedder's presets: the method name, the Hub repo (pooling and normalization are the folder's).
EMBEDDER_PRESETS = PresetTable(
    EmbedderBuilder,
    [
        Preset(
            "allMiniLML6V2",
            "sentence-transformers/all-MiniLM-L6-v2",
            "sentence-transformers/all-MiniLM-L6-v2: 384 dimensions, mean pooling, normalized (its onnx/model.onnx).",
        ),
        Preset(
            "bgeSmallEnV15",
            "BAAI/bge-small-en-v1.5",
            "BAAI/bge-small-en-v1.5: 384 dimensions, CLS pooling, normalized (its onnx/model.onnx).",
        ),
    ],
)


class OnnxEmbedder(EncoderTask):
    """Sentence embeddings from an ONNX sentence encoder (sentence-transformers layout).

    ``embed(texts)`` returns one float32 vector per text, equal to sentence-transformers'
    ``encode()`` on the same model (pooling and normalization read from the folder).

    Example:
        >>> with OnnxEmbedder.allMiniLML6V2().build() as embedder:       # doctest: +SKIP
        ...     a, b = embedder.embed(["How old are you?", "What is your age?"])
        ...     print(float(a @ b))   # cosine similarity: the vectors are normalized
    """

    _encoder_kind = "sentence encoder"
    _other_tasks = "For text generation use OnnxTextGenerator."

    def __init__(
        self,
        folder: Path,
        session: Any,
        tokenizer: Any,
        *,
        pooling: tuple[str, ...] | None,
        normalize: bool,
        max_seq_length: int,
        truncate: bool,
        batch_size: int,
        lower_case: bool = False,
        name: str | None = None,
    ) -> None:
        super().__init__(folder, session, tokenizer, batch_size=batch_size, name=name)
        self.pooling = pooling  # None: the graph's sentence_embedding output is already pooled
        self.normalize = normalize
        self.max_seq_length = max_seq_length
        self.truncate = truncate
        self._lower_case = lower_case
        self._tokenizer = tokenizer
        outputs = graph_outputs(session)
        self._output = POOLED_OUTPUT if pooling is None else next(n for n in TOKEN_OUTPUTS if n in outputs)
        # Truncation is the backend's own (special tokens kept, as transformers does); a second copy
        # without it measures texts that are too long when truncation is off.
        from tokenizers import Tokenizer as Backend

        backend = tokenizer.backend
        backend.no_padding()
        backend.enable_truncation(max_length=max_seq_length)
        self._backend = backend
        self._untruncated = Backend.from_str(backend.to_str())
        self._untruncated.no_truncation()
        self._dimension: int | None = outputs[self._output].dim(-1)
        if self._dimension is not None and pooling is not None:
            self._dimension *= len(pooling)

    # ------------------------------------------------------------------ presets
    builder = EMBEDDER_PRESETS.blank()
    allMiniLML6V2 = EMBEDDER_PRESETS.method("allMiniLML6V2")
    bgeSmallEnV15 = EMBEDDER_PRESETS.method("bgeSmallEnV15")

    # ------------------------------------------------------------------ what the loader asks (EncoderTask)
    @classmethod
    def _find_graph(cls, folder: Path, variant: str | None) -> Path:
        return find_graph(folder, variant)

    @classmethod
    def _read_settings(cls, folder: Path) -> SentenceConfig:
        return read_sentence_config(folder)

    @classmethod
    def _check_graph(cls, graph: str, inputs: Mapping[str, TensorInfo], outputs: Mapping[str, TensorInfo]) -> None:
        super()._check_graph(graph, inputs, outputs)
        if POOLED_OUTPUT not in outputs and not any(n in outputs for n in TOKEN_OUTPUTS):
            raise UnsupportedModelError(
                f"{graph} outputs {', '.join(outputs)}; OnnxEmbedder needs last_hidden_state (or "
                "token_embeddings, or an already pooled sentence_embedding). "
                + ("For text generation use OnnxTextGenerator." if "logits" in outputs else "")
            )

    @classmethod
    def _assemble(cls, parts: EncoderParts, builder: EmbedderBuilder, settings: SentenceConfig) -> OnnxEmbedder:
        folder, outputs = parts.folder, parts.outputs
        pooled = POOLED_OUTPUT in outputs
        if settings.unsupported and not pooled:
            raise UnsupportedModelError(
                f"modules.json of {folder} lists module(s) OnnxEmbedder does not run: {', '.join(settings.unsupported)}. "
                "Export the whole sentence-transformers model to one ONNX graph with a sentence_embedding output "
                "(e.g. optimum's sentence-transformers export) and use that folder."
            )
        if builder._pooling is not None:
            pooling: tuple[str, ...] | None = builder._pooling
        elif pooled:
            pooling = None
        else:
            pooling = settings.pooling or ("mean",)
            if settings.pooling is None:
                _log.info("%s has no sentence-transformers pooling config: mean pooling", folder)
        if pooling is not None and not any(n in outputs for n in TOKEN_OUTPUTS):
            raise ConfigurationError(
                f"{parts.graph.name} outputs only pooled sentence embeddings: .pooling(...) cannot apply; remove it."
            )
        normalize = builder._normalize if builder._normalize is not None else settings.normalize
        return cls(
            folder,
            parts.session,
            parts.tokenizer,
            pooling=pooling,
            normalize=normalize,
            max_seq_length=builder._max_seq_length or max_length(folder, settings, parts.tokenizer),
            truncate=builder._truncate,
            batch_size=builder._batch_size,
            lower_case=settings.do_lower_case,
            name=builder._model_id,
        )

    # ------------------------------------------------------------------ API
    @property
    def dimension(self) -> int:
        """Length of one embedding."""
        if self._dimension is None:
            self._dimension = int(self.embed_tokenized([self.tokenize(["x"])[0]]).shape[1])
        return self._dimension

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """The ids each text is embedded from: special tokens added, cut to ``max_seq_length``.

        Raises:
            InvalidInputError: ``texts`` is empty or holds something that is not a str.
            PromptTooLongError: a text is longer than ``max_seq_length`` and truncation is off.
        """
        self._check_open()
        texts = _check_texts(texts)
        if self._lower_case:
            texts = [t.lower() for t in texts]
        encodings = self._backend.encode_batch(texts, add_special_tokens=True)
        if not self.truncate:
            for i, enc in enumerate(encodings):
                if enc.overflowing:
                    total = len(self._untruncated.encode(texts[i], add_special_tokens=True).ids)
                    raise PromptTooLongError(
                        f"Text {i} has {total} tokens, more than the model's max_seq_length of "
                        f"{self.max_seq_length}. Shorten it, or leave truncation on (the default) to embed its "
                        f"first {self.max_seq_length} tokens."
                    )
        return [list(enc.ids) for enc in encodings]

    def embed(
        self,
        texts: str | Sequence[str],
        *,
        batch_size: int | None = None,
        dimensions: int | None = None,
    ) -> np.ndarray:
        """Embed one text or a list of texts.

        Args:
            texts: A str (the result is one vector, shape ``(dim,)``) or a non-empty list of str
                (shape ``(len(texts), dim)``, row i for text i).
            batch_size: Texts per onnxruntime run (default: the builder's, 32). The result does not
                depend on it: padding is masked out.
            dimensions: Keep only the first ``dimensions`` values of each vector and L2-normalize
                them again (for Matryoshka-trained models; OpenAI's ``dimensions``).

        Returns:
            float32 vectors.

        Raises:
            InvalidInputError: empty list, a non-str item, or a bad ``dimensions``.
            PromptTooLongError: a text is too long and truncation is off (see the builder).
        """
        single = isinstance(texts, str)
        ids = self.tokenize([texts] if isinstance(texts, str) else texts)
        vectors = self.embed_tokenized(ids, batch_size=batch_size, dimensions=dimensions)
        return vectors[0] if single else vectors

    def embed_tokenized(
        self,
        token_ids: Sequence[Sequence[int]],
        *,
        batch_size: int | None = None,
        dimensions: int | None = None,
    ) -> np.ndarray:
        """Embed texts already turned into ids by :meth:`tokenize`: shape ``(len(token_ids), dim)``.

        Raises:
            InvalidInputError: empty input, an empty or non-integer id list, an id outside the vocabulary.
            PromptTooLongError: an id list is longer than ``max_seq_length``.
        """
        self._check_open()
        rows = _check_ids(token_ids, self._vocab, self.max_seq_length)
        # longest first, as sentence-transformers batches
        vectors = self._run_longest_first(rows, [len(r) for r in rows], batch_size, self._run)
        if self.normalize:
            vectors = l2_normalize(vectors)
        if dimensions is not None:
            if not int_in(dimensions, 1, vectors.shape[1]):
                raise InvalidInputError(
                    f"dimensions must be an integer from 1 to {vectors.shape[1]} (this model's size), got {dimensions!r}."
                )
            vectors = l2_normalize(vectors[:, :dimensions])
        return vectors

    def _run(self, rows: list[list[int]]) -> np.ndarray:
        """One onnxruntime run over right-padded rows -> pooled ``[rows, dim]``."""
        feeds, mask = padded_feeds(rows, self._inputs, self._pad)
        (out,) = run_session(self._session, feeds, [self._output], what="sentence encoder")
        if self.pooling is None:
            return np.asarray(out, dtype=np.float32)
        return pool(np.asarray(out), mask, self.pooling)  # out: [batch, seq, hidden]

    def __repr__(self) -> str:
        pooling = "+".join(self.pooling) if self.pooling else "in-graph"
        return (
            f"OnnxEmbedder(model={self.name!r}, pooling={pooling!r}, normalize={self.normalize}, "
            f"max_seq_length={self.max_seq_length})"
        )


def _check_texts(texts: Any) -> list[str]:
    if isinstance(texts, (str, bytes)) or not isinstance(texts, Sequence):
        raise InvalidInputError(
            f"texts must be a str or a list of str, got {type(texts).__name__}."
            + (" Decode bytes first (b.decode('utf-8'))." if isinstance(texts, bytes) else "")
        )
    if len(texts) == 0:
        raise InvalidInputError("texts is an empty list: give at least one text to embed.")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise InvalidInputError(f"texts[{i}] is of type {type(text).__name__}, not str: pass every text as a str.")
    return list(texts)


def _check_ids(token_ids: Any, vocab: int, limit: int) -> list[list[int]]:
    if isinstance(token_ids, (str, bytes)) or not isinstance(token_ids, Sequence) or len(token_ids) == 0:
        raise InvalidInputError("token_ids must be a non-empty list of id lists (from tokenize()).")
    rows = []
    for i, row in enumerate(token_ids):
        if isinstance(row, (str, bytes)) or not isinstance(row, Sequence) or len(row) == 0:
            raise InvalidInputError(f"token_ids[{i}] must be a non-empty list of token ids.")
        if not all(isinstance(t, (int, np.integer)) and not isinstance(t, bool) for t in row):
            raise InvalidInputError(f"token_ids[{i}] holds something that is not an integer token id.")
        if len(row) > limit:
            raise PromptTooLongError(
                f"token_ids[{i}] has {len(row)} tokens, more than the model's max_seq_length of {limit}."
            )
        bad = [int(t) for t in row if not 0 <= t < vocab]
        if bad:
            raise InvalidInputError(f"token_ids[{i}] holds id {bad[0]}, outside the vocabulary (0..{vocab - 1}).")
        rows.append([int(t) for t in row])
    return rows
