"""Speculative decoding: draft several tokens cheaply, verify them in one forward pass of the model.

Decoding on a CPU is bound by reading the weights, and a forward pass over k+1 tokens reads
them once.  A proposer guesses the next tokens; the model scores ``[last token, d_1 .. d_k]``
on top of its KV cache in one pass, which gives the logits of every position; the longest
prefix of the draft the model agrees with is kept, plus one token of the model's own (the
correction at the first disagreement, or a bonus token after a full match), and the cache is
rewound past the rejected drafts.

Two proposers:

* :class:`PromptLookup` copies from the context (no second model): the last n tokens (n from
  ``max_ngram`` down to ``min_ngram``) are looked up earlier in the prompt and the text so far,
  and the tokens that followed become the draft (transformers' ``prompt_lookup_num_tokens``,
  vLLM's n-gram proposer).  Pays off when the output copies its input: summaries, answers
  from a passage, code edits.
* :class:`DraftModel` asks a smaller model with the same tokenizer.

The output is exactly what plain decoding gives: greedy keeps a draft token only when it is
the argmax, so the ids are the plain greedy ids; sampling keeps draft token d with probability
``min(1, p(d) / q(d))`` and otherwise draws from ``norm(max(0, p - q))`` (Leviathan et al. 2023;
Chen et al. 2023), so every token has the plain distribution p.  ``p`` is the distribution the
plain loop samples from at that position: the logits processors (penalties, constraints...)
with the position's own token history, then the sampler's temperature, top-k, top-p, min-p.
A prompt-lookup draft is deterministic: ``q`` is a point mass.

One idea past ~500 lines: the settings, the two proposers, the acceptance rule, the draft-length
policy and the loop share one contract (what a draft is, what a pass costs and keeps); split
apart, each would need the others' internals.

Layers: :func:`speculative_tokens` is a token iterator for :func:`~inference4py.generation.generate.stream_generate`
(so streaming, stop strings, EOS and max_new_tokens work as in the plain loop), and
:class:`SpeculativeStream` wraps the chunk stream so ``collect`` records the draft counts.
"""

from __future__ import annotations

import math
import time
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from inference4py.errors import ConfigurationError, UnsupportedModelError
from inference4py.generation.config import GenerationConfig
from inference4py.generation.processors import LogitsProcessor, make_logits_processors
from inference4py.generation.result import GenerationChunk, SpeculativeStats
from inference4py.generation.sampling import choose_token, make_sampler, nan_logits_error
from inference4py.generation.search import TokenChooser

if TYPE_CHECKING:
    from inference4py.engine.decoder import DecoderState
    from inference4py.tokenization import Tokenizer

__all__ = [
    "PromptLookup",
    "DraftModel",
    "Speculation",
    "resolve_speculative",
    "PromptLookupProposer",
    "DraftModelProposer",
    "DraftLength",
    "speculative_tokens",
    "SpeculativeStream",
    "check_same_vocabulary",
    "speculative_chunks",
    "candidates",
    "distribution",
]

_MAX_DRAFT_LIMIT = 64


def _check_lengths(num_draft_tokens: int, max_draft_tokens: int, timed: bool) -> None:
    if not isinstance(timed, bool):
        raise ConfigurationError(f"timed={timed!r} is invalid: timed must be True or False.")
    for name, value in (("num_draft_tokens", num_draft_tokens), ("max_draft_tokens", max_draft_tokens)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _MAX_DRAFT_LIMIT:
            raise ConfigurationError(
                f"{name}={value!r} is invalid: {name} must be an integer from 1 to {_MAX_DRAFT_LIMIT}."
            )
    if num_draft_tokens > max_draft_tokens:
        raise ConfigurationError(
            f"num_draft_tokens={num_draft_tokens} is larger than max_draft_tokens={max_draft_tokens}: "
            "the first draft length must fit the bound. Raise max_draft_tokens or lower num_draft_tokens."
        )


@dataclass(frozen=True)
class PromptLookup:
    """Drafts copied from the context: ``generate(..., speculative=PromptLookup(...))``.

    ``speculative="prompt_lookup"`` is this with its defaults.

    Args:
        max_ngram: Longest suffix of the sequence looked up in the earlier context (tried first).
        min_ngram: Shortest suffix tried when no longer one matches (1 to ``max_ngram``).
        num_draft_tokens: Draft length to start with.
        max_draft_tokens: Bound on the draft length, which grows by 2 after a fully accepted
            draft and shrinks by 1 after a rejection (never below 1).
        timed: With greedy search, also fit the draft length to measured pass times (see
            :class:`DraftLength`; the ids do not change, the draft counts then vary from run to run).

    Example:
        >>> PromptLookup(max_ngram=4).max_ngram
        4
    """

    max_ngram: int = 3
    min_ngram: int = 2
    num_draft_tokens: int = 4
    max_draft_tokens: int = 10
    timed: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.max_ngram, bool) or not isinstance(self.max_ngram, int) or not 1 <= self.max_ngram <= 16:
            raise ConfigurationError(
                f"max_ngram={self.max_ngram!r} is invalid: max_ngram must be an integer from 1 to 16."
            )
        if (
            isinstance(self.min_ngram, bool)
            or not isinstance(self.min_ngram, int)
            or not 1 <= self.min_ngram <= self.max_ngram
        ):
            raise ConfigurationError(
                f"min_ngram={self.min_ngram!r} is invalid: min_ngram must be an integer from 1 to max_ngram "
                f"({self.max_ngram})."
            )
        _check_lengths(self.num_draft_tokens, self.max_draft_tokens, self.timed)

    @property
    def method(self) -> str:
        return "prompt_lookup"


@dataclass(frozen=True, eq=False)
class DraftModel:
    """Drafts from a smaller model with the same tokenizer: ``speculative=DraftModel(small)``.

    Args:
        model: A loaded :class:`~inference4py.OnnxTextGenerator` (decoder-only) whose tokenizer has
            the target's vocabulary, e.g. SmolLM2-135M drafting for SmolLM2-1.7B, or an int4 copy
            of the target itself.
        num_draft_tokens: Draft length to start with.
        max_draft_tokens: Bound on the draft length (it adapts as with :class:`PromptLookup`).
        timed: As :class:`PromptLookup`'s (the pass times include the draft model's steps).

    The draft model runs the call's logits processors and sampling settings on its own logits,
    so its guesses follow the same rules; its own generation defaults are not used.
    """

    model: Any
    num_draft_tokens: int = 4
    max_draft_tokens: int = 8
    timed: bool = True

    def __post_init__(self) -> None:
        _check_lengths(self.num_draft_tokens, self.max_draft_tokens, self.timed)

    @property
    def method(self) -> str:
        return "draft_model"


Speculation = PromptLookup | DraftModel

_NAMES = {"prompt_lookup": PromptLookup}


def resolve_speculative(value: Any) -> Speculation | None:
    """The speculative setting of a call: None/False (off), ``"prompt_lookup"``, a PromptLookup or a DraftModel.

    Raises:
        ConfigurationError: any other value, naming the valid ones.
    """
    if value is None or value is False:
        return None
    if isinstance(value, (PromptLookup, DraftModel)):
        return value
    if isinstance(value, str) and value in _NAMES:
        return _NAMES[value]()
    raise ConfigurationError(
        f"speculative={value!r} is invalid: use speculative='prompt_lookup', PromptLookup(...) or "
        "DraftModel(smaller_generator) (from inference4py.generation.speculative), or None to turn it off."
    )


def refuse_unsupported(config: GenerationConfig) -> None:
    """Refuse the settings speculative decoding does not run, naming the option to drop."""
    if config.num_beams > 1:
        raise ConfigurationError(
            f"speculative decoding runs greedy search or sampling, not beam search (num_beams={config.num_beams}): "
            "drop num_beams or speculative."
        )
    if config.num_return_sequences > 1:
        raise ConfigurationError(
            f"speculative decoding returns one sequence (num_return_sequences={config.num_return_sequences}): "
            "drop num_return_sequences or speculative, or call generate() once per sample."
        )


# ---------------------------------------------------------------------------------- proposers
class Proposer(Protocol):
    """Guesses the next tokens of a sequence."""

    def propose(self, context: np.ndarray, k: int) -> tuple[np.ndarray, list[np.ndarray] | None]:
        """At most ``k`` draft tokens after ``context`` (``[n]`` int64), and their draft distributions.

        The distributions (float64 ``[vocab]`` each) are None when the draft is deterministic
        (point masses on the drafted tokens).
        """
        ...


_EMPTY = np.zeros(0, dtype=np.int64)


class PromptLookupProposer:
    """N-gram drafts: the tokens that followed the latest earlier occurrence of the sequence's suffix."""

    def __init__(self, settings: PromptLookup) -> None:
        self.max_ngram = settings.max_ngram
        self.min_ngram = settings.min_ngram

    def propose(self, context: np.ndarray, k: int) -> tuple[np.ndarray, list[np.ndarray] | None]:
        length = context.shape[0]
        for n in range(min(self.max_ngram, length - 1), self.min_ngram - 1, -1):
            # starts j of earlier occurrences: context[j : j + n] == suffix, with j + n < length
            candidates = length - n
            match = context[:candidates] == context[candidates]
            for i in range(1, n):
                match &= context[i : candidates + i] == context[candidates + i]
            hits = np.flatnonzero(match)
            if hits.size:
                # the latest occurrence with k tokens after it, else the latest one
                full = hits[hits + n + k <= length]
                start = int(full[-1] if full.size else hits[-1]) + n
                return context[start : start + k].copy(), None
        return _EMPTY, None


_VOCABS: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def _vocab_fingerprint(tokenizer: Tokenizer) -> int:
    """A hash of every (id, token) entry, computed once per tokenizer object."""
    known = _VOCABS.get(tokenizer)
    if known is None:
        known = hash(tuple(tokenizer.id_to_token(i) for i in range(tokenizer.vocab_size)))
        _VOCABS[tokenizer] = known
    return known


def check_same_vocabulary(target: Tokenizer, draft: Tokenizer) -> None:
    """Refuse a draft model whose tokenizer maps ids to other tokens than the target's.

    Raises:
        ConfigurationError: the vocabularies differ (size or any entry).
    """
    if target is draft:
        return
    if target.vocab_size != draft.vocab_size or _vocab_fingerprint(target) != _vocab_fingerprint(draft):
        first = next(
            (
                i
                for i in range(min(target.vocab_size, draft.vocab_size))
                if target.id_to_token(i) != draft.id_to_token(i)
            ),
            min(target.vocab_size, draft.vocab_size),
        )
        raise ConfigurationError(
            f"The draft model's vocabulary differs from the model's ({draft.vocab_size} vs {target.vocab_size} "
            f"tokens; first difference at id {first}: {draft.id_to_token(first)!r} vs {target.id_to_token(first)!r}). "
            "A draft model must share the tokenizer (e.g. a smaller model of the same family); "
            "use speculative='prompt_lookup' otherwise."
        )


class DraftModelProposer:
    """Drafts from a smaller decoder, greedy or sampled with the call's processors and sampler.

    Each proposal is one :class:`TokenChooser` over the context (at most ``k`` tokens, ended by
    the draft's EOS as any sequence is): the draft's tokens are chosen as every token is.  A
    sampled draft also keeps the distribution each token was drawn from, for the acceptance rule.
    The draft's KV cache follows the sequence: each proposal rewinds it to the longest prefix it
    shares with the context (its rejected guesses are dropped) and feeds what it has not seen.
    """

    def __init__(
        self,
        state: DecoderState,
        config: GenerationConfig,
        *,
        prompt_length: int,
        rng: np.random.Generator,
    ) -> None:
        self._state = state
        self._config = config
        self._processors: tuple[LogitsProcessor, ...] = tuple(
            make_logits_processors(config, prompt_length=prompt_length)
        )
        self._sampler = make_sampler(config)
        self._sampling = config.sampling
        self._rng = rng
        self._fed = np.zeros(0, dtype=np.int64)  # the tokens in the draft's cache
        self.forward_passes = 0

    def propose(self, context: np.ndarray, k: int) -> tuple[np.ndarray, list[np.ndarray] | None]:
        length = context.shape[0]
        shared = min(self._fed.shape[0], length - 1)  # at least one token to feed: its logits are needed
        if shared:
            differs = np.flatnonzero(self._fed[:shared] != context[:shared])
            if differs.size:
                shared = int(differs[0])
        if shared < self._state.length:
            self._state.rewind(shared)
        new = context[shared:]
        logits = self._state.step(new) if shared and new.shape[0] == 1 else self._state.prefill(new[None, :])
        self.forward_passes += 1
        chooser = TokenChooser(
            context,
            self._config,
            processors=self._processors,
            sampler=self._sampler,
            rng=self._rng,
            max_new_tokens=k,  # the draft's own end: EOS or k tokens
        )
        dists: list[np.ndarray] | None = [] if self._sampling else None
        while True:
            scores = np.array(logits, dtype=np.float32)  # [1, vocab], the state's own logits left alone
            if dists is None:
                token = chooser.choose(scores)
            else:
                scores = chooser.scores(scores)
                dists.append(distribution(self._sampler, scores))
                token = chooser.append(choose_token(self._sampler, scores, self._rng, step=chooser.generated))
            if chooser.finished:
                break
            logits = self._state.step(np.array([token], dtype=np.int64))
            self.forward_passes += 1
        tokens = chooser.new_ids()
        self._fed = np.concatenate([context, np.asarray(tokens[:-1], dtype=np.int64)])
        return np.asarray(tokens, dtype=np.int64), dists


# ---------------------------------------------------------------------------------- the rule
def candidates(sampler: Any, scores: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
    """The tokens a sampling ``sampler`` may draw for ``scores`` ``[1, vocab]`` and their probabilities.

    The sampler's own warping (temperature, top-k, top-p, min-p) gives the kept tokens and their
    scores; the probabilities (float64, summing to 1) are their softmax, as the sampler's draw
    computes them.  Returns ``(ids, probs)``, or ``(None, probs over the whole vocabulary)``.
    """
    warp = getattr(sampler, "warp", None)
    if warp is None:
        raise ConfigurationError("speculative sampling needs a sampler from make_sampler() (one with warp()).")
    idx, vals = warp(scores)
    weights = np.asarray(vals[0], dtype=np.float64)
    top = weights.max()
    if not math.isfinite(top):
        raise nan_logits_error()
    weights = np.exp(weights - top)
    weights /= weights.sum()
    return (None if idx is None else idx[0]), weights


def distribution(sampler: Any, scores: np.ndarray) -> np.ndarray:
    """The float64 ``[vocab]`` distribution a sampling ``sampler`` draws from (see :func:`candidates`)."""
    ids, probs = candidates(sampler, scores)
    if ids is None:
        return probs
    p = np.zeros(scores.shape[1], dtype=np.float64)
    p[ids] = probs
    return p


def draw(p: np.ndarray, rng: np.random.Generator) -> int:
    """One token from the distribution ``p`` (float64 ``[vocab]``, summing to > 0) with one uniform number."""
    cumulative = np.cumsum(p)
    total = cumulative[-1]
    if not total > 0:
        raise nan_logits_error()
    target = min(rng.random() * total, math.nextafter(total, 0.0))
    return int(cumulative.searchsorted(target, side="right"))


def verify(
    chooser: TokenChooser,
    logits: np.ndarray,
    drafted: int,
    q: np.ndarray | None,
    *,
    sampling: bool,
) -> tuple[int, bool]:
    """The token at one verified position and whether it is the drafted one.

    ``logits`` ``[1, vocab]`` are the target's at that position (processed in place); the
    chooser's history is the sequence before it.  The caller appends the token to the chooser.
    """
    scores = chooser.scores(logits)
    if not sampling:
        token = choose_token(chooser.sampler, scores, chooser.rng, step=chooser.generated)
        return token, token == drafted
    rng = chooser.rng
    if q is None:  # a deterministic draft: accept with probability p(d), over the candidates only
        ids, probs = candidates(chooser.sampler, scores)
        if ids is None:
            where = drafted if 0 <= drafted < probs.shape[0] else -1
        else:
            found = np.flatnonzero(ids == drafted)
            where = int(found[0]) if found.size else -1
        if where >= 0 and rng.random() < probs[where]:
            return drafted, True
        if where >= 0:
            probs[where] = 0.0  # norm(max(0, p - point mass at d))
        pick = draw(probs, rng)
        return (pick if ids is None else int(ids[pick])), False
    p = distribution(chooser.sampler, scores)
    p_draft = p[drafted] if 0 <= drafted < p.shape[0] else 0.0
    q_draft = q[drafted] if 0 <= drafted < q.shape[0] else 0.0
    if rng.random() * q_draft < p_draft:  # min(1, p(d) / q(d))
        return drafted, True
    # a draft model's logits may be wider or narrower than the target's: align q to p's width
    # (tokens the target cannot produce have p = 0: never kept, and no part of the residual)
    aligned = q[: p.shape[0]] if q.shape[0] >= p.shape[0] else np.pad(q, (0, p.shape[0] - q.shape[0]))
    residual = np.maximum(p - aligned, 0.0)
    if not residual.sum() > 0:  # p == q up to rounding: a rejection has probability ~0
        residual = p
    return draw(residual, rng), False


class DraftLength:
    """The adaptive draft length, a back-off when drafts keep failing, and (greedy) a cost model.

    +2 after a fully accepted draft, -1 after a rejection, within ``[1, maximum]``.  A draft with
    nothing kept also pauses drafting for 1, 3, 7, then 15 passes (doubling with each such draft
    in a row, reset by any kept token): on text that does not repeat its context, each rejected
    draft costs the extra positions of its pass, so failing proposers are asked less often.

    With ``timed`` (greedy search, whose output does not depend on the draft length), the loop
    also reports how long its passes take: the cost of one drafted position as a fraction of a
    plain step is learnt (~5% on a float32 CPU graph, ~35% on an int4 one), the chance that a
    drafted token is kept is tracked, and the draft is cut to the length with the most expected
    tokens per unit of time; when no length pays, drafting pauses, with a one-token probe now and
    then.  Sampling leaves the timings out, so a seeded call stays reproducible.
    """

    _MAX_PAUSE = 15
    _DECAY = 0.8  # weight of the past in the running estimates (a memory of ~5 passes)

    def __init__(self, start: int, maximum: int, *, timed: bool = False) -> None:
        self.current = start
        self.maximum = maximum
        self.timed = timed
        self._misses = 0  # drafts in a row with nothing kept
        self._pause = 0  # passes left without a draft
        self._probe = False  # the next unprofitable draft is drafted anyway (one token)
        self._step_time = 0.0  # seconds of a pass without drafts (running estimate)
        self._extra: float | None = None  # cost of one drafted position, in plain steps
        self._kept = 1.0  # decayed counts of drafted tokens kept and of rejections (prior: 1/2)
        self._missed = 1.0

    def next(self) -> int:
        """The length of the next draft (0 while paused)."""
        if self._pause:
            self._pause -= 1
            return 0
        if self._extra is None:
            return self.current
        k = self._best(self.current)
        if k:
            return k
        if self._probe:  # drafting does not pay: one token now and then keeps the estimates current
            self._probe = False
            return 1
        self._probe = True
        self._pause = 7
        return 0

    def _best(self, upto: int) -> int:
        """The draft length with the most expected tokens per unit of time (0: a plain step is better)."""
        alpha = self._kept / (self._kept + self._missed)
        assert self._extra is not None
        best, best_rate, expected, power = 0, 1.0, 1.0, 1.0
        for k in range(1, upto + 1):
            power *= alpha
            expected += power  # tokens of a pass: the kept drafts + the model's own
            rate = expected / (1.0 + self._extra * k)
            if rate > best_rate:
                best, best_rate = k, rate
        return best

    def observe(self, drafted: int, seconds: float) -> None:
        """The duration of a pass that verified ``drafted`` tokens (only used when ``timed``)."""
        if not self.timed:
            return
        d = self._DECAY
        if drafted == 0:
            self._step_time = seconds if not self._step_time else d * self._step_time + (1 - d) * seconds
        elif self._step_time:
            extra = max(0.0, (seconds / self._step_time - 1.0) / drafted)
            self._extra = extra if self._extra is None else d * self._extra + (1 - d) * extra

    def update(self, accepted: int, drafted: int) -> None:
        if not drafted:
            return
        self._kept = self._DECAY * self._kept + accepted
        self._missed = self._DECAY * self._missed + (accepted < drafted)
        if accepted == drafted:
            self.current = min(self.maximum, self.current + 2)
        else:
            self.current = max(1, self.current - 1)
        if accepted:
            self._misses = 0
        else:
            self._misses += 1
            self._pause = min(2**self._misses - 1, self._MAX_PAUSE)


@dataclass
class _Counts:
    method: str
    drafted: int = 0
    accepted: int = 0
    passes: int = 0

    def snapshot(self) -> SpeculativeStats:
        return SpeculativeStats(self.method, self.drafted, self.accepted, self.passes)


# ---------------------------------------------------------------------------------- the loop
def speculative_tokens(
    state: DecoderState,
    chooser: TokenChooser,
    proposer: Proposer,
    config: GenerationConfig,
    *,
    lengths: DraftLength,
    counts: _Counts | None = None,
) -> Iterator[int]:
    """Yield generated token ids from a fresh ``state``, verifying drafts in one pass each.

    The first token comes from the prompt's prefill, as in the plain loop.  Then each pass
    feeds ``[last token, drafts...]``: every draft the target agrees with is yielded, then the
    target's own token (a correction, or a bonus after a full match).  A pass without drafts
    is a plain step.  Tokens are yielded one at a time and the loop stops at EOS or
    ``max_new_tokens`` (never beyond), or when the consumer closes the iterator (stop strings).
    """
    from inference4py.generation.search import prefill_scoring_prompt

    if chooser.recorder is not None and config.prompt_logprobs:
        logits = prefill_scoring_prompt(state, chooser.prompt, chooser.recorder)
    else:
        state.keep_prefill_logits = False  # the prompt's logits stay in the runtime
        logits = state.prefill(chooser.prompt)  # [1, vocab]
    token = chooser.choose(logits)
    yield token
    sampling = config.sampling
    feed = np.empty((1, lengths.maximum + 1), dtype=np.int64)  # [1, last token + drafts]
    while not chooser.finished:
        k = min(lengths.next(), chooser.max_new - chooser.generated - 1)
        started = time.perf_counter()  # a pass's cost: drafting (a draft model's steps) + verifying
        drafts, dists = proposer.propose(chooser.ids, k) if k > 0 else (_EMPTY, None)
        k = int(drafts.shape[0])
        if counts is not None:
            counts.passes += 1
            counts.drafted += k
        if k == 0:
            feed[0, 0] = token
            logits = state.step(feed[0, :1])  # a plain step
            lengths.observe(0, time.perf_counter() - started)
            token = chooser.choose(logits)
            yield token
            continue
        feed[0, 0] = token
        feed[0, 1 : k + 1] = drafts
        state.keep_prefill_logits = True
        state.prefill_logits = None
        state.prefill(feed[:, : k + 1])
        spent = time.perf_counter() - started
        rows = state.prefill_logits  # [1, k + 1, vocab]
        if rows is None or rows.shape[1] != k + 1:
            raise UnsupportedModelError(
                "Speculative decoding verifies several tokens per pass and needs the logits of every position, "
                "but this graph returns only the last position's. Drop speculative for this model."
            )
        accepted = 0
        for i in range(k + 1):
            row = rows[0, i : i + 1]  # [1, vocab]
            if i == k:  # every draft kept: the target's next token, as a plain step would choose it
                token = chooser.choose(row)
                yield token
                break
            token, kept = verify(chooser, row, int(drafts[i]), None if dists is None else dists[i], sampling=sampling)
            chooser.append(token)
            if kept:
                accepted += 1
            else:
                started = time.perf_counter()
                state.discard(k - i)  # keep [last token, d_1 .. d_i]: drop d_{i+1} .. d_k
                spent += time.perf_counter() - started
            yield token
            if not kept or chooser.finished:
                break
        lengths.observe(k, spent)
        lengths.update(accepted, k)
        if counts is not None:
            counts.accepted += accepted


class SpeculativeStream:
    """A chunk stream of a speculative call; ``speculative`` holds its draft counts so far.

    The last chunk's summary carries the final counts, which
    :func:`~inference4py.generation.generate.collect` puts on the result.
    """

    def __init__(self, chunks: Iterator[GenerationChunk], counts: _Counts) -> None:
        self._chunks = chunks
        self._counts = counts

    def __iter__(self) -> SpeculativeStream:
        return self

    def __next__(self) -> GenerationChunk:
        chunk = next(self._chunks)
        if chunk.finish_reason is None:
            return chunk
        return chunk.summarized(speculative=self._counts.snapshot())  # the counts travel on the last chunk

    def close(self) -> None:
        close = getattr(self._chunks, "close", None)
        if close is not None:
            close()

    @property
    def speculative(self) -> SpeculativeStats:
        return self._counts.snapshot()


def speculative_chunks(
    state: DecoderState,
    prompt_ids: Sequence[int],
    config: GenerationConfig,
    tokenizer: Tokenizer,
    *,
    speculation: Speculation,
    draft_state: DecoderState | None = None,
    extra_processors: Sequence[LogitsProcessor] = (),
) -> SpeculativeStream:
    """The chunks of one speculative call over a fresh target ``state`` (see :func:`speculative_tokens`).

    ``draft_state`` is a fresh state of the draft model's runtime, for a :class:`DraftModel`.
    """
    from inference4py.generation.generate import stream_generate
    from inference4py.generation.search import new_chooser

    refuse_unsupported(config)
    processors = make_logits_processors(config, prompt_length=len(prompt_ids), extra=extra_processors)
    chooser = new_chooser(prompt_ids, config, tokenizer, processors=processors)
    proposer: Proposer
    if isinstance(speculation, DraftModel):
        if draft_state is None:
            raise ConfigurationError("A DraftModel needs the draft model's decoder state (draft_state).")
        # one seeded generator for the whole call: drafts and verification draw from it in turn
        proposer = DraftModelProposer(draft_state, config, prompt_length=len(prompt_ids), rng=chooser.rng)
    else:
        proposer = PromptLookupProposer(speculation)
    counts = _Counts(speculation.method)
    tokens = speculative_tokens(
        state,
        chooser,
        proposer,
        config,
        # greedy ids do not depend on the draft length: it may follow measured pass times
        lengths=DraftLength(
            speculation.num_draft_tokens, speculation.max_draft_tokens, timed=speculation.timed and not config.sampling
        ),
        counts=counts,
    )
    return SpeculativeStream(stream_generate(tokens, tokenizer, config, recorder=chooser.recorder), counts)
