"""WhisperSpeechModel: speech to text (transcribe / translate) with Whisper on the native loop.

The model runs as a speech-seq2seq pipeline of the engine (``encoder_model.onnx``
taking ``input_features`` + a decoder with self- and cross-attention caches).  The
task class and its builder live here; so does the window loop (``_events``), the
numpy twin of transformers 4.57 ``WhisperForConditionalGeneration.generate``: each
30 s window is encoded, decoded after the prompt with the generic logits processors,
then Whisper's (``begin_suppress_tokens`` at the first generated position,
``suppress_tokens``, the timestamp rules), and cut into segments.  A backend encodes
and decodes one window through three hooks (``_encode_window``, ``_detect_in``,
``_decode_window``): inference4py_genai's WhisperSpeechModel overrides them.
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from inference4py import audio as _audio
from inference4py.engine.pipeline import load_pipeline, read_model_config
from inference4py.engine.seq2seq import DecoderGraph, Seq2SeqRuntime, Seq2SeqState
from inference4py.engine.sessions import create_session
from inference4py.errors import ConfigurationError, PromptTooLongError, UnsupportedModelError
from inference4py.generation.config import GenerationConfig, read_generation_defaults
from inference4py.generation.processors import (
    LogitsProcessor,
    SuppressTokens,
    SuppressTokensAtBegin,
    make_logits_processors,
)
from inference4py.generation.sampling import make_rng, make_sampler
from inference4py.generation.search import generate_step
from inference4py.tasks.base import CallPlanner, ClosableTask, GenerationBuilder, resolve_generation_defaults
from inference4py.tasks.languages import Language
from inference4py.tasks.whisper.attention import attention_decoder_files
from inference4py.tasks.whisper.decoding import (
    LongformOptions,
    WindowResult,
    WindowScorer,
    best_candidate,
    candidate_generators,
    is_silence,
    needs_fallback,
    no_speech_probability,
    temperatures_of,
)
from inference4py.tasks.whisper.features import feature_settings, log_mel
from inference4py.tasks.whisper.job import POLICY_ARGUMENTS, AlignmentCapture, CallPolicy, FileJob, WindowProbe
from inference4py.tasks.whisper.longform import cut_window
from inference4py.tasks.whisper.prompt import check_request, decoder_prompt
from inference4py.tasks.whisper.results import Transcription
from inference4py.tasks.whisper.timestamps import WhisperTimestampRules
from inference4py.tasks.whisper.vad import SileroVad, SpeechTimeMap, VadOptions, transcription_map
from inference4py.tasks.whisper.vocab import TASKS, WhisperVocab, language_code
from inference4py.tasks.whisper.words import default_alignment_heads
from inference4py.tokenization import Tokenizer, load_tokenizer

# --------------------------------------------------------------------------- builder


class WhisperBuilder(GenerationBuilder["WhisperSpeechModel"]):
    """Options of a :class:`WhisperSpeechModel` (see GenerationBuilder for the shared ones)."""

    def __init__(self, *, preset: str | None = None, model_id: str | None = None) -> None:
        super().__init__(preset=preset, model_id=model_id)
        self._language: str | None = None
        self._whisper_task: str | None = None
        self._timestamps = False

    def language(self, code: Language | str | None) -> WhisperBuilder:
        """The spoken language (``"en"``, ``"english"``, ``Language.EN``); None detects it per call."""
        self._language = None if code is None else language_code(code)
        return self

    def task(self, task: str) -> WhisperBuilder:
        """``"transcribe"`` (same language) or ``"translate"`` (to English)."""
        if task not in TASKS:
            raise ConfigurationError(f"task must be 'transcribe' or 'translate', got {task!r}.")
        self._whisper_task = task
        return self

    def timestamps(self, value: bool = True) -> WhisperBuilder:
        """Predict timestamp tokens: segments get their own times (default: off, one segment per 30 s)."""
        self._timestamps = bool(value)
        return self

    def num_beams(self, n: int) -> WhisperBuilder:
        """Beam width per 30 s window (1 = greedy / sampling)."""
        return self._set(num_beams=n)

    def __repr__(self) -> str:
        text = super().__repr__()[:-1]
        extra = [f"{k}={v!r}" for k, v in (("language", self._language), ("task", self._whisper_task)) if v]
        if self._timestamps:
            extra.append("timestamps=True")
        sep = ", " if extra and not text.endswith("(") else ""
        return text + sep + ", ".join(extra) + ")"


# --------------------------------------------------------------------------- the task


class WhisperSpeechModel(ClosableTask):
    """Transcribe or translate speech with Whisper (any ONNX export with encoder + decoder-with-past).

    Example:
        >>> with WhisperSpeechModel.whisperSmall().language("en").build() as asr:   # doctest: +SKIP
        ...     print(asr.transcribe("meeting.mp3").text)
    """

    Builder = WhisperBuilder

    # ------------------------------------------------------------------ presets
    @classmethod
    def builder(cls) -> WhisperBuilder:
        """A builder with no model chosen: call ``model_id`` or ``model_path``."""
        return cls._preset(None, None)

    @classmethod
    def _preset(cls, name: str | None, model_id: str | None) -> WhisperBuilder:
        b = WhisperBuilder(preset=name, model_id=model_id)
        b._task = cls
        return b

    @classmethod
    def whisperTiny(cls) -> WhisperBuilder:  # noqa: N802 - inference4j's names
        """Whisper tiny (39M, multilingual), onnx-community/whisper-tiny."""
        return cls._preset("whisperTiny", "onnx-community/whisper-tiny")

    @classmethod
    def whisperBase(cls) -> WhisperBuilder:  # noqa: N802
        """Whisper base (74M, multilingual), onnx-community/whisper-base."""
        return cls._preset("whisperBase", "onnx-community/whisper-base")

    @classmethod
    def whisperSmall(cls) -> WhisperBuilder:  # noqa: N802
        """Whisper small (244M, multilingual), onnx-community/whisper-small."""
        return cls._preset("whisperSmall", "onnx-community/whisper-small")

    @classmethod
    def whisperLargeV3Turbo(cls) -> WhisperBuilder:  # noqa: N802
        """Whisper large-v3-turbo (809M, multilingual, 128 mel bins), onnx-community/whisper-large-v3-turbo."""
        return cls._preset("whisperLargeV3Turbo", "onnx-community/whisper-large-v3-turbo")

    @classmethod
    def whisperTinyEn(cls) -> WhisperBuilder:  # noqa: N802
        """Whisper tiny.en (English only), onnx-community/whisper-tiny.en."""
        return cls._preset("whisperTinyEn", "onnx-community/whisper-tiny.en")

    @classmethod
    def whisperBaseEn(cls) -> WhisperBuilder:  # noqa: N802
        """Whisper base.en (English only), onnx-community/whisper-base.en."""
        return cls._preset("whisperBaseEn", "onnx-community/whisper-base.en")

    @classmethod
    def whisperSmallEn(cls) -> WhisperBuilder:  # noqa: N802
        """Whisper small.en (English only), onnx-community/whisper-small.en."""
        return cls._preset("whisperSmallEn", "onnx-community/whisper-small.en")

    # ------------------------------------------------------------------ construction
    @classmethod
    def _from_builder(cls, b: WhisperBuilder) -> WhisperSpeechModel:
        return cls(b.resolve_folder(), b)

    def __init__(self, folder: Path, builder: WhisperBuilder) -> None:
        self.folder = Path(folder)
        self._builder_repr = repr(builder)
        if builder._stops:
            raise ConfigurationError("stop_sequence is not supported by WhisperSpeechModel; remove it.")
        spec = load_pipeline(self.folder)
        config = read_model_config(self.folder)
        self._session_options = builder.session_options()
        self._runtime = Seq2SeqRuntime(spec, config, self._session_options)
        self._aligned: Seq2SeqRuntime | None = None  # the decoder with cross_attentions outputs, made on demand
        self._default_vad: SileroVad | None = None  # vad=True's detector, fetched on first use
        if self._runtime.encoder_input != "input_features":
            raise UnsupportedModelError(
                f"{self.folder} is a text encoder-decoder model, not a speech model (its encoder takes "
                f"'{self._runtime.encoder_input}'). Use FlanT5TextGenerator / BartSummarizer / MarianTranslator for it, "
                "or point WhisperSpeechModel at a Whisper export (encoder_model.onnx taking input_features)."
            )
        self.tokenizer: Tokenizer = load_tokenizer(self.folder)
        self._vocab = WhisperVocab.read(self.folder, self.tokenizer, config, self._runtime.vocab_size)
        self._features = self._feature_settings(config)
        defaults, totals = resolve_generation_defaults(self.folder)
        # Whisper's own processors replace the generic suppress lists (transformers does the same).
        defaults = defaults.replace(
            suppress_tokens=(),
            begin_suppress_tokens=(),
            forced_bos_token_id=None,
            eos_token_id=(self._vocab.eot,) if not defaults.eos_token_id else defaults.eos_token_id,
            decoder_start_token_id=self._vocab.sot,
        )
        self._planner = CallPlanner(
            defaults,
            totals,
            builder.generation_overrides(),
            extra_eos=builder._eos,
            context=self._runtime.max_target_positions,
            total_counts_prompt=True,
        )
        self._processors = tuple(builder._processors)
        self._language = builder._language
        self._task_name = builder._whisper_task
        self._timestamps = builder._timestamps
        # check the builder's language / task against this model now, not at the first call
        self._check_request(self._language, self._task_name, self._timestamps)

    def _feature_settings(self, config: Mapping[str, Any]) -> dict[str, int]:
        return feature_settings(self.folder, config, self._runtime.encoder_inputs["input_features"])

    @property
    def generation_config(self) -> GenerationConfig:
        """The defaults every call starts from (folder + builder options)."""
        return self._planner.base

    @property
    def is_multilingual(self) -> bool:
        return self._vocab.is_multilingual

    @property
    def languages(self) -> tuple[str, ...]:
        """Codes of the languages this model knows (``("en",)`` for English-only models)."""
        return tuple(self._vocab.lang_to_id) if self._vocab.is_multilingual else ("en",)

    @property
    def n_mels(self) -> int:
        return self._features["n_mels"]

    def __repr__(self) -> str:
        return f"WhisperSpeechModel(folder={str(self.folder)!r}, builder={self._builder_repr})"

    def _release(self) -> None:
        self._aligned = None
        self._runtime = None  # type: ignore[assignment]  # closed: every call checks _check_open() first

    # ------------------------------------------------------------------ audio
    def features(self, audio: _audio.AudioInput, *, sample_rate: int | None = None) -> np.ndarray:
        """The log-mel features of ``audio``: ``[n_mels, 3000]``, or all frames when longer than 30 s."""
        samples = _audio.load_audio(audio, sample_rate=sample_rate, target_rate=self._features["sample_rate"])
        return self._features_of(samples)

    def _features_of(self, samples: np.ndarray) -> np.ndarray:
        return log_mel(samples, self._features)

    # ------------------------------------------------------------------ prompt
    def _check_request(self, language: str | None, task: str | None, timestamps: bool) -> None:
        check_request(self._vocab, self.folder, language, task, timestamps)

    def _prompt(self, language: str | None, task: str | None, timestamps: bool) -> tuple[list[int | None], int | None]:
        """The decoder prompt, with None where a detected language goes (see :func:`decoder_prompt`).

        Returns (tokens, index of the language slot to fill by detection or None).
        """
        return decoder_prompt(self._vocab, language, task, timestamps)

    def _detect(self, hidden: Any, mask: np.ndarray) -> int:
        """One decoder step after <|startoftranscript|>; the most likely language token."""
        logits = Seq2SeqState(self._runtime, hidden, mask).prefill(np.array([[self._vocab.sot]], dtype=np.int64))[0]
        return self._vocab.most_likely_language(logits)

    def detect_language(self, audio: _audio.AudioInput, *, sample_rate: int | None = None) -> str:
        """The language Whisper hears in the first 30 s (code such as ``"en"``).

        Raises:
            UnsupportedModelError: an English-only model (it cannot tell languages apart).
            AudioError: unreadable or empty audio.
        """
        self._check_open()
        if not self._vocab.is_multilingual or not self._vocab.lang_to_id:
            raise UnsupportedModelError(f"{self.folder} is an English-only model: it does not detect languages.")
        feats = self.features(audio, sample_rate=sample_rate)
        context = self._encode_window(self._window(feats, 0)[0])  # the backend's hooks (see below)
        return self._vocab.language_of(self._detect_in(context)) or ""

    def _window(self, feats: np.ndarray, seek: int) -> tuple[np.ndarray, int]:
        return cut_window(feats, seek, self._features["window_frames"])

    # ------------------------------------------------------------------ transcription
    def transcribe(
        self,
        audio: _audio.AudioInput,
        *,
        sample_rate: int | None = None,
        language: Language | str | None = None,
        task: str | None = None,
        timestamps: bool | None = None,
        on_token: Callable[[str], None] | None = None,
        on_progress: Callable[[float, float], None] | None = None,
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
        **overrides: Any,
    ) -> Transcription:
        """Transcribe (or translate to English) an audio file or array.

        Long audio is decoded 30 s window by window, as openai-whisper's ``transcribe()`` and
        transformers' long-form ``generate()`` do it: a window whose text is a loop (compression
        ratio above ``compression_ratio_threshold``) or unlikely (average log-probability below
        ``logprob_threshold``) is decoded again at the next of several ``temperature`` values; a
        window that is silence (``<|nospeech|>`` probability above ``no_speech_threshold`` and a
        low log-probability) gives no text.

        Args:
            audio: a path (wav, flac, mp3, ogg, ...), a ``(samples, sample_rate)`` pair, or a
                numpy array with ``sample_rate=``.  Any rate and channel count: it is mixed to
                mono and resampled to 16 kHz.
            sample_rate: the rate of a bare numpy array.
            language: overrides the builder's language for this call (None: builder's, else detected).
            task: ``"transcribe"`` or ``"translate"`` (default: the builder's, else the model's default).
            timestamps: predict timestamp tokens and time each segment (default: the builder's setting).
            on_token: called with each piece of text as soon as it is final (with timestamps, a
                piece is final once its segment is closed; with several temperatures or a window
                that may be silence, once its window is judged).
            temperature: one temperature (0: greedy), or several tried in turn when a window fails
                a threshold, e.g. :data:`FALLBACK_TEMPERATURES` ``(0.0, 0.2, ..., 1.0)``.  None: the
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
                Silero ``.onnx`` file or a :class:`~inference4py.tasks.whisper.vad.SileroVad` is used as it is.
                The speech regions are laid end to end and transcribed; every time is mapped back to the
                recording, so silence and music give no text.
            vad_options: the detector's rules (:class:`~inference4py.tasks.whisper.vad.VadOptions`).
            hallucination_silence_threshold: with ``word_timestamps``, skip silences longer than this
                many seconds around a segment that looks hallucinated (unlikely, too short or too long
                words), openai-whisper's option; None: off.
            best_of: at a ``temperature`` above 0, sample this many candidates of the window and keep
                the one with the highest average log-probability (openai-whisper's ``best_of``, default 5;
                greedy attempts decode once).
            **overrides: generation options for this call (``max_new_tokens`` counts per 30 s window,
                ``num_beams``, ``seed``, ...).

        Returns:
            A :class:`Transcription` (text, segments, language, token ids).

        Raises:
            AudioError: unreadable, non-audio or empty input.
            UnsupportedModelError: a language / task / timestamps the model cannot do.
            ConfigurationError: invalid options.
        """
        options = self._longform_options(
            temperature=temperature,
            compression_ratio_threshold=compression_ratio_threshold,
            logprob_threshold=logprob_threshold,
            no_speech_threshold=no_speech_threshold,
            condition_on_previous_text=condition_on_previous_text,
            initial_prompt=initial_prompt,
            prompt_ids=prompt_ids,
            word_timestamps=word_timestamps,
            vad=vad,
            vad_options=vad_options,
            hallucination_silence_threshold=hallucination_silence_threshold,
            best_of=best_of,
        )
        result = None
        for kind, value in self._events(audio, sample_rate, language, task, timestamps, overrides, options):
            if kind == "text":
                if on_token is not None:
                    on_token(value)
            elif kind == "progress":
                if on_progress is not None:
                    on_progress(*value)
            else:
                result = value
        return result  # type: ignore[return-value]  # _events always ends with ("done", Transcription)

    def transcribe_batch(
        self,
        audios: Sequence[_audio.AudioInput],
        *,
        sample_rate: int | None = None,
        language: Language | str | None = None,
        task: str | None = None,
        timestamps: bool | None = None,
        batch_size: int = 8,
        parallel_chunks: bool = False,
        on_progress: Callable[[float, float], None] | None = None,
        **kwargs: Any,
    ) -> list[Transcription]:
        """Transcribe several recordings, their 30 s windows encoded and decoded as batches.

        Each round takes the current window of up to ``batch_size`` recordings, runs the encoder
        once for all of them and decodes them together; every recording gets exactly the
        transcription :meth:`transcribe` gives it alone.

        Args:
            audios: the recordings (paths, ``(samples, rate)`` pairs, or arrays with ``sample_rate=``).
            batch_size: windows per batch (1 or more).
            parallel_chunks: cut each recording into independent chunks of at most 30 s — the
                speech chunks of ``vad`` (:func:`~inference4py.tasks.whisper.vad.chunk_speech`), else
                fixed 30 s windows — and decode all of them as batches, as faster-whisper's
                ``BatchedInferencePipeline`` does: the fastest way through a long recording, one
                recording alone included.  Each chunk is transcribed as if it were a recording of
                its own (no context from the chunk before; the language is detected once per
                recording, on its first chunk); times are mapped back to the recording.
            on_progress: called after each batch with (seconds of audio done, seconds in all recordings).
            **kwargs: :meth:`transcribe`'s options (``temperature``, thresholds, ``initial_prompt``,
                ``condition_on_previous_text``, ``word_timestamps``, generation options), except
                ``on_token`` and beam search.

        Returns:
            One :class:`Transcription` per recording, in order.

        Raises:
            ConfigurationError: ``batch_size`` below 1, ``num_beams`` above 1, invalid options.
            UnsupportedModelError: a backend other than the native one.
        """
        started = time.perf_counter()
        self._check_open()
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigurationError(f"batch_size must be a positive integer, got {batch_size!r}.")
        if not isinstance(getattr(self, "_runtime", None), Seq2SeqRuntime):
            raise UnsupportedModelError(
                "transcribe_batch runs on the native onnxruntime backend: use inference4py.WhisperSpeechModel."
            )
        if isinstance(audios, (str, Path, tuple, np.ndarray)):
            raise ConfigurationError("transcribe_batch takes a list of recordings; use transcribe() for one.")
        policy = self._longform_options(**{k: kwargs.pop(k) for k in POLICY_ARGUMENTS if k in kwargs})
        overrides = kwargs
        lang = language_code(language) if language is not None else self._language
        task_name = task if task is not None else self._task_name
        if task_name is not None and task_name not in TASKS:
            raise ConfigurationError(f"task must be 'transcribe' or 'translate', got {task_name!r}.")
        want_ts = self._timestamps if timestamps is None else bool(timestamps)
        self._check_request(lang, task_name, want_ts)
        if parallel_chunks:
            return self._transcribe_chunks(
                audios, sample_rate, lang, task_name, want_ts, policy, overrides, batch_size, started, on_progress
            )
        jobs = [self._job(a, sample_rate, lang, task_name, want_ts, policy, overrides) for a in audios]
        self._run_jobs(jobs, want_ts, policy, overrides, batch_size, on_progress)
        elapsed = time.perf_counter() - started
        return [job.finish(elapsed)[1] for job in jobs]

    def _run_jobs(
        self,
        jobs: list[FileJob],
        timestamps: bool,
        policy: CallPolicy,
        overrides: Mapping[str, Any],
        batch_size: int,
        on_progress: Callable[[float, float], None] | None,
    ) -> None:
        """Decode ``jobs`` as batches of up to ``batch_size`` rows (greedy or sampling, each its own seed)."""
        from inference4py.tasks.whisper.batch import run_jobs

        if jobs and self._planner.for_call(len(jobs[0].prompt), overrides).num_beams > 1:
            raise ConfigurationError(
                "transcribe_batch decodes greedily or by sampling: drop num_beams (or use transcribe())."
            )
        rngs = [make_rng(self._planner.for_call(len(j.prompt), overrides).seed) for j in jobs]
        run_jobs(
            self,
            jobs,
            rngs,
            batch_size=batch_size,
            timestamps=timestamps,
            policy=policy,
            overrides=overrides,
            on_progress=on_progress,
        )

    def _transcribe_chunks(
        self,
        audios: Sequence[_audio.AudioInput],
        sample_rate: int | None,
        language: str | None,
        task: str | None,
        timestamps: bool,
        policy: CallPolicy,
        overrides: Mapping[str, Any],
        batch_size: int,
        started: float,
        on_progress: Callable[[float, float], None] | None = None,
    ) -> list[Transcription]:
        """``transcribe_batch(parallel_chunks=True)``: every chunk of every recording is a job of its own."""
        from dataclasses import replace

        from inference4py.tasks.whisper.batch import cut_chunks, merge_chunks

        rate = self._features["sample_rate"]
        per_file: list[tuple[float, list[Any]]] = []
        jobs: list[FileJob] = []
        plain = replace(policy, vad=None)  # the chunks are the speech already
        for audio in audios:
            samples = _audio.load_audio(audio, sample_rate=sample_rate, target_rate=rate)
            chunks = cut_chunks(samples, rate, self._features["n_samples"], policy.vad, policy.vad_options)
            lang = language
            if lang is None and chunks and self._vocab.is_multilingual and self._vocab.lang_to_id:
                lang = self.detect_language((chunks[0].samples, rate))  # once per recording
            file_jobs = [self._job_of(c.samples, lang, task, timestamps, plain, overrides) for c in chunks]
            per_file.append((samples.size / rate, list(zip(chunks, file_jobs))))
            jobs.extend(file_jobs)
        self._run_jobs(jobs, timestamps, plain, overrides, batch_size, on_progress)
        elapsed = time.perf_counter() - started
        out = []
        for duration, pairs in per_file:
            parts = [(chunk, job.finish(elapsed)[1]) for chunk, job in pairs]
            language_out = parts[0][1].language if parts else language if language else None
            if not self._vocab.is_multilingual:
                language_out = "en"
            out.append(merge_chunks(parts, duration=duration, language=language_out, elapsed=elapsed))
        return out

    def stream(self, audio: _audio.AudioInput, **kwargs: Any) -> Iterator[str]:
        """Yield the text piece by piece (same arguments as :meth:`transcribe`, without ``on_token``)."""
        sample_rate = kwargs.pop("sample_rate", None)
        language = kwargs.pop("language", None)
        task = kwargs.pop("task", None)
        timestamps = kwargs.pop("timestamps", None)
        policy = {k: kwargs.pop(k) for k in POLICY_ARGUMENTS if k in kwargs}
        options = self._longform_options(**policy)
        for kind, value in self._events(audio, sample_rate, language, task, timestamps, kwargs, options):
            if kind == "text":
                yield value

    def _longform_options(
        self,
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
        if initial_prompt is not None and prompt_ids is not None:
            raise ConfigurationError("Pass initial_prompt or prompt_ids, not both.")
        ids: tuple[int, ...] = ()
        if initial_prompt is not None:
            if not isinstance(initial_prompt, str):
                raise ConfigurationError(f"initial_prompt must be a str, got {type(initial_prompt).__name__}.")
            if initial_prompt.strip():
                # openai-whisper and transformers' get_prompt_ids: one leading space, no special tokens
                ids = tuple(self.tokenizer.encode(" " + initial_prompt.strip(), add_special_tokens=False))
        elif prompt_ids is not None:
            ids = tuple(int(t) for t in prompt_ids)
            if ids and self._vocab.prev_sot is not None and ids[0] == self._vocab.prev_sot:
                ids = ids[1:]  # transformers' get_prompt_ids starts with <|startofprev|>
        if ids and self._vocab.prev_sot is None:
            raise UnsupportedModelError(
                f"{self.folder} has no <|startofprev|> token (prev_sot_token_id in generation_config.json), so it "
                "cannot take a prompt. Drop initial_prompt / prompt_ids, or add the token id to generation_config.json."
            )
        specials = self._vocab.special_ids | set(self._vocab.timestamp_range or ())
        if any(t in specials for t in ids):
            raise ConfigurationError("prompt_ids must be text tokens: drop the special and timestamp tokens from it.")
        if condition_on_previous_text and self._vocab.prev_sot is None:
            raise UnsupportedModelError(
                f"{self.folder} has no <|startofprev|> token, so condition_on_previous_text cannot be used. "
                "Call with condition_on_previous_text=False."
            )
        if hallucination_silence_threshold is not None and not word_timestamps:
            raise ConfigurationError(
                "hallucination_silence_threshold judges words: call with word_timestamps=True as well."
            )
        explicit = temperature is not None
        temps = temperatures_of(temperature, 0.0)
        return CallPolicy(
            LongformOptions(
                temperatures=temps,
                compression_ratio_threshold=compression_ratio_threshold,
                logprob_threshold=logprob_threshold,
                no_speech_threshold=no_speech_threshold,
                condition_on_previous_text=bool(condition_on_previous_text),
                prompt_ids=ids,
                hallucination_silence_threshold=hallucination_silence_threshold,
                best_of=best_of,
            ),
            explicit_temperature=explicit,
            word_timestamps=bool(word_timestamps),
            vad=self._vad_model(vad),
            vad_options=vad_options,
        )

    def _vad_model(self, vad: bool | str | os.PathLike[str] | SileroVad | None) -> SileroVad | None:
        """The voice activity detector of a call (the Hub's Silero VAD is fetched once per model)."""
        if vad is None or vad is False:
            return None
        if isinstance(vad, SileroVad):
            return vad
        if vad is True:
            if self._default_vad is None:
                self._default_vad = SileroVad.from_pretrained()
            return self._default_vad
        if isinstance(vad, (str, os.PathLike)):
            return SileroVad(vad)
        raise ConfigurationError(f"vad must be True, a Silero .onnx path or a SileroVad; got {vad!r}.")

    def _attempt_config(
        self, prompt_len: int, overrides: Mapping[str, Any], temperature: float, policy: CallPolicy, context: bool
    ) -> GenerationConfig:
        """The generation settings of one decoding attempt of a window (its prompt may hold context)."""
        changes = dict(overrides)
        if policy.explicit_temperature:
            if temperature > 0:
                changes.update(do_sample=True, temperature=temperature, num_beams=1)
            else:
                changes.update(do_sample=False)
                changes.pop("temperature", None)
        try:
            return self._planner.for_call(prompt_len, changes)
        except PromptTooLongError:
            room = (self._planner.context or 0) - prompt_len
            if not context or room < 1:
                raise
            # transformers: the previous text may leave less room than max_new_tokens; fewer new tokens then
            return self._planner.for_call(prompt_len, {**changes, "max_new_tokens": room})

    def _events(
        self,
        audio: _audio.AudioInput,
        sample_rate: int | None,
        language: Language | str | None,
        task: str | None,
        timestamps: bool | None,
        overrides: Mapping[str, Any],
        policy: CallPolicy | None = None,
    ) -> Iterator[tuple[str, Any]]:
        started = time.perf_counter()
        self._check_open()
        policy = policy if policy is not None else CallPolicy(LongformOptions(), explicit_temperature=False)
        options = policy.options
        lang = language_code(language) if language is not None else self._language
        task_name = task if task is not None else self._task_name
        if task_name is not None and task_name not in TASKS:
            raise ConfigurationError(f"task must be 'transcribe' or 'translate', got {task_name!r}.")
        want_ts = self._timestamps if timestamps is None else bool(timestamps)
        self._check_request(lang, task_name, want_ts)

        job = self._job(audio, sample_rate, lang, task_name, want_ts, policy, overrides)
        rng = make_rng(self._planner.for_call(len(job.prompt), overrides).seed)
        while job.active:
            context = self._encode_window(job.window())
            if job.needs_language:
                job.set_language(self._detect_in(context))
            ids, has_context = job.ids()
            for attempt, temp in enumerate(options.temperatures):
                config = self._attempt_config(len(ids), overrides, temp, policy, has_context)
                n = job.candidates(temp)
                # best_of: each candidate samples with a generator of its own, as in transcribe_batch
                candidates: list[tuple[WindowResult, AlignmentCapture | None]] = []
                for cand_rng in candidate_generators(rng, n):
                    capture = None if job.words_for is None else AlignmentCapture(*job.words_for)
                    scorer = WindowScorer(make_sampler(config), capture)
                    out: list[int] = []
                    live: bool | None = None  # streamed while decoding: nothing can discard this window's text
                    for token in self._decode_window(context, ids, config, want_ts, scorer, cand_rng):
                        if live is None:
                            live = job.live(scorer)
                        out.append(token)
                        if live:
                            piece = job.stream(out)
                            if piece:
                                yield "text", piece
                    candidates.append((job.judge(out, config, scorer), capture))
                result, capture = candidates[best_candidate([c for c, _ in candidates])]
                if attempt == len(options.temperatures) - 1 or not needs_fallback(result, options):
                    break
            if is_silence(result, options):
                job.skip()
            else:
                for piece in job.accept(result, capture):
                    yield "text", piece
            yield "progress", (job.done, job.recording)
        tail, transcription = job.finish(time.perf_counter() - started)
        if tail:
            yield "text", tail
        yield "done", transcription

    def _job(
        self,
        audio: _audio.AudioInput,
        sample_rate: int | None,
        language: str | None,
        task: str | None,
        timestamps: bool,
        policy: CallPolicy,
        overrides: Mapping[str, Any],
    ) -> FileJob:
        """A file's window loop: its audio read, its prompt made, the options checked."""
        samples = _audio.load_audio(audio, sample_rate=sample_rate, target_rate=self._features["sample_rate"])
        duration = samples.size / self._features["sample_rate"]
        time_map = None
        if policy.vad is not None:  # only the speech, laid end to end (faster-whisper's vad_filter)
            time_map = transcription_map(policy.vad, samples, policy.vad_options)
            samples = time_map.extract(samples)
        return self._job_of(
            samples, language, task, timestamps, policy, overrides, time_map=time_map, duration=duration
        )

    def _job_of(
        self,
        samples: np.ndarray,
        language: str | None,
        task: str | None,
        timestamps: bool,
        policy: CallPolicy,
        overrides: Mapping[str, Any],
        *,
        time_map: SpeechTimeMap | None = None,
        duration: float | None = None,
    ) -> FileJob:
        """The window loop of samples at the model's rate."""
        if samples.size:
            feats = self._features_of(samples)  # [n_mels, frames]
        else:  # no speech at all: no window to decode
            feats = np.zeros((self._features["n_mels"], 0), dtype=np.float32)
        prompt, detect_at = self._prompt(language, task, timestamps)
        self._attempt_config(
            len(prompt), overrides, policy.options.temperatures[0], policy, False
        )  # refuse bad options
        words_for = self._word_setup() if policy.word_timestamps else None
        return FileJob(
            self,
            samples,
            feats,
            prompt,
            detect_at,
            timestamps=timestamps,
            policy=policy,
            words_for=words_for,
            time_map=time_map,
            duration=duration,
        )

    def _language_in(self, prompt: Sequence[int | None]) -> str | None:
        """The language code of a decoder prompt (``"en"`` for English-only models)."""
        v = self._vocab
        if not v.is_multilingual:
            return "en"
        return v.language_of(prompt[1]) if len(prompt) > 1 and prompt[1] is not None else None

    def _word_setup(self) -> tuple[list[tuple[int, int]], np.ndarray]:
        """(alignment heads, text-token mask over the vocabulary) for word timestamps; refuses other backends."""
        if getattr(self, "_runtime", None) is None or not isinstance(self._runtime, Seq2SeqRuntime):
            raise UnsupportedModelError(
                "word_timestamps needs the cross-attention weights of the native onnxruntime backend; use "
                "inference4py.WhisperSpeechModel for it."
            )
        v = self._vocab
        size = int(self._runtime.vocab_size or 0) or max(v.special_ids | {v.eot}) + 1
        mask = np.ones(size, dtype=bool)
        mask[[i for i in v.special_ids if i < size]] = False
        if v.timestamp_range is not None:
            mask[v.timestamp_range.start : min(v.timestamp_range.stop, size)] = False
        return self._alignment_heads(), mask

    def _median_width(self) -> int:
        return int(self._runtime.config.get("median_filter_width") or 7)

    def _runtime_context(self) -> int | None:
        """The decoder's positions (``max_target_positions``)."""
        return self._planner.context

    # -- the hooks of the window loop: a backend (here the native engine) encodes and decodes one window
    def _encode_window(self, window: np.ndarray) -> Any:
        """What the window's decoding needs from the encoder: (hidden states, mask)."""
        return self._runtime.encode(window)

    def _detect_in(self, context: Any) -> int:
        """The language token for an encoded window."""
        return self._detect(*context)

    def _decode_window(
        self,
        context: Any,
        ids: list[int],
        config: GenerationConfig,
        timestamps: bool,
        sampler: Any,
        rng: np.random.Generator,
    ) -> Iterator[int]:
        """The tokens generated for one window after the prompt ``ids``.

        A :class:`WindowScorer` as ``sampler`` also receives the ``<|nospeech|>`` probability
        (the raw logits at ``<|startoftranscript|>``) and, for beam search, the best beam's score.
        """
        v = self._vocab
        capture = sampler.alignment if isinstance(sampler, WindowScorer) else None
        beams = config.num_beams > 1
        state: Any = (
            Seq2SeqState(self._alignment_runtime(), *context)
            if capture is not None and not beams
            else self._new_state(context)
        )
        processors = self._window_processors(config, len(ids), timestamps)
        if isinstance(sampler, WindowScorer):
            sot_at = ids.index(v.sot) if v.no_speech is not None and v.sot in ids else None
            if beams:  # beam search reorders its state: probe on a state of its own
                if sot_at is not None and v.no_speech is not None:
                    logits = self._new_state(context).prefill(np.asarray([ids[: sot_at + 1]], dtype=np.int64))
                    sampler.set_no_speech(no_speech_probability(logits[0], v.no_speech))
            else:
                state = WindowProbe(state, sampler, sot_at=sot_at, no_speech=v.no_speech, capture=capture)
        if beams and capture is not None and isinstance(sampler, WindowScorer):
            tokens = list(self._window_tokens(state, ids, config, processors, sampler, rng))
            self._align_tokens(context, ids, tokens, sampler, capture)
            yield from tokens
            return
        yield from self._window_tokens(state, ids, config, processors, sampler, rng)

    def _align_tokens(
        self, context: Any, ids: list[int], tokens: list[int], scorer: WindowScorer, capture: AlignmentCapture
    ) -> None:
        """Word timestamps of a beam search: the chosen beam's tokens fed again, one by one, on a state of
        their own, so that ``capture`` holds the cross-attention rows and token probabilities greedy
        decoding would have recorded for them (transformers gathers the same rows along the beam's path)."""
        probe = WindowProbe(
            Seq2SeqState(self._alignment_runtime(), *context), scorer, sot_at=None, no_speech=None, capture=capture
        )
        probe.prefill(np.asarray([ids], dtype=np.int64))
        for token in tokens[:-1]:  # as in greedy decoding, the last token is not fed back
            probe.step(np.asarray([token], dtype=np.int64))

    def _alignment_runtime(self) -> Seq2SeqRuntime:
        """The runtime whose decoder graphs output ``cross_attentions.{i}`` (rewritten once, cached)."""
        if self._aligned is None:
            rt = self._runtime
            spec = rt.spec
            roles = ["decoder", *(["decoder_with_past"] if spec.has("decoder_with_past") else [])]
            layers = rt.config.get("decoder_layers")
            files = attention_decoder_files(
                [Path(spec.path(r)) for r in roles], layers=None if layers is None else int(layers)
            )
            graphs = {}
            for role in roles:
                desc = spec.session(role)
                path = files[Path(spec.path(role))]
                session = create_session(
                    path,
                    self._session_options,
                    provider=desc.provider,
                    provider_options=desc.provider_options,
                    settings=desc.options,
                )
                graphs[role] = DecoderGraph(session, rt.config, path.name, spec)
            aligned = copy.copy(rt)
            aligned.first = graphs["decoder"]
            aligned.rest = graphs.get("decoder_with_past", aligned.first)
            aligned.layout = aligned.rest.layout
            self._aligned = aligned
        return self._aligned

    def _alignment_heads(self) -> list[tuple[int, int]]:
        """generation_config ``alignment_heads``, else every head of the last half of the decoder layers."""
        heads = read_generation_defaults(self.folder).get("alignment_heads")
        if heads:
            return [(int(layer), int(head)) for layer, head in heads]
        config = self._runtime.config
        layers = int(config.get("decoder_layers") or config.get("num_hidden_layers") or 0)
        n_heads = int(config.get("decoder_attention_heads") or 0)
        if not layers or not n_heads:
            raise UnsupportedModelError(
                f"{self.folder}: word timestamps need alignment_heads in generation_config.json, or decoder_layers and "
                "decoder_attention_heads in config.json to use every head of the last half of the layers."
            )
        return default_alignment_heads(layers, n_heads)

    def _new_state(self, context: Any) -> Seq2SeqState:
        """A fresh decoding state attending to an encoded window."""
        return Seq2SeqState(self._runtime, *context)

    def _whisper_processors(self, prompt_length: int, timestamps: bool) -> list[LogitsProcessor]:
        """Whisper's own rules, in transformers' order: begin-suppress, suppress, timestamps."""
        v = self._vocab
        extra: list[LogitsProcessor] = []
        if v.begin_suppress_tokens:
            extra.append(SuppressTokensAtBegin(v.begin_suppress_tokens, prompt_length))
        if v.suppress_tokens:
            extra.append(SuppressTokens(v.suppress_tokens))
        stamps = v.timestamp_range
        # transcribe() refuses timestamps without <|notimestamps|> or without the tokenizer's timestamp tokens
        if timestamps and v.no_timestamps is not None and stamps is not None:
            extra.append(
                WhisperTimestampRules(
                    v.no_timestamps,
                    v.eot,
                    prompt_length,
                    v.max_initial_timestamp_index,
                    timestamp_begin=stamps.start,
                    timestamp_end=stamps.stop,
                    special_ids=v.special_ids,
                )
            )
        return extra

    def _window_processors(
        self, config: GenerationConfig, prompt_length: int, timestamps: bool
    ) -> list[LogitsProcessor]:
        """transformers' order: the generic processors, then Whisper's rules, then the user's."""
        extra = [*self._whisper_processors(prompt_length, timestamps), *self._processors]
        return make_logits_processors(config, prompt_length=prompt_length, extra=extra)

    def _window_tokens(
        self,
        state: Seq2SeqState,
        ids: list[int],
        config: GenerationConfig,
        processors: Sequence[LogitsProcessor],
        sampler: Any,
        rng: np.random.Generator,
    ) -> Iterator[int]:
        if config.num_beams > 1:
            from inference4py.generation.beam import generate_sequences

            best = generate_sequences(
                state, ids, config.replace(num_return_sequences=1), processors=processors, sampler=sampler, rng=rng
            )[0]
            if isinstance(sampler, WindowScorer):
                sampler.set_sequence_score(best.score)  # transformers judges a beam by its sequences_scores
            yield from best.token_ids
            return
        yield from generate_step(state, ids, config, processors=processors, sampler=sampler, rng=rng)
