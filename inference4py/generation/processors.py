"""Logits processors: small callables ``(input_ids, scores) -> scores``.

Each class here is the numpy twin of a transformers processor with the same
semantics, so the generation loop produces the tokens ``model.generate()``
would.  :func:`make_logits_processors` builds the list transformers applies in
greedy, sampling and beam search (same order, inactive ones skipped).  The warpers
applied only when sampling (temperature, top-k, top-p, min-p) are in warping.py.

Shapes: ``input_ids`` is int64 ``[batch, cur_len]`` (the whole sequence so far:
prompt + generated for decoder-only models, decoder ids including the start
token for encoder-decoder models); ``scores`` is float32 ``[batch, vocab]``.
Processors may modify ``scores`` in place and return it.

One idea past ~500 lines: a catalogue of small processor classes (30 lines each) and the two
factories that order them; split up, the order transformers applies them in would be spread
over many files.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from inference4py.errors import ConfigurationError
from inference4py.generation.config import GenerationConfig

__all__ = [
    "LogitsProcessor",
    "make_logits_processors",
    "apply_processors",
    "log_softmax",
    "RepetitionPenalty",
    "NoRepeatNGram",
    "NoBadWords",
    "MinNewTokens",
    "ForcedBOSToken",
    "ForcedEOSToken",
    "SuppressTokens",
    "SuppressTokensAtBegin",
    "PresenceFrequencyPenalty",
    "LogitBias",
]

LogitsProcessor = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""``(input_ids int64 [batch, cur_len], scores float32 [batch, vocab]) -> scores``."""

_NEG_INF = np.float32(-np.inf)


def _ids(values: Iterable[int] | int | None) -> np.ndarray:
    if values is None:
        return np.zeros(0, dtype=np.int64)
    if isinstance(values, (int, np.integer)):
        values = (int(values),)
    return np.asarray(list(values), dtype=np.int64).reshape(-1)


def _in_vocab(ids: np.ndarray, vocab_size: int) -> np.ndarray:
    # transformers builds these masks with ``isin(arange(vocab), ids)``: ids outside
    # the vocabulary are silently ignored, so do the same.
    return ids[(ids >= 0) & (ids < vocab_size)]


@functools.lru_cache(maxsize=256)
def _vocab_ids(token_ids: tuple[int, ...], vocab_size: int) -> np.ndarray:
    """``_in_vocab`` of a fixed id tuple, computed once per vocabulary size (processors run every step)."""
    out = _in_vocab(np.asarray(token_ids, dtype=np.int64).reshape(-1), vocab_size)
    out.flags.writeable = False
    return out


class _Repr:
    __slots__: tuple[str, ...] = ()

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__ if not name.startswith("_"))
        return f"{type(self).__name__}({fields})"


# ---------------------------------------------------------------------------------- processors
class RepetitionPenalty(_Repr):
    """Penalise every token already in ``input_ids`` (CTRL-style).

    Scores of seen tokens are divided by ``penalty`` when positive and multiplied
    by it when negative, as transformers' ``RepetitionPenaltyLogitsProcessor``.
    """

    __slots__ = ("penalty",)

    def __init__(self, penalty: float) -> None:
        self.penalty = float(penalty)

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        seen = np.take_along_axis(scores, input_ids, axis=1)
        penalised = np.where(seen < 0, seen * self.penalty, seen / self.penalty).astype(scores.dtype, copy=False)
        np.put_along_axis(scores, input_ids, penalised, axis=1)
        return scores


class NoRepeatNGram(_Repr):
    """Forbid any n-gram of size ``ngram_size`` from occurring twice in ``input_ids``."""

    __slots__ = ("ngram_size",)

    def __init__(self, ngram_size: int) -> None:
        self.ngram_size = int(ngram_size)

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        n = self.ngram_size
        cur_len = input_ids.shape[1]
        if cur_len < n:  # no complete n-gram yet (transformers: nothing banned)
            return scores
        # All n-grams of the sequence: [batch, cur_len - n + 1, n]; a token is banned
        # when it followed an earlier occurrence of the current (n-1)-token suffix.
        windows = np.lib.stride_tricks.sliding_window_view(input_ids, n, axis=1)
        suffix = input_ids[:, cur_len - n + 1 :]  # [batch, n - 1]
        match = (windows[:, :, :-1] == suffix[:, None, :]).all(axis=2)  # [batch, windows]
        rows, cols = np.nonzero(match)
        if rows.size:
            scores[rows, windows[rows, cols, -1]] = _NEG_INF
        return scores


class NoBadWords(_Repr):
    """Never generate the token sequences in ``bad_words_ids``.

    A single-token entry is always masked; for a longer entry its last token is
    masked when the sequence ends with the entry's prefix.  Entries equal to a
    single EOS id are dropped, as transformers' ``NoBadWordsLogitsProcessor`` does.
    """

    __slots__ = ("bad_words_ids", "_single", "_by_length", "_checked_vocab")

    def __init__(self, bad_words_ids: Sequence[Sequence[int]], eos_token_id: Iterable[int] | int | None = None) -> None:
        eos = set(_ids(eos_token_id).tolist())
        words = [tuple(int(t) for t in w) for w in bad_words_ids]
        words = [w for w in words if w and not (len(w) == 1 and w[0] in eos)]
        self.bad_words_ids = tuple(words)
        self._checked_vocab = -1
        self._single = np.asarray(sorted({w[0] for w in words if len(w) == 1}), dtype=np.int64)
        grouped: dict[int, list[tuple[int, ...]]] = {}
        for w in dict.fromkeys(words):  # unique, ordered
            if len(w) > 1:
                grouped.setdefault(len(w), []).append(w)
        # length -> (prefixes [m, length - 1], last tokens [m])
        self._by_length = {
            length: (np.asarray([w[:-1] for w in ws], dtype=np.int64), np.asarray([w[-1] for w in ws], dtype=np.int64))
            for length, ws in grouped.items()
        }

    def _check_vocab(self, vocab_size: int) -> None:
        if vocab_size == self._checked_vocab:
            return
        too_big = sorted({t for w in self.bad_words_ids for t in w if t >= vocab_size})
        if too_big:
            raise ConfigurationError(
                f"bad_words_ids contains token ids {too_big} but the model vocabulary has {vocab_size} tokens; "
                "remove them or check that bad_words_ids was made with this model's tokenizer."
            )
        self._checked_vocab = vocab_size

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        self._check_vocab(scores.shape[1])
        if self._single.size:
            scores[:, self._single] = _NEG_INF
        cur_len = input_ids.shape[1]
        for length, (prefixes, last) in self._by_length.items():
            if length > cur_len:
                continue
            tail = input_ids[:, cur_len - (length - 1) :]  # [batch, length - 1]
            match = (tail[:, None, :] == prefixes[None, :, :]).all(axis=2)  # [batch, m]
            rows, cols = np.nonzero(match)
            if rows.size:
                scores[rows, last[cols]] = _NEG_INF
        return scores


class MinNewTokens(_Repr):
    """Mask EOS until ``min_new_tokens`` tokens follow the first ``prompt_length`` ids."""

    __slots__ = ("prompt_length", "min_new_tokens", "eos_token_id", "_masked")

    def __init__(self, prompt_length: int, min_new_tokens: int, eos_token_id: Iterable[int] | int) -> None:
        self.prompt_length = int(prompt_length)
        self.min_new_tokens = int(min_new_tokens)
        self.eos_token_id = tuple(_ids(eos_token_id).tolist())
        # (vocab size, the eos ids in it): this runs every step.  One id is kept as an int,
        # a plain index (no fancy-indexing iterator).
        self._masked: tuple[int, np.ndarray | int] = (-1, _ids(None))

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        if input_ids.shape[1] - self.prompt_length < self.min_new_tokens:
            if self._masked[0] != scores.shape[1]:
                ids = _vocab_ids(self.eos_token_id, scores.shape[1])
                self._masked = (scores.shape[1], int(ids[0]) if ids.size == 1 else ids)
            scores[:, self._masked[1]] = _NEG_INF
        return scores


class ForcedBOSToken(_Repr):
    """Force ``token_id`` when the sequence has length 1 (transformers: ``cur_len == 1``).

    This is the first generated token of encoder-decoder models, whose decoder
    starts with one start token; for decoder-only models it only fires on a
    one-token prompt, exactly as in transformers.
    """

    __slots__ = ("token_id",)

    def __init__(self, token_id: int) -> None:
        self.token_id = int(token_id)

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        if input_ids.shape[1] == 1:
            scores[:] = _NEG_INF
            scores[:, self.token_id] = 0.0
        return scores


class ForcedEOSToken(_Repr):
    """Force EOS as the last token: when ``cur_len == max_length - 1``."""

    __slots__ = ("max_length", "eos_token_id")

    def __init__(self, max_length: int, eos_token_id: Iterable[int] | int) -> None:
        self.max_length = int(max_length)
        self.eos_token_id = tuple(_ids(eos_token_id).tolist())

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        if input_ids.shape[1] == self.max_length - 1:
            scores[:] = _NEG_INF
            scores[:, list(self.eos_token_id)] = 0.0
        return scores


class SuppressTokens(_Repr):
    """Set the scores of ``token_ids`` to -inf at every step."""

    __slots__ = ("token_ids",)

    def __init__(self, token_ids: Iterable[int]) -> None:
        self.token_ids = tuple(_ids(token_ids).tolist())

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        scores[:, _vocab_ids(self.token_ids, scores.shape[1])] = _NEG_INF
        return scores


class SuppressTokensAtBegin(_Repr):
    """Set the scores of ``token_ids`` to -inf when ``cur_len == begin_index``."""

    __slots__ = ("token_ids", "begin_index")

    def __init__(self, token_ids: Iterable[int], begin_index: int) -> None:
        self.token_ids = tuple(_ids(token_ids).tolist())
        self.begin_index = int(begin_index)

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        if input_ids.shape[1] == self.begin_index:
            scores[:, _vocab_ids(self.token_ids, scores.shape[1])] = _NEG_INF
        return scores


class PresenceFrequencyPenalty(_Repr):
    """OpenAI's presence and frequency penalties over the generated tokens (vLLM's semantics).

    ``scores[t] -= presence * (count[t] > 0) + frequency * count[t]``, where ``count[t]`` is
    how many times token t was generated so far in that row (the prompt does not count).
    """

    __slots__ = ("presence", "frequency", "prompt_length")

    def __init__(self, presence: float, frequency: float, prompt_length: int) -> None:
        self.presence = float(presence)
        self.frequency = float(frequency)
        self.prompt_length = int(prompt_length)

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        generated = input_ids[:, self.prompt_length :]  # [batch, new]
        if generated.shape[1] == 0:
            return scores
        vocab = scores.shape[1]
        rows = np.repeat(np.arange(generated.shape[0]), generated.shape[1])
        flat = generated.reshape(-1)
        keep = (flat >= 0) & (flat < vocab)
        counts = np.zeros(scores.shape, dtype=np.float32)  # [batch, vocab]
        np.add.at(counts, (rows[keep], flat[keep]), 1.0)
        scores -= np.float32(self.frequency) * counts + np.float32(self.presence) * (counts > 0)
        return scores


class LogitBias(_Repr):
    """Add a fixed bias to some tokens' scores at every step (OpenAI's ``logit_bias``)."""

    __slots__ = ("token_ids", "biases")

    def __init__(self, bias: Iterable[tuple[int, float]]) -> None:
        pairs = list(bias)
        self.token_ids = np.asarray([t for t, _ in pairs], dtype=np.int64)
        self.biases = np.asarray([b for _, b in pairs], dtype=np.float32)

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        inside = self.token_ids < scores.shape[1]  # ids past the vocabulary are ignored, like suppress_tokens
        scores[:, self.token_ids[inside]] += self.biases[inside]
        return scores


# ---------------------------------------------------------------------------------- factories
def make_logits_processors(
    config: GenerationConfig,
    *,
    prompt_length: int,
    extra: Sequence[LogitsProcessor] = (),
) -> list[LogitsProcessor]:
    """The processors transformers applies before choosing a token, in its order.

    Used by greedy search, sampling and beam search alike.  The order is that of
    transformers 4.57 ``GenerationMixin._get_logits_processor``: repetition
    penalty, no-repeat n-gram, bad words, min new tokens, forced BOS, forced EOS,
    suppress tokens, begin-suppress tokens; then OpenAI's presence / frequency penalties and
    logit bias, which transformers does not have; then ``extra``.  Inactive processors
    are left out, so greedy decoding with default settings gets an empty list.

    Args:
        config: The generation settings.
        prompt_length: Length of ``input_ids`` when generation starts (decoder-only:
            the prompt; encoder-decoder: the decoder start ids, usually 1).
        extra: User processors, applied after the built-in ones.

    Returns:
        A new list of callables ``(input_ids, scores) -> scores``.

    Example:
        >>> cfg = GenerationConfig(repetition_penalty=1.3, eos_token_id=2, min_new_tokens=4)
        >>> [type(p).__name__ for p in make_logits_processors(cfg, prompt_length=5)]
        ['RepetitionPenalty', 'MinNewTokens']
    """
    procs: list[LogitsProcessor] = []
    eos = config.eos_token_id
    if config.repetition_penalty != 1.0:
        procs.append(RepetitionPenalty(config.repetition_penalty))
    if config.no_repeat_ngram_size > 0:
        procs.append(NoRepeatNGram(config.no_repeat_ngram_size))
    if config.bad_words_ids:
        bad = NoBadWords(config.bad_words_ids, eos)
        if bad.bad_words_ids:
            procs.append(bad)
    if config.min_new_tokens > 0 and eos:
        # transformers also adds MinLengthLogitsProcessor(prompt_length + min_new_tokens),
        # which masks exactly the same steps.
        procs.append(MinNewTokens(prompt_length, config.min_new_tokens, eos))
    if config.forced_bos_token_id is not None:
        procs.append(ForcedBOSToken(config.forced_bos_token_id))
    if config.forced_eos_token_id is not None:
        procs.append(ForcedEOSToken(prompt_length + config.max_new_tokens, config.forced_eos_token_id))
    if config.suppress_tokens:
        procs.append(SuppressTokens(config.suppress_tokens))
    if config.begin_suppress_tokens:
        begin_index = prompt_length
        if prompt_length <= 1 and config.forced_bos_token_id is not None:
            begin_index += 1  # the forced BOS comes first
        procs.append(SuppressTokensAtBegin(config.begin_suppress_tokens, begin_index))
    if config.presence_penalty or config.frequency_penalty:
        procs.append(PresenceFrequencyPenalty(config.presence_penalty, config.frequency_penalty, prompt_length))
    if config.logit_bias:
        procs.append(LogitBias(config.logit_bias))
    procs.extend(extra)
    return procs


def apply_processors(processors: Sequence[LogitsProcessor], input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Run ``processors`` in order; returns the processed scores."""
    for proc in processors:
        scores = proc(input_ids, scores)
    return scores


def log_softmax(scores: np.ndarray) -> np.ndarray:
    """Numerically stable log-softmax over the last axis, float32.

    Rows may contain -inf (masked tokens); they stay -inf.
    """
    scores = np.asarray(scores, dtype=np.float32)
    shifted = scores - scores.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
