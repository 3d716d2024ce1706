"""One call's long-form options, checked where the call enters, and each decoding attempt's settings.

:func:`call_policy` turns ``transcribe()``'s keyword options into a frozen :class:`CallPolicy`
(temperatures and thresholds as :class:`~inference4py.tasks.whisper.decoding.LongformOptions`,
the initial prompt as token ids, word timestamps, the voice activity detector);
:func:`attempt_config` gives the generation settings of one attempt at one temperature, where
``GenerationConfig.with_temperature`` says what a temperature means.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from inference4py.errors import ConfigurationError, PromptTooLongError, UnsupportedModelError
from inference4py.generation.config import GenerationConfig
from inference4py.tasks.base import CallPlanner
from inference4py.tasks.whisper.decoding import LongformOptions, temperatures_of
from inference4py.tasks.whisper.parts import WhisperParts
from inference4py.tasks.whisper.vad import SileroVad, VadOptions

#: the keyword options of ``transcribe()`` that :func:`call_policy` takes (the rest are generation options)
POLICY_ARGUMENTS = (
    "temperature",
    "compression_ratio_threshold",
    "logprob_threshold",
    "no_speech_threshold",
    "condition_on_previous_text",
    "initial_prompt",
    "prompt_ids",
    "word_timestamps",
    "vad",
    "vad_options",
    "hallucination_silence_threshold",
    "best_of",
)


@dataclass(frozen=True)
class CallPolicy:
    """The long-form options of one call, and whether the temperature was given (else the builder's sampling)."""

    options: LongformOptions
    explicit_temperature: bool
    word_timestamps: bool = False
    vad: SileroVad | None = None  # only the speech it finds is transcribed
    vad_options: VadOptions | None = None  # its rules (None: faster-whisper's defaults)


class DefaultVad:
    """``vad=True``'s detector: the Hub's Silero VAD, fetched on first use and kept (one per model)."""

    def __init__(self) -> None:
        self._vad: SileroVad | None = None

    def __call__(self) -> SileroVad:
        if self._vad is None:
            self._vad = SileroVad.from_pretrained()
        return self._vad


def call_policy(
    parts: WhisperParts,
    default_vad: DefaultVad,
    *,
    temperature: float | Sequence[float] | None = None,
    compression_ratio_threshold: float | None = 2.4,
    logprob_threshold: float | None = -1.0,
    no_speech_threshold: float | None = 0.6,
    condition_on_previous_text: bool = False,
    initial_prompt: str | None = None,
    prompt_ids: Sequence[int] | None = None,
    word_timestamps: bool = False,
    vad: bool | str | os.PathLike[str] | SileroVad = False,
    vad_options: VadOptions | None = None,
    hallucination_silence_threshold: float | None = None,
    best_of: int = 5,
) -> CallPolicy:
    """The checked policy of a call (the options are ``transcribe()``'s, documented there).

    Raises:
        ConfigurationError: invalid or conflicting options.
        UnsupportedModelError: a prompt or previous-text context on a model without ``<|startofprev|>``.
    """
    vocab, folder = parts.vocab, parts.folder
    if initial_prompt is not None and prompt_ids is not None:
        raise ConfigurationError("Pass initial_prompt or prompt_ids, not both.")
    ids: tuple[int, ...] = ()
    if initial_prompt is not None:
        if not isinstance(initial_prompt, str):
            raise ConfigurationError(f"initial_prompt must be a str, got {type(initial_prompt).__name__}.")
        if initial_prompt.strip():
            # openai-whisper and transformers' get_prompt_ids: one leading space, no special tokens
            ids = tuple(parts.tokenizer.encode(" " + initial_prompt.strip(), add_special_tokens=False))
    elif prompt_ids is not None:
        ids = tuple(int(t) for t in prompt_ids)
        if ids and vocab.prev_sot is not None and ids[0] == vocab.prev_sot:
            ids = ids[1:]  # transformers' get_prompt_ids starts with <|startofprev|>
    if ids and vocab.prev_sot is None:
        raise UnsupportedModelError(
            f"{folder} has no <|startofprev|> token (prev_sot_token_id in generation_config.json), so it "
            "cannot take a prompt. Drop initial_prompt / prompt_ids, or add the token id to generation_config.json."
        )
    specials = vocab.special_ids | set(vocab.timestamp_range or ())
    if any(t in specials for t in ids):
        raise ConfigurationError("prompt_ids must be text tokens: drop the special and timestamp tokens from it.")
    if condition_on_previous_text and vocab.prev_sot is None:
        raise UnsupportedModelError(
            f"{folder} has no <|startofprev|> token, so condition_on_previous_text cannot be used. "
            "Call with condition_on_previous_text=False."
        )
    if hallucination_silence_threshold is not None and not word_timestamps:
        raise ConfigurationError(
            "hallucination_silence_threshold judges words: call with word_timestamps=True as well."
        )
    return CallPolicy(
        LongformOptions(
            temperatures=temperatures_of(temperature, 0.0),
            compression_ratio_threshold=compression_ratio_threshold,
            logprob_threshold=logprob_threshold,
            no_speech_threshold=no_speech_threshold,
            condition_on_previous_text=bool(condition_on_previous_text),
            prompt_ids=ids,
            hallucination_silence_threshold=hallucination_silence_threshold,
            best_of=best_of,
        ),
        explicit_temperature=temperature is not None,
        word_timestamps=bool(word_timestamps),
        vad=_detector(vad, default_vad),
        vad_options=vad_options,
    )


def _detector(vad: bool | str | os.PathLike[str] | SileroVad | None, default: DefaultVad) -> SileroVad | None:
    """The voice activity detector of a call (``True``: the model's default one)."""
    if vad is None or vad is False:
        return None
    if isinstance(vad, SileroVad):
        return vad
    if vad is True:
        return default()
    if isinstance(vad, (str, os.PathLike)):
        return SileroVad(vad)
    raise ConfigurationError(f"vad must be True, a Silero .onnx path or a SileroVad; got {vad!r}.")


def attempt_config(
    planner: CallPlanner,
    prompt_len: int,
    overrides: Mapping[str, Any],
    temperature: float,
    policy: CallPolicy,
    context: bool,
) -> GenerationConfig:
    """The generation settings of one decoding attempt of a window (``context``: its prompt holds previous text).

    A call's explicit temperature is applied by ``GenerationConfig.with_temperature`` (0: greedy); a
    sampled attempt decodes one sequence (no beams), as openai-whisper's fallback does.
    """
    changes = dict(overrides)
    if policy.explicit_temperature and temperature > 0:
        changes["num_beams"] = 1
    try:
        config = planner.for_call(prompt_len, changes)
    except PromptTooLongError:
        room = (planner.context or 0) - prompt_len
        if not context or room < 1:
            raise
        # transformers: the previous text may leave less room than max_new_tokens; fewer new tokens then
        config = planner.for_call(prompt_len, {**changes, "max_new_tokens": room})
    return config.with_temperature(temperature) if policy.explicit_temperature else config
