"""Task adapters: a batch of :class:`~inference4py.batch.inputs.InputRow` -> one result dict per row.

An adapter loads the model once and turns rows into results with the library's batched
generation (``generate_batch``); a row that cannot run (empty prompt, over-long prompt, malformed
messages) becomes an error row, and when a whole batch fails the rows are run one by one so one bad
row never fails its neighbours.

Seeds: with sampling on, row ``id`` of a job with seed ``S`` is sampled with
``row_seed(S, id) = int.from_bytes(sha256(f"{S}:{id}".encode()).digest()[:8], "big")``, with a
random stream of its own, so its text does not depend on the batch size or on which replica ran it.
Decoder rows are then decoded together by the library's scheduler (one sampler per request);
encoder-decoder rows run one at a time.  Greedy rows need no seed and run through ``generate_batch``.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inference4py.batch.inputs import InputRow
from inference4py.errors import AudioError, ConfigurationError, InvalidInputError, PromptTooLongError
from inference4py.generation.generate import collect
from inference4py.tasks.options import GENERATION_FIELDS, OUTPUT_FIELDS, RequestOptions

if TYPE_CHECKING:
    from inference4py.speech.options import TranscribeOptions

__all__ = ["TASKS", "RESULT_COLUMNS", "row_seed", "load_adapter", "TaskAdapter", "error_row", "transcribe_options"]

#: Tasks the batch runner runs.
TASKS = ("generate", "chat", "summarize", "translate", "transcribe")

#: The columns of every output row.
RESULT_COLUMNS = ("id", "text", "finish_reason", "prompt_tokens", "completion_tokens", "error")


def row_seed(seed: int, row_id: str) -> int:
    """The sampling seed of row ``row_id`` in a job seeded with ``seed`` (64 bits, same in every process)."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{row_id}".encode()).digest()[:8], "big")


def error_row(row_id: str, exc: BaseException | str) -> dict[str, Any]:
    """The result of a row that did not run: no text, the error's type and message."""
    message = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
    return {
        "id": row_id,
        "text": None,
        "finish_reason": None,
        "prompt_tokens": None,
        "completion_tokens": None,
        "error": message,
    }


def _ok_row(row_id: str, result: Any) -> dict[str, Any]:
    return {
        "id": row_id,
        "text": result.text,
        "finish_reason": result.finish_reason,
        "prompt_tokens": int(result.prompt_tokens),
        "completion_tokens": int(result.generated_tokens),
        "error": None,
    }


class TaskAdapter:
    """Runs one task's rows on one loaded model; call :meth:`run` per batch, :meth:`close` at the end."""

    task: str = ""

    def __init__(self, model: Any, *, seed: int | None, overrides: Mapping[str, Any]) -> None:
        self.model = model
        self.seed = seed
        self.overrides = dict(overrides)
        generation = {k: v for k, v in overrides.items() if k in GENERATION_FIELDS}
        self.config = RequestOptions.from_keywords(generation).apply(model.generation_config)  # the job's settings
        self.sampling = self.config.sampling

    def close(self) -> None:
        self.model.close()

    def run(self, rows: Sequence[InputRow]) -> list[dict[str, Any]]:
        """One result per row, in order; never raises for a bad row."""
        results: dict[str, dict[str, Any]] = {}
        ready: list[tuple[InputRow, Any]] = []
        for row in rows:
            try:
                ready.append((row, self.prepare(row.value)))
            except Exception as exc:  # a bad row is an error in its own row
                results[row.id] = error_row(row.id, exc)
        if self.sampling:
            self.run_sampled(ready, results)
        else:
            for group in self.groups(ready):
                self._batch(group, results)
        return [results[row.id] for row in rows]

    # ------------------------------------------------------------------ per task
    def prepare(self, value: Any) -> Any:
        """The model input of a row's value; raises for a bad row (before any batch runs)."""
        raise NotImplementedError

    def groups(self, ready: list[tuple[InputRow, Any]]) -> list[list[tuple[InputRow, Any]]]:
        """Rows that may share one ``generate_batch`` call (same generation settings alone)."""
        return [ready] if ready else []

    def call_batch(self, sources: list[Any], group: list[tuple[InputRow, Any]]) -> list[Any]:
        return list(self.model.generate_batch(sources, **self.overrides))

    def call_alone(self, source: Any, seed: int | None) -> Any:
        """One row alone, with its own seed (None: the job's)."""
        overrides = self.overrides if seed is None else {**self.overrides, "seed": seed}
        return self.model.generate(source, **overrides)

    def _row(self, row_id: str, result: Any) -> dict[str, Any]:
        return _ok_row(row_id, result)

    def run_sampled(self, ready: list[tuple[InputRow, Any]], results: dict[str, dict[str, Any]]) -> None:
        """Sampled rows, each with its own seed (here one at a time, as ``generate`` alone)."""
        for row, source in ready:
            results[row.id] = self._alone(row, source, seed=self._seed(row))

    # ------------------------------------------------------------------ shared
    def _seed(self, row: InputRow) -> int | None:
        return None if self.seed is None else row_seed(self.seed, row.id)

    def _batch(self, group: list[tuple[InputRow, Any]], results: dict[str, dict[str, Any]]) -> None:
        try:
            outputs = self.call_batch([source for _, source in group], group)
        except Exception:  # one bad row fails the batch: run each alone to find it
            for row, source in group:
                results[row.id] = self._alone(row, source, seed=None)
            return
        for (row, _), result in zip(group, outputs):
            results[row.id] = self._row(row.id, result)

    def _alone(self, row: InputRow, source: Any, *, seed: int | None) -> dict[str, Any]:
        try:
            return self._row(row.id, self.call_alone(source, seed))
        except Exception as exc:
            return error_row(row.id, exc)


class DecoderAdapter(TaskAdapter):
    """``generate`` (text prompts) and ``chat`` (message lists, or text as one user message).

    Every row runs on the library's continuous-batching scheduler
    (:class:`~inference4py.tasks.batched.BatchedTextGenerator`), greedy or sampled: each row has its
    own processors, sampler and seed, so its tokens are those of ``generate(prompt, seed=row_seed(...))``
    alone, whatever rows share its batch.
    """

    def __init__(self, model: Any, *, task: str, seed: int | None, overrides: Mapping[str, Any]) -> None:
        super().__init__(model, seed=seed, overrides=overrides)
        self.task = task
        self.options = RequestOptions.from_keywords(overrides)
        self._batched: Any = None  # the scheduler, made on first use

    def prepare(self, value: Any) -> Any:
        if value is None:
            raise InvalidInputError("The row has no input (the column is missing or null).")
        if self.task == "chat":
            if isinstance(value, str):
                value = [{"role": "user", "content": value}]
            if not isinstance(value, list) or not all(isinstance(m, Mapping) for m in value):
                raise InvalidInputError(
                    f"A chat row needs a list of {{'role': ..., 'content': ...}} messages, got {type(value).__name__}."
                )
            return [dict(m) for m in value]
        if not isinstance(value, str):
            raise InvalidInputError(f"A generate row needs a text prompt, got {type(value).__name__}.")
        return value

    def run(self, rows: Sequence[InputRow]) -> list[dict[str, Any]]:
        """Every row submitted to the scheduler before any is read; a row that fails is an error row."""
        if self._batched is None:
            self._batched = self.model.batched(max_concurrent=max(1, len(rows)), max_waiting=1 << 20)
        started = time.perf_counter()
        results: dict[str, dict[str, Any]] = {}
        pending = []
        for row in rows:
            try:
                seed = self._seed(row)
                options = self.options if seed is None else self.options.replace(seed=seed)
                submission, chunks = self._batched.open(self.prepare(row.value), options)
            except Exception as exc:  # a bad row (empty, too long, malformed) is an error in its own row
                results[row.id] = error_row(row.id, exc)
                continue
            pending.append((row, submission, chunks))
        for row, submission, chunks in pending:
            try:
                result = collect(chunks, prompt_tokens=submission.prompt_tokens, started=started)
                results[row.id] = _ok_row(row.id, submission.finish(result))
            except Exception as exc:
                results[row.id] = error_row(row.id, exc)
        return [results[row.id] for row in rows]

    def close(self) -> None:
        if self._batched is not None:
            self._batched.close()
        super().close()


class Seq2SeqAdapter(TaskAdapter):
    """``summarize`` and ``translate`` on an encoder-decoder model: the task's prompt format, then batched."""

    def __init__(
        self, model: Any, *, task: str, seed: int | None, overrides: Mapping[str, Any], prefix: str, fmt: Any
    ) -> None:
        super().__init__(model, seed=seed, overrides=overrides)
        self.task = task
        self._prefix = prefix
        self._format = fmt
        self._beams = self.config.num_beams > 1 or self.config.num_return_sequences > 1

    def prepare(self, value: Any) -> Any:
        if not isinstance(value, str) or not value.strip():
            what = "no input (the column is missing or null)" if value is None else "an empty text"
            if value is not None and not isinstance(value, str):
                what = f"a {type(value).__name__}, not a text"
            raise InvalidInputError(f"The row has {what}: pass the text to {self.task}.")
        text = self._prefix + (self._format(value) if self._format else value)
        ids = self.model.encode_source(text)  # raises for an empty input
        limit = self.model.max_source_tokens  # checked here so one long row does not fail its batch
        if limit and len(ids) > limit:
            raise PromptTooLongError(
                f"The input has {len(ids)} tokens but the encoder accepts at most {limit}: shorten this row."
            )
        return text

    def groups(self, ready: list[tuple[InputRow, Any]]) -> list[list[tuple[InputRow, Any]]]:
        if self._beams:  # generate_batch runs greedy / sampling only: beam search runs per row
            return [[item] for item in ready]
        return super().groups(ready)

    def call_batch(self, sources: list[Any], group: list[tuple[InputRow, Any]]) -> list[Any]:
        if self._beams:
            return [self.model.generate(s, **self.overrides) for s in sources]
        return super().call_batch(sources, group)


class TranscribeAdapter(TaskAdapter):
    """``transcribe``: a column of audio file paths through ``WhisperSpeechModel.transcribe_batch``.

    A row's result has the transcription's text and its token count; Whisper reports no finish
    reason or prompt tokens (null).  With a seed each row runs alone with its own seed (Whisper's
    temperature fallback samples), as ``transcribe(path, seed=row_seed(...))``.
    """

    task = "transcribe"

    def __init__(self, model: Any, *, seed: int | None, options: TranscribeOptions, language: str | None) -> None:
        self.model = model
        self.seed = seed
        self.options = options  # the job's options, typed at the batch edge (transcribe_options)
        self.language = language
        self.sampling = seed is not None

    def prepare(self, value: Any) -> Any:
        if not isinstance(value, str) or not value.strip():
            raise InvalidInputError(
                "The row has no audio path (the column is missing, null or empty): pass the path of an audio file."
            )
        path = Path(value).expanduser()
        if not path.is_file():
            raise AudioError(
                f"The audio file {value!r} does not exist: fix the path (a relative path starts at the input file's folder)."
            )
        return str(path)

    def call_batch(self, sources: list[Any], group: list[tuple[InputRow, Any]]) -> list[Any]:
        return list(
            self.model.transcribe_batch(sources, batch_size=len(sources), language=self.language, options=self.options)
        )

    def call_alone(self, source: Any, seed: int | None) -> Any:
        options = self.options if seed is None else self.options.with_seed(seed)
        return self.model.transcribe(source, language=self.language, options=options)

    def _row(self, row_id: str, result: Any) -> dict[str, Any]:
        return {
            "id": row_id,
            "text": result.text,
            "finish_reason": None,
            "prompt_tokens": None,
            "completion_tokens": len(result.token_ids),
            "error": None,
        }


def load_adapter(
    model: str,
    *,
    task: str,
    seed: int | None = None,
    overrides: Mapping[str, Any] | None = None,
    threads: int | None = None,
    source_language: str | None = None,
    target_language: str | None = None,
) -> TaskAdapter:
    """Load ``model`` (hub id or local folder) for ``task`` and return its adapter.

    Raises:
        ConfigurationError: an unknown task, or a task this model type cannot run.
        UnsupportedModelError: a model the task's class cannot run (e.g. ``transcribe`` on a text model).
    """
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    if task not in TASKS:
        raise ConfigurationError(f"Unknown batch task {task!r}: use one of {', '.join(TASKS)}.")
    if task in ("generate", "chat"):
        from inference4py.tasks.text_generation import OnnxTextGenerator

        builder = _source(OnnxTextGenerator.builder(), model)
        if threads:
            builder = builder.intra_op_threads(threads)
        return DecoderAdapter(builder.build(), task=task, seed=seed, overrides=overrides)
    if task == "transcribe":
        from inference4py.speech import WhisperSpeechModel

        options = transcribe_options(overrides)  # before the model loads or any audio is read
        builder = _source(WhisperSpeechModel.builder(), model)
        if threads:
            builder = builder.intra_op_threads(threads)
        return TranscribeAdapter(builder.build(), seed=seed, options=options, language=source_language)
    return _seq2seq_adapter(model, task, seed, overrides, threads, source_language, target_language)


def transcribe_options(overrides: Mapping[str, Any]) -> TranscribeOptions:
    """A transcribe job's keywords as one :class:`~inference4py.speech.options.TranscribeOptions`
    (:meth:`~inference4py.speech.options.TranscribeOptions.from_keywords`: Whisper's long-form fields,
    the rest its generation options), typed here at the batch edge.

    Raises:
        ConfigurationError: an unknown keyword or a bad value (named), or an output constraint.
    """
    from inference4py.speech.options import TranscribeOptions

    if any(k in overrides for k in OUTPUT_FIELDS):
        raise ConfigurationError("A JSON schema constrains generated text: drop json_schema for --task transcribe.")
    options, _ = TranscribeOptions.from_keywords(overrides)
    return options


def _source(builder: Any, model: str) -> Any:
    return builder.model_path(model) if Path(model).expanduser().is_dir() else builder.model_id(model)


def _seq2seq_adapter(
    model: str,
    task: str,
    seed: int | None,
    overrides: dict[str, Any],
    threads: int | None,
    source_language: str | None,
    target_language: str | None,
) -> TaskAdapter:
    from inference4py.tasks.bart import BartSummarizer
    from inference4py.tasks.flan_t5 import FlanT5TextGenerator, flan_t5_prompt
    from inference4py.tasks.kinds import model_kind
    from inference4py.tasks.languages import Language
    from inference4py.tasks.marian import MarianTranslator

    kind = model_kind(model).model_type
    classes = {"t5": FlanT5TextGenerator, "bart": BartSummarizer, "marian": MarianTranslator}
    usable = {"summarize": ("t5", "bart"), "translate": ("t5", "marian")}[task]
    if kind not in usable:
        raise ConfigurationError(
            f"--task {task} runs on {' or '.join(usable)} models; {model} is a {kind or 'model of unknown type'} "
            f"model. Pick another model or task (decoder-only models: --task generate or chat)."
        )
    builder = _source(classes[kind].builder(), model)
    if threads:
        builder = builder.intra_op_threads(threads)
    loaded = builder.build()
    prefix, fmt = "", None
    if kind == "t5" and task == "summarize":

        def fmt(text: str) -> str:
            return flan_t5_prompt(text, task="summarize")

    elif kind == "t5":
        if source_language is None or target_language is None:
            loaded.close()
            raise ConfigurationError("Translating with a T5 model needs both languages: --source en --target fr.")
        src, tgt = Language.of(source_language), Language.of(target_language)

        def fmt(text: str) -> str:
            return flan_t5_prompt(text, task="translate", source=src, target=tgt)

    elif kind == "marian":
        try:  # the ">>xxx<< " token of a multilingual model; "" for a fixed pair (raises for a pair it cannot do)
            prefix = loaded.target_prefix(target_language, source_language)
        except Exception:
            loaded.close()
            raise
    return Seq2SeqAdapter(loaded, task=task, seed=seed, overrides=overrides, prefix=prefix, fmt=fmt)
