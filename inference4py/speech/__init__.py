"""Speech to text: WhisperSpeechModel (transcribe / translate) with Whisper on the native loop.

The model runs as a speech-seq2seq pipeline of the engine (``encoder_model.onnx``
taking ``input_features`` + a decoder with self- and cross-attention caches).
Everything Whisper-specific lives in this package, as the numpy twin of transformers 4.57
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

One idea per module, in layers whose imports point one way (facade -> policy -> runtime):

- data: ``vocab`` (Whisper's languages and tasks, the special ids of a model folder), ``results``
  (:class:`Transcription`, :class:`Segment`, :class:`Word`; SRT / VTT / JSON), ``speech_map``
  (speech laid end to end: times mapped back, chunks);
- runtime (onnxruntime): ``runtime`` (the window backend protocol and the native one), ``features``
  (log-mel), ``probe`` (what a decoding attempt reports besides tokens), ``attention`` (decoders that
  output their cross-attention, rewritten once and cached), ``vad`` (the Silero detector and its rules);
- policy: ``parts`` (what a model is made of), ``options`` (one call's options; each attempt's
  settings), ``prompt`` (the decoder prompt and what a model refuses), ``timestamps`` (the logits
  rules), ``decoding`` (temperature fallback, silent windows, previous-text context), ``longform``
  (30 s windows, a window's output cut into segments), ``words`` (DTW word timestamps), ``job``
  (one file's state between windows), ``loop`` (one file's window loop), ``batch`` (several files'
  windows as batches), ``chunks`` (``parallel_chunks``);
- facade: ``model`` (:class:`WhisperSpeechModel` and its builder);
- files (a layer lower, beside the other converters): ``files``, faster-whisper's and whisper.cpp's
  files converted into a folder this package runs.

The names below are imported lazily, so that ``inference4py.speech.files`` (used by ``tasks.kinds``
and the converters' command) imports without the task above it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: The names importable from the package itself, and the module each comes from.
_EXPORTS: dict[str, str] = {
    "WhisperSpeechModel": "inference4py.speech.model",
    "WhisperBuilder": "inference4py.speech.model",
    "Transcription": "inference4py.speech.results",
    "Segment": "inference4py.speech.results",
    "Word": "inference4py.speech.results",
    "FALLBACK_TEMPERATURES": "inference4py.speech.decoding",
    "LongformOptions": "inference4py.speech.decoding",
    "TranscribeOptions": "inference4py.speech.options",
    "WhisperTimestampRules": "inference4py.speech.timestamps",
    "WHISPER_LANGUAGES": "inference4py.speech.files.vocabulary",
    "FRAME_SECONDS": "inference4py.speech.longform",
    "TIME_PRECISION": "inference4py.speech.longform",
    "split_segments": "inference4py.speech.longform",
    "TASKS": "inference4py.speech.vocab",
    "language_code": "inference4py.speech.vocab",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from inference4py.speech.decoding import FALLBACK_TEMPERATURES as FALLBACK_TEMPERATURES
    from inference4py.speech.decoding import LongformOptions as LongformOptions
    from inference4py.speech.files.vocabulary import WHISPER_LANGUAGES as WHISPER_LANGUAGES
    from inference4py.speech.longform import FRAME_SECONDS as FRAME_SECONDS
    from inference4py.speech.longform import TIME_PRECISION as TIME_PRECISION
    from inference4py.speech.longform import split_segments as split_segments
    from inference4py.speech.model import WhisperBuilder as WhisperBuilder
    from inference4py.speech.model import WhisperSpeechModel as WhisperSpeechModel
    from inference4py.speech.options import TranscribeOptions as TranscribeOptions
    from inference4py.speech.results import Segment as Segment
    from inference4py.speech.results import Transcription as Transcription
    from inference4py.speech.results import Word as Word
    from inference4py.speech.timestamps import WhisperTimestampRules as WhisperTimestampRules
    from inference4py.speech.vocab import TASKS as TASKS
    from inference4py.speech.vocab import language_code as language_code


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'inference4py.speech' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
