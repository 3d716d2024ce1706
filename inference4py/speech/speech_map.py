"""Speech laid end to end: times mapped back to the recording, and speech packed into chunks.

A transcription with voice activity detection decodes only the speech regions of a recording,
laid end to end.  :class:`SpeechTimeMap` turns a time of that audio (a Whisper timestamp) into
the time of the recording; :func:`chunk_speech` packs regions into chunks of at most one
Whisper window, each a :class:`SpeechChunk` with its own map; :func:`map_segments` puts a
transcription's segments and words back in the recording.  The regions themselves come from
:mod:`inference4py.speech.vad`.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from inference4py.errors import ConfigurationError
from inference4py.speech.results import Segment, Word

__all__ = [
    "SAMPLE_RATE",
    "Region",
    "SpeechTimeMap",
    "SpeechChunk",
    "chunk_speech",
    "is_number",
    "map_segments",
    "map_segment",
]

SAMPLE_RATE = 16000  # Whisper's rate, and the only one Silero VAD runs at

Region = tuple[int, int]  # [start, end) in samples of the original audio


def is_number(value: Any) -> bool:
    """A real number (numpy's included), not a bool."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


class SpeechTimeMap:
    """Times in audio made of ``regions`` of a recording laid end to end -> times in that recording.

    Args:
        regions: ``(start, end)`` sample ranges of the original audio, in the order they
            were concatenated (sorted and disjoint, as :meth:`SileroVad.speech_regions` gives).
        sampling_rate: samples per second of both.
        onsets: for each region, the sample of the original audio where its speech starts
            before padding (``start <= onset < end``), or None where it is not known (a
            piece of a region cut in two); None: no onsets (:meth:`SileroVad.speech_map`
            sets them).

    Example:
        >>> m = SpeechTimeMap([(16000, 32000), (64000, 80000)])  # 1-2 s and 4-5 s
        >>> m.to_original(0.5), m.to_original(1.0), m.to_original(1.0, is_end=True), m.to_original(1.5)
        (1.5, 4.0, 2.0, 4.5)
        >>> m.to_concatenated(4.5)
        1.5
    """

    def __init__(
        self,
        regions: Iterable[Region],
        *,
        sampling_rate: int = SAMPLE_RATE,
        onsets: Iterable[int | None] | None = None,
    ) -> None:
        self.regions: tuple[Region, ...] = tuple((int(s), int(e)) for s, e in regions)
        self.sampling_rate = int(sampling_rate)
        previous = 0
        for start, end in self.regions:
            if not 0 <= start < end or start < previous:
                raise ConfigurationError(
                    f"Speech regions must be non-empty, sorted and disjoint sample ranges; got {list(self.regions)}."
                )
            previous = end
        self.onsets: tuple[int | None, ...] | None = None
        if onsets is not None:
            self.onsets = tuple(None if o is None else int(o) for o in onsets)
            if len(self.onsets) != len(self.regions) or not all(
                o is None or s <= o < e for o, (s, e) in zip(self.onsets, self.regions)
            ):
                raise ConfigurationError(
                    f"onsets must give one sample (or None) per region, inside it; got {list(self.onsets)} "
                    f"for the regions {list(self.regions)}."
                )
        self._ends: list[int] = []  # where each region ends in the concatenated audio, in samples
        total = 0
        for start, end in self.regions:
            total += end - start
            self._ends.append(total)

    @property
    def num_samples(self) -> int:
        """Length of the concatenated audio in samples."""
        return self._ends[-1] if self._ends else 0

    @property
    def duration(self) -> float:
        """Length of the concatenated audio in seconds."""
        return self.num_samples / self.sampling_rate

    def __repr__(self) -> str:
        onsets = "" if self.onsets is None else f", onsets={list(self.onsets)}"
        return f"SpeechTimeMap(regions={list(self.regions)}, sampling_rate={self.sampling_rate}{onsets})"

    def onset_of(self, region: int) -> float | None:
        """Where the speech of region ``region`` starts before padding, in seconds of the original audio.

        None when the map has no onsets or does not know this region's.
        """
        if not 0 <= region < len(self.regions):
            raise ConfigurationError(f"region={region!r} is invalid: this map has {len(self.regions)} regions.")
        onset = None if self.onsets is None else self.onsets[region]
        return None if onset is None else onset / self.sampling_rate

    def to_original(self, t: float, *, is_end: bool = False) -> float:
        """The time in the original audio of time ``t`` (seconds) in the concatenated audio.

        A time where one region meets the next is the start of the next region, or the
        end of the earlier one with ``is_end=True`` (pass it for the end of a segment or
        word).  Times outside ``[0, duration]`` are clamped to it.
        """
        if not self.regions:
            raise ConfigurationError("This SpeechTimeMap has no regions: there is no time to map.")
        sample = _snap(min(max(float(t), 0.0), self.duration) * self.sampling_rate)
        # at the sample where two regions meet: the earlier one's end, or the later one's start
        index = self.region_at(t, is_end=is_end)
        before = self._ends[index - 1] if index else 0
        return (self.regions[index][0] + sample - before) / self.sampling_rate

    def region_at(self, t: float, *, is_end: bool = False) -> int:
        """Index of the region that time ``t`` (seconds) of the concatenated audio lies in.

        A time where one region meets the next belongs to the next, or to the earlier one with
        ``is_end=True`` (as in :meth:`to_original`); times outside ``[0, duration]`` are clamped to it.
        """
        if not self.regions:
            raise ConfigurationError("This SpeechTimeMap has no regions: there is no time to map.")
        sample = _snap(min(max(float(t), 0.0), self.duration) * self.sampling_rate)
        index = bisect.bisect_left(self._ends, sample) if is_end else bisect.bisect_right(self._ends, sample)
        return min(index, len(self.regions) - 1)

    def to_original_in(self, t: float, region: int) -> float:
        """Time ``t`` of the concatenated audio as a time of region ``region`` of the original audio.

        The offset from where that region starts in the concatenated audio, kept inside the
        region: a word whose middle is in a region keeps both its ends there, even when DTW
        stretches it over the place where the next region was joined on (faster-whisper's
        ``restore_speech_timestamps`` resolves a word's two ends in the same chunk the same way).
        """
        if not 0 <= region < len(self.regions):
            raise ConfigurationError(f"region={region!r} is invalid: this map has {len(self.regions)} regions.")
        before = self._ends[region - 1] if region else 0
        start, end = self.regions[region]
        sample = _snap(float(t) * self.sampling_rate) - before + start
        return min(max(sample, start), end) / self.sampling_rate

    def to_concatenated(self, t: float) -> float:
        """The time in the concatenated audio of time ``t`` (seconds) in the original audio.

        A time in a pause that was cut out maps to where the next region starts (the end,
        after the last region).
        """
        if not self.regions:
            raise ConfigurationError("This SpeechTimeMap has no regions: there is no time to map.")
        sample = _snap(float(t) * self.sampling_rate)
        index = bisect.bisect_right([end for _, end in self.regions], sample)
        if index == len(self.regions):
            return self.duration
        start, _ = self.regions[index]
        before = self._ends[index - 1] if index else 0
        return (before + max(sample - start, 0.0)) / self.sampling_rate

    def extract(self, audio: np.ndarray) -> np.ndarray:
        """The regions of ``audio`` laid end to end (float32)."""
        if not self.regions:
            return np.zeros(0, dtype=np.float32)
        return np.concatenate([np.asarray(audio[s:e], dtype=np.float32) for s, e in self.regions])


def _snap(sample: float) -> float:
    """A sample position, with float noise of seconds * rate removed (0.3 s -> 4800, not 4799.999...)."""
    nearest = round(sample)
    return float(nearest) if abs(sample - nearest) < 1e-6 else sample


@dataclass(frozen=True)
class SpeechChunk:
    """Speech of a recording to transcribe as one Whisper window, and its time map.

    Attributes:
        audio: float32 samples: the regions of ``time_map`` laid end to end.
        time_map: chunk time -> original time.
    """

    audio: np.ndarray
    time_map: SpeechTimeMap

    @property
    def start(self) -> float:
        """Where the chunk's first region starts in the original audio (seconds)."""
        return self.time_map.regions[0][0] / self.time_map.sampling_rate

    @property
    def end(self) -> float:
        """Where the chunk's last region ends in the original audio (seconds)."""
        return self.time_map.regions[-1][1] / self.time_map.sampling_rate

    @property
    def duration(self) -> float:
        """Length of ``audio`` in seconds."""
        return self.time_map.duration

    def to_original(self, t: float, *, is_end: bool = False) -> float:
        """The time in the original audio of time ``t`` (seconds) in this chunk's audio."""
        return self.time_map.to_original(t, is_end=is_end)

    def __repr__(self) -> str:
        return f"SpeechChunk(start={self.start:.3f}, end={self.end:.3f}, duration={self.duration:.3f}, regions={len(self.time_map.regions)})"


def chunk_speech(
    audio: np.ndarray,
    regions: Iterable[Region] | SpeechTimeMap,
    *,
    max_duration_s: float = 30.0,
    keep_gaps: bool = False,
    sampling_rate: int = SAMPLE_RATE,
) -> list[SpeechChunk]:
    """Pack speech regions, in order, into chunks of at most ``max_duration_s``.

    A chunk takes regions while they fit; the next region that does not fit starts the
    next chunk.  A region longer than ``max_duration_s`` on its own (possible only with
    ``VadOptions.max_speech_duration_s`` above it) is cut into pieces of that length.

    Args:
        audio: the original samples the regions refer to.
        regions: sorted, disjoint ``(start, end)`` sample ranges (:meth:`SileroVad.speech_regions`),
            or a map of them (:meth:`SileroVad.speech_map`), whose onsets the chunks' maps then
            carry (a region cut into pieces: the piece the onset lies in; ``keep_gaps``: the
            onset of a chunk's first region).
        max_duration_s: the longest chunk (30 s: one Whisper window).
        keep_gaps: False (faster-whisper's ``collect_chunks``): a chunk is its regions laid
            end to end, pauses cut out, and its length is the sum of theirs.  True
            (whisperX's ``merge_chunks``): a chunk is the stretch of audio from its first
            region's start to its last region's end, pauses included.
        sampling_rate: samples per second of ``audio``.

    Returns:
        the chunks in order; none when there are no regions.

    Raises:
        ConfigurationError: ``max_duration_s`` is not positive, or the regions are not
            sorted, disjoint ranges inside the audio.
    """
    if not is_number(max_duration_s) or not 0 < max_duration_s < math.inf:
        raise ConfigurationError(f"max_duration_s={max_duration_s!r} is invalid: use a positive number of seconds.")
    limit = int(max_duration_s * sampling_rate)
    if limit < 1:
        raise ConfigurationError(f"max_duration_s={max_duration_s!r} is shorter than one sample.")
    given = regions if isinstance(regions, SpeechTimeMap) else SpeechTimeMap(regions, sampling_rate=sampling_rate)
    checked = given.regions  # validated: sorted and disjoint
    if checked and checked[-1][1] > len(audio):
        raise ConfigurationError(
            f"The speech region {checked[-1]} ends after the audio ({len(audio)} samples): "
            "were the regions found on other audio?"
        )
    onsets = given.onsets

    def onset_in(region: int, first: int) -> int | None:  # the region's onset, if it is in the piece from first
        onset = None if onsets is None else onsets[region]
        return onset if onset is not None and first <= onset < first + limit else None

    pieces = [
        (s, min(s + limit, end), onset_in(i, s))
        for i, (start, end) in enumerate(checked)
        for s in range(start, end, limit)
    ]

    groups: list[list[tuple[int, int, int | None]]] = []
    length = 0  # of the group under way, as keep_gaps counts it
    for start, end, onset in pieces:
        if groups:
            grown = end - groups[-1][0][0] if keep_gaps else length + end - start
            if grown <= limit:
                groups[-1].append((start, end, onset))
                length = grown
                continue
        groups.append([(start, end, onset)])
        length = end - start
    chunks = []
    for group in groups:
        if keep_gaps:
            spans, starts = [(group[0][0], group[-1][1])], [group[0][2]]
        else:
            spans, starts = [(s, e) for s, e, _ in group], [o for _, _, o in group]
        time_map = SpeechTimeMap(spans, sampling_rate=sampling_rate, onsets=None if onsets is None else starts)
        chunks.append(SpeechChunk(time_map.extract(audio), time_map))
    return chunks


# --------------------------------------------------------------------------- segments mapped back

MAX_ONSET_SHIFT = 1.0  # seconds: how far a region's first word may move to the region's speech onset


def map_segments(segments: Sequence[Segment], time_map: SpeechTimeMap) -> tuple[Segment, ...]:
    """The segments of one transcription of speech cut out by VAD (or of a chunk), in the original recording.

    Each as :func:`map_segment`; and when the map knows where the speech of its regions starts
    (``time_map.onsets``, :meth:`~inference4py.speech.vad.SileroVad.speech_map`), the first
    word of each region starts there, if that is before the word's end.  DTW times that word badly:
    after a join the timestamp tokens before it take the frames of the padded pause (0.30 s late on
    the test recording), at the start of a chunk it lands in the padding (0.40 s early), while
    Silero's onset is resolved to its 32 ms windows.  The other words keep DTW's times, and so
    does a first word more than ``MAX_ONSET_SHIFT`` (1 s) from the onset: the decoder left out
    speech before it (a window skipped as silence), and moving it would make one long word.
    """
    started: set[int] = set()  # regions whose first word has been placed
    return tuple(map_segment(s, time_map, started=started) for s in segments)


def map_segment(segment: Segment, time_map: SpeechTimeMap, *, started: set[int] | None = None) -> Segment:
    """A segment of speech cut out by VAD (or of a chunk), its times and its words' in the original recording.

    A word is placed in the region its middle lies in, both ends inside that region: DTW may stretch
    the last word before a join over the padding of the region joined on, which is a pause of the
    recording, not the speech after it.  A segment keeps its own times, except that an end that
    falls in another region than the word next to it is that word's: a timestamp token is coarser
    than the join, and the segment after one may start in the region before its speech.

    ``started``: the regions whose first word came in an earlier segment (updated); with it, a word
    that is the first of its region starts at the region's onset when the map knows it and it is
    before the word's end (see :func:`map_segments`).  None: no word is moved to an onset.
    """

    def rounded(t: float) -> float:
        return round(float(t), 3)

    words: list[Word] = []
    moved_first = False
    for w in segment.words:
        region = time_map.region_at((w.start + w.end) / 2)
        start = rounded(time_map.to_original_in(w.start, region))
        end = rounded(time_map.to_original_in(w.end, region))
        if started is not None and region not in started:
            started.add(region)
            onset = time_map.onset_of(region)
            # further than MAX_ONSET_SHIFT from DTW's start, the word is not the region's first speech
            # (the decoder left out what came before it): it keeps DTW's times
            if onset is not None and rounded(onset) < end and abs(onset - start) <= MAX_ONSET_SHIFT:
                start = rounded(onset)
                moved_first = moved_first or not words
        words.append(replace(w, start=start, end=max(start, end)))
    start = rounded(time_map.to_original(segment.start))
    end = rounded(time_map.to_original(segment.end, is_end=True))
    if words:
        first, last = segment.words[0], segment.words[-1]
        if time_map.region_at(segment.start) != time_map.region_at((first.start + first.end) / 2):
            start = words[0].start
        if time_map.region_at(segment.end, is_end=True) != time_map.region_at((last.start + last.end) / 2):
            end = words[-1].end
        if moved_first:  # a segment does not start after its first word
            start = min(start, words[0].start)
    return replace(segment, start=start, end=max(start, end), words=tuple(words))
