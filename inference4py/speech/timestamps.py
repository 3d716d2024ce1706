"""Whisper's logits rules: which tokens the decoder may choose, timestamps above all.

:func:`whisper_rules` lists a window's rules in transformers' order: ``begin_suppress_tokens`` at
the first generated position, ``suppress_tokens``, then the timestamp rules.

:class:`WhisperTimestampRules` is a logits processor, the numpy twin of transformers'
``WhisperTimeStampLogitsProcessor``; it runs after the generic processors and the suppress lists.
The timestamp tokens are a range of ids given by the caller (the tokenizer's ``<|0.00|>`` ...,
see ``WhisperVocab.timestamp_range``), not the ids after ``<|notimestamps|>``: on Whisper's own
vocabularies the two are the same, on a vocabulary with its ordinary tokens after the special
ones they are not.
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np

from inference4py.generation.processors import LogitsProcessor, SuppressTokens, SuppressTokensAtBegin, log_softmax
from inference4py.speech.vocab import WhisperVocab


def whisper_rules(vocab: WhisperVocab, prompt_length: int, timestamps: bool) -> list[LogitsProcessor]:
    """Whisper's own rules for a window decoded after ``prompt_length`` tokens, in transformers' order:
    begin-suppress, suppress, and the timestamp rules when ``timestamps`` (and the vocabulary has them)."""
    v = vocab
    rules: list[LogitsProcessor] = []
    if v.begin_suppress_tokens:
        rules.append(SuppressTokensAtBegin(v.begin_suppress_tokens, prompt_length))
    if v.suppress_tokens:
        rules.append(SuppressTokens(v.suppress_tokens))
    stamps = v.timestamp_range
    # transcribe() refuses timestamps without <|notimestamps|> or without the tokenizer's timestamp tokens
    if timestamps and v.no_timestamps is not None and stamps is not None:
        rules.append(
            WhisperTimestampRules(
                v.no_timestamps,
                v.eot,
                prompt_length,
                v.max_initial_timestamp_index,
                timestamp_begin=stamps.start,
                timestamp_end=stamps.stop,
                special_ids=v.special_ids,
            )
        )
    return rules


class WhisperTimestampRules:
    """Timestamp logits rules, the numpy twin of transformers' ``WhisperTimeStampLogitsProcessor``.

    ``<|notimestamps|>`` is never chosen; timestamps come in pairs (a timestamp after text
    must be followed by another timestamp or a non-text token such as <|endoftext|>; after a
    pair comes no timestamp); timestamps never decrease; the first generated token is a
    timestamp no later than ``max_initial_timestamp_index``; and when the timestamps'
    summed probability beats every other single token, a timestamp is forced.

    Args:
        no_timestamps_token_id: ``<|notimestamps|>``.
        eos_token_id: ``<|endoftext|>``; without ``special_ids``, the ids below it are the text tokens.
        begin_index: length of the decoder prompt (the first generated position).
        max_initial_timestamp_index: latest allowed first timestamp (in 0.02 s steps), or None.
        timestamp_begin: id of ``<|0.00|>``.
        timestamp_end: one past the id of the last timestamp token; None: the end of the vocabulary.
        special_ids: the ids that are neither text nor timestamps (``<|endoftext|>``, the language
            and task tokens, ...); None: every id from ``eos_token_id`` up, Whisper's own layout.
    """

    __slots__ = (
        "no_timestamps_token_id",
        "timestamp_begin",
        "timestamp_end",
        "eos_token_id",
        "begin_index",
        "max_initial_timestamp_index",
        "special_ids",
        "_masks",
    )

    def __init__(
        self,
        no_timestamps_token_id: int,
        eos_token_id: int,
        begin_index: int,
        max_initial_timestamp_index: int | None = None,
        *,
        timestamp_begin: int,
        timestamp_end: int | None = None,
        special_ids: Collection[int] | None = None,
    ) -> None:
        self.no_timestamps_token_id = int(no_timestamps_token_id)
        self.timestamp_begin = int(timestamp_begin)
        self.timestamp_end = None if timestamp_end is None else int(timestamp_end)
        if self.timestamp_end is not None and self.timestamp_end <= self.timestamp_begin:
            raise ValueError(
                f"timestamp_end ({self.timestamp_end}) must be above timestamp_begin ({self.timestamp_begin})."
            )
        self.eos_token_id = int(eos_token_id)
        self.begin_index = int(begin_index)
        self.max_initial_timestamp_index = (
            None if max_initial_timestamp_index is None else int(max_initial_timestamp_index)
        )
        self.special_ids = None if special_ids is None else frozenset(int(i) for i in special_ids)
        self._masks: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def __repr__(self) -> str:
        return (
            f"WhisperTimestampRules(no_timestamps_token_id={self.no_timestamps_token_id}, "
            f"timestamp_begin={self.timestamp_begin}, timestamp_end={self.timestamp_end}, "
            f"begin_index={self.begin_index}, max_initial_timestamp_index={self.max_initial_timestamp_index})"
        )

    def _masks_for(self, vocab: int) -> tuple[np.ndarray, np.ndarray]:
        """(text tokens, tokens that are not timestamps) as boolean masks over ``vocab`` ids."""
        masks = self._masks.get(vocab)
        if masks is None:
            stamp = np.zeros(vocab, dtype=bool)
            stamp[self.timestamp_begin : self.timestamp_end] = True
            if self.special_ids is None:
                text = np.zeros(vocab, dtype=bool)
                text[: self.eos_token_id] = True
            else:
                text = ~stamp
                text[[i for i in self.special_ids if 0 <= i < vocab]] = False
            masks = self._masks[vocab] = (text, ~stamp)
        return masks

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        tb = self.timestamp_begin
        te = scores.shape[1] if self.timestamp_end is None else min(self.timestamp_end, scores.shape[1])
        text, other = self._masks_for(scores.shape[1])
        neg = np.float32(-np.inf)
        scores[:, self.no_timestamps_token_id] = neg
        for k in range(input_ids.shape[0]):
            seq = input_ids[k, self.begin_index :]
            is_stamp = (seq >= tb) & (seq < te)
            last_was_ts = seq.size >= 1 and bool(is_stamp[-1])
            penultimate_was_ts = seq.size < 2 or bool(is_stamp[-2])
            if last_was_ts:
                if penultimate_was_ts:  # a pair (or the first token): text next
                    scores[k, tb:te] = neg
                else:  # a segment's end: its twin timestamp (or something not text) next
                    scores[k, text] = neg
            stamps = seq[is_stamp]
            if stamps.size:
                last = int(stamps[-1]) if (last_was_ts and not penultimate_was_ts) else int(stamps[-1]) + 1
                scores[k, tb:last] = neg
        if input_ids.shape[1] == self.begin_index:
            scores[:, other] = neg
            if self.max_initial_timestamp_index is not None:
                scores[:, tb + self.max_initial_timestamp_index + 1 : te] = neg
        logprobs = log_softmax(scores)  # float32 [batch, vocab]
        for k in range(input_ids.shape[0]):
            stamp_lp = _logsumexp(logprobs[k, tb:te])
            if stamp_lp > logprobs[k, other].max():
                scores[k, other] = neg
        return scores


def _logsumexp(x: np.ndarray) -> np.float32:
    m = x.max()
    if not np.isfinite(m):
        return np.float32(m)
    return np.float32(m + np.log(np.exp(x - m, dtype=np.float32).sum(dtype=np.float32)))
