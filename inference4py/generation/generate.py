"""The middle and top tiers of generation.

``stream_generate`` turns a token iterator into :class:`GenerationChunk` objects
(complete UTF-8 text, stop sequences cut across pieces, a finish reason on the
last chunk); ``collect`` drains a chunk stream into one :class:`GenerationResult`.
"""

from __future__ import annotations

import time
from typing import Callable, Iterable, Iterator

from inference4py.generation.config import GenerationConfig
from inference4py.generation.result import Candidate, FinishReason, GenerationChunk, GenerationResult
from inference4py.generation.streaming import IncrementalDetokenizer, StopSequenceMatcher

__all__ = ["stream_generate", "collect"]


def stream_generate(tokens: Iterator[int], tokenizer, config: GenerationConfig) -> Iterator[GenerationChunk]:
    """Decode a token stream into text chunks.

    The concatenation of every chunk's text equals the final text exactly; a stop
    sequence ends the stream (``finish_reason="stop"``) and never appears in it.
    """
    detok = IncrementalDetokenizer(tokenizer, skip_special_tokens=True)
    stops = StopSequenceMatcher(config.stop_sequences) if config.stop_sequences else None
    eos = frozenset(config.eos_token_id)
    reason: FinishReason = "length"
    last: int | None = None
    held = ""  # text of the EOS token itself (non-special EOS ids decode to text, as in transformers)
    try:
        for token in tokens:
            last = token
            piece = detok.add(token)
            if stops is not None:
                piece, stopped = stops.push(piece)
                if stopped:
                    yield GenerationChunk(piece, token, "stop")
                    return
            if token in eos:
                reason = "eos"
                held = piece
                break
            yield GenerationChunk(piece, token, None)
        tail = detok.finish()
        if stops is not None:
            tail, stopped = stops.push(tail)
            if stopped:
                yield GenerationChunk(held + tail, last if reason == "eos" else None, "stop")
                return
            tail += stops.flush()
        if reason == "eos":
            yield GenerationChunk(held + tail, last, "eos")
        else:
            yield GenerationChunk(tail, None, "length")
    finally:
        close = getattr(tokens, "close", None)
        if close is not None:
            close()  # stop the engine loop: no forward pass after a stop


def collect(
    chunks: Iterable[GenerationChunk],
    *,
    prompt_tokens: int,
    started: float,
    on_token: Callable[[str], None] | None = None,
) -> GenerationResult:
    """Drain a chunk stream into a :class:`GenerationResult`, calling ``on_token`` per non-empty piece."""
    pieces: list[str] = []
    ids: list[int] = []
    first_token_at: float | None = None
    reason: FinishReason = "length"
    for chunk in chunks:
        if chunk.token_id is not None:
            ids.append(chunk.token_id)
            if first_token_at is None:
                first_token_at = time.perf_counter()
        if chunk.text:
            pieces.append(chunk.text)
            if on_token is not None:
                on_token(chunk.text)
        if chunk.finish_reason is not None:
            reason = chunk.finish_reason
    end = time.perf_counter()
    text = "".join(pieces)
    return GenerationResult(
        text=text,
        token_ids=tuple(ids),
        prompt_tokens=prompt_tokens,
        generated_tokens=len(ids),
        finish_reason=reason,
        duration=end - started,
        time_to_first_token=(first_token_at or end) - started,
        candidates=(Candidate(text, tuple(ids), None, reason),),
    )
