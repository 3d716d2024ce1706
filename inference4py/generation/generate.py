"""The middle and top tiers of generation.

``stream_generate`` turns a token iterator into :class:`GenerationChunk` objects
(complete UTF-8 text, stop sequences cut across pieces, a finish reason on the
last chunk); ``collect`` drains a chunk stream into one :class:`GenerationResult`.
``CandidateStream`` is the chunk stream of a search that returns several
sequences (beam search, several samples): it runs the search to the end, then
streams the best sequence and keeps every candidate for ``collect``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from inference4py.errors import ConfigurationError
from inference4py.generation.beam import Hypothesis, SearchModel
from inference4py.generation.config import GenerationConfig
from inference4py.generation.logprobs import LogprobRecorder, TokenLogprob
from inference4py.generation.processors import LogitsProcessor
from inference4py.generation.result import Candidate, FinishReason, GenerationChunk, GenerationResult, StreamSummary
from inference4py.generation.search import new_chooser, run_chooser
from inference4py.generation.streaming import IncrementalDetokenizer, StopSequenceMatcher
from inference4py.tokenization.harmony import harmony_markers

if TYPE_CHECKING:
    from inference4py.tokenization import Tokenizer

__all__ = [
    "stream_generate",
    "collect",
    "CandidateStream",
    "FinalPhaseStream",
    "generate_chunks",
]


def stream_generate(
    tokens: Iterator[int],
    tokenizer: Tokenizer,
    config: GenerationConfig,
    *,
    recorder: LogprobRecorder | None = None,
) -> Iterator[GenerationChunk]:
    """Decode a token stream into text chunks.

    The concatenation of every chunk's text equals the final text exactly; a stop
    sequence ends the stream (``finish_reason="stop"``) and never appears in it.
    ``recorder`` (filled by the step loop as it yields) gives each token's chunk its
    :class:`TokenLogprob`, and the first chunk the prompt's log-probabilities when recorded.

    Special tokens are left out of the text, but for the markers of a turn format that the text is
    split by (Harmony's ``<|channel|>``, ``<|message|>``... for gpt-oss: see
    :func:`~inference4py.tokenization.harmony.harmony_markers`), which stay in it.
    """
    eos = frozenset(config.eos_token_id)
    markers = harmony_markers(tokenizer.token_to_id).values()
    detok = IncrementalDetokenizer(tokenizer, skip_special_tokens=True, keep=[i for i in markers if i not in eos])
    stops = StopSequenceMatcher(config.stop_sequences) if config.stop_sequences else None
    reason: FinishReason = "length"
    last: int | None = None
    held = ""  # text of the EOS token itself (non-special EOS ids decode to text, as in transformers)
    count = 0
    entry: TokenLogprob | None = None
    logprobs = recorder.items if recorder is not None else None

    def prompt_part() -> tuple[TokenLogprob | None, ...] | None:  # on the first chunk only
        items = recorder.prompt_items if recorder is not None and count == 1 else None
        return tuple(items) if items is not None else None

    try:
        for token in tokens:
            last = token
            entry = logprobs[count] if logprobs is not None else None
            count += 1
            piece = detok.add(token)
            if stops is not None:
                piece, stopped = stops.push(piece)
                if stopped:
                    yield GenerationChunk(piece, token, "stop", entry, prompt_part(), stop_sequence=stops.matched)
                    return
            if token in eos:
                reason = "eos"
                held = piece
                break
            yield GenerationChunk(piece, token, None, entry, prompt_part())
        tail = detok.finish()
        if stops is not None:
            tail, stopped = stops.push(tail)
            if stopped:
                eos_hit = reason == "eos"
                yield GenerationChunk(
                    held + tail,
                    last if eos_hit else None,
                    "stop",
                    entry if eos_hit else None,
                    stop_sequence=stops.matched,
                )
                return
            tail += stops.flush()
        if reason == "eos":
            yield GenerationChunk(held + tail, last, "eos", entry, prompt_part())
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
    logprobs: list[TokenLogprob] = []
    prompt_logprobs: tuple[TokenLogprob | None, ...] | None = None
    first_token_at: float | None = None
    reason: FinishReason = "length"
    stop_sequence: str | None = None
    summary = StreamSummary()
    for chunk in chunks:
        if chunk.logprob is not None:
            logprobs.append(chunk.logprob)
        if chunk.prompt_logprobs is not None:
            prompt_logprobs = chunk.prompt_logprobs
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
            stop_sequence = chunk.stop_sequence
        if chunk.summary is not None:
            summary = chunk.summary
    end = time.perf_counter()
    text = "".join(pieces)
    candidates = summary.candidates or (Candidate(text, tuple(ids), None, reason),)
    return GenerationResult(
        text=text,
        token_ids=tuple(ids),
        prompt_tokens=prompt_tokens,
        generated_tokens=len(ids),
        finish_reason=reason,
        duration=end - started,
        time_to_first_token=(first_token_at or end) - started,
        candidates=tuple(candidates),
        logprobs=tuple(logprobs) if logprobs else None,
        prompt_logprobs=prompt_logprobs,
        speculative=summary.speculative,
        final_outputs=summary.final_outputs,
        stop_sequence=stop_sequence,
    )


class CandidateStream:
    """Chunks of the best of several sequences, computed in full before the first chunk.

    Beam search only knows its best sequence at the end, so nothing is streamed
    while it runs: the first ``next()`` runs ``search`` to completion, decodes
    every returned sequence (stop sequences cut each text, as in a stream), then
    yields the chunks of the first (best) one; its last chunk's summary holds all of
    them, best first (``candidates`` too, once the stream has started).

    Args:
        search: Runs the search: returns the hypotheses, best first.
        tokenizer: Decodes the token ids.
        config: Stop sequences and EOS ids are read from it.
    """

    def __init__(self, search: Callable[[], list[Hypothesis]], tokenizer: Tokenizer, config: GenerationConfig) -> None:
        self._search: Callable[[], list[Hypothesis]] | None = search
        self._tokenizer = tokenizer
        self._config = config
        self._chunks: Iterator[GenerationChunk] = iter(())
        self.candidates: tuple[Candidate, ...] = ()

    def __iter__(self) -> CandidateStream:
        return self

    def __next__(self) -> GenerationChunk:
        if self._search is not None:
            search, self._search = self._search, None
            self._start(search())
        return next(self._chunks)

    def _start(self, hypotheses: list[Hypothesis]) -> None:
        decoded = []
        for hyp in hypotheses:
            chunks = list(stream_generate(iter(hyp.token_ids), self._tokenizer, self._config))
            ids = tuple(c.token_id for c in chunks if c.token_id is not None)
            reason: FinishReason = chunks[-1].finish_reason or "length"
            decoded.append((Candidate("".join(c.text for c in chunks), ids, hyp.score, reason), chunks))
        self.candidates = tuple(candidate for candidate, _ in decoded)
        best = list(decoded[0][1]) if decoded else []
        if best:
            best[-1] = best[-1].summarized(candidates=self.candidates)
        self._chunks = iter(best)

    def close(self) -> None:
        self._search = None
        self._chunks = iter(())


def generate_chunks(
    state: SearchModel,
    prompt_ids: Sequence[int],
    config: GenerationConfig,
    tokenizer: Tokenizer,
    *,
    extra_processors: Sequence[LogitsProcessor] = (),
) -> Iterator[GenerationChunk]:
    """Chunks for one prompt over a fresh engine state: the search the config asks for, then streaming.

    Greedy and sampling stream token by token; beam search and several samples search
    first and then stream the best sequence (see :class:`CandidateStream`).  A state whose
    pipeline has ``final`` sessions runs them once the chunks end (see :class:`FinalPhaseStream`).
    """
    chunks = _search_chunks(state, prompt_ids, config, tokenizer, extra_processors=extra_processors)
    if getattr(state, "has_final_phase", False):
        return FinalPhaseStream(chunks, state, prompt_ids)
    return chunks


def _search_chunks(
    state: SearchModel,
    prompt_ids: Sequence[int],
    config: GenerationConfig,
    tokenizer: Tokenizer,
    *,
    extra_processors: Sequence[LogitsProcessor] = (),
) -> Iterator[GenerationChunk]:
    from inference4py.generation.beam import generate_sequences, returns_several
    from inference4py.generation.processors import make_logits_processors
    from inference4py.generation.sampling import make_rng, make_sampler

    processors = make_logits_processors(config, prompt_length=len(prompt_ids), extra=extra_processors)
    if returns_several(config):
        if config.logprobs:
            raise ConfigurationError(
                "logprobs are reported for one sequence per call (greedy search or sampling). Beam search gives each "
                "sequence's score in result.candidates[i].score; for several samples, call generate() once per sample."
            )
        return CandidateStream(
            lambda: generate_sequences(
                state,
                prompt_ids,
                config,
                processors=processors,
                sampler=make_sampler(config),
                rng=make_rng(config.seed),
            ),
            tokenizer,
            config,
        )
    chooser = new_chooser(prompt_ids, config, tokenizer, processors=processors)
    return stream_generate(run_chooser(state, chooser, config), tokenizer, config, recorder=chooser.recorder)


class FinalPhaseStream:
    """The chunks of a generation, then the pipeline's ``final`` sessions on its ids.

    Iterates ``chunks`` unchanged until the last one; then runs ``state.run_final(prompt, ids)``
    on the generated ids (the best candidate's for beam search) and puts the outputs on that last
    chunk's summary, where :func:`collect` finds them (``result.final_outputs``).
    """

    def __init__(self, chunks: Iterator[GenerationChunk], state: object, prompt_ids: Sequence[int]) -> None:
        self._chunks = chunks
        self._state = state
        self._prompt = list(prompt_ids)
        self._ids: list[int] = []

    def __iter__(self) -> FinalPhaseStream:
        return self

    def __next__(self) -> GenerationChunk:
        chunk = next(self._chunks)
        if chunk.token_id is not None:
            self._ids.append(chunk.token_id)
        if chunk.finish_reason is None:
            return chunk
        candidates = chunk.summary.candidates if chunk.summary is not None else ()
        best = candidates[0].token_ids if candidates else tuple(self._ids)
        outputs = self._state.run_final(self._prompt, best)  # type: ignore[attr-defined]
        return chunk.summarized(final_outputs=outputs)

    def close(self) -> None:
        close = getattr(self._chunks, "close", None)
        if close is not None:
            close()
