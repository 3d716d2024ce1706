"""The window loop of one recording: each 30 s window decoded, judged, retried and cut into segments.

The numpy twin of transformers 4.57 ``WhisperForConditionalGeneration.generate`` over long audio
(openai-whisper's ``transcribe()``): each window is encoded once, its language detected on the
first window when not given, then decoded at the first temperature; a window that fails a
threshold is decoded again at the next one (``best_of`` candidates when sampling), a silent window
is skipped, and the kept one is cut into segments (:class:`~inference4py.speech.job.FileJob`).
The backend (:class:`~inference4py.speech.runtime.WindowBackend`) runs the windows.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

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
from inference4py.speech.timestamps import whisper_rules


def window_events(
    parts: WhisperParts, job: FileJob, policy: CallPolicy, *, started: float
) -> Iterator[tuple[str, Any]]:
    """Run ``job`` to its end: ``("text", piece)`` as text becomes final, ``("progress", (done, total))``
    after each window, and last ``("done", Transcription)`` (``started``: ``time.perf_counter()`` at the call).
    """
    backend, options = parts.backend, policy.options
    rng = make_rng(policy.config(parts.planner, len(job.prompt)).seed)
    while job.active:
        context = backend.encode(job.window())
        if job.needs_language:
            job.set_language(backend.detect_language(context))
        ids, has_context = job.ids()
        rules = [*whisper_rules(parts.vocab, len(ids), job.timestamps), *parts.processors]
        for attempt, temp in enumerate(options.temperatures):
            config = attempt_config(parts.planner, len(ids), temp, policy, has_context)
            # best_of: each candidate samples with a generator of its own, as in transcribe_batch
            candidates: list[tuple[WindowResult, AlignmentCapture | None]] = []
            for cand_rng in candidate_generators(rng, job.candidates(temp)):
                capture = None if job.words_for is None else job.words_for.capture()
                scorer = WindowScorer(make_sampler(config), capture)
                out: list[int] = []
                live: bool | None = None  # streamed while decoding: nothing can discard this window's text
                for token in backend.decode(context, ids, config, rules, scorer, cand_rng):
                    if live is None:
                        live = job.live(scorer)
                    out.append(token)
                    if live:
                        piece = job.stream(out)
                        if piece:
                            yield "text", piece
                candidates.append((job.judge(out, config, scorer), capture))
            result, capture = candidates[best_candidate([c for c, _ in candidates])]
            if attempt == len(options.temperatures) - 1 or not needs_fallback(result, options):
                break
        if is_silence(result, options):
            job.skip()
        else:
            for piece in job.accept(result, capture):
                yield "text", piece
        yield "progress", (job.done, job.recording)
    tail, transcription = job.finish(time.perf_counter() - started)
    if tail:
        yield "text", tail
    yield "done", transcription
