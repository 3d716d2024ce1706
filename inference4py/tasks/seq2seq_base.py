"""What the encoder-decoder task classes share (T5, BART, Marian, CoEdIT, text-to-SQL).

The encoder runs once per call; the decoder loop is the same ``generate_step``
as decoder-only models, over a :class:`~inference4py.engine.seq2seq.Seq2SeqState`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from inference4py.engine.pipeline import PipelineSpec
from inference4py.engine.seq2seq import Seq2SeqRuntime
from inference4py.engine.sessions import SessionOptions
from inference4py.errors import ConfigurationError, InvalidInputError
from inference4py.generation.batch import check_batchable, right_pad, row_results, run_rows
from inference4py.generation.config import GenerationConfig
from inference4py.generation.generate import collect, generate_chunks
from inference4py.generation.processors import make_logits_processors
from inference4py.generation.result import Candidate, GenerationChunk, GenerationResult
from inference4py.generation.search import new_chooser
from inference4py.tasks.base import GenerationBuilder, renamed
from inference4py.tasks.loader import GenerativeTask
from inference4py.tasks.options import RequestOptions
from inference4py.tasks.output_control import OutputControl, output_control
from inference4py.tasks.presets import Preset, PresetTable, preset_builder

__all__ = ["Seq2SeqBuilder", "Seq2SeqTask", "TextOutput"]

Source = str | Sequence[int]


class TextOutput(str):
    """A ``str`` (the generated text) that also carries its :class:`GenerationResult`.

    Convenience methods such as ``summarize`` return it, so ``print(bart.summarize(a))``
    works and ``bart.summarize(a, on_token=...).finish_reason`` too; the return type
    is the same whatever the arguments.
    """

    result: GenerationResult

    def __new__(cls, result: GenerationResult) -> TextOutput:
        obj = super().__new__(cls, result.text)
        obj.result = result
        return obj

    @property
    def text(self) -> str:
        return self.result.text

    @property
    def token_ids(self) -> tuple[int, ...]:
        return self.result.token_ids

    @property
    def finish_reason(self) -> str:
        return self.result.finish_reason

    @property
    def prompt_tokens(self) -> int:
        return self.result.prompt_tokens

    @property
    def generated_tokens(self) -> int:
        return self.result.generated_tokens

    @property
    def duration(self) -> float:
        return self.result.duration

    @property
    def time_to_first_token(self) -> float:
        return self.result.time_to_first_token

    @property
    def tokens_per_second(self) -> float:
        return self.result.tokens_per_second

    @property
    def candidates(self) -> tuple[Candidate, ...]:
        return self.result.candidates


class Seq2SeqBuilder(GenerationBuilder[Any]):
    """Builder options shared by the encoder-decoder task classes."""

    def __init__(self, *, preset: str | None = None, model_id: str | None = None, **preset_fields: Any) -> None:
        super().__init__(preset=preset, model_id=model_id, **preset_fields)
        self._truncate = False
        self._prompt_formatter: Callable[..., str] | None = preset_fields.get("prompt_formatter")

    def truncate(self, value: bool = True) -> Seq2SeqBuilder:
        """Cut inputs longer than the encoder's limit instead of raising PromptTooLongError."""
        self._truncate = bool(value)
        return self

    def prompt_formatter(self, fn: Callable[..., str]) -> Seq2SeqBuilder:
        """Replace the preset's prompt format: ``fn(text, **fields) -> str`` (see each class)."""
        if not callable(fn):
            raise ConfigurationError("prompt_formatter needs a callable returning the model input string.")
        self._prompt_formatter = fn
        return self


#: A builder of an encoder-decoder task with no model chosen (each class's presets are its own table).
SEQ2SEQ_BLANK = PresetTable(Seq2SeqBuilder, ())


class Seq2SeqTask(GenerativeTask[Seq2SeqRuntime]):
    """Generic encoder-decoder generation; subclasses add task-shaped methods and a table of presets."""

    Builder = Seq2SeqBuilder
    builder = SEQ2SEQ_BLANK.blank()
    _total_counts_prompt = False  # the folder's max_length counts the output only

    @classmethod
    def _preset(cls, name: str, model_id: str | None, **fields: Any) -> Seq2SeqBuilder:
        """A preset made on the spot (a Marian language pair: the CLI's and ``translate()``'s)."""
        return preset_builder(Seq2SeqBuilder, cls, Preset(name, model_id, "", fields))

    def __init__(self, folder: Path, builder: Seq2SeqBuilder) -> None:
        super().__init__(folder, builder)  # the loader's steps (tasks/loader.py)
        self._truncate = builder._truncate
        self._formatter = builder._prompt_formatter
        self._preset_fields = dict(builder._preset_fields)

    def _open_runtime(
        self, spec: PipelineSpec | None, config: dict[str, Any], options: SessionOptions
    ) -> Seq2SeqRuntime:
        return Seq2SeqRuntime(self._described(spec), config, options)

    def _adjust_defaults(self, defaults: GenerationConfig, config: dict[str, Any]) -> GenerationConfig:
        if defaults.decoder_start_token_id is not None:
            return defaults
        start = config.get("decoder_start_token_id", defaults.pad_token_id)
        if start is None:
            raise ConfigurationError(
                f"{self.folder} does not say which token starts the decoder (decoder_start_token_id in "
                "config.json / generation_config.json). Add it to generation_config.json."
            )
        return defaults.replace(decoder_start_token_id=start)

    def _context(self, config: dict[str, Any]) -> int | None:
        return self._runtime.max_target_positions

    @property
    def max_source_tokens(self) -> int | None:
        """The most source tokens the encoder accepts (None when the folder does not say)."""
        limit = self._runtime.max_source_positions
        return int(limit) if limit else None

    # ------------------------------------------------------------------ inputs
    def encode_source(self, source: Source) -> list[int]:
        """Encoder token ids for a text (as-is, no prompt format) or a list of ids."""
        if isinstance(source, str):
            if not source.strip():
                raise InvalidInputError("The input text is empty. Pass the text to process.")
            ids = self.tokenizer.encode(source)
        elif (
            isinstance(source, (list, tuple))
            and source
            and all(isinstance(t, int) and not isinstance(t, bool) for t in source)
        ):
            ids = list(source)
            vocab = self._runtime.vocab_size
            bad = [t for t in ids if t < 0 or (vocab is not None and t >= vocab)]
            if bad:
                raise InvalidInputError(
                    f"Token id(s) {bad[:5]} are outside the model's vocabulary (0..{(vocab or 0) - 1})."
                )
            return ids
        else:
            raise InvalidInputError(
                f"Unsupported input of type {type(source).__name__}: pass a non-empty str or a list of token ids."
            )
        limit = self.max_source_tokens
        if self._truncate and limit and len(ids) > limit:
            eos = self.tokenizer.eos_token_id
            ids = ids[: limit - 1] + [ids[-1]] if eos is not None and ids[-1] == eos else ids[:limit]
        return ids

    # ------------------------------------------------------------------ generation
    @staticmethod
    def _start_id(config: GenerationConfig) -> int:
        start = config.decoder_start_token_id
        if start is None:  # __init__ sets it from the folder or refuses the model
            raise ConfigurationError("decoder_start_token_id is not set: pass decoder_start_token_id=... .")
        return int(start)

    def _config_and_control(self, options: RequestOptions) -> tuple[GenerationConfig, OutputControl]:
        """The request's config and its output constraint (json_schema, regex, ...), checked before any token."""
        options.refuse_speculation(f"{type(self).__name__} (an encoder-decoder model)")
        given = options.output_options()
        control = output_control(given, template=None) if given else OutputControl()
        return self._planner.for_request(1, options), control

    def _chunks(
        self, source_ids: list[int], config: GenerationConfig, control: OutputControl
    ) -> Iterator[GenerationChunk]:
        state = self._runtime.new_state(np.array([source_ids], dtype=np.int64))
        start = [self._start_id(config)]
        extra = control.processors(self.tokenizer, config.eos_token_id, self._processors)
        return generate_chunks(state, start, config, self.tokenizer, extra_processors=extra)

    def generate_batch(
        self, sources: Sequence[Source], *, options: RequestOptions | None = None, **overrides: Any
    ) -> list[GenerationResult]:
        """Run several raw inputs at once (encoder inputs padded with a mask, one decoder pass per step)."""
        started = time.perf_counter()
        self._check_open()
        if not isinstance(sources, (list, tuple)) or not sources:
            raise InvalidInputError("generate_batch needs a non-empty list of inputs.")
        rows = [self.encode_source(s) for s in sources]
        config, control = self._config_and_control(RequestOptions.of_call(options, overrides))
        check_batchable(config)
        pad = next(int(c) for c in (config.pad_token_id, self.tokenizer.pad_token_id, 0) if c is not None)
        enc_ids, enc_mask = right_pad(rows, pad)
        state = self._runtime.new_state(enc_ids, enc_mask)
        start = [self._start_id(config)]
        choosers = [
            new_chooser(
                start,
                config,
                self.tokenizer,
                processors=make_logits_processors(
                    config,
                    prompt_length=1,
                    extra=control.processors(self.tokenizer, config.eos_token_id, self._processors),
                ),
            )
            for _ in rows
        ]
        run_rows(state, choosers, pad_id=pad)
        results = row_results(choosers, self.tokenizer, config, prompt_tokens=[len(r) for r in rows], started=started)
        return [control.finish(r) for r in results]

    def stream_chunks(
        self, source: Source, *, options: RequestOptions | None = None, **overrides: Any
    ) -> Iterator[GenerationChunk]:
        """Chunks (text, token id, finish reason) for a raw model input; options as :meth:`generate`'s."""
        self._check_open()
        request = RequestOptions.of_call(options, overrides)
        ids = self.encode_source(source)
        config, control = self._config_and_control(request)
        return self._chunks(ids, config, control)

    def request_chunks(self, source: Source, options: RequestOptions) -> Iterator[GenerationChunk]:
        """Deprecated: ``stream_chunks(source, options=options)``."""
        renamed("request_chunks(source, options)", "stream_chunks(source, options=options)")
        return self.stream_chunks(source, options=options)

    def generate(
        self,
        source: Source,
        on_token: Callable[[str], None] | None = None,
        *,
        options: RequestOptions | None = None,
        **overrides: Any,
    ) -> GenerationResult:
        """Run the model on a raw input (no prompt format is added) or on encoder token ids.

        Args:
            source: the exact encoder input text, or a list of encoder token ids used as-is.
            on_token: called with each piece of output text as soon as it is final.
            options: the call's options as one typed :class:`~inference4py.tasks.options.RequestOptions`;
                keywords given too replace its fields.
            **overrides: generation options for this call only.

        Raises:
            InvalidInputError: empty input. PromptTooLongError: input over the encoder's
            limit (use ``.truncate()`` on the builder to cut instead).
        """
        started = time.perf_counter()
        self._check_open()
        ids = self.encode_source(source)
        config, control = self._config_and_control(RequestOptions.of_call(options, overrides))
        chunks = self._chunks(ids, config, control)
        return collect(chunks, prompt_tokens=len(ids), started=started, on_token=on_token)

    def stream(self, source: Source, *, options: RequestOptions | None = None, **overrides: Any) -> Iterator[str]:
        """Yield the output text piece by piece."""
        for chunk in self.stream_chunks(source, options=options, **overrides):
            if chunk.text:
                yield chunk.text

    def _run_formatted(
        self,
        text: str,
        on_token: Callable[[str], None] | None,
        overrides: dict[str, Any],
        default_formatter: Callable[..., str] | None = None,
        **fields: Any,
    ) -> TextOutput:
        if not isinstance(text, str) or not text.strip():
            raise InvalidInputError("The input text is empty. Pass the text to process.")
        formatter = self._formatter or default_formatter
        prompt = formatter(text, **fields) if formatter else text
        return TextOutput(self.generate(prompt, on_token=on_token, **overrides))
