"""Batched long-form: the current windows of several files encoded and decoded as one batch.

Each file keeps its own :class:`~inference4py.speech.job.FileJob` (where its next window
starts, its context, its segments); a round takes the current window of up to ``batch_size``
files, runs the encoder once on all of them, and decodes the windows whose prompts have the same
length as one batch (:meth:`~inference4py.speech.runtime.WhisperRuntime.decode_rows`:
one chooser per row, with its own processors, sampler, random generator and stop rule).  Rows that fail a threshold are decoded again, together, at the next
temperature.  A row goes through the same choices, judgement and cutting as the file alone, so
its ids are the ids of the file transcribed alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from inference4py.errors import ConfigurationError, UnsupportedModelError
from inference4py.generation.sampling import make_rng, make_sampler
from inference4py.speech.decoding import (
    WindowResult,
    WindowScorer,
    best_candidate,
    candidate_generators,
    is_silence,
    needs_fallback,
)
from inference4py.speech.job import FileJob
from inference4py.speech.options import CallPolicy, attempt_config
from inference4py.speech.parts import WhisperParts
from inference4py.speech.probe import AlignmentCapture
from inference4py.speech.runtime import WhisperRuntime
from inference4py.speech.timestamps import whisper_rules


def run_batch(
    parts: WhisperParts,
    jobs: Sequence[FileJob],
    *,
    batch_size: int,
    timestamps: bool,
    policy: CallPolicy,
    on_progress: Callable[[float, float], None] | None = None,
) -> None:
    """Decode ``jobs`` as batches of up to ``batch_size`` rows (greedy or sampling, each file its own seed).

    Raises:
        ConfigurationError: beam search (``num_beams`` above 1).
        UnsupportedModelError: a backend other than the native one.
    """
    runtime = parts.backend
    if not isinstance(runtime, WhisperRuntime):
        raise UnsupportedModelError(
            "transcribe_batch runs on the native onnxruntime backend: use inference4py.WhisperSpeechModel."
        )
    planner = parts.planner
    if jobs and policy.config(planner, len(jobs[0].prompt)).num_beams > 1:
        raise ConfigurationError(
            "transcribe_batch decodes greedily or by sampling: drop num_beams (or use transcribe())."
        )
    rngs = [make_rng(policy.config(planner, len(j.prompt)).seed) for j in jobs]
    run_jobs(
        parts,
        runtime,
        jobs,
        rngs,
        batch_size=batch_size,
        timestamps=timestamps,
        policy=policy,
        on_progress=on_progress,
    )


def run_jobs(
    parts: WhisperParts,
    runtime: WhisperRuntime,
    jobs: Sequence[FileJob],
    rngs: Sequence[np.random.Generator],
    *,
    batch_size: int,
    timestamps: bool,
    policy: CallPolicy,
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
            hidden, mask, cross = runtime.encode_rows(windows)  # [rows, src, d_model], [rows, 1], cross cache
            for i, k in enumerate(chunk):
                if jobs[k].needs_language:
                    jobs[k].set_language(runtime.detect_language_row(hidden, mask, i, cross))
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
                        attempt_config(parts.planner, len(prompts[i][0]), temp, policy, prompts[i][1]) for i in rows
                    ]
                    words = [jobs[chunk[i]].words_for for i in rows]
                    scorers = [
                        WindowScorer(make_sampler(c), None if w is None else w.capture())
                        for c, w in zip(configs, words)
                    ]
                    n = len(prompts[group[0]][0])  # one prompt length per group
                    rules = [[*whisper_rules(parts.vocab, n, timestamps), *parts.processors] for _ in rows]
                    outs = runtime.decode_rows(
                        hidden[rows],
                        mask[rows],
                        [prompts[i][0] for i in rows],
                        configs,
                        rules,
                        scorers,
                        row_rngs,
                        {name: value[rows] for name, value in cross.items()},
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
