"""One call's long-form options, checked where the call enters, and each decoding attempt's settings.

:class:`TranscribeOptions` is a call's options, typed and frozen at its edge (keywords, the server's
form, the CLI's flags); :func:`call_policy` checks them against the model into a frozen
:class:`CallPolicy` (temperatures and thresholds as
:class:`~inference4py.speech.decoding.LongformOptions`, the initial prompt as token ids,
word timestamps, the voice activity detector);
:func:`attempt_config` gives the generation settings of one attempt at one temperature, where
``GenerationConfig.with_temperature`` says what a temperature means.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from inference4py.errors import ConfigurationError, PromptTooLongError, UnsupportedModelError
from inference4py.generation.config import GenerationConfig
from inference4py.speech.decoding import LongformOptions, temperatures_of
from inference4py.speech.parts import WhisperParts
from inference4py.speech.vad import SileroVad, VadOptions
from inference4py.tasks.base import CallPlanner
from inference4py.tasks.options import RequestOptions


@dataclass(frozen=True)
class TranscribeOptions:
    """The long-form options of one transcription, typed and checked once where the call enters.

    Every edge builds one: ``transcribe()`` / ``transcribe_batch()`` / ``stream()`` from their
    keywords (:meth:`from_keywords`), the server from its form fields, the CLI from its flags.  The
    defaults are :class:`~inference4py.speech.decoding.LongformOptions`' (openai-whisper's),
    written there once.

    Attributes:
        temperature: one temperature (0: greedy), or several tried in turn when a window fails a
            threshold, e.g. :data:`FALLBACK_TEMPERATURES` ``(0.0, 0.2, ..., 1.0)``.  None: the
            builder's sampling settings.
        compression_ratio_threshold: retry a window whose text's zlib compression ratio is above
            this (openai-whisper's 2.4; None: never).
        logprob_threshold: retry a window whose average log-probability is below this (-1.0; None: never).
        no_speech_threshold: skip a window whose ``<|nospeech|>`` probability is above this
            while its log-probability is below ``logprob_threshold`` (0.6; None: never).
        condition_on_previous_text: feed the text of the windows so far as ``<|startofprev|>``
            context (transformers' ``condition_on_prev_tokens``); it starts afresh after a window
            decoded at a temperature above 0.5.
        initial_prompt: text given as context to the first window (and kept in the context
            with ``condition_on_previous_text``): spellings, names, a glossary.
        prompt_ids: the same as token ids (without ``<|startofprev|>``); not with ``initial_prompt``.
        word_timestamps: time every word (``Segment.words``) from the cross-attention of the
            alignment heads, as openai-whisper and transformers do; a standard export's decoder is
            rewritten once to expose those weights (kept in the inference4py cache).
        vad: transcribe only the speech that the Silero voice activity detector finds (faster-whisper's
            ``vad_filter``): True fetches ``onnx-community/silero-vad`` from the Hub once; a path to a
            Silero ``.onnx`` file or a :class:`~inference4py.speech.vad.SileroVad` is used as it is.
            The speech regions are laid end to end and transcribed; every time is mapped back to the
            recording, so silence and music give no text.
        vad_options: the detector's rules (:class:`~inference4py.speech.vad.VadOptions`).
        hallucination_silence_threshold: with ``word_timestamps``, skip silences longer than this
            many seconds around a segment that looks hallucinated (unlikely, too short or too long
            words), openai-whisper's option; None: off.
        best_of: at a ``temperature`` above 0, sample this many candidates of the window and keep
            the one with the highest average log-probability (openai-whisper's ``best_of``, default 5;
            greedy attempts decode once).
        generation: the call's generation options (``max_new_tokens`` per window, ``seed``,
            ``num_beams``, ...) as one :class:`~inference4py.tasks.options.RequestOptions`; a
            transcription's keywords that are not fields of this class go there.  Drafts and output
            constraints are refused: Whisper's windows take neither.

    Raises:
        ConfigurationError: an invalid value, or options that cannot go together.
    """

    temperature: float | tuple[float, ...] | None = None
    compression_ratio_threshold: float | None = LongformOptions.compression_ratio_threshold
    logprob_threshold: float | None = LongformOptions.logprob_threshold
    no_speech_threshold: float | None = LongformOptions.no_speech_threshold
    condition_on_previous_text: bool = LongformOptions.condition_on_previous_text
    initial_prompt: str | None = None
    prompt_ids: tuple[int, ...] | None = None
    word_timestamps: bool = False
    vad: bool | str | os.PathLike[str] | SileroVad = False
    vad_options: VadOptions | None = None
    hallucination_silence_threshold: float | None = LongformOptions.hallucination_silence_threshold
    best_of: int = LongformOptions.best_of
    generation: RequestOptions = RequestOptions()

    def __post_init__(self) -> None:
        if not isinstance(self.generation, RequestOptions):
            raise ConfigurationError(
                f"generation takes a RequestOptions, got {type(self.generation).__name__}: pass "
                "generation=RequestOptions(max_new_tokens=...), or the options as keywords."
            )
        self.generation.refuse_speculation("This call")
        self.generation.refuse_output("This call")
        temperatures = temperatures_of(self.temperature, 0.0)  # a number or a sequence, checked
        if self.temperature is not None and not isinstance(self.temperature, (int, float)):
            object.__setattr__(self, "temperature", temperatures)  # a list (JSON, keywords) as a tuple
        if self.prompt_ids is not None:
            object.__setattr__(self, "prompt_ids", tuple(int(t) for t in self.prompt_ids))
        if self.initial_prompt is not None and self.prompt_ids is not None:
            raise ConfigurationError("Pass initial_prompt or prompt_ids, not both.")
        if self.initial_prompt is not None and not isinstance(self.initial_prompt, str):
            raise ConfigurationError(f"initial_prompt must be a str, got {type(self.initial_prompt).__name__}.")
        if self.hallucination_silence_threshold is not None and not self.word_timestamps:
            raise ConfigurationError(
                "hallucination_silence_threshold judges words: call with word_timestamps=True as well."
            )
        self.longform(temperatures, ())  # the thresholds, temperatures and best_of, checked there

    def longform(self, temperatures: tuple[float, ...], prompt_ids: tuple[int, ...]) -> LongformOptions:
        """The window rules of these options, with the prompt as token ids."""
        return LongformOptions(
            temperatures=temperatures,
            compression_ratio_threshold=self.compression_ratio_threshold,
            logprob_threshold=self.logprob_threshold,
            no_speech_threshold=self.no_speech_threshold,
            condition_on_previous_text=bool(self.condition_on_previous_text),
            prompt_ids=prompt_ids,
            hallucination_silence_threshold=self.hallucination_silence_threshold,
            best_of=self.best_of,
        )

    @classmethod
    def from_keywords(
        cls, keywords: Mapping[str, Any], options: TranscribeOptions | None = None
    ) -> tuple[TranscribeOptions, RequestOptions]:
        """The Python edge: a call's keywords as one :class:`TranscribeOptions`, typed here, and its
        generation options (the same object as its ``generation``).

        The keywords named like a field of this class are these options (over ``options``, when
        given); the others are the call's generation options (``max_new_tokens``, ``seed``, ...),
        over ``generation`` as :meth:`RequestOptions.of_call <inference4py.tasks.options.RequestOptions.of_call>`
        merges them (unknown names refused, and drafts and output constraints, which Whisper's
        windows do not take).

        Raises:
            ConfigurationError: an unknown keyword (named), a bad value, options that cannot go together.
        """
        mine = {k: v for k, v in keywords.items() if k in TRANSCRIBE_FIELDS}
        others = {k: v for k, v in keywords.items() if k not in TRANSCRIBE_FIELDS}
        call = options if options is not None and not mine else dataclasses.replace(options or cls(), **mine)
        request = RequestOptions.of_call(call.generation, others)
        if request is not call.generation:
            call = dataclasses.replace(call, generation=request)
        return call, request

    def replace(self, **changes: Any) -> TranscribeOptions:
        """A copy with some fields changed (checked again)."""
        return dataclasses.replace(self, **changes)

    def with_seed(self, seed: int) -> TranscribeOptions:
        """These options with the generation ``seed`` set (a batch row's own seed)."""
        return self.replace(generation=self.generation.replace(seed=seed))


#: The names of :class:`TranscribeOptions`' fields: a call's keywords that are not generation options.
TRANSCRIBE_FIELDS = frozenset(f.name for f in dataclasses.fields(TranscribeOptions))


@dataclass(frozen=True)
class CallPolicy:
    """The long-form options of one call, and whether the temperature was given (else the builder's sampling)."""

    options: LongformOptions
    explicit_temperature: bool
    word_timestamps: bool = False
    vad: SileroVad | None = None  # only the speech it finds is transcribed
    vad_options: VadOptions | None = None  # its rules (None: faster-whisper's defaults)
    request: RequestOptions = RequestOptions()  # the call's generation options (max_new_tokens, seed, ...)

    def config(self, planner: CallPlanner, prompt_len: int) -> GenerationConfig:
        """The call's generation settings for a prompt of ``prompt_len`` tokens (before any temperature)."""
        return planner.for_request(prompt_len, self.request)


class DefaultVad:
    """``vad=True``'s detector: the Hub's Silero VAD, fetched on first use and kept (one per model)."""

    def __init__(self) -> None:
        self._vad: SileroVad | None = None

    def __call__(self) -> SileroVad:
        if self._vad is None:
            self._vad = SileroVad.from_pretrained()
        return self._vad


def call_policy(
    parts: WhisperParts, default_vad: DefaultVad, options: TranscribeOptions, request: RequestOptions
) -> CallPolicy:
    """The policy of a call on this model: ``options`` checked against the model's vocabulary, and the
    call's generation options (``request``).

    Raises:
        ConfigurationError: prompt ids that are not text tokens.
        UnsupportedModelError: a prompt or previous-text context on a model without ``<|startofprev|>``.
    """
    vocab, folder = parts.vocab, parts.folder
    ids: tuple[int, ...] = ()
    if options.initial_prompt is not None:
        if options.initial_prompt.strip():
            # openai-whisper and transformers' get_prompt_ids: one leading space, no special tokens
            ids = tuple(parts.tokenizer.encode(" " + options.initial_prompt.strip(), add_special_tokens=False))
    elif options.prompt_ids is not None:
        ids = options.prompt_ids
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
    if options.condition_on_previous_text and vocab.prev_sot is None:
        raise UnsupportedModelError(
            f"{folder} has no <|startofprev|> token, so condition_on_previous_text cannot be used. "
            "Call with condition_on_previous_text=False."
        )
    return CallPolicy(
        options.longform(temperatures_of(options.temperature, 0.0), ids),
        explicit_temperature=options.temperature is not None,
        word_timestamps=bool(options.word_timestamps),
        vad=_detector(options.vad, default_vad),
        vad_options=options.vad_options,
        request=request,
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
    planner: CallPlanner, prompt_len: int, temperature: float, policy: CallPolicy, context: bool
) -> GenerationConfig:
    """The generation settings of one decoding attempt of a window (``context``: its prompt holds previous text).

    A call's explicit temperature is applied by ``GenerationConfig.with_temperature`` (0: greedy); a
    sampled attempt decodes one sequence (no beams), as openai-whisper's fallback does.
    """
    request = policy.request
    if policy.explicit_temperature and temperature > 0:
        request = request.replace(num_beams=1)
    try:
        config = planner.for_request(prompt_len, request)
    except PromptTooLongError:
        room = (planner.context or 0) - prompt_len
        if not context or room < 1:
            raise
        # transformers: the previous text may leave less room than max_new_tokens; fewer new tokens then
        config = planner.for_request(prompt_len, request.replace(max_new_tokens=room))
    return config.with_temperature(temperature) if policy.explicit_temperature else config
