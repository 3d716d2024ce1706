"""What a transcription returns: a :class:`Transcription`, its time-stamped :class:`Segment` list,
and the same segments as SubRip / WebVTT subtitles."""

from __future__ import annotations

from dataclasses import dataclass, field


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
