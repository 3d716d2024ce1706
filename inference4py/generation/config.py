"""GenerationConfig: the settings of one generation call.

Field names and meanings follow transformers' ``GenerationConfig`` so a folder's
``generation_config.json`` can be read as-is and results can be compared with
``model.generate()``.  Values are validated at construction; an invalid value
raises :class:`~inference4py.errors.ConfigurationError` naming the valid range.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from inference4py.errors import ConfigurationError, ModelLoadError

__all__ = ["GenerationConfig"]

MAX_TOP_LOGPROBS = 20  # OpenAI's limit on top_logprobs

EarlyStopping = bool | str


def _bias_pairs(value: Any) -> tuple[tuple[int, float], ...]:
    """``{token_id: bias}`` (ids may be strings, as in JSON) -> sorted ``((id, bias), ...)``."""
    if not value:
        return ()
    items = value.items() if isinstance(value, Mapping) else value
    try:
        pairs = {int(token): float(bias) for token, bias in items}
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(
            f"logit_bias={value!r} is invalid: logit_bias must map token ids to numbers, e.g. {{50256: -100}}."
        ) from exc
    return tuple(sorted(pairs.items()))


def _as_id_list(value: Any) -> tuple[int, ...]:
    if value is None:
        return ()
    if isinstance(value, int):
        return (int(value),)
    return tuple(int(v) for v in value)


@dataclass(frozen=True)
class GenerationConfig:
    """Settings of a generation call, with transformers' names and semantics.

    Args:
        max_new_tokens: Tokens to generate at most (>= 1).
        min_new_tokens: EOS is blocked until this many tokens were generated.
        do_sample: Sample from the distribution instead of taking the argmax.
        temperature: Logit divisor when sampling (> 0); ``0`` means greedy.
        top_k: Keep the k most likely tokens when sampling (0 disables; 50 by default, as in transformers).
        top_p: Keep the smallest set with cumulative probability >= top_p, in (0, 1].
        min_p: Drop tokens less likely than ``min_p`` times the top token, in [0, 1].
        repetition_penalty: > 0; 1.0 disables (CTRL-style, as in transformers).
        no_repeat_ngram_size: Forbid repeating n-grams of this size (0 disables).
        num_beams: Beam width (1 = no beam search).
        num_return_sequences: Sequences to return (<= num_beams without sampling).
        length_penalty: Exponent on the length in beam scores.
        early_stopping: True, False or "never" (transformers' semantics).
        eos_token_id: Token ids that end generation.
        pad_token_id: Padding id for batches.
        bos_token_id: Beginning-of-sequence id (informational).
        decoder_start_token_id: First decoder token of encoder-decoder models.
        forced_bos_token_id: Token forced as the first generated token.
        forced_eos_token_id: Token forced when the length limit is reached.
        bad_words_ids: Token sequences that must never be generated.
        suppress_tokens: Token ids whose logits are set to -inf at every step.
        begin_suppress_tokens: Token ids suppressed at the first generated step.
        stop_sequences: Strings that end generation; they never appear in the output.
        seed: Seed of the sampler's random generator (None = random).
        presence_penalty: OpenAI's: subtracted once from the logit of every token already generated, in [-2, 2].
        frequency_penalty: OpenAI's: subtracted from a token's logit once per time it was generated, in [-2, 2].
        logit_bias: ``{token_id: bias}`` added to the logits at every step, biases in [-100, 100].
        logprobs: Report each generated token's log-probability (raw distribution, before any processor).
        top_logprobs: Also report this many most likely alternatives per step, 0 to 20 (> 0 turns logprobs on).
        prompt_logprobs: Also report the prompt's own tokens' log-probabilities (OpenAI's ``echo``;
            decoder-only models; turns logprobs on).
    """

    max_new_tokens: int = 256
    min_new_tokens: int = 0
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 50
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    num_beams: int = 1
    num_return_sequences: int = 1
    length_penalty: float = 1.0
    early_stopping: EarlyStopping = False
    eos_token_id: tuple[int, ...] = ()
    pad_token_id: int | None = None
    bos_token_id: int | None = None
    decoder_start_token_id: int | None = None
    forced_bos_token_id: int | None = None
    forced_eos_token_id: int | None = None
    bad_words_ids: tuple[tuple[int, ...], ...] = ()
    suppress_tokens: tuple[int, ...] = ()
    begin_suppress_tokens: tuple[int, ...] = ()
    stop_sequences: tuple[str, ...] = ()
    seed: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: tuple[tuple[int, float], ...] = ()
    logprobs: bool = False
    top_logprobs: int = 0
    prompt_logprobs: bool = False

    def __post_init__(self) -> None:
        # Normalise containers so configs are hashable and comparable.
        object.__setattr__(self, "eos_token_id", _as_id_list(self.eos_token_id))
        object.__setattr__(self, "suppress_tokens", _as_id_list(self.suppress_tokens))
        object.__setattr__(self, "begin_suppress_tokens", _as_id_list(self.begin_suppress_tokens))
        object.__setattr__(
            self, "bad_words_ids", tuple(tuple(int(t) for t in seq) for seq in (self.bad_words_ids or ()))
        )
        stops = self.stop_sequences
        if isinstance(stops, str):
            stops = (stops,)
        object.__setattr__(self, "stop_sequences", tuple(stops or ()))
        object.__setattr__(self, "logit_bias", _bias_pairs(self.logit_bias))
        if isinstance(self.top_logprobs, int) and not isinstance(self.top_logprobs, bool) and self.top_logprobs > 0:
            object.__setattr__(self, "logprobs", True)
        if self.prompt_logprobs is True:
            object.__setattr__(self, "logprobs", True)
        self._validate()

    # ------------------------------------------------------------------ validation
    def _validate(self) -> None:
        def bad(name: str, value: Any, valid: str) -> ConfigurationError:
            return ConfigurationError(f"{name}={value!r} is invalid: {name} must be {valid}.")

        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise bad("max_new_tokens", self.max_new_tokens, "an integer >= 1")
        if not isinstance(self.min_new_tokens, int) or self.min_new_tokens < 0:
            raise bad("min_new_tokens", self.min_new_tokens, "an integer >= 0")
        if (
            not isinstance(self.temperature, (int, float))
            or self.temperature < 0
            or self.temperature != self.temperature
        ):
            raise bad("temperature", self.temperature, "a number >= 0 (0 means greedy)")
        if not isinstance(self.top_k, int) or self.top_k < 0:
            raise bad("top_k", self.top_k, "an integer >= 0 (0 disables top-k)")
        if not isinstance(self.top_p, (int, float)) or not (0.0 < self.top_p <= 1.0):
            raise bad("top_p", self.top_p, "in (0, 1] (1.0 disables top-p)")
        if not isinstance(self.min_p, (int, float)) or not (0.0 <= self.min_p <= 1.0):
            raise bad("min_p", self.min_p, "in [0, 1] (0 disables min-p)")
        if not isinstance(self.repetition_penalty, (int, float)) or self.repetition_penalty <= 0:
            raise bad("repetition_penalty", self.repetition_penalty, "a number > 0 (1.0 disables it)")
        if not isinstance(self.no_repeat_ngram_size, int) or self.no_repeat_ngram_size < 0:
            raise bad("no_repeat_ngram_size", self.no_repeat_ngram_size, "an integer >= 0")
        if not isinstance(self.num_beams, int) or self.num_beams < 1:
            raise bad("num_beams", self.num_beams, "an integer >= 1")
        if not isinstance(self.num_return_sequences, int) or self.num_return_sequences < 1:
            raise bad("num_return_sequences", self.num_return_sequences, "an integer >= 1")
        if not self.sampling and self.num_return_sequences > self.num_beams:
            raise ConfigurationError(
                f"num_return_sequences={self.num_return_sequences} is larger than num_beams={self.num_beams}: "
                "without sampling a search returns at most num_beams sequences. Raise num_beams, "
                "or set do_sample=True to draw independent samples."
            )
        if self.early_stopping not in (True, False, "never"):
            raise bad("early_stopping", self.early_stopping, 'True, False or "never"')
        if self.min_new_tokens > self.max_new_tokens:
            raise ConfigurationError(
                f"min_new_tokens={self.min_new_tokens} is larger than max_new_tokens={self.max_new_tokens}; "
                "lower min_new_tokens or raise max_new_tokens."
            )
        for s in self.stop_sequences:
            if not isinstance(s, str) or not s:
                raise bad("stop_sequences", self.stop_sequences, "a list of non-empty strings")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise bad("seed", self.seed, "an integer, or None for a random seed")
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (-2.0 <= value <= 2.0):
                raise bad(name, value, "a number in [-2, 2] (0 disables it)")
        for token, bias in self.logit_bias:
            if token < 0 or not (-100.0 <= bias <= 100.0) or bias != bias:
                raise bad("logit_bias", {token: bias}, "a map of token ids >= 0 to biases in [-100, 100]")
        if not isinstance(self.logprobs, bool):
            raise bad("logprobs", self.logprobs, "True or False")
        if not isinstance(self.prompt_logprobs, bool):
            raise bad("prompt_logprobs", self.prompt_logprobs, "True or False")
        top = self.top_logprobs
        if isinstance(top, bool) or not isinstance(top, int) or not (0 <= top <= MAX_TOP_LOGPROBS):
            raise bad("top_logprobs", top, f"an integer from 0 to {MAX_TOP_LOGPROBS}")

    # ------------------------------------------------------------------ helpers
    @property
    def sampling(self) -> bool:
        """True when tokens are drawn at random (do_sample and temperature > 0)."""
        return bool(self.do_sample) and self.temperature > 0

    def with_temperature(self, temperature: float) -> GenerationConfig:
        """The config at OpenAI's ``temperature``: the one place that says 0 means greedy.

        ``0`` turns sampling off (the temperature itself is kept); any other value samples at it.

        Raises:
            ConfigurationError: a negative or non-numeric temperature.
        """
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
            raise ConfigurationError(f"temperature={temperature!r} is invalid: temperature must be a number >= 0.")
        if temperature == 0:
            return self if not self.do_sample else self.replace(do_sample=False)
        return self.replace(do_sample=True, temperature=float(temperature))

    def with_request(self, changes: Mapping[str, Any]) -> GenerationConfig:
        """The config with one request's generation fields: the one place that decides greedy or sampling.

        Every edge (the builder, the CLI, the server, the batch runner, ``generate(**options)``)
        comes through here, so the same options give the same kind of answer everywhere:

        - ``do_sample`` given: as given (the other fields only set their values);
        - else ``temperature`` given: :meth:`with_temperature` (0 is greedy, any other value samples);
        - else a sampling filter that filters (``top_k > 0``, ``top_p < 1``, ``min_p > 0``) samples
          at the model's temperature: the caller asked for a filter of the sampled distribution, as
          in vLLM and llama.cpp, where only temperature 0 is greedy (transformers would ignore the
          filter with a warning);
        - else the model's own ``do_sample``.

        Raises:
            ConfigurationError: an unknown field or a value outside its range.
        """
        values = dict(changes)
        temperature = values.pop("temperature", None) if "do_sample" not in values else None
        config = self.replace(**values) if values else self
        if temperature is not None:
            return config.with_temperature(temperature)
        if "do_sample" not in values and _filters(values):
            return config.replace(do_sample=True)
        return config

    def replace(self, **changes: object) -> GenerationConfig:
        """Return a copy with some fields changed (validated again).

        Raises:
            ConfigurationError: for an unknown field name or an invalid value.
        """
        known = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise ConfigurationError(
                f"Unknown generation option(s): {', '.join(unknown)}. Valid options: {', '.join(sorted(known))}."
            )
        values: dict[str, Any] = dict(changes)  # any value: __post_init__ checks each one
        return dataclasses.replace(self, **values)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], overrides: Mapping[str, Any] | None = None) -> GenerationConfig:
        """Build from a transformers-style dict, ignoring keys we do not use.

        ``max_length`` / ``min_length`` are total lengths in transformers; they are
        kept out of the config and must be converted by the caller who knows the
        prompt length (see :meth:`from_model_folder`).
        """
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known and v is not None}
        values.update(overrides or {})
        return cls(**values)

    @classmethod
    def from_model_folder(
        cls, folder: str | os.PathLike[str], overrides: Mapping[str, Any] | None = None
    ) -> GenerationConfig:
        """Defaults from ``generation_config.json`` (and ``config.json`` ids) of a model folder."""
        data = read_generation_defaults(folder)
        return cls.from_dict(data, overrides)


def _filters(values: Mapping[str, Any]) -> bool:
    """True when ``values`` set a sampling filter that drops tokens (``top_k=0`` and ``top_p=1`` do not)."""
    top_k, top_p, min_p = values.get("top_k", 0), values.get("top_p", 1.0), values.get("min_p", 0.0)
    return bool(top_k > 0 or top_p < 1.0 or min_p > 0.0)


def _read_json(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except json.JSONDecodeError as exc:
        raise ModelLoadError(f"{path} is not valid JSON ({exc}). Re-download the model or fix the file.") from exc
    if not isinstance(data, dict):
        raise ModelLoadError(f"{path} must contain a JSON object.")
    return data


_ID_KEYS = (
    "eos_token_id",
    "pad_token_id",
    "bos_token_id",
    "decoder_start_token_id",
    "forced_bos_token_id",
    "forced_eos_token_id",
)


def read_generation_defaults(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """Generation defaults as transformers would resolve them for a folder.

    transformers builds the generation config from ``generation_config.json`` when
    present, otherwise from the generation keys of ``config.json``.  Special token
    ids missing from generation_config.json fall back to config.json.  The
    returned dict may contain ``max_length`` / ``min_length`` (total lengths).
    """
    folder = os.fspath(folder)
    cfg_path = os.path.join(folder, "config.json")
    gen_path = os.path.join(folder, "generation_config.json")
    model_cfg = _read_json(cfg_path) if os.path.isfile(cfg_path) else {}
    if os.path.isfile(gen_path):
        data = _read_json(gen_path)
        for key in _ID_KEYS:
            if data.get(key) is None and model_cfg.get(key) is not None:
                data[key] = model_cfg[key]
    else:
        data = {k: v for k, v in model_cfg.items() if k in _GEN_KEYS_IN_MODEL_CONFIG}
    # Older configs nest task defaults; transformers ignores them for generate().
    return data


_GEN_KEYS_IN_MODEL_CONFIG = frozenset(
    {
        "max_length",
        "min_length",
        "do_sample",
        "early_stopping",
        "num_beams",
        "temperature",
        "top_k",
        "top_p",
        "repetition_penalty",
        "length_penalty",
        "no_repeat_ngram_size",
        "bad_words_ids",
        "num_return_sequences",
        "suppress_tokens",
        "begin_suppress_tokens",
        *_ID_KEYS,
    }
)
