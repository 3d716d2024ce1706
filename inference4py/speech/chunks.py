"""``transcribe_batch(parallel_chunks=True)``: a recording cut into independent chunks, decoded as batches.

Each chunk of at most 30 s (a speech chunk of the voice activity detector, else a fixed window) is
transcribed as a recording of its own, the chunks of every recording decoded together as batches
(faster-whisper's ``BatchedInferencePipeline``); their segments are then mapped back to the
recording and joined.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from inference4py import audio as _audio
from inference4py.speech.batch import run_batch
from inference4py.speech.job import FileJob, open_job
from inference4py.speech.options import CallPolicy
from inference4py.speech.parts import WhisperParts
from inference4py.speech.results import Segment, Transcription
from inference4py.speech.speech_map import SpeechTimeMap, chunk_speech, map_segments
from inference4py.speech.vad import SileroVad, VadOptions, transcription_map


def transcribe_chunks(
    parts: WhisperParts,
    audios: Sequence[_audio.AudioInput],
    sample_rate: int | None,
    language: str | None,
    task: str | None,
    timestamps: bool,
    policy: CallPolicy,
    *,
    batch_size: int,
    started: float,
    detect_language: Callable[[tuple[np.ndarray, int]], str],
    on_progress: Callable[[float, float], None] | None = None,
) -> list[Transcription]:
    """Every chunk of every recording is a job of its own; the language is detected once per recording
    (``detect_language``, on its first chunk) when not given."""
    rate = parts.features["sample_rate"]
    vocab = parts.vocab
    per_file: list[tuple[float, list[tuple[Chunk, FileJob]]]] = []
    jobs: list[FileJob] = []
    plain = replace(policy, vad=None)  # the chunks are the speech already
    for audio in audios:
        samples = _audio.load_audio(audio, sample_rate=sample_rate, target_rate=rate)
        chunks = cut_chunks(samples, rate, parts.features["n_samples"], policy.vad, policy.vad_options)
        lang = language
        if lang is None and chunks and vocab.is_multilingual and vocab.lang_to_id:
            lang = detect_language((chunks[0].samples, rate))  # once per recording
        file_jobs = [open_job(parts, c.samples, lang, task, timestamps, plain) for c in chunks]
        per_file.append((samples.size / rate, list(zip(chunks, file_jobs))))
        jobs.extend(file_jobs)
    run_batch(
        parts,
        jobs,
        batch_size=batch_size,
        timestamps=timestamps,
        policy=plain,
        on_progress=on_progress,
    )
    elapsed = time.perf_counter() - started
    out = []
    for duration, pairs in per_file:
        parts_done = [(chunk, job.finish(elapsed)[1]) for chunk, job in pairs]
        language_out = parts_done[0][1].language if parts_done else language if language else None
        if not vocab.is_multilingual:
            language_out = "en"
        out.append(merge_chunks(parts_done, duration=duration, language=language_out, elapsed=elapsed))
    return out


@dataclass(frozen=True)
class Chunk:
    """A stretch of a recording transcribed on its own: its samples and where they are in the recording.

    ``time_map``: the ``(start, end)`` sample ranges of the recording the samples are made of (one
    range for a fixed window; the speech regions of a VAD chunk, laid end to end), with the onsets
    of the regions' speech when the first word of a region is to start there (VAD chunks unless
    ``VadOptions.word_onsets=False``).
    """

    samples: np.ndarray
    time_map: SpeechTimeMap


def cut_chunks(
    samples: np.ndarray, rate: int, window: int, vad: SileroVad | None, vad_options: VadOptions | None
) -> list[Chunk]:
    """The chunks of a recording: VAD speech chunks of at most one window, else fixed windows."""
    if vad is not None:
        speech = transcription_map(vad, samples, vad_options)
        return [
            Chunk(c.audio, c.time_map)
            for c in chunk_speech(samples, speech, max_duration_s=window / rate, sampling_rate=rate)
        ]
    return [
        Chunk(
            samples[start : start + window],
            SpeechTimeMap([(start, min(start + window, samples.size))], sampling_rate=rate),
        )
        for start in range(0, samples.size, window)
    ]


def merge_chunks(
    parts: Sequence[tuple[Chunk, Transcription]], *, duration: float, language: str | None, elapsed: float
) -> Transcription:
    """One recording's transcription from its chunks' (times mapped back to the recording)."""
    segments: list[Segment] = []
    for chunk, result in parts:
        segments.extend(map_segments(result.segments, chunk.time_map))
    return Transcription(
        "".join(result.text for _, result in parts),
        tuple(segments),
        language,
        tuple(t for _, result in parts for t in result.token_ids),
        duration=duration,
        elapsed=elapsed,
    )
