"""What a WhisperSpeechModel is made of, as the long-form policy sees it.

:class:`WhisperParts` holds the backend that encodes and decodes windows (the native
:class:`~inference4py.speech.runtime.WhisperRuntime`, or onnxruntime-genai's), the
tokenizer and special ids, the log-mel settings, the planner of each call's generation settings
and the builder's logits processors.  The task facade makes one per model and passes it to the
policy's functions; :func:`whisper_defaults` adapts a folder's generation defaults to Whisper.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from inference4py.generation.config import GenerationConfig
from inference4py.generation.processors import LogitsProcessor
from inference4py.speech.runtime import WindowBackend
from inference4py.speech.vocab import WhisperVocab
from inference4py.tasks.base import CallPlanner
from inference4py.tokenization import Tokenizer


@dataclass(frozen=True)
class WhisperParts:
    """A Whisper model's backend, vocabulary, features and generation planner.

    Attributes:
        folder: the model folder (named in error messages).
        backend: encodes and decodes one window.
        tokenizer: the model's tokenizer.
        vocab: the special ids.
        features: the log-mel settings (``n_mels``, ``n_fft``, ``hop_length``, ``sample_rate``,
            ``n_samples``, ``window_frames``).
        planner: each call's generation settings (per 30 s window).
        processors: the builder's logits processors, run after Whisper's rules.
    """

    folder: Path
    backend: WindowBackend
    tokenizer: Tokenizer
    vocab: WhisperVocab
    features: Mapping[str, int]
    planner: CallPlanner
    processors: tuple[LogitsProcessor, ...] = ()


def whisper_defaults(defaults: GenerationConfig, vocab: WhisperVocab) -> GenerationConfig:
    """A folder's generation defaults for Whisper: its own rules replace the generic suppress lists
    (transformers does the same), the decoder starts at ``<|startoftranscript|>``, and
    ``<|endoftext|>`` ends it unless the folder names its EOS ids."""
    return defaults.replace(
        suppress_tokens=(),
        begin_suppress_tokens=(),
        forced_bos_token_id=None,
        eos_token_id=defaults.eos_token_id or (vocab.eot,),
        decoder_start_token_id=vocab.sot,
    )
