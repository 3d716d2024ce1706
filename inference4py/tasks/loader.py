"""One loader for the generative task classes: folder -> pipeline -> tokenizer -> runtime -> defaults -> planner.

:class:`GenerativeTask` assembles :class:`~inference4py.tasks.text_generation.OnnxTextGenerator`,
the encoder-decoder tasks (:class:`~inference4py.tasks.seq2seq_base.Seq2SeqTask`) and
:class:`~inference4py.tasks.vision_language.VisionLanguageModel` the same way:

1. the pipeline description of the folder (``load_pipeline``) and its config.json;
2. the tokenizer (``load_tokenizer``);
3. the runtime the class runs (``_open_runtime``);
4. the folder's generation defaults (generation_config.json, the description's), what the class
   adds to them (``_adjust_defaults``), and the tokenizer's EOS when the folder names none;
5. the :class:`~inference4py.tasks.base.CallPlanner` over those defaults and the builder's options,
   with the context the class reads (``_context``).

A class says only what differs by overriding those hooks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from inference4py.engine.pipeline import PipelineSpec, load_pipeline, read_model_config
from inference4py.engine.sessions import SessionOptions
from inference4py.errors import ConfigurationError
from inference4py.generation.config import GenerationConfig
from inference4py.tasks.base import CallPlanner, ClosableTask, GenerationBuilder, resolve_generation_defaults
from inference4py.tokenization import Tokenizer, load_tokenizer

__all__ = ["GenerativeTask"]

R = TypeVar("R")
T = TypeVar("T", bound="GenerativeTask[Any]")


class GenerativeTask(ClosableTask, Generic[R]):
    """A generative task class loaded from a model folder and a builder (see the module's steps).

    ``R`` is the runtime the class runs.  Subclasses extend ``__init__`` with what only they keep.
    """

    #: Whether the folder's ``max_length`` counts the prompt (decoder-only) or not (an encoder's input).
    _total_counts_prompt: ClassVar[bool] = True

    def __init__(self, folder: Path, builder: GenerationBuilder[Any]) -> None:
        self.folder = Path(folder)
        self._builder_repr = repr(builder)
        spec = self._load_pipeline()
        config = self._model_config()
        self.tokenizer: Tokenizer = load_tokenizer(self.folder)
        self._runtime: R = self._open_runtime(spec, config, builder.session_options())
        defaults, totals = resolve_generation_defaults(self.folder, spec)
        defaults = self._adjust_defaults(defaults, config)
        if not defaults.eos_token_id and self.tokenizer.eos_token_id is not None:
            defaults = defaults.replace(eos_token_id=(self.tokenizer.eos_token_id,))
        self._planner = CallPlanner(
            defaults,
            totals,
            builder.generation_overrides(),
            extra_eos=builder._eos,
            context=self._context(config),
            total_counts_prompt=self._total_counts_prompt,
        )
        self._processors = tuple(builder._processors)

    @classmethod
    def _from_builder(cls: type[T], builder: Any) -> T:
        return cls(builder.resolve_folder(), builder)

    # ------------------------------------------------------------------ what a class says
    def _load_pipeline(self) -> PipelineSpec | None:
        """The folder's pipeline description (None where the class reads its layout another way)."""
        return load_pipeline(self.folder)

    def _model_config(self) -> dict[str, Any]:
        """The folder's config.json (empty when absent)."""
        return read_model_config(self.folder)

    def _open_runtime(self, spec: PipelineSpec | None, config: dict[str, Any], options: SessionOptions) -> R:
        """The sessions this class runs (the tokenizer is loaded by now)."""
        raise NotImplementedError

    def _described(self, spec: PipelineSpec | None) -> PipelineSpec:
        """``spec`` where the class runs a pipeline description (the default ``_load_pipeline`` always gives one)."""
        if spec is None:
            raise ConfigurationError(f"{type(self).__name__} runs a pipeline description; {self.folder} gave none.")
        return spec

    def _adjust_defaults(self, defaults: GenerationConfig, config: dict[str, Any]) -> GenerationConfig:
        """What the class adds to the folder's generation defaults (the tokenizer's EOS comes after)."""
        return defaults

    def _context(self, config: dict[str, Any]) -> int | None:
        """The positions the planner may fill (None: no limit known)."""
        return None

    # ------------------------------------------------------------------ shared
    @property
    def generation_config(self) -> GenerationConfig:
        """The defaults every call starts from (folder + builder options)."""
        return self._planner.base

    def _repr_fields(self) -> str:
        """More ``name=value, `` of the class for ``__repr__``, between the folder and the builder."""
        return ""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(folder={str(self.folder)!r}, {self._repr_fields()}builder={self._builder_repr})"

    def _release(self) -> None:
        self._runtime = None  # type: ignore[assignment]  # closed: every call checks _check_open() first
