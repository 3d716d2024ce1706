"""WhisperSpeechModel on onnxruntime-genai: speech to text with genai's Whisper pipeline.

genai runs the encoder and the decoder loop (its cross-attention cache and
search) in C++.  Everything around it is inference4py's
:class:`inference4py.speech.WhisperSpeechModel`, which this class extends:
audio loading and log-mel features (:mod:`inference4py.audio`, transformers'
numbers), the decoder prompt (language / task / ``<|notimestamps|>``), language
detection, Whisper's suppress lists and timestamp rules (run in Python on genai's
logits when the folder or the call needs them), segments, and the 30 s window
loop for audio of any length.  The result is the same
:class:`~inference4py.speech.Transcription`.

genai folders come from ``python -m onnxruntime_genai.models.builder`` on a
Whisper checkpoint: ``encoder.onnx`` (``audio_features`` [batch, n_mels, 3000]),
``decoder.onnx``, ``genai_config.json`` and ``audio_processor_config.json``
(genai's own feature extractor, read here only for the STFT / mel settings).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np

from inference4py import audio as _audio
from inference4py.errors import ConfigurationError, InferenceError, UnsupportedModelError
from inference4py.generation.config import GenerationConfig
from inference4py.generation.processors import LogitsProcessor
from inference4py.speech import Segment, Transcription
from inference4py.speech import model as native
from inference4py.speech.features import read_json_object
from inference4py.speech.parts import WhisperParts, whisper_defaults
from inference4py.speech.presets import WhisperPreset
from inference4py.speech.vocab import WhisperVocab
from inference4py.tokenization import Tokenizer, load_tokenizer
from inference4py_genai import _base
from inference4py_genai._runtime import load_genai_config, og, open_model, raising

__all__ = ["WhisperSpeechModel", "WhisperBuilder", "Transcription", "Segment"]


class WhisperBuilder(_base.GenaiBuilder["WhisperSpeechModel"], native.WhisperBuilder):
    """Options of the genai :class:`WhisperSpeechModel`: inference4py's WhisperBuilder (language, task,
    timestamps, generation options) with genai's providers / threads."""


class WhisperSpeechModel(native.WhisperSpeechModel):
    """Transcribe or translate speech with a Whisper model exported for onnxruntime-genai.

    Same calls and results as :class:`inference4py.WhisperSpeechModel`
    (``transcribe``, ``stream``, ``detect_language``, ``features``); only the
    encoder + decoder loop runs in onnxruntime-genai.

    Example:
        >>> with WhisperSpeechModel.whisperSmall().language("en").build() as asr:   # doctest: +SKIP
        ...     print(asr.transcribe("clip.wav").text)
    """

    Builder = WhisperBuilder

    # ------------------------------------------------------------------ presets
    #: The one genai export among the preset methods; the others point at optimum exports (refused by name).
    PRESETS: ClassVar[Mapping[str, WhisperPreset]] = MappingProxyType(
        {"whisperSmall": WhisperPreset("inference4j/whisper-small-genai")}
    )

    @classmethod
    def _no_preset(cls, name: str) -> ConfigurationError:
        return ConfigurationError(
            f"WhisperSpeechModel.{name}() points at an optimum export, which onnxruntime-genai cannot load. Use "
            "inference4py.WhisperSpeechModel for it, WhisperSpeechModel.whisperSmall() here, or "
            ".builder().model_path(folder) with a folder made by onnxruntime-genai's model builder."
        )

    # ------------------------------------------------------------------ construction
    @classmethod
    def _from_builder(cls, b: WhisperBuilder) -> WhisperSpeechModel:  # type: ignore[override]  # takes genai's builder
        return cls(b.resolve_folder(), b)

    def _load(self, folder: Path, builder: native.WhisperBuilder) -> WhisperParts:
        """The model's parts with onnxruntime-genai's backend (no onnxruntime sessions of inference4py's)."""
        if not isinstance(builder, WhisperBuilder):
            raise ConfigurationError(
                "Build the genai WhisperSpeechModel with its own builder (WhisperSpeechModel.builder())."
            )
        genai_config = load_genai_config(folder)
        model_section = genai_config["model"]
        if model_section.get("type") != "whisper" or not isinstance(model_section.get("encoder"), dict):
            raise UnsupportedModelError(
                f"{folder} holds a {model_section.get('type')!r} model for onnxruntime-genai, not Whisper "
                "(genai_config.json model.type must be 'whisper'). Use TextGenerator / VisionLanguageModel for it."
            )
        tokenizer: Tokenizer = load_tokenizer(folder)
        config = read_json_object(folder / "config.json")
        vocab = WhisperVocab.read(folder, tokenizer, config, model_section.get("vocab_size"))
        # The builder writes fixed search values for Whisper (top_k 1...), not the model's: skip them.
        defaults, totals, context = _base.genai_defaults(folder, genai_config, search_defaults=False)
        planner = _base.GenaiPlanner(
            whisper_defaults(defaults, vocab),
            totals,
            builder.generation_overrides(),
            extra_eos=builder._eos,
            context=context,
            total_counts_prompt=True,
            model_eos=_base.genai_eos(genai_config),
        )
        model = open_model(folder, genai_config, providers=builder._providers, threads=builder._threads)
        backend = GenaiWhisperBackend(model, tokenizer, vocab, planner.model_eos)
        features = _feature_settings(folder, config)
        return WhisperParts(folder, backend, tokenizer, vocab, features, planner, tuple(builder._processors))

    def __repr__(self) -> str:
        return f"genai.WhisperSpeechModel(folder={str(self.folder)!r}, builder={self._builder_repr})"


class GenaiWhisperBackend:
    """The window backend on onnxruntime-genai: genai encodes each window and runs the decoder loop; Whisper's
    logits rules and the builder's processors run in Python on genai's logits (genai runs the generic ones)."""

    def __init__(self, model: Any, tokenizer: Tokenizer, vocab: WhisperVocab, model_eos: Any) -> None:
        self._model = model
        self._tokenizer = tokenizer
        self._vocab = vocab
        self._model_eos = model_eos

    def close(self) -> None:
        self._model = None

    def _feed(self, window: np.ndarray, ids: list[int]) -> _base.Feed:
        """Put one window's features ``[1, n_mels, 3000]`` and the decoder prompt into a generator."""
        prompt = np.asarray(ids, dtype=np.int32)

        def feed(generator: Any) -> None:
            inputs = og().NamedTensors()
            inputs["audio_features"] = window
            generator.set_inputs(inputs)
            generator.append_tokens(prompt)

        return feed

    def encode(self, window: np.ndarray) -> np.ndarray:
        return window  # genai encodes inside its own loop

    def detect_language(self, context: np.ndarray) -> int:
        """One decoder step after <|startoftranscript|>; the most likely language token (first on ties)."""
        genai = og()
        with raising(InferenceError, "detecting the language"):
            params = genai.GeneratorParams(self._model)
            params.set_search_options(max_length=2, do_sample=False, batch_size=1)
            generator = genai.Generator(self._model, params)
            self._feed(context, [self._vocab.sot])(generator)
            logits = np.asarray(generator.get_logits(), dtype=np.float32)[0, -1]  # [vocab]
        return self._vocab.most_likely_language(logits)

    def decode(
        self,
        context: np.ndarray,
        ids: list[int],
        config: GenerationConfig,
        rules: Sequence[LogitsProcessor],
        sampler: Any,
        rng: Any,
    ) -> Iterator[int]:
        call = _base.Call(
            model=self._model,
            tokenizer=self._tokenizer,
            config=config,
            feed=self._feed(context, ids),
            prompt_ids=ids,
            model_eos=self._model_eos,
            extra_processors=list(rules),
            skip=len(ids),
        )
        if config.num_beams > 1:
            result = _base.run_generation(call, started=time.perf_counter())
            yield from result.token_ids
            return
        yield from call.tokens(config)


def _feature_settings(folder: Path, config: Mapping[str, Any]) -> dict[str, int]:
    """STFT / mel settings: preprocessor_config.json, else genai's audio_processor_config.json, else Whisper's."""
    pre = read_json_object(folder / "preprocessor_config.json")
    ops: dict[str, dict[str, Any]] = {}
    for step in (
        read_json_object(folder / "audio_processor_config.json").get("feature_extraction", {}).get("sequence", [])
    ):
        op = step.get("operation", {}) if isinstance(step, dict) else {}
        if isinstance(op.get("attrs"), dict):
            ops[str(op.get("type"))] = op["attrs"]
    mel, stft = ops.get("LogMelSpectrum", {}), ops.get("STFTNorm", {})
    settings = {
        "n_mels": int(pre.get("feature_size") or mel.get("n_mel") or config.get("num_mel_bins") or 80),
        "n_fft": int(pre.get("n_fft") or stft.get("n_fft") or _audio.N_FFT),
        "hop_length": int(pre.get("hop_length") or stft.get("hop_length") or _audio.HOP_LENGTH),
        "sample_rate": int(pre.get("sampling_rate") or _audio.SAMPLE_RATE),
    }
    chunk = int(pre.get("chunk_length") or mel.get("chunk_size") or _audio.CHUNK_SECONDS)
    settings["n_samples"] = int(pre.get("n_samples") or chunk * settings["sample_rate"])
    settings["window_frames"] = settings["n_samples"] // settings["hop_length"]  # genai's encoder: 3000 frames
    return settings


WhisperBuilder._task = WhisperSpeechModel
