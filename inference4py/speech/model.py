"""WhisperSpeechModel: the task facade of speech to text (transcribe / translate) with Whisper.

The class and its builder are a preset over the package's parts: the builder's options, a backend
that encodes and decodes windows (the native :class:`~inference4py.speech.runtime.WhisperRuntime`
here; inference4py_genai's WhisperSpeechModel loads its own through :meth:`WhisperSpeechModel._load`),
and the long-form policy that every call delegates to (:mod:`options`, :mod:`job`, :mod:`loop`,
:mod:`batch`, :mod:`chunks`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from inference4py import audio as _audio
from inference4py.errors import ConfigurationError, UnsupportedModelError
from inference4py.generation.config import GenerationConfig
from inference4py.speech.batch import run_batch
from inference4py.speech.chunks import transcribe_chunks
from inference4py.speech.features import log_mel
from inference4py.speech.job import load_job
from inference4py.speech.live import check_stream_options, live_segments
from inference4py.speech.longform import cut_window
from inference4py.speech.loop import window_events
from inference4py.speech.options import CallPolicy, DefaultVad, TranscribeOptions, _detector, call_policy
from inference4py.speech.parts import WhisperParts, whisper_defaults
from inference4py.speech.presets import WHISPER_PRESETS, WhisperPreset
from inference4py.speech.prompt import check_request, resolve_request
from inference4py.speech.results import Segment, Transcription
from inference4py.speech.runtime import WhisperRuntime
from inference4py.speech.vad import SileroVad, VadOptions
from inference4py.speech.vocab import TASKS, language_code
from inference4py.tasks.base import CallPlanner, ClosableTask, GenerationBuilder, resolve_generation_defaults
from inference4py.tasks.languages import Language
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

    def start_from(self, preset: WhisperPreset) -> WhisperBuilder:
        """A preset's files and generation defaults (the user's setters come after)."""
        if preset.variant is not None:
            self.variant(preset.variant)
        return self._set(**preset.defaults) if preset.defaults else self

    def resolve_folder(self) -> Path:
        """The local model folder; a faster-whisper (CTranslate2) folder, a whisper.cpp ggml file or a ``pip:``
        package holding one is converted first (once, cached: :mod:`inference4py.speech.files`)."""
        from inference4py.pip_packages import PIP_PREFIX
        from inference4py.speech.files import is_whisper_file, whisper_folder

        path = self._model_path
        if path is not None and (path.startswith(PIP_PREFIX) or is_whisper_file(path)):
            return whisper_folder(path)
        return super().resolve_folder()

    def __repr__(self) -> str:
        text = super().__repr__()[:-1]
        extra = [f"{k}={v!r}" for k, v in (("language", self._language), ("task", self._whisper_task)) if v]
        if self._timestamps:
            extra.append("timestamps=True")
        sep = ", " if extra and not text.endswith("(") else ""
        return text + sep + ", ".join(extra) + ")"


# --------------------------------------------------------------------------- the task


class PresetMethod:
    """A preset method of :class:`WhisperSpeechModel`: ``WhisperSpeechModel.whisperTiny()`` is a builder
    started from the row named ``whisperTiny`` of the class's ``PRESETS`` (a subclass's own table)."""

    def __init__(self, about: str) -> None:
        self.about = about
        self.name = ""

    def __set_name__(self, owner: type[Any], name: str) -> None:
        self.name = name

    def __get__(self, obj: object, owner: type[WhisperSpeechModel]) -> Callable[[], WhisperBuilder]:
        name = self.name

        def preset() -> WhisperBuilder:
            return owner._preset(name)

        preset.__name__ = preset.__qualname__ = name
        preset.__doc__ = f"{self.about}: a builder from the row {name!r} of PRESETS (repo, files, defaults)."
        return preset


class WhisperSpeechModel(ClosableTask):
    """Transcribe or translate speech with Whisper (any ONNX export with encoder + decoder-with-past).

    Example:
        >>> with WhisperSpeechModel.whisperSmall().language("en").build() as asr:   # doctest: +SKIP
        ...     print(asr.transcribe("meeting.mp3").text)
    """

    Builder = WhisperBuilder

    # ------------------------------------------------------------------ presets
    #: The rows the preset methods read, by method name (inference4py_genai's class has its own table).
    PRESETS: ClassVar[Mapping[str, WhisperPreset]] = WHISPER_PRESETS

    @classmethod
    def builder(cls) -> WhisperBuilder:
        """A builder with no model chosen: call ``model_id`` or ``model_path``."""
        b = cls.Builder()
        b._task = cls
        return b

    @classmethod
    def _preset(cls, name: str) -> WhisperBuilder:
        """A builder started from the row ``name`` of :attr:`PRESETS`."""
        preset = cls.PRESETS.get(name)
        if preset is None:
            raise cls._no_preset(name)
        b = cls.Builder(preset=name, model_id=preset.model_id)
        b._task = cls
        return b.start_from(preset)

    @classmethod
    def _no_preset(cls, name: str) -> ConfigurationError:
        """The error of a preset method whose name has no row in :attr:`PRESETS`."""
        return ConfigurationError(f"{cls.__name__} has no preset {name}(): use {', '.join(cls.PRESETS)}.")

    # inference4j's names, each reading the row of PRESETS named after it
    whisperTiny = PresetMethod("Whisper tiny (39M, multilingual)")
    whisperBase = PresetMethod("Whisper base (74M, multilingual)")
    whisperSmall = PresetMethod("Whisper small (244M, multilingual)")
    whisperLargeV3Turbo = PresetMethod("Whisper large-v3-turbo (809M, multilingual, 128 mel bins)")
    whisperTinyEn = PresetMethod("Whisper tiny.en (English only)")
    whisperBaseEn = PresetMethod("Whisper base.en (English only)")
    whisperSmallEn = PresetMethod("Whisper small.en (English only)")

    # ------------------------------------------------------------------ construction
    @classmethod
    def _from_builder(cls, b: WhisperBuilder) -> WhisperSpeechModel:
        return cls(b.resolve_folder(), b)

    def __init__(self, folder: Path, builder: WhisperBuilder) -> None:
        self.folder = Path(folder)
        self._builder_repr = repr(builder)
        if builder._stops:
            raise ConfigurationError("stop_sequence is not supported by WhisperSpeechModel; remove it.")
        self._parts = self._load(self.folder, builder)
        self.tokenizer: Tokenizer = self._parts.tokenizer
        self._default_vad = DefaultVad()  # vad=True's detector, fetched on first use
        self._language = builder._language
        self._task_name = builder._whisper_task
        self._timestamps = builder._timestamps
        # check the builder's language / task against this model now, not at the first call
        check_request(self._parts.vocab, self.folder, self._language, self._task_name, self._timestamps)

    def _load(self, folder: Path, builder: WhisperBuilder) -> WhisperParts:
        """The model's parts on the native backend (inference4py_genai's class loads genai's instead)."""
        tokenizer = load_tokenizer(folder)
        runtime = WhisperRuntime.load(folder, builder.session_options(), tokenizer)
        defaults, totals = resolve_generation_defaults(folder)
        planner = CallPlanner(
            whisper_defaults(defaults, runtime.vocab),
            totals,
            builder.generation_overrides(),
            extra_eos=builder._eos,
            context=runtime.max_target_positions,
            total_counts_prompt=True,
        )
        return WhisperParts(
            folder, runtime, tokenizer, runtime.vocab, runtime.feature_settings(), planner, tuple(builder._processors)
        )

    @property
    def generation_config(self) -> GenerationConfig:
        """The defaults every call starts from (folder + builder options)."""
        return self._parts.planner.base

    @property
    def is_multilingual(self) -> bool:
        return self._parts.vocab.is_multilingual

    @property
    def languages(self) -> tuple[str, ...]:
        """Codes of the languages this model knows (``("en",)`` for English-only models)."""
        vocab = self._parts.vocab
        return tuple(vocab.lang_to_id) if vocab.is_multilingual else ("en",)

    @property
    def n_mels(self) -> int:
        return self._parts.features["n_mels"]

    def __repr__(self) -> str:
        return f"WhisperSpeechModel(folder={str(self.folder)!r}, builder={self._builder_repr})"

    def _release(self) -> None:
        self._parts.backend.close()

    # ------------------------------------------------------------------ audio
    def features(self, audio: _audio.AudioInput, *, sample_rate: int | None = None) -> np.ndarray:
        """The log-mel features of ``audio``: ``[n_mels, 3000]``, or all frames when longer than 30 s."""
        settings = self._parts.features
        samples = _audio.load_audio(audio, sample_rate=sample_rate, target_rate=settings["sample_rate"])
        return log_mel(samples, settings)

    def detect_language(self, audio: _audio.AudioInput, *, sample_rate: int | None = None) -> str:
        """The language Whisper hears in the first 30 s (code such as ``"en"``).

        Raises:
            UnsupportedModelError: an English-only model (it cannot tell languages apart).
            AudioError: unreadable or empty audio.
        """
        self._check_open()
        parts = self._parts
        if not parts.vocab.is_multilingual or not parts.vocab.lang_to_id:
            raise UnsupportedModelError(f"{self.folder} is an English-only model: it does not detect languages.")
        window, _ = cut_window(self.features(audio, sample_rate=sample_rate), 0, parts.features["window_frames"])
        context = parts.backend.encode(window)
        return parts.vocab.language_of(parts.backend.detect_language(context)) or ""

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
        options: TranscribeOptions | None = None,
        **keywords: Any,
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
            options: the long-form options (:class:`TranscribeOptions`: temperatures, thresholds,
                prompt, word timestamps, voice activity detection, ``best_of``); their fields may be
                given as keywords too (``temperature=(0.0, 0.2)``), over ``options``.
            **keywords: :class:`TranscribeOptions`' fields, and generation options for this call
                (``max_new_tokens`` counts per 30 s window,
                ``num_beams``, ``seed``, ...).

        Returns:
            A :class:`Transcription` (text, segments, language, token ids).

        Raises:
            AudioError: unreadable, non-audio or empty input.
            UnsupportedModelError: a language / task / timestamps the model cannot do.
            ConfigurationError: invalid options.
        """
        policy = self._policy(keywords, options)
        result = None
        for kind, value in self._events(audio, sample_rate, language, task, timestamps, policy):
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
        options: TranscribeOptions | None = None,
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
                speech chunks of ``vad`` (:func:`~inference4py.speech.vad.chunk_speech`), else
                fixed 30 s windows — and decode all of them as batches, as faster-whisper's
                ``BatchedInferencePipeline`` does: the fastest way through a long recording, one
                recording alone included.  Each chunk is transcribed as if it were a recording of
                its own (no context from the chunk before; the language is detected once per
                recording, on its first chunk); times are mapped back to the recording.
            on_progress: called after each batch with (seconds of audio done, seconds in all recordings).
            options, **kwargs: :meth:`transcribe`'s (:class:`TranscribeOptions` and generation
                options), except ``on_token`` and beam search.

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
        if not isinstance(self._parts.backend, WhisperRuntime):
            raise UnsupportedModelError(
                "transcribe_batch runs on the native onnxruntime backend: use inference4py.WhisperSpeechModel."
            )
        if isinstance(audios, (str, Path, tuple, np.ndarray)):
            raise ConfigurationError("transcribe_batch takes a list of recordings; use transcribe() for one.")
        policy = self._policy(kwargs, options)
        lang, task_name, want_ts = self._request(language, task, timestamps)
        if parallel_chunks:
            return transcribe_chunks(
                self._parts,
                audios,
                sample_rate,
                lang,
                task_name,
                want_ts,
                policy,
                batch_size=batch_size,
                started=started,
                detect_language=self.detect_language,
                on_progress=on_progress,
            )
        jobs = [load_job(self._parts, a, sample_rate, lang, task_name, want_ts, policy) for a in audios]
        run_batch(
            self._parts,
            jobs,
            batch_size=batch_size,
            timestamps=want_ts,
            policy=policy,
            on_progress=on_progress,
        )
        elapsed = time.perf_counter() - started
        return [job.finish(elapsed)[1] for job in jobs]

    def transcribe_stream(
        self,
        chunks: Iterable[Any],
        *,
        sample_rate: int = _audio.SAMPLE_RATE,
        vad: bool | str | os.PathLike[str] | SileroVad = True,
        vad_options: VadOptions | None = None,
        language: Language | str | None = None,
        task: str | None = None,
        options: TranscribeOptions | None = None,
        **keywords: Any,
    ) -> Iterator[Segment]:
        """Transcribe audio as it arrives (a microphone, a socket): each stretch of speech as a pause ends it.

        ``chunks``: numpy arrays at ``sample_rate`` (or ``(samples, rate)`` pairs), any sizes; ``vad``:
        ``True`` (the Hub's Silero VAD), a Silero ``.onnx`` path or a :class:`SileroVad`; ``language``,
        ``task``, ``options`` and ``**keywords``: ``transcribe()``'s, for each stretch, typed once
        (:meth:`TranscribeOptions.from_keywords`) before any audio is read. Segments come with times
        in the whole stream, the same however the audio is chunked (:mod:`~inference4py.speech.live`).

        Raises:
            AudioError: a chunk that is not audio, or a stream without samples.
            ConfigurationError: ``vad=False``, an option the stream sets itself, or bad options.
        """
        check_stream_options(keywords)
        call, _ = TranscribeOptions.from_keywords(keywords, options)
        if call.vad is not False or call.vad_options is not None:
            raise ConfigurationError(
                "transcribe_stream sets vad itself: pass vad= and vad_options= to it, not in options."
            )

        def stretch(samples: np.ndarray) -> Transcription:
            return self.transcribe(
                (samples, _audio.SAMPLE_RATE), language=language, task=task, timestamps=True, options=call
            )

        detector = _detector(vad, self._default_vad)
        yield from live_segments(chunks, stretch, detector, sample_rate=sample_rate, options=vad_options)

    def stream(
        self,
        audio: _audio.AudioInput,
        *,
        sample_rate: int | None = None,
        language: Language | str | None = None,
        task: str | None = None,
        timestamps: bool | None = None,
        options: TranscribeOptions | None = None,
        **keywords: Any,
    ) -> Iterator[str]:
        """Yield the text piece by piece (same arguments as :meth:`transcribe`, without ``on_token``)."""
        policy = self._policy(keywords, options)
        for kind, value in self._events(audio, sample_rate, language, task, timestamps, policy):
            if kind == "text":
                yield value

    def _policy(self, keywords: Mapping[str, Any], options: TranscribeOptions | None) -> CallPolicy:
        """A call's options, typed at its edge (:meth:`TranscribeOptions.from_keywords`) and checked against the model."""
        transcribe_options, request = TranscribeOptions.from_keywords(keywords, options)
        return call_policy(self._parts, self._default_vad, transcribe_options, request)

    def _request(
        self, language: Language | str | None, task: str | None, timestamps: bool | None
    ) -> tuple[str | None, str | None, bool]:
        """A call's language, task and timestamps (the builder's where not given), checked against the model."""
        defaults = (self._language, self._task_name, self._timestamps)
        return resolve_request(self._parts.vocab, self.folder, language, task, timestamps, defaults=defaults)

    def _events(
        self,
        audio: _audio.AudioInput,
        sample_rate: int | None,
        language: Language | str | None,
        task: str | None,
        timestamps: bool | None,
        policy: CallPolicy,
    ) -> Iterator[tuple[str, Any]]:
        started = time.perf_counter()
        self._check_open()
        lang, task_name, want_ts = self._request(language, task, timestamps)
        job = load_job(self._parts, audio, sample_rate, lang, task_name, want_ts, policy)
        yield from window_events(self._parts, job, policy, started=started)
