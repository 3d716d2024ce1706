"""What the one-pass encoder tasks share (``OnnxEmbedder``, ``OnnxReranker``).

:class:`EncoderTask` is their one loader: folder -> graph -> settings -> tokenizer -> session ->
the class's checks and fields, each step a hook the class overrides only where it differs. Below it:
the graph of a folder, its tokenizer.json, rows of token ids as one right-padded batch of the
graph's inputs, and rows run longest first in such batches.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import numpy as np

from inference4py.engine.sessions import TensorInfo, create_session, graph_inputs, graph_outputs
from inference4py.errors import ConfigurationError, InvalidInputError, ModelFilesMissingError, UnsupportedModelError
from inference4py.tasks.base import ClosableTask, ModelSourceBuilder

if TYPE_CHECKING:
    from inference4py.tokenization.fast import FastTokenizer

__all__ = [
    "DEFAULT_BATCH",
    "ENCODER_INPUTS",
    "EncoderBuilder",
    "EncoderParts",
    "EncoderTask",
    "encoder_graph",
    "fast_tokenizer",
    "int_in",
    "padded_feeds",
    "takes_encoder_inputs",
]

E = TypeVar("E", bound="EncoderTask")
EB = TypeVar("EB", bound="EncoderBuilder")

#: Rows per onnxruntime run when the builder sets none.
DEFAULT_BATCH = 32
Row = TypeVar("Row")

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


def int_in(value: Any, low: int, high: int | None = None) -> bool:
    """Whether ``value`` is an int (not a bool) from ``low`` to ``high`` (inclusive; None: no upper bound)."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value and (high is None or value <= high)


class EncoderBuilder(ModelSourceBuilder):
    """What the encoder tasks' builders share beside the model source: rows per onnxruntime run."""

    def __init__(self, *, preset: str | None = None, model_id: str | None = None) -> None:
        super().__init__(preset=preset, model_id=model_id)
        self._batch_size = DEFAULT_BATCH

    def batch_size(self: EB, n: int) -> EB:
        """Rows (texts, pairs) per onnxruntime run (default 32); the results do not depend on it."""
        if not int_in(n, 1):
            raise ConfigurationError(f"batch_size must be an integer >= 1, got {n!r}.")
        self._batch_size = n
        return self

    def _batch_parts(self) -> list[str]:
        """``batch_size=n`` for ``__repr__`` when it is not the default."""
        return [f"batch_size={self._batch_size}"] if self._batch_size != DEFAULT_BATCH else []


@dataclass(frozen=True)
class EncoderParts:
    """What the loader opened for a class's ``_assemble``: the folder, its graph file, the session, the
    tokenizer and the graph's outputs."""

    folder: Path
    graph: Path
    session: Any
    tokenizer: FastTokenizer
    outputs: Mapping[str, TensorInfo]


class EncoderTask(ClosableTask):
    """A one-pass encoder task loaded from a model folder and a builder.

    ``_from_builder`` does the steps every encoder task takes: the folder, its graph
    (``_find_graph``), what the folder's own files say (``_read_settings``), the tokenizer.json
    tokenizer, the session, a check that the graph takes only :data:`ENCODER_INPUTS`
    (``_check_graph`` says what else the class needs of it), then the object (``_assemble``).
    The shared fields are ``folder``, ``name``, ``batch_size`` and the session's inputs, vocabulary
    size and pad id; :meth:`_run_longest_first` runs rows in padded batches.
    """

    #: What the graph is, in messages ("sentence encoder").
    _encoder_kind: ClassVar[str] = "encoder"
    #: The end of the message when the graph's inputs are not an encoder's: which class to use instead.
    _other_tasks: ClassVar[str] = ""

    def __init__(self, folder: Path, session: Any, tokenizer: Any, *, batch_size: int, name: str | None) -> None:
        self.folder = folder
        self.name = name or folder.name
        self.batch_size = batch_size
        self._session = session
        self._inputs = graph_inputs(session)
        self._vocab = tokenizer.vocab_size
        self._pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0

    @classmethod
    def _from_builder(cls: type[E], builder: Any) -> E:
        folder = builder.resolve_folder()
        graph = cls._find_graph(folder, builder._variant)
        settings = cls._read_settings(folder)
        tokenizer = fast_tokenizer(folder, cls.__name__)
        session = create_session(graph, builder.session_options())
        parts = EncoderParts(folder, graph, session, tokenizer, graph_outputs(session))
        cls._check_graph(graph.name, graph_inputs(session), parts.outputs)
        return cls._assemble(parts, builder, settings)

    # ------------------------------------------------------------------ what a class says
    @classmethod
    def _find_graph(cls, folder: Path, variant: str | None) -> Path:
        """The graph file of the folder (``model.onnx`` or its variant)."""
        raise NotImplementedError

    @classmethod
    def _read_settings(cls, folder: Path) -> Any:
        """What the folder's own files say that the class needs (checked before the session opens)."""
        return None

    @classmethod
    def _check_graph(cls, graph: str, inputs: Mapping[str, TensorInfo], outputs: Mapping[str, TensorInfo]) -> None:
        """Raises UnsupportedModelError where the graph is not one this class runs.

        The default refuses a graph without ``input_ids`` or with inputs not in :data:`ENCODER_INPUTS`.
        """
        if not takes_encoder_inputs(inputs):
            raise UnsupportedModelError(
                f"{graph} takes {', '.join(inputs)}; a {cls._encoder_kind} takes input_ids and optionally "
                f"attention_mask, token_type_ids, position_ids. {cls._other_tasks}"
            )

    @classmethod
    def _assemble(cls: type[E], parts: EncoderParts, builder: Any, settings: Any) -> E:
        """The object, from the loaded parts, the builder's options and the folder's settings."""
        raise NotImplementedError

    # ------------------------------------------------------------------ shared
    def _run_longest_first(
        self,
        rows: Sequence[Row],
        lengths: Sequence[int],
        batch_size: int | None,
        run: Callable[[list[Row]], np.ndarray],
    ) -> np.ndarray:
        """``run`` over the rows longest first, in batches of ``batch_size`` (None: the builder's),
        its float32 results put back in the rows' order (axis 0). Less padding per run; padding is
        masked, so a row's result does not depend on its batch.

        Raises:
            InvalidInputError: ``batch_size`` is not an integer >= 1.
        """
        size = batch_size if batch_size is not None else self.batch_size
        if not int_in(size, 1):
            raise InvalidInputError(f"batch_size must be an integer >= 1, got {size!r}.")
        if not rows:
            return np.zeros(0, dtype=np.float32)
        order = sorted(range(len(rows)), key=lambda i: -lengths[i])
        done = np.concatenate([run([rows[i] for i in order[s : s + size]]) for s in range(0, len(order), size)])
        out = np.empty(done.shape, dtype=np.float32)
        out[order] = done
        return out

    def _release(self) -> None:
        self._session = None


def takes_encoder_inputs(inputs: Mapping[str, TensorInfo]) -> bool:
    """Whether a graph takes ``input_ids`` and nothing outside :data:`ENCODER_INPUTS`."""
    return "input_ids" in inputs and not set(inputs) - ENCODER_INPUTS
