"""WhisperSpeechModel: speech to text (transcribe / translate) with Whisper on the native loop.

The model runs as a speech-seq2seq pipeline of the engine (``encoder_model.onnx``
taking ``input_features`` + a decoder with self- and cross-attention caches).
Everything Whisper-specific lives here, as the numpy twin of transformers 4.57
``WhisperForConditionalGeneration.generate``:

* the decoder prompt (``_retrieve_init_tokens``): ``<|startoftranscript|>``, the
  language (given, or detected: one decoder step after ``<|startoftranscript|>``,
  argmax over the language tokens), the task, ``<|notimestamps|>`` unless timestamps
  are requested; ``forced_decoder_ids`` of generation_config.json when neither
  language nor task is set;
* the logits processors, after the generic ones: ``begin_suppress_tokens`` at the
  first generated position, ``suppress_tokens``, then the timestamp rules
  (:class:`WhisperTimestampRules`, twin of ``WhisperTimeStampLogitsProcessor``);
* the window loop: the audio's features are cut in 30 s windows (3000 frames); after
  each window the output is split into segments at pairs of timestamp tokens and the
  next window starts at the last complete segment's end (``_retrieve_segment``).
  Without timestamp tokens a window is one segment and the next window starts 30 s
  later, which is how audio longer than 30 s is transcribed without timestamps
  (transformers refuses that case; its loop would do the same).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from inference4py import audio as _audio
from inference4py.engine.pipeline import load_pipeline, read_model_config
from inference4py.engine.seq2seq import Seq2SeqRuntime, Seq2SeqState
from inference4py.errors import ConfigurationError, ModelLoadError, UnsupportedModelError
from inference4py.generation.config import GenerationConfig, read_generation_defaults
from inference4py.generation.processors import (
    LogitsProcessor,
    SuppressTokens,
    SuppressTokensAtBegin,
    log_softmax,
    make_logits_processors,
)
from inference4py.generation.sampling import make_rng, make_sampler
from inference4py.generation.search import generate_step
from inference4py.generation.streaming import IncrementalDetokenizer
from inference4py.tasks.base import CallPlanner, ClosableTask, GenerationBuilder, resolve_generation_defaults
from inference4py.tasks.languages import Language
from inference4py.tokenization import Tokenizer, load_tokenizer

__all__ = [
    "WhisperSpeechModel",
    "WhisperBuilder",
    "Transcription",
    "Segment",
    "WhisperTimestampRules",
    "WHISPER_LANGUAGES",
    "split_segments",
]

TIME_PRECISION = 0.02  # seconds per timestamp token step
FRAME_SECONDS = 0.01  # seconds per mel frame (hop 160 at 16 kHz)
TASKS = ("transcribe", "translate")

#: Whisper's language codes and names, in vocabulary order (``<|en|>`` first; ``yue`` is large-v3's 100th).
WHISPER_LANGUAGES: dict[str, str] = {
    "en": "english",
    "zh": "chinese",
    "de": "german",
    "es": "spanish",
    "ru": "russian",
    "ko": "korean",
    "fr": "french",
    "ja": "japanese",
    "pt": "portuguese",
    "tr": "turkish",
    "pl": "polish",
    "ca": "catalan",
    "nl": "dutch",
    "ar": "arabic",
    "sv": "swedish",
    "it": "italian",
    "id": "indonesian",
    "hi": "hindi",
    "fi": "finnish",
    "vi": "vietnamese",
    "he": "hebrew",
    "uk": "ukrainian",
    "el": "greek",
    "ms": "malay",
    "cs": "czech",
    "ro": "romanian",
    "da": "danish",
    "hu": "hungarian",
    "ta": "tamil",
    "no": "norwegian",
    "th": "thai",
    "ur": "urdu",
    "hr": "croatian",
    "bg": "bulgarian",
    "lt": "lithuanian",
    "la": "latin",
    "mi": "maori",
    "ml": "malayalam",
    "cy": "welsh",
    "sk": "slovak",
    "te": "telugu",
    "fa": "persian",
    "lv": "latvian",
    "bn": "bengali",
    "sr": "serbian",
    "az": "azerbaijani",
    "sl": "slovenian",
    "kn": "kannada",
    "et": "estonian",
    "mk": "macedonian",
    "br": "breton",
    "eu": "basque",
    "is": "icelandic",
    "hy": "armenian",
    "ne": "nepali",
    "mn": "mongolian",
    "bs": "bosnian",
    "kk": "kazakh",
    "sq": "albanian",
    "sw": "swahili",
    "gl": "galician",
    "mr": "marathi",
    "pa": "punjabi",
    "si": "sinhala",
    "km": "khmer",
    "sn": "shona",
    "yo": "yoruba",
    "so": "somali",
    "af": "afrikaans",
    "oc": "occitan",
    "ka": "georgian",
    "be": "belarusian",
    "tg": "tajik",
    "sd": "sindhi",
    "gu": "gujarati",
    "am": "amharic",
    "yi": "yiddish",
    "lo": "lao",
    "uz": "uzbek",
    "fo": "faroese",
    "ht": "haitian creole",
    "ps": "pashto",
    "tk": "turkmen",
    "nn": "nynorsk",
    "mt": "maltese",
    "sa": "sanskrit",
    "lb": "luxembourgish",
    "my": "myanmar",
    "bo": "tibetan",
    "tl": "tagalog",
    "mg": "malagasy",
    "as": "assamese",
    "tt": "tatar",
    "haw": "hawaiian",
    "ln": "lingala",
    "ha": "hausa",
    "ba": "bashkir",
    "jw": "javanese",
    "su": "sundanese",
    "yue": "cantonese",
}
_LANGUAGE_ALIASES = {
    **{name: code for code, name in WHISPER_LANGUAGES.items()},
    "burmese": "my",
    "valencian": "ca",
    "flemish": "nl",
    "haitian": "ht",
    "letzeburgesch": "lb",
    "pushto": "ps",
    "panjabi": "pa",
    "moldavian": "ro",
    "moldovan": "ro",
    "sinhalese": "si",
    "castilian": "es",
    "mandarin": "zh",
}


def language_code(value: Language | str) -> str:
    """Whisper's code for a language given as a code (``"fr"``), a name (``"french"``), ``"<|fr|>"`` or a Language.

    Raises:
        ConfigurationError: not a language Whisper knows.
    """
    if isinstance(value, Language):
        value = value.iso_code
    if not isinstance(value, str) or not value.strip():
        raise ConfigurationError(f"language must be a code like 'en' or a name like 'english', got {value!r}.")
    key = value.strip().lower()
    if key.startswith("<|") and key.endswith("|>"):
        key = key[2:-2]
    if key in WHISPER_LANGUAGES:
        return key
    if key in _LANGUAGE_ALIASES:
        return _LANGUAGE_ALIASES[key]
    raise ConfigurationError(
        f"Unknown language {value!r}. Use one of Whisper's codes ({', '.join(list(WHISPER_LANGUAGES)[:12])}, ...) "
        "or an English name such as 'german'."
    )


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Segment:
    """A stretch of the transcription with its time span.

    Attributes:
        start: Start time in seconds from the beginning of the audio.
        end: End time in seconds.
        text: The segment's text (timestamp and special tokens removed).
        token_ids: The segment's generated ids, timestamp tokens included.
    """

    start: float
    end: float
    text: str
    token_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Transcription:
    """What :meth:`WhisperSpeechModel.transcribe` returns.

    Attributes:
        text: The whole text (what transformers' ``batch_decode(generate(...), skip_special_tokens=True)`` gives).
        segments: Time-stamped segments, in order.  With timestamps, one per pair of timestamp
            tokens; without, one per 30 s window.
        language: Whisper's code of the language (given or detected); ``"en"`` for English-only models.
        token_ids: Generated ids of every window, in order, as transformers' ``generate()`` returns them:
            no prompt, no ``<|endoftext|>``, timestamp tokens included, tokens after the last complete
            segment of a window dropped.
        duration: Length of the audio in seconds.
        elapsed: Wall time of the call in seconds (not compared by ``==``).
    """

    text: str
    segments: tuple[Segment, ...]
    language: str | None
    token_ids: tuple[int, ...]
    duration: float = 0.0
    elapsed: float = field(default=0.0, compare=False)

    def __str__(self) -> str:
        return self.text

    def to_srt(self) -> str:
        """The segments as SubRip subtitles (segments without text are skipped)."""
        blocks = []
        for i, seg in enumerate((s for s in self.segments if s.text.strip()), start=1):
            blocks.append(f"{i}\n{_clock(seg.start, ',')} --> {_clock(seg.end, ',')}\n{seg.text.strip()}\n")
        return "\n".join(blocks)

    def to_vtt(self) -> str:
        """The segments as WebVTT subtitles (segments without text are skipped)."""
        cues = [
            f"{_clock(s.start, '.')} --> {_clock(s.end, '.')}\n{s.text.strip()}\n"
            for s in self.segments
            if s.text.strip()
        ]
        return "WEBVTT\n\n" + "\n".join(cues)


def _clock(seconds: float, separator: str) -> str:
    ms = int(round(max(seconds, 0.0) * 1000))
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{separator}{ms:03d}"


# --------------------------------------------------------------------------- timestamps


class WhisperTimestampRules:
    """Timestamp logits rules, the numpy twin of transformers' ``WhisperTimeStampLogitsProcessor``.

    ``<|notimestamps|>`` is never chosen; timestamps come in pairs (a timestamp after text
    must be followed by another timestamp or a non-text token such as <|endoftext|>; after a
    pair comes no timestamp); timestamps never decrease; the first generated token is a
    timestamp no later than ``max_initial_timestamp_index``; and when the timestamps'
    summed probability beats every single text token, a timestamp is forced.

    Args:
        no_timestamps_token_id: ``<|notimestamps|>``; timestamps are the ids after it.
        eos_token_id: ``<|endoftext|>``; ids below it are text tokens.
        begin_index: length of the decoder prompt (the first generated position).
        max_initial_timestamp_index: latest allowed first timestamp (in 0.02 s steps), or None.
    """

    __slots__ = (
        "no_timestamps_token_id",
        "timestamp_begin",
        "eos_token_id",
        "begin_index",
        "max_initial_timestamp_index",
    )

    def __init__(
        self,
        no_timestamps_token_id: int,
        eos_token_id: int,
        begin_index: int,
        max_initial_timestamp_index: int | None = None,
    ) -> None:
        self.no_timestamps_token_id = int(no_timestamps_token_id)
        self.timestamp_begin = self.no_timestamps_token_id + 1
        self.eos_token_id = int(eos_token_id)
        self.begin_index = int(begin_index)
        self.max_initial_timestamp_index = (
            None if max_initial_timestamp_index is None else int(max_initial_timestamp_index)
        )

    def __repr__(self) -> str:
        return (
            f"WhisperTimestampRules(no_timestamps_token_id={self.no_timestamps_token_id}, "
            f"begin_index={self.begin_index}, max_initial_timestamp_index={self.max_initial_timestamp_index})"
        )

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        tb = self.timestamp_begin
        neg = np.float32(-np.inf)
        scores[:, self.no_timestamps_token_id] = neg
        for k in range(input_ids.shape[0]):
            seq = input_ids[k, self.begin_index :]
            last_was_ts = seq.size >= 1 and seq[-1] >= tb
            penultimate_was_ts = seq.size < 2 or seq[-2] >= tb
            if last_was_ts:
                if penultimate_was_ts:  # a pair (or the first token): text next
                    scores[k, tb:] = neg
                else:  # a segment's end: its twin timestamp (or something not text) next
                    scores[k, : self.eos_token_id] = neg
            stamps = seq[seq >= tb]
            if stamps.size:
                last = int(stamps[-1]) if (last_was_ts and not penultimate_was_ts) else int(stamps[-1]) + 1
                scores[k, tb:last] = neg
        if input_ids.shape[1] == self.begin_index:
            scores[:, :tb] = neg
            if self.max_initial_timestamp_index is not None:
                scores[:, tb + self.max_initial_timestamp_index + 1 :] = neg
        logprobs = log_softmax(scores)  # float32 [batch, vocab]
        for k in range(input_ids.shape[0]):
            stamp_lp = _logsumexp(logprobs[k, tb:])
            if stamp_lp > logprobs[k, :tb].max():
                scores[k, :tb] = neg
        return scores


def _logsumexp(x: np.ndarray) -> np.float32:
    m = x.max()
    if not np.isfinite(m):
        return np.float32(m)
    return np.float32(m + np.log(np.exp(x - m, dtype=np.float32).sum(dtype=np.float32)))


@dataclass(frozen=True)
class _RawSegment:
    start: float
    end: float
    tokens: tuple[int, ...]


def split_segments(
    tokens: Sequence[int],
    *,
    timestamp_begin: int,
    seek: int,
    window_frames: int,
    input_stride: int = 2,
) -> tuple[list[_RawSegment], int]:
    """Cut one window's output into segments; returns them and how many mel frames to advance.

    The twin of transformers' ``WhisperGenerationMixin._retrieve_segment``: a pair of
    consecutive timestamp tokens ends a segment and starts the next.  When the output
    ends inside a segment (no single timestamp before the end), that unfinished segment
    is dropped and the next window starts at the last complete segment's end;
    otherwise the next window starts ``window_frames`` later.

    Args:
        tokens: the window's generated ids without the prompt and without <|endoftext|>.
        timestamp_begin: id of ``<|0.00|>``.
        seek: the window's first mel frame in the whole audio.
        window_frames: mel frames of audio in this window (3000, less for the last window).
        input_stride: mel frames per encoder position (2 for Whisper).
    """
    offset = seek * TIME_PRECISION / input_stride  # seconds, float64 like transformers
    toks = [int(t) for t in tokens]
    is_ts = [t >= timestamp_begin for t in toks]
    single_ending = is_ts[-2:] == [False, True]
    cuts = [i + 1 for i in range(len(toks) - 1) if is_ts[i] and is_ts[i + 1]]
    if cuts:
        if single_ending:
            cuts.append(len(toks))
        else:
            cuts[-1] += 1  # keep the last timestamp in the last segment
        segments = []
        last = 0
        for i, cut in enumerate(cuts):
            piece = toks[last:cut]
            end_at = -2 if (i == len(cuts) - 1 and not single_ending) else -1
            segments.append(
                _RawSegment(
                    offset + (piece[0] - timestamp_begin) * TIME_PRECISION,
                    offset + (piece[end_at] - timestamp_begin) * TIME_PRECISION,
                    tuple(piece),
                )
            )
            last = cut
        advance = window_frames if single_ending else (toks[last - 2] - timestamp_begin) * input_stride
    else:
        stamps = [t for t in toks if t >= timestamp_begin]
        end_pos: float = int(window_frames * FRAME_SECONDS / TIME_PRECISION)
        if stamps and stamps[-1] != timestamp_begin:
            end_pos = stamps[-1] - timestamp_begin
        segments = [_RawSegment(offset, offset + end_pos * TIME_PRECISION, tuple(toks))]
        advance = window_frames
    return segments, advance


# --------------------------------------------------------------------------- model vocabulary


@dataclass(frozen=True)
class _WhisperVocab:
    """The special ids and generation settings of one Whisper model folder."""

    sot: int
    eot: int
    no_timestamps: int | None
    lang_to_id: Mapping[str, int]  # code -> id
    task_to_id: Mapping[str, int]
    is_multilingual: bool
    forced_decoder_ids: tuple[tuple[int, int | None], ...]
    max_initial_timestamp_index: int | None
    suppress_tokens: tuple[int, ...]
    begin_suppress_tokens: tuple[int, ...]

    @property
    def timestamp_begin(self) -> int:
        return self.no_timestamps + 1 if self.no_timestamps is not None else 1 << 62

    @classmethod
    def read(
        cls, folder: Path, tokenizer: Tokenizer, config: Mapping[str, Any], vocab_size: int | None
    ) -> _WhisperVocab:
        gen = read_generation_defaults(folder)
        token = tokenizer.token_to_id

        def first_id(value: Any) -> int | None:
            if isinstance(value, (list, tuple)):
                return int(value[0]) if value else None
            return None if value is None else int(value)

        sot = first_id(gen.get("decoder_start_token_id"))
        sot = sot if sot is not None else token("<|startoftranscript|>")
        eot = first_id(gen.get("eos_token_id"))
        eot = eot if eot is not None else token("<|endoftext|>")
        if sot is None or eot is None:
            raise UnsupportedModelError(
                f"{folder} does not look like a Whisper model: no <|startoftranscript|> / <|endoftext|> token and no "
                "decoder_start_token_id / eos_token_id in generation_config.json."
            )
        no_ts = gen.get("no_timestamps_token_id")
        if no_ts is None:
            no_ts = token("<|notimestamps|>")
        raw_langs = gen.get("lang_to_id")
        if isinstance(raw_langs, Mapping) and raw_langs:
            langs = {str(k).strip("<|>"): int(v) for k, v in raw_langs.items()}
        else:
            langs = {c: i for c in WHISPER_LANGUAGES if (i := token(f"<|{c}|>")) is not None}
        raw_tasks = gen.get("task_to_id")
        if isinstance(raw_tasks, Mapping) and raw_tasks:
            tasks = {str(k): int(v) for k, v in raw_tasks.items()}
        else:
            tasks = {t: i for t in TASKS if (i := token(f"<|{t}|>")) is not None}
        multilingual = gen.get("is_multilingual")
        if multilingual is None:
            # openai/whisper's rule for its own vocabularies (51864 ids: English-only, 51865+: multilingual);
            # other sizes: multilingual when language tokens exist.
            multilingual = vocab_size >= 51865 if vocab_size and 51000 < vocab_size < 52000 else bool(langs)
        forced = tuple((int(p), None if t is None else int(t)) for p, t in (gen.get("forced_decoder_ids") or ()))
        mit = gen.get("max_initial_timestamp_index")
        return cls(
            sot=int(sot),
            eot=int(eot),
            no_timestamps=None if no_ts is None else int(no_ts),
            lang_to_id=langs,
            task_to_id=tasks,
            is_multilingual=bool(multilingual),
            forced_decoder_ids=forced,
            max_initial_timestamp_index=None if mit is None else int(mit),
            suppress_tokens=tuple(int(t) for t in gen.get("suppress_tokens") or config.get("suppress_tokens") or ()),
            begin_suppress_tokens=tuple(
                int(t) for t in gen.get("begin_suppress_tokens") or config.get("begin_suppress_tokens") or ()
            ),
        )

    def most_likely_language(self, logits: np.ndarray) -> int:
        """The language token with the highest logit (``logits``: ``[vocab]``); first on ties, like torch."""
        ids = np.fromiter(self.lang_to_id.values(), dtype=np.int64)
        return int(ids[np.argmax(logits[ids])])

    def language_of(self, token_id: int) -> str | None:
        for code, i in self.lang_to_id.items():
            if i == token_id:
                return code
        return None


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
        self._runtime = Seq2SeqRuntime(spec, config, builder.session_options())
        if self._runtime.encoder_input != "input_features":
            raise UnsupportedModelError(
                f"{self.folder} is a text encoder-decoder model, not a speech model (its encoder takes "
                f"'{self._runtime.encoder_input}'). Use FlanT5TextGenerator / BartSummarizer / MarianTranslator for it, "
                "or point WhisperSpeechModel at a Whisper export (encoder_model.onnx taking input_features)."
            )
        self.tokenizer: Tokenizer = load_tokenizer(self.folder)
        self._vocab = _WhisperVocab.read(self.folder, self.tokenizer, config, self._runtime.vocab_size)
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
        pre = _read_json_object(self.folder / "preprocessor_config.json")
        enc = self._runtime.encoder_inputs["input_features"]
        n_mels = pre.get("feature_size") or config.get("num_mel_bins") or enc.dim(1) or 80
        frames = enc.dim(2) or 2 * int(config.get("max_source_positions") or 1500)
        settings = {
            "n_mels": int(n_mels),
            "n_fft": int(pre.get("n_fft") or _audio.N_FFT),
            "hop_length": int(pre.get("hop_length") or _audio.HOP_LENGTH),
            "sample_rate": int(pre.get("sampling_rate") or _audio.SAMPLE_RATE),
            "window_frames": int(frames),
        }
        settings["n_samples"] = int(pre.get("n_samples") or settings["window_frames"] * settings["hop_length"])
        if enc.dim(1) and enc.dim(1) != settings["n_mels"]:
            raise UnsupportedModelError(
                f"{self.folder}: the encoder takes {enc.dim(1)} mel bins but the configuration says {settings['n_mels']}."
            )
        return settings

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
        self._runtime = None  # type: ignore[assignment]  # closed: every call checks _check_open() first

    # ------------------------------------------------------------------ audio
    def features(self, audio: _audio.AudioInput, *, sample_rate: int | None = None) -> np.ndarray:
        """The log-mel features of ``audio``: ``[n_mels, 3000]``, or all frames when longer than 30 s."""
        samples = _audio.load_audio(audio, sample_rate=sample_rate, target_rate=self._features["sample_rate"])
        return self._features_of(samples)

    def _features_of(self, samples: np.ndarray) -> np.ndarray:
        f = self._features
        return _audio.log_mel_spectrogram(
            samples,
            f["n_mels"],
            pad_or_trim=samples.size <= f["n_samples"],
            n_samples=f["n_samples"],
            n_fft=f["n_fft"],
            hop_length=f["hop_length"],
            sample_rate=f["sample_rate"],
        )

    # ------------------------------------------------------------------ prompt
    def _check_request(self, language: str | None, task: str | None, timestamps: bool) -> None:
        v = self._vocab
        if not v.is_multilingual:
            if language not in (None, "en") or task not in (None, "transcribe"):
                raise UnsupportedModelError(
                    f"{self.folder} is an English-only Whisper model: it cannot take language={language!r}"
                    f"{'' if task in (None, 'transcribe') else ', task=' + repr(task)}. Use a multilingual model "
                    "(e.g. WhisperSpeechModel.whisperSmall()) for other languages and translation."
                )
        else:
            if language is not None and language not in v.lang_to_id:
                raise UnsupportedModelError(
                    f"This model has no language token for {language!r}; it knows {', '.join(v.lang_to_id)}."
                )
            if task is not None and task not in v.task_to_id:
                raise UnsupportedModelError(f"This model has no <|{task}|> token (generation_config.json task_to_id).")
        if timestamps and v.no_timestamps is None:
            raise UnsupportedModelError(
                f"{self.folder} does not say which token is <|notimestamps|> (no_timestamps_token_id in "
                "generation_config.json), so timestamps cannot be predicted. Add it, or transcribe without timestamps."
            )

    def _prompt(self, language: str | None, task: str | None, timestamps: bool) -> tuple[list[int | None], int | None]:
        """transformers' ``_retrieve_init_tokens``: the decoder prompt, with None where a detected language goes.

        Returns (tokens, index of the language slot to fill by detection or None).
        """
        v = self._vocab
        if not v.is_multilingual:  # English-only: language / task tokens do not exist (transformers would raise)
            language = task = None
        init: list[int | None] = [v.sot]
        if task is None and language is None and v.forced_decoder_ids:
            for i, (pos, tok) in enumerate(v.forced_decoder_ids, start=1):
                if pos != i:
                    raise UnsupportedModelError(
                        f"forced_decoder_ids {list(v.forced_decoder_ids)} in generation_config.json do not follow "
                        "Whisper's prompt pattern (positions 1, 2, ...)."
                    )
                init.append(tok)
        lang_undefined = len(init) <= 1 or init[1] is None
        detect_at = None
        if language is not None:
            lang_id = v.lang_to_id[language]
            if len(init) > 1:
                init[1] = lang_id
            else:
                init.append(lang_id)
        elif v.is_multilingual and v.lang_to_id and lang_undefined:
            if len(init) > 1:
                init[1] = None
            else:
                init.append(None)
            detect_at = 1
        if task is not None:
            init.append(v.task_to_id[task])
        elif language is not None and v.task_to_id and not any(t in init for t in v.task_to_id.values()):
            init.append(v.task_to_id.get("transcribe"))
        if v.no_timestamps is not None:
            if not timestamps and init[-1] != v.no_timestamps:
                init.append(v.no_timestamps)
            elif timestamps and init[-1] == v.no_timestamps:
                init.pop()
        if detect_at is None:
            init = [t for t in init if t is not None]
        return init, detect_at

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
        n = self._features["window_frames"]
        frames = min(feats.shape[1] - seek, n)
        window = feats[:, seek : seek + frames]
        if frames < n:
            window = np.pad(window, ((0, 0), (0, n - frames)))
        return np.ascontiguousarray(window[None], dtype=np.float32), frames  # [1, n_mels, 3000]

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
        **overrides: Any,
    ) -> Transcription:
        """Transcribe (or translate to English) an audio file or array.

        Args:
            audio: a path (wav, flac, mp3, ogg, ...), a ``(samples, sample_rate)`` pair, or a
                numpy array with ``sample_rate=``.  Any rate and channel count: it is mixed to
                mono and resampled to 16 kHz.
            sample_rate: the rate of a bare numpy array.
            language: overrides the builder's language for this call (None: builder's, else detected).
            task: ``"transcribe"`` or ``"translate"`` (default: the builder's, else the model's default).
            timestamps: predict timestamp tokens and time each segment (default: the builder's setting).
            on_token: called with each piece of text as soon as it is final (with timestamps, a
                piece is final once its segment is closed).
            **overrides: generation options for this call (``max_new_tokens`` counts per 30 s window,
                ``temperature``, ``num_beams``, ...).

        Returns:
            A :class:`Transcription` (text, segments, language, token ids).

        Raises:
            AudioError: unreadable, non-audio or empty input.
            UnsupportedModelError: a language / task / timestamps the model cannot do.
            ConfigurationError: invalid options.
        """
        result = None
        for kind, value in self._events(audio, sample_rate, language, task, timestamps, overrides):
            if kind == "text":
                if on_token is not None:
                    on_token(value)
            else:
                result = value
        return result  # type: ignore[return-value]  # _events always ends with ("done", Transcription)

    def stream(self, audio: _audio.AudioInput, **kwargs: Any) -> Iterator[str]:
        """Yield the text piece by piece (same arguments as :meth:`transcribe`, without ``on_token``)."""
        sample_rate = kwargs.pop("sample_rate", None)
        language = kwargs.pop("language", None)
        task = kwargs.pop("task", None)
        timestamps = kwargs.pop("timestamps", None)
        for kind, value in self._events(audio, sample_rate, language, task, timestamps, kwargs):
            if kind == "text":
                yield value

    def _events(
        self,
        audio: _audio.AudioInput,
        sample_rate: int | None,
        language: Language | str | None,
        task: str | None,
        timestamps: bool | None,
        overrides: Mapping[str, Any],
    ) -> Iterator[tuple[str, Any]]:
        started = time.perf_counter()
        self._check_open()
        lang = language_code(language) if language is not None else self._language
        task_name = task if task is not None else self._task_name
        if task_name is not None and task_name not in TASKS:
            raise ConfigurationError(f"task must be 'transcribe' or 'translate', got {task_name!r}.")
        want_ts = self._timestamps if timestamps is None else bool(timestamps)
        self._check_request(lang, task_name, want_ts)

        samples = _audio.load_audio(audio, sample_rate=sample_rate, target_rate=self._features["sample_rate"])
        feats = self._features_of(samples)  # [n_mels, frames]
        v = self._vocab
        prompt, detect_at = self._prompt(lang, task_name, want_ts)
        config = self._planner.for_call(len(prompt), overrides)
        sampler = make_sampler(config)
        rng = make_rng(config.seed)
        detok = IncrementalDetokenizer(self.tokenizer, skip_special_tokens=True)
        tb = v.timestamp_begin
        segments: list[Segment] = []
        kept: list[int] = []
        total = feats.shape[1]
        seek = 0
        first = True
        while seek < total:
            window, frames = self._window(feats, seek)
            context = self._encode_window(window)
            if first and detect_at is not None:
                prompt[detect_at] = self._detect_in(context)  # detected once, on the first window
            first = False
            ids = [int(t) for t in prompt if t is not None]
            out: list[int] = []
            final = 0  # tokens of `out` known to be kept (up to the last closed pair of timestamps)
            for token in self._decode_window(context, ids, config, want_ts, sampler, rng):
                out.append(token)
                n = len(out)
                if n >= 2 and out[-1] >= tb and out[-2] >= tb:  # a closed segment: everything so far is kept
                    piece = detok.add_many(t for t in out[final:n] if t < tb)
                    final = n
                    if piece:
                        yield "text", piece
            if out and out[-1] in config.eos_token_id:
                out.pop()
            raw, advance = split_segments(out, timestamp_begin=tb, seek=seek, window_frames=frames)
            n_kept = sum(len(s.tokens) for s in raw)
            piece = detok.add_many(t for t in out[final:n_kept] if t < tb)
            if piece:
                yield "text", piece
            kept.extend(out[:n_kept])
            for s in raw:
                text = self.tokenizer.decode([t for t in s.tokens if t < tb], skip_special_tokens=True)
                segments.append(Segment(s.start, s.end, text, s.tokens))
            # A window that does not move on would repeat forever (only possible without the timestamp rules).
            seek += advance if advance > 0 else frames
        tail = detok.finish()
        if tail:
            yield "text", tail
        if not v.is_multilingual:
            language_out: str | None = "en"
        else:
            language_out = v.language_of(prompt[1]) if len(prompt) > 1 and prompt[1] is not None else None
        yield (
            "done",
            Transcription(
                detok.text,
                tuple(segments),
                language_out,
                tuple(kept),
                duration=samples.size / self._features["sample_rate"],
                elapsed=time.perf_counter() - started,
            ),
        )

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
        """The tokens generated for one window after the prompt ``ids``."""
        state = Seq2SeqState(self._runtime, *context)
        processors = self._window_processors(config, len(ids), timestamps)
        yield from self._window_tokens(state, ids, config, processors, sampler, rng)

    def _whisper_processors(self, prompt_length: int, timestamps: bool) -> list[LogitsProcessor]:
        """Whisper's own rules, in transformers' order: begin-suppress, suppress, timestamps."""
        v = self._vocab
        extra: list[LogitsProcessor] = []
        if v.begin_suppress_tokens:
            extra.append(SuppressTokensAtBegin(v.begin_suppress_tokens, prompt_length))
        if v.suppress_tokens:
            extra.append(SuppressTokens(v.suppress_tokens))
        if timestamps and v.no_timestamps is not None:  # transcribe() refuses timestamps without the token
            extra.append(WhisperTimestampRules(v.no_timestamps, v.eot, prompt_length, v.max_initial_timestamp_index))
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
            yield from best.token_ids
            return
        yield from generate_step(state, ids, config, processors=processors, sampler=sampler, rng=rng)


def _read_json_object(path: Path) -> dict[str, Any]:
    """A JSON object file of the model folder (preprocessor_config.json), or {} when absent."""
    if not path.is_file():
        return {}
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelLoadError(f"{path} is not valid JSON ({exc}). Re-download the model or fix the file.") from exc
    return data if isinstance(data, dict) else {}
