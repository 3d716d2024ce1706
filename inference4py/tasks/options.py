"""RequestOptions: one request's options, typed and checked once, where the request enters.

Every edge builds one: the server from its protocol models, the CLI from its arguments, a task's
``generate(prompt, **options)`` from its keywords, or from ``options=`` and keywords together
(:meth:`RequestOptions.from_keywords`, :meth:`RequestOptions.of_call`), the batch runner from its job.  Below that, the frozen object is passed down as it is: the task turns
it into the call's :class:`~inference4py.generation.config.GenerationConfig`
(:meth:`RequestOptions.apply`, where greedy or sampling is decided by
:meth:`GenerationConfig.with_request`), its output control (the constraint compiled once) and
its speculation.

A field left ``None`` keeps the model's own setting (its generation_config.json and the builder's
options).  Values are checked at construction with :class:`GenerationConfig`'s rules, so a bad
value is refused before a prompt is tokenized.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Literal

from inference4py.errors import ConfigurationError
from inference4py.generation.config import GenerationConfig
from inference4py.generation.speculative import Speculation, resolve_speculative

__all__ = ["GENERATION_FIELDS", "OUTPUT_FIELDS", "RequestOptions"]

#: What the output may be (docs/structured-output.md, tool calling): compiled by output_control.
OUTPUT_FIELDS = (
    "json_schema",
    "response_format",
    "regex",
    "grammar",
    "choices",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
)


@dataclass(frozen=True)
class RequestOptions:
    """The options of one generation request (transformers' names; OpenAI's for the output).

    Generation fields mirror :class:`~inference4py.generation.config.GenerationConfig` (None: the
    model's setting).  Without ``do_sample``, ``temperature`` turns sampling on (> 0) or off (0),
    as OpenAI's does, and a sampling filter (``top_k``, ``top_p``, ``min_p``) turns it on.
    Output fields (one constraint at a time, or tools) are OpenAI's shapes, compiled once per
    request by the task.  ``speculative`` is a
    :class:`~inference4py.generation.speculative.PromptLookup` / ``DraftModel``, ``"off"``, or None
    for the builder's setting.  ``reasoning`` says where a reasoning model's thinking goes:
    ``"split"`` (None: apart from the answer, in ``result.reasoning``) or ``"inline"`` (in the text).
    ``chat_template_kwargs`` are more variables for the chat template
    (e.g. ``{"enable_thinking": False}``), as transformers' ``apply_chat_template`` takes them.

    Raises:
        ConfigurationError: a value outside its range (named with the valid one).
    """

    max_new_tokens: int | None = None
    min_new_tokens: int | None = None
    do_sample: bool | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    no_repeat_ngram_size: int | None = None
    num_beams: int | None = None
    num_return_sequences: int | None = None
    length_penalty: float | None = None
    early_stopping: bool | str | None = None
    eos_token_id: tuple[int, ...] | None = None
    pad_token_id: int | None = None
    bos_token_id: int | None = None
    decoder_start_token_id: int | None = None
    forced_bos_token_id: int | None = None
    forced_eos_token_id: int | None = None
    bad_words_ids: tuple[tuple[int, ...], ...] | None = None
    suppress_tokens: tuple[int, ...] | None = None
    begin_suppress_tokens: tuple[int, ...] | None = None
    stop_sequences: tuple[str, ...] | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: Mapping[int, float] | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    prompt_logprobs: bool | None = None
    json_schema: Mapping[str, Any] | str | None = None
    response_format: Mapping[str, Any] | None = None
    regex: str | None = None
    grammar: str | None = None
    choices: Sequence[str] | None = None
    tools: Sequence[Mapping[str, Any]] | None = None
    tool_choice: str | Mapping[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    speculative: Speculation | Literal["off"] | None = None
    reasoning: Literal["split", "inline"] | None = None
    chat_template_kwargs: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.reasoning not in (None, "split", "inline"):
            raise ConfigurationError(
                f"reasoning must be 'split' (the thinking apart from the answer, the default) or 'inline' "
                f"(left in the text), got {self.reasoning!r}."
            )
        _check_template_kwargs(self.chat_template_kwargs)
        for name in _SEQUENCE_FIELDS:  # the JSON / keyword world's lists (or one value) as frozen tuples
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _tupled(name, value))
        if self.speculative is not None and self.speculative != "off":
            object.__setattr__(self, "speculative", resolve_speculative(self.speculative))
        # checked against a neutral base: each value's own range here, cross-field rules again per call
        self.apply(GenerationConfig(do_sample=True, max_new_tokens=max(256, self.min_new_tokens or 0)))

    # ------------------------------------------------------------------ edges
    @classmethod
    def from_keywords(cls, options: Mapping[str, Any]) -> RequestOptions:
        """The Python edge: ``generate(prompt, **options)``'s keywords, with their aliases.

        ``stop`` (a string or a list, OpenAI's name) and ``stop_sequence`` mean ``stop_sequences``;
        ``speculative=None`` turns speculation off for the call; other None values are "not set".

        Raises:
            ConfigurationError: an unknown option (the valid ones are listed) or a bad value.
        """
        known = {f.name for f in fields(cls)}
        values: dict[str, Any] = {}
        for name, value in options.items():
            if name in ("stop", "stop_sequence"):
                name = "stop_sequences"
            if name not in known:
                unknown = sorted(set(options) - known - {"stop", "stop_sequence"})
                raise ConfigurationError(
                    f"Unknown generation option(s): {', '.join(unknown)}. Valid options: {', '.join(sorted(known))}."
                )
            if name == "speculative":
                values[name] = "off" if value is None or value is False else value
            elif value is not None:
                values[name] = value
        return cls(**values)

    @classmethod
    def of_call(cls, options: RequestOptions | None, keywords: Mapping[str, Any]) -> RequestOptions:
        """The edge of a task method that takes typed ``options=``, keywords, or both.

        With both, the keywords a call sets replace those fields of ``options``
        (``generate(prompt, options=opts, max_new_tokens=8)``).

        Raises:
            ConfigurationError: ``options`` is not a RequestOptions, an unknown keyword, or a bad value.
        """
        if options is None:
            return cls.from_keywords(keywords)
        if not isinstance(options, RequestOptions):
            raise ConfigurationError(
                f"options takes a RequestOptions, got {type(options).__name__}: pass generation options as "
                "keywords (max_new_tokens=20) or as options=RequestOptions(max_new_tokens=20)."
            )
        if not keywords:
            return options
        given = cls.from_keywords(keywords)
        return options.replace(
            **{f.name: getattr(given, f.name) for f in fields(cls) if getattr(given, f.name) is not None}
        )

    def replace(self, **changes: Any) -> RequestOptions:
        """A copy with some fields changed (checked again)."""
        return dataclasses.replace(self, **changes)

    # ------------------------------------------------------------------ below the edge
    def generation_changes(self) -> dict[str, Any]:
        """The generation fields this request sets, by GenerationConfig's names."""
        out = {}
        for name in GENERATION_FIELDS:
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out

    def output_options(self) -> dict[str, Any]:
        """The output fields this request sets (for the task's output control)."""
        return {name: getattr(self, name) for name in OUTPUT_FIELDS if getattr(self, name) is not None}

    def apply(self, config: GenerationConfig) -> GenerationConfig:
        """``config`` with this request's generation fields (:meth:`GenerationConfig.with_request`).

        That is where greedy or sampling is decided: ``do_sample`` as given, else ``temperature``
        (0 greedy), else a sampling filter (``top_k`` / ``top_p`` / ``min_p`` that filters) samples.
        """
        return config.with_request(self.generation_changes())

    def refuse_speculation(self, where: str) -> None:
        """Raise when this request asks to draft tokens where ``where`` (a task, a path) does not."""
        if self.speculation(None) is not None:
            raise ConfigurationError(
                f"{where} does not draft tokens: speculative decoding runs in OnnxTextGenerator's generate(), "
                "stream() and stream_chunks() of one sequence. Drop speculative here."
            )

    def refuse_output(self, where: str) -> None:
        """Raise when this request constrains the output (or passes tools) where ``where`` cannot."""
        given = sorted(self.output_options())
        if given:
            raise ConfigurationError(
                f"{', '.join(given)}: {where} does not constrain its output or call tools. Drop "
                f"{'it' if len(given) == 1 else 'them'}, or use OnnxTextGenerator (or an encoder-decoder task for "
                "json_schema / regex / grammar / choices)."
            )

    def speculation(self, default: Speculation | None) -> Speculation | None:
        """The speculation of this request: its own, ``"off"``, or the builder's ``default``."""
        if self.speculative is None:
            return default
        return None if self.speculative == "off" else self.speculative


#: The generation fields: GenerationConfig's names (tests check RequestOptions declares each).
GENERATION_FIELDS = tuple(f.name for f in fields(GenerationConfig))


# the chat template's own arguments: a variable of the same name could not be passed beside them
_TEMPLATE_ARGUMENTS = frozenset({"messages", "tools", "add_generation_prompt", "template", "special_tokens"})


def _check_template_kwargs(value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise ConfigurationError(
            'chat_template_kwargs must map template variable names to values, e.g. {"enable_thinking": false}.'
        )
    taken = sorted(_TEMPLATE_ARGUMENTS.intersection(value))
    if taken:
        raise ConfigurationError(
            f"chat_template_kwargs cannot set {', '.join(taken)}: the request itself gives "
            f"{'it' if len(taken) == 1 else 'them'} to the template. Drop {'it' if len(taken) == 1 else 'them'}."
        )


_SEQUENCE_FIELDS = ("eos_token_id", "suppress_tokens", "begin_suppress_tokens", "stop_sequences", "bad_words_ids")


def _tupled(name: str, value: Any) -> Any:
    """A sequence field's value as the frozen tuple it holds: one id or one string becomes a 1-tuple."""
    if isinstance(value, (int, str)):
        return (value,)
    if not isinstance(value, (list, tuple)):
        return value  # left for GenerationConfig's check to name
    if name == "bad_words_ids":
        return tuple(tuple(seq) if isinstance(seq, (list, tuple)) else seq for seq in value)
    return tuple(value)
