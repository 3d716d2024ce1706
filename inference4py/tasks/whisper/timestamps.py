"""Whisper's timestamp rules: which tokens the decoder may choose when timestamps are predicted.

:class:`WhisperTimestampRules` is a logits processor, the numpy twin of transformers'
``WhisperTimeStampLogitsProcessor``; it runs after the generic processors and the suppress lists.
"""

from __future__ import annotations

import numpy as np

from inference4py.generation.processors import log_softmax


class WhisperTimestampRules:
    """Timestamp logits rules, the numpy twin of transformers' ``WhisperTimeStampLogitsProcessor``.

    ``<|notimestamps|>`` is never chosen; timestamps come in pairs (a timestamp after text
    must be followed by another timestamp or a non-text token such as <|endoftext|>; after a
    pair comes no timestamp); timestamps never decrease; the first generated token is a
    timestamp no later than ``max_initial_timestamp_index``; and when the timestamps'
    summed probability beats every single text token, a timestamp is forced.

    Args:
        no_timestamps_token_id: ``<|notimestamps|>``; timestamps are the ids after it.
        eos_token_id: ``<|endoftext|>``; ids below it are text tokens.
        begin_index: length of the decoder prompt (the first generated position).
        max_initial_timestamp_index: latest allowed first timestamp (in 0.02 s steps), or None.
    """

    __slots__ = (
        "no_timestamps_token_id",
        "timestamp_begin",
        "eos_token_id",
        "begin_index",
        "max_initial_timestamp_index",
    )

    def __init__(
        self,
        no_timestamps_token_id: int,
        eos_token_id: int,
        begin_index: int,
        max_initial_timestamp_index: int | None = None,
    ) -> None:
        self.no_timestamps_token_id = int(no_timestamps_token_id)
        self.timestamp_begin = self.no_timestamps_token_id + 1
        self.eos_token_id = int(eos_token_id)
        self.begin_index = int(begin_index)
        self.max_initial_timestamp_index = (
            None if max_initial_timestamp_index is None else int(max_initial_timestamp_index)
        )

    def __repr__(self) -> str:
        return (
            f"WhisperTimestampRules(no_timestamps_token_id={self.no_timestamps_token_id}, "
            f"begin_index={self.begin_index}, max_initial_timestamp_index={self.max_initial_timestamp_index})"
        )

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        tb = self.timestamp_begin
        neg = np.float32(-np.inf)
        scores[:, self.no_timestamps_token_id] = neg
        for k in range(input_ids.shape[0]):
            seq = input_ids[k, self.begin_index :]
            last_was_ts = seq.size >= 1 and seq[-1] >= tb
            penultimate_was_ts = seq.size < 2 or seq[-2] >= tb
            if last_was_ts:
                if penultimate_was_ts:  # a pair (or the first token): text next
                    scores[k, tb:] = neg
                else:  # a segment's end: its twin timestamp (or something not text) next
                    scores[k, : self.eos_token_id] = neg
            stamps = seq[seq >= tb]
            if stamps.size:
                last = int(stamps[-1]) if (last_was_ts and not penultimate_was_ts) else int(stamps[-1]) + 1
                scores[k, tb:last] = neg
        if input_ids.shape[1] == self.begin_index:
            scores[:, :tb] = neg
            if self.max_initial_timestamp_index is not None:
                scores[:, tb + self.max_initial_timestamp_index + 1 :] = neg
        logprobs = log_softmax(scores)  # float32 [batch, vocab]
        for k in range(input_ids.shape[0]):
            stamp_lp = _logsumexp(logprobs[k, tb:])
            if stamp_lp > logprobs[k, :tb].max():
                scores[k, :tb] = neg
        return scores


def _logsumexp(x: np.ndarray) -> np.float32:
    m = x.max()
    if not np.isfinite(m):
        return np.float32(m)
    return np.float32(m + np.log(np.exp(x - m, dtype=np.float32).sum(dtype=np.float32)))
