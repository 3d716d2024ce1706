"""Whisper speech to text: the package's modules (moved from ``inference4py/tasks/whisper.py``)."""

from __future__ import annotations

# Re-exported one by one (``X as X``): every name importable from here before the move, private ones included
# (inference4py_genai.whisper uses _WhisperVocab and _read_json_object).
from inference4py.tasks.whisper.model import _LANGUAGE_ALIASES as _LANGUAGE_ALIASES
from inference4py.tasks.whisper.model import FRAME_SECONDS as FRAME_SECONDS
from inference4py.tasks.whisper.model import TASKS as TASKS
from inference4py.tasks.whisper.model import TIME_PRECISION as TIME_PRECISION
from inference4py.tasks.whisper.model import WHISPER_LANGUAGES as WHISPER_LANGUAGES
from inference4py.tasks.whisper.model import Segment as Segment
from inference4py.tasks.whisper.model import Transcription as Transcription
from inference4py.tasks.whisper.model import WhisperBuilder as WhisperBuilder
from inference4py.tasks.whisper.model import WhisperSpeechModel as WhisperSpeechModel
from inference4py.tasks.whisper.model import WhisperTimestampRules as WhisperTimestampRules
from inference4py.tasks.whisper.model import _clock as _clock
from inference4py.tasks.whisper.model import _logsumexp as _logsumexp
from inference4py.tasks.whisper.model import _RawSegment as _RawSegment
from inference4py.tasks.whisper.model import _read_json_object as _read_json_object
from inference4py.tasks.whisper.model import _WhisperVocab as _WhisperVocab
from inference4py.tasks.whisper.model import language_code as language_code
from inference4py.tasks.whisper.model import split_segments as split_segments

__all__ = [
    "WhisperSpeechModel",
    "WhisperBuilder",
    "Transcription",
    "Segment",
    "WhisperTimestampRules",
    "WHISPER_LANGUAGES",
    "split_segments",
]
