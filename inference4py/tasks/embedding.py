"""OnnxEmbedder: sentence embeddings from a sentence-transformers model exported to ONNX.

One pass, no generation loop: tokenize (special tokens added, truncated to the model's
``max_seq_length``), run the encoder on a right-padded batch with its attention mask, pool the
token vectors, L2-normalize when the model says so.  Everything comes from the folder, the way
``SentenceTransformer(folder)`` reads it:

- the graph: ``model.onnx`` or ``onnx/model.onnx`` (``model_<variant>.onnx`` with ``variant``);
  its ``last_hidden_state`` (or ``token_embeddings``) output is pooled here, a
  ``sentence_embedding`` output is taken as already pooled;
- ``modules.json``: the modules in order -- Transformer, Pooling, optionally Normalize;
- the Pooling module's ``config.json`` (``1_Pooling/config.json``): ``pooling_mode`` (current
  format: a name or a list) or the ``pooling_mode_*`` booleans (older format), several modes
  concatenated in sentence-transformers' order;
- ``sentence_bert_config.json``: ``max_seq_length`` (else the tokenizer's ``model_max_length``,
  else ``max_position_embeddings``) and ``do_lower_case``;
- the tokenizer from ``tokenizer.json`` (:func:`inference4py.tokenization.load_tokenizer`).

A folder without ``modules.json`` (a bare ONNX export of an encoder) gets mean pooling and no
normalization unless the builder says otherwise.  Texts are tokenized as given: sentence-transformers
before 5.x stripped surrounding whitespace first (a difference only for tokenizers that keep spaces).

Example:
    >>> from inference4py import OnnxEmbedder
    >>> with OnnxEmbedder.allMiniLML6V2().build() as embedder:   # doctest: +SKIP
    ...     vectors = embedder.embed(["A cat sits on the mat.", "A dog plays in the garden."])
    >>> vectors.shape                                                 # doctest: +SKIP
    (2, 384)
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from inference4py.engine.sessions import SessionOptions, create_session, graph_inputs, graph_outputs, run_session
from inference4py.errors import (
    ConfigurationError,
    InvalidInputError,
    ModelFilesMissingError,
    ModelLoadError,
    PromptTooLongError,
    UnsupportedModelError,
)
from inference4py.tasks.base import ClosableTask

__all__ = ["OnnxEmbedder", "EmbedderBuilder", "POOLING_MODES", "is_embedding_model"]

_log = logging.getLogger("inference4py.embedding")

#: Pooling modes, in the order sentence-transformers concatenates them when several are on.
POOLING_MODES: tuple[str, ...] = ("cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
# the older pooling config's booleans -> mode names
_LEGACY_KEYS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
_POOLED_OUTPUT = "sentence_embedding"
_TOKEN_OUTPUTS = ("last_hidden_state", "token_embeddings")
_KNOWN_INPUTS = frozenset({"input_ids", "attention_mask", "token_type_ids", "position_ids"})
_DEFAULT_BATCH = 32

B = TypeVar("B", bound="EmbedderBuilder")


# ----------------------------------------------------------------------------------- folder config
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
            f"{where} asks for pooling {list(unknown or modes)}; OnnxEmbedder pools with {', '.join(POOLING_MODES)}. "
            "Set a supported mode in that file, or choose one with .pooling(...) on the builder."
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

    Raises:
        ModelFilesMissingError: neither exists; the message lists the ONNX files that do.
    """
    name = "model.onnx" if variant in (None, "", "fp32") else f"model_{variant}.onnx"
    for candidate in (folder / name, folder / "onnx" / name):
        if candidate.is_file():
            return candidate
    found = sorted(p.relative_to(folder).as_posix() for p in [*folder.glob("*.onnx"), *folder.glob("onnx/*.onnx")])
    listing = f"ONNX files found: {', '.join(found)}." if found else "The folder has no .onnx file at all."
    raise ModelFilesMissingError(
        f"No {name} in {folder} nor in {folder / 'onnx'}. {listing} Pass the folder of a sentence-transformers "
        "model exported to ONNX (e.g. `optimum-cli export onnx --model sentence-transformers/all-MiniLM-L6-v2 "
        "--task feature-extraction DIR`, then copy modules.json, sentence_bert_config.json and 1_Pooling/ into DIR)"
        + (", or choose an existing precision with variant=..." if found else "")
        + ".",
        [name],
    )


def is_embedding_model(folder: str | os.PathLike[str]) -> bool:
    """Whether a local folder holds a sentence encoder: sentence-transformers files, or a
    ``model.onnx`` whose outputs are token or sentence embeddings (and no logits).

    Reads file names and the graph's header only (no session is created).
    """
    from inference4py.engine._graph_io import read_graph_io

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
    return "logits" not in outputs and bool(outputs & {_POOLED_OUTPUT, *_TOKEN_OUTPUTS})


# ----------------------------------------------------------------------------------- pooling
def pool(hidden: np.ndarray, mask: np.ndarray, modes: Sequence[str]) -> np.ndarray:
    """Pool right-padded token vectors into one vector per row, modes concatenated in the given order.

    Args:
        hidden: ``[batch, seq, hidden]`` token vectors.
        mask: ``[batch, seq]`` attention mask (1 = token, 0 = padding), padding on the right.
        modes: Names from :data:`POOLING_MODES`.

    Returns:
        ``[batch, hidden * len(modes)]`` float32.
    """
    hidden = hidden.astype(np.float32, copy=False)
    weights = mask.astype(np.float32)[:, :, None]  # [batch, seq, 1]
    counts = weights.sum(axis=1)  # [batch, 1]
    lengths = mask.astype(np.int64).sum(axis=1)
    out = []
    for mode in modes:
        if mode == "cls":
            out.append(hidden[:, 0])
        elif mode == "max":
            out.append(np.where(weights > 0, hidden, -np.inf).max(axis=1))
        elif mode == "mean":
            out.append((hidden * weights).sum(axis=1) / np.maximum(counts, 1e-9))
        elif mode == "mean_sqrt_len_tokens":
            out.append((hidden * weights).sum(axis=1) / np.sqrt(np.maximum(counts, 1e-9)))
        elif mode == "weightedmean":
            position = np.arange(1, hidden.shape[1] + 1, dtype=np.float32)[None, :, None]
            w = weights * position
            out.append((hidden * w).sum(axis=1) / np.maximum(w.sum(axis=1), 1e-9))
        elif mode == "lasttoken":
            out.append(hidden[np.arange(hidden.shape[0]), np.maximum(lengths - 1, 0)])
        else:  # checked where modes are set
            raise ConfigurationError(f"Unknown pooling mode {mode!r}; choose from {', '.join(POOLING_MODES)}.")
    return np.concatenate(out, axis=1).astype(np.float32, copy=False)


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Each row divided by its L2 norm (rows of zeros stay zero), as torch's ``F.normalize``."""
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    return (vectors / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)


def _check_modes(modes: str | Sequence[str]) -> tuple[str, ...]:
    chosen = (modes,) if isinstance(modes, str) else tuple(modes)
    bad = [m for m in chosen if m not in POOLING_MODES]
    if bad or not chosen:
        raise ConfigurationError(
            f"pooling {list(bad or chosen)} is not supported: choose one or more of {', '.join(POOLING_MODES)}."
        )
    return chosen


# ----------------------------------------------------------------------------------- builder
class EmbedderBuilder:
    """Chainable, validated options of an :class:`OnnxEmbedder`; each setter returns the builder.

    Options not set come from the model folder (pooling, normalization, max_seq_length).
    """

    def __init__(self, *, preset: str | None = None, model_id: str | None = None) -> None:
        self._preset = preset
        self._model_id = model_id
        self._model_path: str | None = None
        self._revision: str | None = None
        self._token: str | bool | None = None
        self._local_files_only = False
        self._variant: str | None = None
        self._providers: tuple[str, ...] | None = None
        self._threads: int | None = None
        self._pooling: tuple[str, ...] | None = None
        self._normalize: bool | None = None
        self._max_seq_length: int | None = None
        self._truncate = True
        self._batch_size = _DEFAULT_BATCH

    # ------------------------------------------------------------------ where the model comes from
    def model_id(self: B, model_id: str) -> B:
        """Hugging Face repo id to download (``"org/name"``)."""
        if not isinstance(model_id, str) or not model_id.strip():
            raise ConfigurationError(
                "model_id must be a non-empty string like 'sentence-transformers/all-MiniLM-L6-v2'."
            )
        self._model_id, self._model_path = model_id, None
        return self

    def model_path(self: B, path: str | os.PathLike[str]) -> B:
        """Local model folder (no download)."""
        self._model_path, self._model_id = os.fspath(path), None
        return self

    def revision(self: B, revision: str) -> B:
        """Branch, tag or commit of the hub repo."""
        self._revision = revision
        return self

    def token(self: B, token: str | bool) -> B:
        """Hugging Face token for private or gated repos (default: HF_TOKEN / the saved login)."""
        self._token = token
        return self

    def local_files_only(self: B, value: bool = True) -> B:
        """Never contact the hub; use the local cache only."""
        self._local_files_only = bool(value)
        return self

    def variant(self: B, variant: str) -> B:
        """Which precision of the graph to use when the repo has several (``model_<variant>.onnx``, e.g. "quantized")."""
        if not isinstance(variant, str) or not variant:
            raise ConfigurationError("variant must be a non-empty string such as 'quantized' or 'fp16'.")
        self._variant = variant
        return self

    def providers(self: B, providers: Sequence[str]) -> B:
        """onnxruntime execution providers in priority order."""
        if isinstance(providers, str):
            providers = [providers]
        self._providers = tuple(providers)
        SessionOptions(providers=self._providers)  # validates now
        return self

    def intra_op_threads(self: B, threads: int) -> B:
        """Threads onnxruntime may use inside one operator."""
        SessionOptions(intra_op_threads=threads)
        self._threads = threads
        return self

    # ------------------------------------------------------------------ embedding options
    def pooling(self: B, modes: str | Sequence[str]) -> B:
        """Pool with these modes instead of the folder's (several: concatenated). See :data:`POOLING_MODES`."""
        self._pooling = _check_modes(modes)
        return self

    def normalize(self: B, value: bool = True) -> B:
        """L2-normalize the vectors (default: when the folder's modules.json has a Normalize module)."""
        self._normalize = bool(value)
        return self

    def max_seq_length(self: B, n: int) -> B:
        """Tokens per text, special tokens included (default: the folder's max_seq_length)."""
        if not isinstance(n, int) or isinstance(n, bool) or n < 2:
            raise ConfigurationError(f"max_seq_length must be an integer >= 2, got {n!r}.")
        self._max_seq_length = n
        return self

    def truncate(self: B, value: bool = True) -> B:
        """Cut texts longer than max_seq_length (default); False makes them an error instead."""
        self._truncate = bool(value)
        return self

    def batch_size(self: B, n: int) -> B:
        """Texts per onnxruntime run (default 32)."""
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ConfigurationError(f"batch_size must be an integer >= 1, got {n!r}.")
        self._batch_size = n
        return self

    # ------------------------------------------------------------------ build
    def resolve_folder(self) -> Path:
        """The local model folder (downloading it if needed)."""
        from inference4py import hub

        if self._model_path is not None:
            return hub.local_model_folder(self._model_path)
        if self._model_id is None:
            raise ConfigurationError(
                "No model chosen: call .model_id('org/name') or .model_path('folder') before build()."
            )
        return hub.resolve_model_folder(
            self._model_id,
            revision=self._revision,
            token=self._token,
            local_files_only=self._local_files_only,
            variant=self._variant,
        )

    def build(self) -> OnnxEmbedder:
        """Load the model and return the embedder."""
        return OnnxEmbedder._from_builder(self)

    def __repr__(self) -> str:
        parts = [f"preset={self._preset!r}"] if self._preset else []
        if self._model_id:
            parts.append(f"model_id={self._model_id!r}")
        if self._model_path:
            parts.append(f"model_path={self._model_path!r}")
        for name in ("variant", "pooling", "normalize", "max_seq_length"):
            value = getattr(self, "_" + name)
            if value is not None:
                parts.append(f"{name}={value!r}")
        if not self._truncate:
            parts.append("truncate=False")
        if self._batch_size != _DEFAULT_BATCH:
            parts.append(f"batch_size={self._batch_size}")
        return f"{type(self).__name__}({', '.join(parts)})"


# ----------------------------------------------------------------------------------- the task
class OnnxEmbedder(ClosableTask):
    """Sentence embeddings from an ONNX sentence encoder (sentence-transformers layout).

    ``embed(texts)`` returns one float32 vector per text, equal to sentence-transformers'
    ``encode()`` on the same model (pooling and normalization read from the folder).

    Example:
        >>> with OnnxEmbedder.allMiniLML6V2().build() as embedder:       # doctest: +SKIP
        ...     a, b = embedder.embed(["How old are you?", "What is your age?"])
        ...     print(float(a @ b))   # cosine similarity: the vectors are normalized
    """

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
        self.folder = folder
        self.name = name or folder.name
        self.pooling = pooling  # None: the graph's sentence_embedding output is already pooled
        self.normalize = normalize
        self.max_seq_length = max_seq_length
        self.truncate = truncate
        self.batch_size = batch_size
        self._lower_case = lower_case
        self._session = session
        self._tokenizer = tokenizer
        inputs = graph_inputs(session)
        outputs = graph_outputs(session)
        self._inputs = inputs
        self._output = _POOLED_OUTPUT if pooling is None else next(n for n in _TOKEN_OUTPUTS if n in outputs)
        self._vocab = tokenizer.vocab_size
        self._pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
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
    @classmethod
    def builder(cls) -> EmbedderBuilder:
        """A builder with no model chosen: call ``.model_path(...)`` or ``.model_id(...)``."""
        return EmbedderBuilder()

    @classmethod
    def allMiniLML6V2(cls) -> EmbedderBuilder:  # noqa: N802
        """sentence-transformers/all-MiniLM-L6-v2: 384 dimensions, mean pooling, normalized (its onnx/model.onnx)."""
        return EmbedderBuilder(preset="allMiniLML6V2", model_id="sentence-transformers/all-MiniLM-L6-v2")

    @classmethod
    def bgeSmallEnV15(cls) -> EmbedderBuilder:  # noqa: N802
        """BAAI/bge-small-en-v1.5: 384 dimensions, CLS pooling, normalized (its onnx/model.onnx)."""
        return EmbedderBuilder(preset="bgeSmallEnV15", model_id="BAAI/bge-small-en-v1.5")

    @classmethod
    def _from_builder(cls, builder: EmbedderBuilder) -> OnnxEmbedder:
        from inference4py.tokenization import load_tokenizer
        from inference4py.tokenization.fast import _FastTokenizer

        folder = builder.resolve_folder()
        graph = find_graph(folder, builder._variant)
        config = read_sentence_config(folder)
        tokenizer = load_tokenizer(folder)
        if not isinstance(tokenizer, _FastTokenizer):
            raise UnsupportedModelError(
                f"{folder} has no tokenizer.json; OnnxEmbedder reads the tokenizer from tokenizer.json. "
                "Save the model's tokenizer with a recent transformers (tokenizer.save_pretrained) into the folder."
            )
        session = create_session(graph, SessionOptions(providers=builder._providers, intra_op_threads=builder._threads))
        inputs, outputs = graph_inputs(session), graph_outputs(session)
        if "input_ids" not in inputs or set(inputs) - _KNOWN_INPUTS:
            raise UnsupportedModelError(
                f"{graph.name} takes {', '.join(inputs)}; a sentence encoder takes input_ids and optionally "
                f"attention_mask, token_type_ids, position_ids. For text generation use OnnxTextGenerator."
            )
        pooled = _POOLED_OUTPUT in outputs
        if not pooled and not any(n in outputs for n in _TOKEN_OUTPUTS):
            raise UnsupportedModelError(
                f"{graph.name} outputs {', '.join(outputs)}; OnnxEmbedder needs last_hidden_state (or "
                "token_embeddings, or an already pooled sentence_embedding). "
                + ("For text generation use OnnxTextGenerator." if "logits" in outputs else "")
            )
        if config.unsupported and not pooled:
            raise UnsupportedModelError(
                f"modules.json of {folder} lists module(s) OnnxEmbedder does not run: {', '.join(config.unsupported)}. "
                "Export the whole sentence-transformers model to one ONNX graph with a sentence_embedding output "
                "(e.g. optimum's sentence-transformers export) and use that folder."
            )
        if builder._pooling is not None:
            pooling: tuple[str, ...] | None = builder._pooling
        elif pooled:
            pooling = None
        else:
            pooling = config.pooling or ("mean",)
            if config.pooling is None:
                _log.info("%s has no sentence-transformers pooling config: mean pooling", folder)
        if pooling is not None and not any(n in outputs for n in _TOKEN_OUTPUTS):
            raise ConfigurationError(
                f"{graph.name} outputs only pooled sentence embeddings: .pooling(...) cannot apply; remove it."
            )
        normalize = builder._normalize if builder._normalize is not None else config.normalize
        return cls(
            folder,
            session,
            tokenizer,
            pooling=pooling,
            normalize=normalize,
            max_seq_length=builder._max_seq_length or _max_length(folder, config, tokenizer),
            truncate=builder._truncate,
            batch_size=builder._batch_size,
            lower_case=config.do_lower_case,
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
        size = batch_size if batch_size is not None else self.batch_size
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise InvalidInputError(f"batch_size must be an integer >= 1, got {size!r}.")
        # longest first, as sentence-transformers batches: less padding per run
        order = sorted(range(len(rows)), key=lambda i: -len(rows[i]))
        pieces: list[np.ndarray] = []
        for start in range(0, len(order), size):
            pieces.append(self._run([rows[i] for i in order[start : start + size]]))
        vectors = np.empty((len(rows), pieces[0].shape[1]), dtype=np.float32)
        vectors[order] = np.concatenate(pieces)
        if self.normalize:
            vectors = l2_normalize(vectors)
        if dimensions is not None:
            if (
                not isinstance(dimensions, int)
                or isinstance(dimensions, bool)
                or not 1 <= dimensions <= vectors.shape[1]
            ):
                raise InvalidInputError(
                    f"dimensions must be an integer from 1 to {vectors.shape[1]} (this model's size), got {dimensions!r}."
                )
            vectors = l2_normalize(vectors[:, :dimensions])
        return vectors

    def _run(self, rows: list[list[int]]) -> np.ndarray:
        """One onnxruntime run over right-padded rows -> pooled ``[rows, dim]``."""
        width = max(len(r) for r in rows)
        ids = np.full((len(rows), width), self._pad, dtype=np.int64)  # [batch, seq]
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = row
            mask[i, : len(row)] = 1
        feeds: dict[str, np.ndarray] = {"input_ids": ids}
        if "attention_mask" in self._inputs:
            feeds["attention_mask"] = mask
        if "token_type_ids" in self._inputs:
            feeds["token_type_ids"] = np.zeros_like(ids)
        if "position_ids" in self._inputs:
            feeds["position_ids"] = np.broadcast_to(np.arange(width, dtype=np.int64), ids.shape).copy()
        feeds = {k: v.astype(self._inputs[k].dtype, copy=False) for k, v in feeds.items()}
        (out,) = run_session(self._session, feeds, [self._output], what="sentence encoder")
        if self.pooling is None:
            return np.asarray(out, dtype=np.float32)
        return pool(np.asarray(out), mask, self.pooling)  # out: [batch, seq, hidden]

    def _release(self) -> None:
        self._session = None

    def __repr__(self) -> str:
        pooling = "+".join(self.pooling) if self.pooling else "in-graph"
        return (
            f"OnnxEmbedder(model={self.name!r}, pooling={pooling!r}, normalize={self.normalize}, "
            f"max_seq_length={self.max_seq_length})"
        )


def _max_length(folder: Path, config: SentenceConfig, tokenizer: Any) -> int:
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
        "model_max_length in tokenizer_config.json, no max_position_embeddings in config.json): set one with "
        ".max_seq_length(n) on the builder."
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
