"""What task classes share: the model-source builder (every task), the generation builder and the
generate/stream facade (generative tasks).

A task class is a preset: a few recorded parameters (default model, prompt
format, chat template) over the generic engine.  Builders are chainable,
validate each value when it is set, and record only what the user set, so
everything else comes from the model folder (config.json,
generation_config.json, tokenizer files).
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

from inference4py.engine.sessions import SessionOptions
from inference4py.errors import ConfigurationError, GeneratorClosedError, PromptTooLongError
from inference4py.generation.config import GenerationConfig, read_generation_defaults
from inference4py.generation.processors import LogitsProcessor
from inference4py.tasks.options import RequestOptions

__all__ = ["GenerationBuilder", "ModelSourceBuilder", "DEFAULT_MAX_NEW_TOKENS"]

DEFAULT_MAX_NEW_TOKENS = 256

_GEN_FIELDS = {f.name for f in dataclasses.fields(GenerationConfig)}

T = TypeVar("T")
B = TypeVar("B", bound="GenerationBuilder[Any]")
S = TypeVar("S", bound="ModelSourceBuilder")


class ModelSourceBuilder:
    """Where a model comes from and how its sessions run: the options every task builder shares.

    Each setter validates its value and returns the builder.
    """

    _task: Any = None  # the task class build() makes (set by the class, or by its preset table)

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

    # ------------------------------------------------------------------ where the model comes from
    def model_id(self: S, model_id: str) -> S:
        """Hugging Face repo id to download (``"org/name"``)."""
        if not isinstance(model_id, str) or not model_id.strip():
            raise ConfigurationError("model_id must be a non-empty string like 'inference4j/gpt2'.")
        self._model_id, self._model_path = model_id, None
        return self

    def model_path(self: S, path: str | os.PathLike[str]) -> S:
        """Local model folder (no download)."""
        self._model_path, self._model_id = os.fspath(path), None
        return self

    def revision(self: S, revision: str) -> S:
        """Branch, tag or commit of the hub repo."""
        self._revision = revision
        return self

    def token(self: S, token: str | bool) -> S:
        """Hugging Face token for private or gated repos (default: HF_TOKEN / the saved login)."""
        self._token = token
        return self

    def local_files_only(self: S, value: bool = True) -> S:
        """Never contact the hub; use the local cache only."""
        self._local_files_only = bool(value)
        return self

    def variant(self: S, variant: str) -> S:
        """Which precision of a hub repo to download when it has several (e.g. "fp16", "quantized", "q4")."""
        if not isinstance(variant, str) or not variant:
            raise ConfigurationError("variant must be a non-empty string such as 'fp16' or 'quantized'.")
        self._variant = variant
        return self

    def providers(self: S, providers: Sequence[str]) -> S:
        """onnxruntime execution providers in priority order."""
        if isinstance(providers, str):
            providers = [providers]
        self._providers = tuple(providers)
        SessionOptions(providers=self._providers)  # validates now
        return self

    def intra_op_threads(self: S, threads: int) -> S:
        """Threads onnxruntime may use inside one operator."""
        SessionOptions(intra_op_threads=threads)
        self._threads = threads
        return self

    def _source_parts(self) -> list[str]:
        """The preset and where the model comes from, as ``name=value`` for a builder's ``__repr__``."""
        parts = [f"preset={self._preset!r}"] if self._preset else []
        if self._model_id:
            parts.append(f"model_id={self._model_id!r}")
        if self._model_path:
            parts.append(f"model_path={self._model_path!r}")
        return parts

    # ------------------------------------------------------------------ resolving
    def _source(self) -> tuple[str | None, str | None]:
        return self._model_id, self._model_path

    def resolve_folder(self) -> Path:
        """The local model folder (downloading it if needed)."""
        from inference4py import hub

        if self._model_path is not None:
            return hub.local_model_folder(self._model_path)
        if self._model_id is None:
            raise ConfigurationError(
                f"No model chosen{' for preset ' + self._preset if self._preset else ''}: call "
                ".model_id('org/name') or .model_path('folder') before build()."
            )
        return hub.resolve_checkpoint(
            self._model_id,
            self._revision,
            self._token,
            local_files_only=self._local_files_only,
            variant=self._variant,
        )

    def session_options(self) -> SessionOptions:
        return SessionOptions(providers=self._providers, intra_op_threads=self._threads)


class GenerationBuilder(ModelSourceBuilder, Generic[T]):
    """Chainable, validated options shared by every generative task class.

    Subclasses set ``_task`` (the class ``build()`` creates) and may add
    options of their own.  Each setter returns the builder.
    """

    def __init__(self, *, preset: str | None = None, model_id: str | None = None, **preset_fields: Any) -> None:
        super().__init__(preset=preset, model_id=model_id)
        self._generation: dict[str, Any] = {}
        self._stops: list[str] = []
        self._eos: list[int] = []
        self._processors: list[LogitsProcessor] = []
        self._preset_fields = dict(preset_fields)

    # ------------------------------------------------------------------ generation options
    def _set(self: B, **values: Any) -> B:
        # Each value is checked on its own here (so setters can come in any order);
        # combinations (num_return_sequences vs num_beams, ...) are checked by build().
        neutral = {"do_sample": True, "num_beams": 1, "max_new_tokens": 2**31 - 1, "min_new_tokens": 0}
        GenerationConfig(**{**neutral, **values})
        self._generation.update(values)
        return self

    def max_new_tokens(self: B, n: int) -> B:
        """Generate at most ``n`` tokens."""
        return self._set(max_new_tokens=n)

    def min_new_tokens(self: B, n: int) -> B:
        """Block EOS until ``n`` tokens were generated."""
        return self._set(min_new_tokens=n)

    def do_sample(self: B, value: bool = True) -> B:
        """Sample (True) or take the most likely token (False)."""
        return self._set(do_sample=bool(value))

    def greedy(self: B) -> B:
        """Always take the most likely token."""
        return self._set(do_sample=False)

    def temperature(self: B, t: float) -> B:
        """Sampling temperature; setting one > 0 turns sampling on, 0 means greedy."""
        return self._set(temperature=t)  # the planner decides sampling: GenerationConfig.with_request

    def top_k(self: B, k: int) -> B:
        """Sample among the ``k`` most likely tokens (0 disables; see :meth:`GenerationConfig.with_request`)."""
        return self._set(top_k=k)

    def top_p(self: B, p: float) -> B:
        """Nucleus sampling threshold in (0, 1] (1 disables; see :meth:`GenerationConfig.with_request`)."""
        return self._set(top_p=p)

    def min_p(self: B, p: float) -> B:
        """Drop tokens less likely than ``p`` times the top token (0 disables; see GenerationConfig.with_request)."""
        return self._set(min_p=p)

    def repetition_penalty(self: B, penalty: float) -> B:
        """Penalise tokens already in the sequence (> 1 discourages repeats)."""
        return self._set(repetition_penalty=penalty)

    def presence_penalty(self: B, penalty: float) -> B:
        """OpenAI's presence penalty in [-2, 2]: subtracted once from every token already generated."""
        return self._set(presence_penalty=penalty)

    def frequency_penalty(self: B, penalty: float) -> B:
        """OpenAI's frequency penalty in [-2, 2]: subtracted once per time a token was generated."""
        return self._set(frequency_penalty=penalty)

    def logit_bias(self: B, bias: Mapping[int, float]) -> B:
        """``{token_id: bias}`` added to the logits at every step (biases in [-100, 100])."""
        return self._set(logit_bias=dict(bias))

    def logprobs(self: B, top_logprobs: int = 0) -> B:
        """Report each generated token's log-probability, and the ``top_logprobs`` (<= 20) likeliest alternatives."""
        return self._set(logprobs=True, top_logprobs=top_logprobs)

    def no_repeat_ngram_size(self: B, n: int) -> B:
        """Never repeat an n-gram of this size."""
        return self._set(no_repeat_ngram_size=n)

    def num_beams(self: B, n: int) -> B:
        """Beam search width (1 = greedy or sampling)."""
        return self._set(num_beams=n)

    def length_penalty(self: B, penalty: float) -> B:
        """Beam scores are divided by length ** penalty (> 0 favours longer sequences)."""
        return self._set(length_penalty=float(penalty))

    def early_stopping(self: B, value: bool | str) -> B:
        """Beam search stop rule: True, False or "never" (transformers' semantics)."""
        return self._set(early_stopping=value)

    def num_return_sequences(self: B, n: int) -> B:
        """Return this many sequences (<= num_beams, or independent samples when sampling)."""
        return self._set(num_return_sequences=n)

    def bad_words_ids(self: B, sequences: Sequence[Sequence[int]]) -> B:
        """Token sequences that must never be generated."""
        return self._set(bad_words_ids=tuple(tuple(s) for s in sequences))

    def suppress_tokens(self: B, token_ids: Sequence[int]) -> B:
        """Token ids that are never generated."""
        return self._set(suppress_tokens=tuple(token_ids))

    def seed(self: B, seed: int) -> B:
        """Seed for reproducible sampling."""
        if not isinstance(seed, int):
            raise ConfigurationError(f"seed must be an integer, got {seed!r}.")
        return self._set(seed=seed)

    def stop_sequence(self: B, text: str) -> B:
        """End generation when ``text`` appears (repeatable); it is not included in the output."""
        if not isinstance(text, str) or not text:
            raise ConfigurationError("stop_sequence needs a non-empty string.")
        self._stops.append(text)
        return self

    def eos_token_id(self: B, token_id: int) -> B:
        """An extra token id that ends generation (repeatable)."""
        if not isinstance(token_id, int) or token_id < 0:
            raise ConfigurationError(f"eos_token_id must be a non-negative integer, got {token_id!r}.")
        self._eos.append(token_id)
        return self

    def logits_processor(self: B, fn: Callable[[Any, Any], Any]) -> B:
        """Add ``fn(token_ids, logits) -> logits``, applied after the built-in processors."""
        if not callable(fn):
            raise ConfigurationError("logits_processor needs a callable fn(token_ids, logits) -> logits.")
        self._processors.append(fn)
        return self

    # ------------------------------------------------------------------ build
    def generation_overrides(self) -> dict[str, Any]:
        """Options the user set explicitly (HF names)."""
        out = dict(self._generation)
        if self._stops:
            out["stop_sequences"] = tuple(self._stops)
        return out

    def build(self) -> T:
        """Load the model and return the task object."""
        return self._task._from_builder(self)

    def __repr__(self) -> str:
        parts = self._source_parts()
        parts += [f"{k}={v!r}" for k, v in self._preset_fields.items() if v is not None and k != "chat_template"]
        parts += [f"{k}={v!r}" for k, v in self._generation.items()]
        return f"{type(self).__name__}({', '.join(parts)})"


def resolve_generation_defaults(folder: Path, spec: Any = None) -> tuple[GenerationConfig, dict[str, Any]]:
    """The folder's generation defaults as a config plus transformers' total-length keys.

    Returns the config (without length limits) and ``{"max_length": ..,
    "min_length": ..}`` where the folder sets them: those are total lengths in
    transformers and only become new-token counts once the prompt is known.
    ``spec`` (a PipelineSpec) layers the tokens and generation defaults its
    description declares over generation_config.json.
    """
    data = read_generation_defaults(folder)
    if spec is not None:
        data.update(spec.generation_defaults())
    totals = {k: data.pop(k) for k in ("max_length", "min_length", "max_new_tokens") if isinstance(data.get(k), int)}
    known = {k: v for k, v in data.items() if k in _GEN_FIELDS and v is not None}
    try:
        config = GenerationConfig(**known)
    except ConfigurationError:
        # A folder may carry values we reject (e.g. num_return_sequences > num_beams with sampling off);
        # keep only the ids and fall back to library defaults for the rest.
        ids = {
            k: known[k]
            for k in ("eos_token_id", "pad_token_id", "bos_token_id", "decoder_start_token_id")
            if k in known
        }
        config = GenerationConfig(**ids)
    return config, totals


class CallPlanner:
    """Turns the stored defaults + builder options + call overrides into one call's config."""

    def __init__(
        self,
        defaults: GenerationConfig,
        totals: Mapping[str, int],
        overrides: Mapping[str, Any],
        *,
        extra_eos: Sequence[int] = (),
        context: int | None = None,
        total_counts_prompt: bool = True,
    ) -> None:
        self.totals = dict(totals)
        self.context = context
        self.total_counts_prompt = total_counts_prompt
        self.explicit_max = "max_new_tokens" in overrides
        builder = RequestOptions.from_keywords({k: v for k, v in overrides.items() if k in _GEN_FIELDS})
        base = builder.apply(defaults)  # greedy or sampling decided as for a request (with_request)
        if extra_eos:
            base = base.replace(eos_token_id=tuple(dict.fromkeys([*base.eos_token_id, *extra_eos])))
        self.base = base

    def for_call(self, prompt_len: int, overrides: Mapping[str, Any]) -> GenerationConfig:
        """:meth:`for_request` with a task's keywords where nothing drafts and the output is free.

        The keyword edge of the paths that take generation options only (Whisper, vision-language,
        the step-level Generator, chat sessions, ``call_settings``).
        """
        options = RequestOptions.from_keywords(overrides)
        options.refuse_speculation("This call")
        options.refuse_output("This call")
        return self.for_request(prompt_len, options)

    def for_request(self, prompt_len: int, options: RequestOptions) -> GenerationConfig:
        """The config of one request: its options over the defaults, the length limits for its prompt."""
        config = options.apply(self.base)
        explicit = self.explicit_max or options.max_new_tokens is not None
        start = prompt_len if self.total_counts_prompt else 1
        if not explicit:
            if "max_new_tokens" in self.totals:
                config = config.replace(max_new_tokens=max(1, self.totals["max_new_tokens"]))
            elif "max_length" in self.totals:
                config = config.replace(max_new_tokens=max(1, self.totals["max_length"] - start))
            if self.context is not None:
                room = self.context - start
                if room >= 1 and config.max_new_tokens > room:
                    config = config.replace(max_new_tokens=room)
        if "min_length" in self.totals and self.totals["min_length"] - start > config.min_new_tokens:
            config = config.replace(min_new_tokens=min(config.max_new_tokens, self.totals["min_length"] - start))
        if self.context is not None and start + config.max_new_tokens > self.context:
            if not self.total_counts_prompt:
                raise PromptTooLongError(
                    f"max_new_tokens={config.max_new_tokens} is more than the decoder can produce: it has "
                    f"{self.context} positions, so at most {self.context - start} new tokens. Lower max_new_tokens."
                )
            if prompt_len >= self.context:
                raise PromptTooLongError(
                    f"The prompt has {prompt_len} tokens but the model's context is {self.context} tokens. "
                    "Shorten the prompt."
                )
            raise PromptTooLongError(
                f"The prompt has {prompt_len} tokens and max_new_tokens is {config.max_new_tokens}: together "
                f"{prompt_len + config.max_new_tokens}, more than the model's context of {self.context} tokens. "
                f"Lower max_new_tokens to at most {self.context - prompt_len} or shorten the prompt."
            )
        return config


def renamed(old: str, new: str) -> None:
    """Warn that the method ``old`` is a deprecated name of ``new`` (called from the old method)."""
    warnings.warn(f"{old} is deprecated: call {new} instead.", DeprecationWarning, stacklevel=3)


_Task = TypeVar("_Task", bound="ClosableTask")


class ClosableTask:
    """Context-manager plumbing and a closed flag shared by task classes."""

    _closed = False

    def close(self) -> None:
        """Release the model's sessions; the object cannot be used afterwards."""
        self._closed = True
        self._release()

    def _release(self) -> None:  # overridden where there is something to free
        pass

    def _check_open(self) -> None:
        if self._closed:
            raise GeneratorClosedError(f"This {type(self).__name__} was closed; build a new one to generate again.")

    def __enter__(self: _Task) -> _Task:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
