"""Batched long-form: the current windows of several files encoded and decoded as one batch.

Each file keeps its own :class:`~inference4py.tasks.whisper.job.FileJob` (where its next window
starts, its context, its segments); a round takes the current window of up to ``batch_size``
files, runs the encoder once on all of them, and decodes the windows whose prompts have the same
length as one batch (one :class:`TokenChooser` per row: its own processors, sampler, random
generator and stop rule).  Rows that fail a threshold are decoded again, together, at the next
temperature.  A row goes through the same choices, judgement and cutting as the file alone, so
its ids are the ids of the file transcribed alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import onnxruntime as ort

from inference4py.engine.seq2seq import Seq2SeqState
from inference4py.generation.config import GenerationConfig
from inference4py.generation.sampling import make_sampler
from inference4py.generation.search import TokenChooser
from inference4py.tasks.whisper.decoding import (
    WindowResult,
    WindowScorer,
    best_candidate,
    candidate_generators,
    is_silence,
    needs_fallback,
    no_speech_probability,
)
from inference4py.tasks.whisper.job import AlignmentCapture, CallPolicy, FileJob, map_segments
from inference4py.tasks.whisper.results import Segment, Transcription

if TYPE_CHECKING:
    from collections.abc import Mapping

    from inference4py.tasks.whisper.model import WhisperSpeechModel
    from inference4py.tasks.whisper.vad import SileroVad, SpeechTimeMap, VadOptions


def run_jobs(
    model: WhisperSpeechModel,
    jobs: Sequence[FileJob],
    rngs: Sequence[np.random.Generator],
    *,
    batch_size: int,
    timestamps: bool,
    policy: CallPolicy,
    overrides: Mapping[str, Any],
    on_progress: Callable[[float, float], None] | None = None,
) -> None:
    """Run every job to its end, ``batch_size`` windows at a time (``on_progress(done, total)`` after each batch)."""
    total = sum(job.recording for job in jobs)
    temps = policy.options.temperatures
    while True:
        active = [k for k, job in enumerate(jobs) if job.active]
        if not active:
            return
        for start in range(0, len(active), batch_size):
            chunk = active[start : start + batch_size]
            windows = [jobs[k].window() for k in chunk]
            hidden_value, mask = model._runtime.encode(np.concatenate(windows, axis=0))
            hidden = np.asarray(hidden_value.numpy())  # [rows, src, d_model]
            for i, k in enumerate(chunk):
                if jobs[k].needs_language:
                    one = ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(hidden[i : i + 1]))
                    jobs[k].set_language(model._detect(one, mask[i : i + 1]))
            prompts = [jobs[k].ids() for k in chunk]
            results: dict[int, tuple[WindowResult, AlignmentCapture | None]] = {}
            pending = list(range(len(chunk)))
            for attempt, temp in enumerate(temps):
                groups: dict[int, list[int]] = {}
                for i in pending:
                    groups.setdefault(len(prompts[i][0]), []).append(i)
                for group in groups.values():
                    # best_of: a window's candidates are rows of the batch, each with a generator of its own
                    # (seeded from the file's, as transcribe() does), so they are the candidates alone
                    rows: list[int] = []
                    row_rngs: list[np.random.Generator] = []
                    for i in group:
                        n = jobs[chunk[i]].candidates(temp)
                        rows.extend([i] * n)
                        row_rngs.extend(candidate_generators(rngs[chunk[i]], n))
                    configs = [
                        model._attempt_config(len(prompts[i][0]), overrides, temp, policy, prompts[i][1]) for i in rows
                    ]
                    words = [jobs[chunk[i]].words_for for i in rows]
                    scorers = [
                        WindowScorer(make_sampler(c), None if w is None else AlignmentCapture(*w))
                        for c, w in zip(configs, words)
                    ]
                    outs = decode_rows(
                        model,
                        hidden[rows],
                        mask[rows],
                        [prompts[i][0] for i in rows],
                        configs,
                        scorers,
                        row_rngs,
                        timestamps=timestamps,
                    )
                    candidates: dict[int, list[tuple[WindowResult, AlignmentCapture | None]]] = {}
                    for i, out, config, scorer in zip(rows, outs, configs, scorers):
                        judged = jobs[chunk[i]].judge(out, config, scorer)
                        candidates.setdefault(i, []).append((judged, scorer.alignment))
                    for i, found in candidates.items():
                        results[i] = found[best_candidate([r for r, _ in found])]
                if attempt == len(temps) - 1:
                    break
                pending = [i for i in pending if needs_fallback(results[i][0], policy.options)]
                if not pending:
                    break
            for i, k in enumerate(chunk):
                result, capture = results[i]
                if is_silence(result, policy.options):
                    jobs[k].skip()
                else:
                    for _ in jobs[k].accept(result, capture):
                        pass
            if on_progress is not None:
                on_progress(sum(job.done for job in jobs), total)


def decode_rows(
    model: WhisperSpeechModel,
    hidden: np.ndarray,
    mask: np.ndarray,
    prompts: Sequence[Sequence[int]],
    configs: Sequence[GenerationConfig],
    scorers: Sequence[WindowScorer],
    rngs: Sequence[np.random.Generator],
    *,
    timestamps: bool,
) -> list[list[int]]:
    """Greedy / sampled tokens of several windows decoded together (prompts of one length).

    Args:
        hidden: the windows' encoder output ``[rows, src, d_model]``; ``mask`` its ``[rows, 1]`` mask.
        prompts: each row's decoder prompt.
        configs, scorers, rngs: each row's settings, sampler (which also collects its scores and
            ``<|nospeech|>`` probability) and random generator.
    """
    v = model._vocab
    captures = [s.alignment for s in scorers]
    words = any(c is not None for c in captures)
    runtime = model._alignment_runtime() if words else model._runtime
    state = Seq2SeqState(runtime, ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(hidden)), mask)
    if words:
        state.extra_outputs = next(c for c in captures if c is not None).outputs
    ids = np.asarray(prompts, dtype=np.int64)  # [rows, n]
    n = ids.shape[1]
    sot_at = list(prompts[0]).index(v.sot) if v.no_speech is not None and v.sot in prompts[0] else None
    if sot_at is not None and v.no_speech is not None:
        at_sot = state.prefill(ids[:, : sot_at + 1])  # [rows, vocab]: what follows <|startoftranscript|>
        for r, scorer in enumerate(scorers):
            scorer.set_no_speech(no_speech_probability(at_sot[r], v.no_speech))
        logits = state.prefill(ids[:, sot_at + 1 :]) if n > sot_at + 1 else at_sot
    else:
        logits = state.prefill(ids)
    choosers = [
        TokenChooser(
            list(p),
            c,
            processors=model._window_processors(c, n, timestamps),
            sampler=s,
            rng=rng,
        )
        for p, c, s, rng in zip(prompts, configs, scorers, rngs)
    ]
    outs: list[list[int]] = [[] for _ in prompts]
    feed = np.full(len(prompts), v.eot, dtype=np.int64)
    while True:
        fed: list[int] = []
        for r, chooser in enumerate(choosers):
            if chooser.finished:
                continue
            row = np.array(logits[r : r + 1], dtype=np.float32)  # [1, vocab]: the processors change it in place
            capture = captures[r]
            if capture is not None:
                capture.observe(row[0])
            token = chooser.choose(row)
            outs[r].append(token)
            feed[r] = token
            if not chooser.finished:
                fed.append(r)
                if capture is not None:
                    capture.chosen(token)
        if not fed:
            return outs
        logits = state.step(feed)
        for r in fed:
            capture = captures[r]
            if capture is not None:
                capture.attention(state.extras, r)


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
    from inference4py.tasks.whisper.vad import SpeechTimeMap, chunk_speech, transcription_map

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
