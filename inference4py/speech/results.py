"""What a transcription returns: a :class:`Transcription`, its time-stamped :class:`Segment` list and
their :class:`Word` list; the same as SubRip / WebVTT subtitles (per segment or per word) and JSON."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from inference4py.errors import ConfigurationError


@dataclass(frozen=True)
class Word:
    """One word of a segment with its time span (``word_timestamps=True``).

    Attributes:
        start: Start time in seconds from the beginning of the audio.
        end: End time in seconds.
        word: The word's text as decoded, with its leading space and attached punctuation.
        probability: The mean probability of the word's tokens under the decoder.
    """

    start: float
    end: float
    word: str
    probability: float


@dataclass(frozen=True)
class Segment:
    """A stretch of the transcription with its time span.

    Attributes:
        start: Start time in seconds from the beginning of the audio.
        end: End time in seconds.
        text: The segment's text (timestamp and special tokens removed).
        token_ids: The segment's generated ids, timestamp tokens included.
        avg_logprob: Average log-probability of the tokens of the segment's window (None when the
            backend does not report scores).
        no_speech_prob: Probability of ``<|nospeech|>`` at the window's ``<|startoftranscript|>``.
        compression_ratio: zlib compression ratio of the window's text (openai-whisper's measure).
        temperature: Temperature the window was decoded at (0: greedy).
        words: The segment's words with their times (empty unless ``word_timestamps=True``).
    """

    start: float
    end: float
    text: str
    token_ids: tuple[int, ...] = ()
    avg_logprob: float | None = None
    no_speech_prob: float | None = None
    compression_ratio: float | None = None
    temperature: float | None = None
    words: tuple[Word, ...] = ()


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

    def to_srt(self, *, words: bool = False) -> str:
        """The segments as SubRip subtitles (segments without text are skipped).

        Args:
            words: one cue per word (needs ``word_timestamps=True``) instead of one per segment.
        """
        blocks = [
            f"{i}\n{_clock(start, ',')} --> {_clock(end, ',')}\n{text}\n"
            for i, (start, end, text) in enumerate(self._cues(words), start=1)
        ]
        return "\n".join(blocks)

    def to_vtt(self, *, words: bool = False) -> str:
        """The segments as WebVTT subtitles (segments without text are skipped).

        Args:
            words: one cue per word (needs ``word_timestamps=True``) instead of one per segment.
        """
        cues = [f"{_clock(start, '.')} --> {_clock(end, '.')}\n{text}\n" for start, end, text in self._cues(words)]
        return "WEBVTT\n\n" + "\n".join(cues)

    def _cues(self, words: bool) -> list[tuple[float, float, str]]:
        if not words:
            return [(s.start, s.end, s.text.strip()) for s in self.segments if s.text.strip()]
        if self.segments and not any(s.words for s in self.segments) and any(s.text.strip() for s in self.segments):
            raise ConfigurationError("Word-level cues need word times: transcribe with word_timestamps=True.")
        return [(w.start, w.end, w.word.strip()) for s in self.segments for w in s.words if w.word.strip()]

    def to_dict(self) -> dict[str, Any]:
        """The transcription as plain data (what :meth:`to_json` writes); times in whole milliseconds (:func:`seconds`)."""
        return {
            "text": self.text,
            "language": self.language,
            "duration": seconds(self.duration),
            "segments": [
                {
                    "start": seconds(s.start),
                    "end": seconds(s.end),
                    "text": s.text,
                    "avg_logprob": s.avg_logprob,
                    "no_speech_prob": s.no_speech_prob,
                    "compression_ratio": s.compression_ratio,
                    "temperature": s.temperature,
                    "token_ids": list(s.token_ids),
                    "words": [asdict(w) | {"start": seconds(w.start), "end": seconds(w.end)} for w in s.words],
                }
                for s in self.segments
            ],
        }

    def to_json(self, *, indent: int | None = 2) -> str:
        """The transcription as JSON: text, language, duration, segments (with their numbers and words)."""
        return json.dumps(self.to_dict(), ensure_ascii=False, indent=indent)


def seconds(value: float) -> float:
    """A time as written out (JSON): rounded to the millisecond, so 0.02-s steps print as 3.8, not 3.8000000000000003."""
    return round(float(value), 3)


def _clock(seconds: float, separator: str) -> str:
    ms = int(round(max(seconds, 0.0) * 1000))
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{separator}{ms:03d}"
