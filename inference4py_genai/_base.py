"""What the genai task classes share: the builder, generation defaults, the og loop.

inference4py's :class:`~inference4py.generation.config.GenerationConfig` is mapped
onto onnxruntime-genai's search options here, so that every option either really
applies or is refused with a message naming the alternative:

* ``do_sample`` is set explicitly on every call: temperature / top-k / top-p
  apply only when sampling, exactly as in transformers;
* ``max_new_tokens`` becomes genai's *total* ``max_length`` (prompt + new), so
  the KV buffer genai pre-allocates holds this call, not the model's whole
  context;
* the logits processors genai's loop does not implement (no-repeat n-grams, bad
  words, suppressed or forced tokens, ``min_new_tokens`` with extra end tokens,
  user logits processors) run in Python on genai's logits
  (``Generator.get_logits`` / ``set_logits``), with inference4py's own
  processors (the twins of transformers'); the call then stays on genai's loop
  for everything else.  Calls that need none of them stay fully native;
* min-p (a warper applied after temperature, which genai applies internally)
  raises :class:`~inference4py.errors.ConfigurationError`.

Stop sequences and streaming use inference4py's own
:class:`~inference4py.generation.streaming.StopSequenceMatcher` and
:class:`~inference4py.generation.streaming.IncrementalDetokenizer` (via
:func:`~inference4py.generation.generate.stream_generate`): genai has no stop
strings of its own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from inference4py.errors import ConfigurationError, InferenceError
from inference4py.generation.config import GenerationConfig
from inference4py.generation.generate import collect, stream_generate
from inference4py.generation.processors import LogitsProcessor, apply_processors, make_logits_processors
from inference4py.generation.result import Candidate, FinishReason, GenerationChunk, GenerationResult
from inference4py.generation.streaming import StopSequenceMatcher
from inference4py.tasks.base import CallPlanner, GenerationBuilder, resolve_generation_defaults
from inference4py.tasks.options import OUTPUT_FIELDS, RequestOptions
from inference4py_genai._runtime import og, provider_name, raising

__all__ = [
    "GenaiBuilder",
    "GenaiPlanner",
    "Call",
    "search_options",
    "python_processors",
    "og_tokens",
    "og_sequences",
    "run_generation",
    "stream_chunks",
    "feed_tokens",
    "genai_defaults",
    "genai_eos",
]

T = TypeVar("T")
B = TypeVar("B", bound="GenaiBuilder[Any]")

# GenerationConfig fields onnxruntime-genai cannot apply at all, with their "off" values.
_UNSUPPORTED: dict[str, Any] = {"min_p": 0.0, "logprobs": False, "top_logprobs": 0, "prompt_logprobs": False}

_NATIVE_HINT = "use inference4py's own loop (inference4py.OnnxTextGenerator and friends), which implements it"


def _unsupported(name: str) -> ConfigurationError:
    return ConfigurationError(
        f"{name} is not supported by onnxruntime-genai's generation loop: remove it, or {_NATIVE_HINT}."
    )


class GenaiBuilder(GenerationBuilder[T]):
    """Options shared by the genai task builders (see GenerationBuilder for the rest).

    Differences from inference4py's builders: ``providers`` takes onnxruntime or
    onnxruntime-genai names and is checked when the model loads (by
    onnxruntime-genai); ``min_p`` is refused (genai applies temperature inside its
    loop, and min-p must come after it).  Logits processors, including the ones
    ``logits_processor`` adds, run in Python on genai's logits.
    """

    def providers(self: B, providers: Sequence[str]) -> B:
        """Execution providers in priority order, e.g. ``["cuda"]`` or ``["CPUExecutionProvider"]``.

        Applied through ``og.Config.clear_providers`` / ``append_provider``; the
        names are checked when the model is built.
        """
        if isinstance(providers, str):
            providers = [providers]
        names = tuple(providers)
        if not names:
            raise ConfigurationError("providers needs at least one name, e.g. ['CPUExecutionProvider'].")
        for name in names:
            provider_name(name)
        self._providers = names
        return self

    def intra_op_threads(self: B, threads: int) -> B:
        """Threads onnxruntime may use inside one operator (every session of the model)."""
        if not isinstance(threads, int) or isinstance(threads, bool) or threads < 0:
            raise ConfigurationError(
                f"intra_op_threads={threads!r} is invalid: use an integer >= 0 (0 lets onnxruntime choose)."
            )
        self._threads = threads
        return self

    def min_p(self: B, p: float) -> B:
        """Not available with onnxruntime-genai (raises ConfigurationError)."""
        raise _unsupported("min_p")


# --------------------------------------------------------------------------- defaults


def genai_defaults(
    folder: Path, genai_config: Mapping[str, Any], *, search_defaults: bool = True
) -> tuple[GenerationConfig, dict[str, int], int | None]:
    """Generation defaults of a genai folder: (config, total lengths, context length).

    genai_config.json's ``search`` section holds the model author's defaults (the
    model builder copies them from generation_config.json for text models; pass
    ``search_defaults=False`` where it writes fixed values instead, as for Whisper,
    whose ``top_k: 1`` would turn sampling into greedy search); its ``max_length`` is
    usually the whole context, which is *not* used as a default length: it would
    make every call allocate a KV buffer for the full context.  Only a
    ``max_length`` below the context counts (as a total, like transformers').
    """
    model = genai_config["model"]
    search = genai_config.get("search") or {}
    context = model.get("context_length")
    context = int(context) if isinstance(context, int) and context > 0 else None
    base, totals = resolve_generation_defaults(folder)  # generation_config.json, when the folder has one
    values: dict[str, Any] = {}
    for key in (
        "do_sample",
        "temperature",
        "top_k",
        "top_p",
        "repetition_penalty",
        "num_beams",
        "num_return_sequences",
        "length_penalty",
    ):
        if search_defaults and key in search and search[key] is not None:
            values[key] = search[key]
    if search_defaults and isinstance(search.get("early_stopping"), bool):
        values["early_stopping"] = search["early_stopping"]
    if not (isinstance(values.get("top_p"), (int, float)) and 0 < values["top_p"] <= 1):
        values.pop("top_p", None)  # genai uses 0 for "off"
    for key in ("eos_token_id", "pad_token_id", "bos_token_id"):
        if model.get(key) is not None:
            values[key] = model[key]
    if values.get("num_beams", 1) == 1:
        values.pop("num_return_sequences", None)
    config = base
    for key, value in values.items():
        with contextlib.suppress(ConfigurationError):  # a value we would reject (e.g. temperature 0 with
            config = config.replace(**{key: value})  # do_sample): keep the library default
    config = config.replace(**{k: v for k, v in _UNSUPPORTED.items() if getattr(config, k) != v})  # not applicable
    max_length = search.get("max_length")
    if isinstance(max_length, int) and (context is None or max_length < context) and "max_new_tokens" not in totals:
        totals.setdefault("max_length", max_length)
    return config, totals, context


def genai_eos(genai_config: Mapping[str, Any]) -> tuple[int, ...]:
    """The EOS ids genai itself stops on (``model.eos_token_id``, an int or a list)."""
    eos = genai_config["model"].get("eos_token_id")
    if eos is None:
        return ()
    return tuple(int(i) for i in (eos if isinstance(eos, (list, tuple)) else [eos]))


def genai_window(genai_config: Mapping[str, Any]) -> int:
    """The decoder's sliding window (``model.decoder.sliding_window.window_size``), 0 when none.

    onnxruntime-genai sizes a windowed KV cache from ``max_length`` and fails when that is
    below the window ("KV cache capacity (N) must be at least local_window_size (W)").
    """
    window = (genai_config["model"].get("decoder") or {}).get("sliding_window")
    size = window.get("window_size") if isinstance(window, Mapping) else None
    return size if isinstance(size, int) and size > 0 else 0


class GenaiPlanner(CallPlanner):
    """CallPlanner for genai's loop.

    Refuses the options genai cannot apply, and keeps the model's own EOS ids
    (genai_config.json) in every call's ``eos_token_id``: genai always stops on
    them, so a user-given ``eos_token_id`` adds end tokens rather than replacing them.
    """

    def __init__(
        self,
        defaults: GenerationConfig,
        totals: Mapping[str, int],
        overrides: Mapping[str, Any],
        *,
        model_eos: Sequence[int] = (),
        **kw: Any,
    ) -> None:
        check_supported(overrides)
        self.model_eos = tuple(int(i) for i in model_eos)
        super().__init__(defaults, totals, overrides, **kw)

    def for_request(self, prompt_len: int, options: RequestOptions) -> GenerationConfig:
        check_supported({**options.generation_changes(), **options.output_options()})
        config = super().for_request(prompt_len, options)
        eos = tuple(dict.fromkeys([*self.model_eos, *config.eos_token_id]))
        if eos != config.eos_token_id:
            config = config.replace(eos_token_id=eos)
        return config


def check_supported(overrides: Mapping[str, Any]) -> None:
    """Raise ConfigurationError for a user-set option genai cannot apply."""
    control = sorted(k for k in OUTPUT_FIELDS if overrides.get(k) is not None)
    if control:
        raise ConfigurationError(
            f"{', '.join(control)}: structured output and tool calling run on inference4py's own loop only for now; "
            "load this folder with inference4py.OnnxTextGenerator (it runs genai folders too) to use them."
        )
    for name, off in _UNSUPPORTED.items():
        value = overrides.get(name)
        if value is not None and value != off and not (isinstance(off, tuple) and not value):
            raise _unsupported(name)


# --------------------------------------------------------------------------- the og loop


def python_processors(
    config: GenerationConfig, *, prompt_length: int, model_eos: Sequence[int], extra: Sequence[LogitsProcessor] = ()
) -> list[LogitsProcessor]:
    """The processors a call must run in Python (empty: the call runs fully native).

    genai applies the repetition penalty and ``min_length`` (blocking its own EOS
    ids) itself; everything else transformers' ``generate`` applies before
    choosing a token needs Python.  When any is needed, *all* processors run in
    Python, in transformers' order, and genai's own are switched off (see
    :func:`search_options`), so the result is the same as inference4py's loop.
    """
    extra_eos = [i for i in config.eos_token_id if i not in set(model_eos)]
    needed = (
        config.no_repeat_ngram_size > 0
        or bool(config.bad_words_ids)
        or config.forced_bos_token_id is not None
        or config.forced_eos_token_id is not None
        or bool(config.suppress_tokens)
        or bool(config.begin_suppress_tokens)
        or (config.min_new_tokens > 0 and bool(extra_eos))
        or bool(config.presence_penalty or config.frequency_penalty or config.logit_bias)  # OpenAI's: not in genai
        or bool(extra)
    )
    if not needed:
        return []
    return make_logits_processors(config, prompt_length=prompt_length, extra=extra)


def search_options(config: GenerationConfig, prompt_len: int, *, native_processors: bool = True) -> dict[str, Any]:
    """onnxruntime-genai search options for one call.

    ``max_length`` / ``min_length`` are totals in genai (prompt included).
    ``do_sample`` is always set: genai_config.json's own value must not leak in.
    With ``native_processors=False`` (processors run in Python) genai's repetition
    penalty and min length are turned off, so they are not applied twice.
    """
    sampling = config.sampling
    options: dict[str, Any] = {
        "max_length": prompt_len + config.max_new_tokens,
        "min_length": prompt_len + config.min_new_tokens if config.min_new_tokens and native_processors else 0,
        "do_sample": sampling,
        "num_beams": config.num_beams,
        "num_return_sequences": config.num_return_sequences if config.num_beams > 1 else 1,
        "repetition_penalty": float(config.repetition_penalty) if native_processors else 1.0,
        "length_penalty": float(config.length_penalty),
        "early_stopping": config.early_stopping is True,
        "batch_size": 1,
    }
    if sampling:
        options.update(
            temperature=float(config.temperature),
            top_k=int(config.top_k),
            top_p=float(config.top_p),
            random_seed=int(config.seed) if config.seed is not None else -1,
        )
    return options


Feed = Callable[[Any], None]
Guidance = tuple[
    str, str
]  # (type, data) for GeneratorParams.set_guidance: json_schema, regex, lark_grammar (_guidance.py)


def _new_generator(model: Any, options: Mapping[str, Any], feed: Feed, guidance: Guidance | None = None) -> Any:
    genai = og()
    with raising(InferenceError, "setting the search options"):
        params = genai.GeneratorParams(model)
        params.set_search_options(**options)
    if guidance is not None:
        with raising(InferenceError, "setting the output constraint (onnxruntime-genai's guidance)"):
            params.set_guidance(*guidance)
    with raising(InferenceError, "creating the generator"):
        generator = genai.Generator(model, params)
    with raising(InferenceError, "reading the prompt"):
        feed(generator)
    return generator


def og_tokens(
    model: Any,
    options: Mapping[str, Any],
    feed: Feed,
    *,
    processors: Sequence[LogitsProcessor] = (),
    prompt_ids: Sequence[int] = (),
    limit: int | None = None,
    guidance: Guidance | None = None,
) -> Iterator[int]:
    """The step tier: token ids chosen by genai's loop, one per iteration.

    ``limit`` stops after that many tokens even when ``max_length`` leaves room for more.

    ``feed(generator)`` appends the prompt (token ids or processor outputs).  With
    ``processors``, each step's logits are read from genai, processed in Python
    (``input_ids`` = ``prompt_ids`` + the tokens so far) and written back before
    genai chooses the token.  Closing the iterator (a stop sequence, the caller
    breaking out) ends the loop with no further forward pass.
    """
    generator = _new_generator(model, options, feed, guidance)
    ids = np.zeros((1, len(prompt_ids) + int(options["max_length"])), dtype=np.int64)  # [1, capacity]
    ids[0, : len(prompt_ids)] = prompt_ids
    length = len(prompt_ids)
    while limit is None or length - len(prompt_ids) < limit:
        with raising(InferenceError, "generating a token"):
            if generator.is_done():
                return
            if processors:
                logits = generator.get_logits()  # [1, 1, vocab]: the last position only
                scores = apply_processors(processors, ids[:, :length], np.array(logits[:, -1, :], dtype=np.float32))
                generator.set_logits(scores[:, None, :])
            generator.generate_next_token()
            token = int(generator.get_next_tokens()[0])
        ids[0, length] = token
        length += 1
        yield token


def og_sequences(
    model: Any, options: Mapping[str, Any], feed: Feed, *, count: int, guidance: Guidance | None = None
) -> list[list[int]]:
    """Run genai's loop to the end (beam search) and return ``count`` whole sequences, best first."""
    generator = _new_generator(model, options, feed, guidance)
    with raising(InferenceError, "generating"):
        while not generator.is_done():
            generator.generate_next_token()
        return [[int(t) for t in generator.get_sequence(i)] for i in range(count)]


def feed_tokens(ids: Sequence[int]) -> Feed:
    array = np.asarray(ids, dtype=np.int32)

    def feed(generator: Any) -> None:
        generator.append_tokens(array)

    return feed


def _candidate(ids: list[int], tokenizer: Any, config: GenerationConfig) -> Candidate:
    eos = set(config.eos_token_id)
    cut = next((i + 1 for i, t in enumerate(ids) if t in eos), None)
    reason: FinishReason = "length"
    if cut is not None:
        ids, reason = ids[:cut], "eos"  # what follows an ended beam is padding
    text = tokenizer.decode(ids, skip_special_tokens=True)
    if config.stop_sequences:
        matcher = StopSequenceMatcher(config.stop_sequences)
        safe, stopped = matcher.push(text)
        text, reason = (safe, "stop") if stopped else (safe + matcher.flush(), reason)
    return Candidate(text, tuple(ids), None, reason)


@dataclasses.dataclass(frozen=True)
class Call:
    """Everything one generation call needs.

    Attributes:
        model: The ``og.Model``.
        tokenizer: inference4py's tokenizer of the folder (decoding, streaming).
        config: This call's settings.
        feed: Appends the prompt to a new ``og.Generator``.
        prompt_ids: The ids the model sees before the first generated one (the
            decoder prompt for Whisper; image tokens, negative in genai's
            Phi-3-vision inputs, included); their count is ``prompt_tokens``.
        model_eos: The EOS ids genai itself stops on.
        extra_processors: The builder's ``logits_processor`` callables.
        skip: Leading ids of a finished sequence that are not generated ones.
    """

    model: Any
    tokenizer: Any
    config: GenerationConfig
    feed: Feed
    prompt_ids: Sequence[int]
    model_eos: Sequence[int] = ()
    extra_processors: Sequence[LogitsProcessor] = ()
    skip: int = 0
    window: int = 0
    guidance: Guidance | None = None

    @property
    def text_ids(self) -> list[int]:
        """The prompt as Python processors see it: image placeholders (negative ids) left out."""
        return [int(i) for i in self.prompt_ids if i >= 0]

    def processors(self, config: GenerationConfig) -> list[LogitsProcessor]:
        return python_processors(
            config, prompt_length=len(self.text_ids), model_eos=self.model_eos, extra=self.extra_processors
        )

    def tokens(self, config: GenerationConfig) -> Iterator[int]:
        processors = self.processors(config)
        options = search_options(config, len(self.prompt_ids), native_processors=not processors)
        # genai's cache is max_length long: a sliding window needs it longer than this call asks for
        options["max_length"] = max(options["max_length"], self.window)
        return og_tokens(
            self.model,
            options,
            self.feed,
            processors=processors,
            prompt_ids=self.text_ids,
            limit=config.max_new_tokens,
            guidance=self.guidance,
        )


def run_generation(call: Call, *, started: float, on_token: Callable[[str], None] | None = None) -> GenerationResult:
    """The top tier: one call drained into a GenerationResult.

    Greedy and single-sample calls stream through :func:`stream_generate`;
    beam search runs to the end and returns ``num_return_sequences`` candidates;
    several samples are drawn one after another (seed, seed + 1, ...).
    """
    config, prompt_len = call.config, len(call.prompt_ids)
    if config.num_beams > 1:
        if call.processors(config):
            raise ConfigurationError(
                "Beam search runs entirely inside onnxruntime-genai: it cannot be combined with logits processors "
                "genai lacks (no_repeat_ngram_size, bad_words_ids, suppress_tokens, forced tokens, logits_processor, "
                f"min_new_tokens with extra end tokens). Drop one of the two, or {_NATIVE_HINT}."
            )
        if call.window:
            raise ConfigurationError(
                f"onnxruntime-genai's beam search cannot run this model's sliding-window KV cache (window "
                f"{call.window}). Use greedy search or sampling here, or run beam search on this folder with "
                "inference4py.OnnxTextGenerator, whose native loop handles the window."
            )
        seqs = og_sequences(
            call.model,
            search_options(config, prompt_len),
            call.feed,
            count=config.num_return_sequences,
            guidance=call.guidance,
        )
        candidates = tuple(_candidate(s[call.skip :], call.tokenizer, config) for s in seqs)
        end = time.perf_counter()
        best = candidates[0]
        if on_token is not None and best.text:
            on_token(best.text)
        return GenerationResult(
            text=best.text,
            token_ids=best.token_ids,
            prompt_tokens=prompt_len,
            generated_tokens=len(best.token_ids),
            finish_reason=best.finish_reason,
            duration=end - started,
            time_to_first_token=end - started,
            candidates=candidates,
        )
    results = []
    for i in range(config.num_return_sequences):
        sample_config = config if i == 0 or config.seed is None else config.replace(seed=config.seed + i)
        chunks = stream_generate(call.tokens(sample_config), call.tokenizer, sample_config)
        results.append(
            collect(chunks, prompt_tokens=prompt_len, started=started, on_token=on_token if i == 0 else None)
        )
    first = results[0]
    if len(results) == 1:
        return first
    candidates = tuple(c for r in results for c in r.candidates)
    return dataclasses.replace(first, duration=time.perf_counter() - started, candidates=candidates)


def stream_chunks(call: Call) -> Iterator[GenerationChunk]:
    """The middle tier: GenerationChunk objects (one sequence only)."""
    config = call.config
    if config.num_beams > 1 or config.num_return_sequences > 1:
        raise ConfigurationError(
            "stream() produces one sequence: use generate() for beam search or several sequences "
            f"(num_beams={config.num_beams}, num_return_sequences={config.num_return_sequences})."
        )
    return stream_generate(call.tokens(config), call.tokenizer, config)
