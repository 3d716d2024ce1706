"""Word timestamps: cross-attention weights -> token times (DTW) -> words with punctuation attached.

The numpy twin of transformers 4.57 (``WhisperGenerationMixin._extract_token_timestamps`` and the
ASR pipeline's word grouping), itself a port of openai-whisper's ``timing.py``:

1. the cross-attention probabilities of the alignment heads (generation_config ``alignment_heads``;
   default: every head of the last half of the decoder layers) at each generated token fed to the
   decoder, cropped to the window's frames of audio (``frames // 2`` encoder positions);
2. normalised per encoder position over the tokens (mean 0, standard deviation 1), median-filtered
   along time (width 7), averaged over the heads;
3. dynamic time warping of the tokens against time on ``-weights``; each token's time is where its
   row first appears on the path (``0.02 s`` per encoder position);
4. the segment's text tokens grouped into words (split at spaces and punctuation, or at every
   character for Chinese, Japanese, Thai, Lao, Burmese and Cantonese), punctuation merged into its
   neighbours (openai-whisper's ``merge_punctuations`` rules); a word spans the time of the token
   before its first token to its last token's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from inference4py.speech.results import Word

PREPEND_PUNCTUATIONS = "\"'“¡¿([{-"
APPEND_PUNCTUATIONS = "\"'.。,，!！?？:：”)]}、"
_PUNCTUATION = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
_NO_SPACE_LANGUAGES = {"zh", "ja", "th", "lo", "my", "yue"}


def median_filter(x: np.ndarray, width: int) -> np.ndarray:
    """transformers' ``_median_filter`` along the last axis: reflect-padded, odd ``width``."""
    if width <= 0 or width % 2 != 1:
        raise ValueError("the median filter width must be an odd number")
    pad = width // 2
    if x.shape[-1] <= pad:
        return x
    padded = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(pad, pad)], mode="reflect")
    windows = np.lib.stride_tricks.sliding_window_view(padded, width, axis=-1)
    return np.sort(windows, axis=-1)[..., pad]


def dynamic_time_warping(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """transformers' ``_dynamic_time_warping`` (same costs and tie rules), vectorised along anti-diagonals.

    Args:
        matrix: ``[tokens, frames]`` costs.

    Returns:
        (text indices, time indices) of the path from the first cell to the last.
    """
    n, m = matrix.shape
    cost = np.full((n + 1, m + 1), np.inf, dtype=np.float64)
    trace = np.full((n + 1, m + 1), -1, dtype=np.int8)
    cost[0, 0] = 0.0
    x = matrix.astype(np.float64)
    for d in range(2, n + m + 1):  # cells (i, j) with i + j = d depend on diagonals d - 1 and d - 2 only
        i = np.arange(max(1, d - m), min(n, d - 1) + 1)
        j = d - i
        c0, c1, c2 = cost[i - 1, j - 1], cost[i - 1, j], cost[i, j - 1]
        t = np.where((c0 < c1) & (c0 < c2), 0, np.where((c1 < c0) & (c1 < c2), 1, 2))
        c = np.where(t == 0, c0, np.where(t == 1, c1, c2))
        # transformers keeps the cost in float32
        cost[i, j] = (x[i - 1, j - 1] + c).astype(np.float32)
        trace[i, j] = t
    trace[0, :] = 2
    trace[:, 0] = 1
    i, j = n, m
    text, time = [], []
    while i > 0 or j > 0:
        text.append(i - 1)
        time.append(j - 1)
        t = trace[i, j]
        if t == 0:
            i, j = i - 1, j - 1
        elif t == 1:
            i -= 1
        else:
            j -= 1
    return np.array(text[::-1]), np.array(time[::-1])


def token_times(weights: np.ndarray, *, frames: int, filter_width: int = 7, time_precision: float = 0.02) -> np.ndarray:
    """Times (seconds from the window's start) of generated tokens from their cross-attention weights.

    Args:
        weights: ``[heads, n - 1, src]``: the alignment heads' attention at each generated token fed back
            to the decoder (all but the last generated token).
        frames: mel frames of audio in the window (its first ``frames // 2`` encoder positions are audio).

    Returns:
        ``[n]`` times: the DTW time of each token's row, the last token repeating the one before it
        (transformers' ``token_timestamps`` of the generated part); zeros when fewer than two tokens.
    """
    rows = weights.shape[1]
    if rows == 0:
        return np.zeros(rows + 1)
    w = weights[..., : frames // 2].astype(np.float32)
    with np.errstate(invalid="ignore", divide="ignore"):  # one row: 0 / 0, as in torch
        mean = w.mean(axis=-2, keepdims=True)
        std = w.std(axis=-2, keepdims=True)
        w = (w - mean) / std
    w = median_filter(w, filter_width)
    matrix = w.mean(axis=0)
    text_indices, time_indices = dynamic_time_warping(-matrix.astype(np.float64))
    jumps = np.pad(np.diff(text_indices), (1, 0), constant_values=1).astype(bool)
    jump_times = time_indices[jumps] * time_precision
    return np.concatenate([jump_times, jump_times[-1:]])


def split_words(
    tokens: Sequence[int],
    decode: Callable[[Sequence[int]], str],
    *,
    language: str | None,
    is_special: Callable[[int], bool],
) -> tuple[list[str], list[list[int]]]:
    """Words of text tokens and the indices of each word's tokens (transformers' ``_combine_tokens_into_words``)."""
    words, indices = _split_on_unicode(tokens, decode)
    if language not in _NO_SPACE_LANGUAGES:
        merged_words: list[str] = []
        merged_indices: list[list[int]] = []
        for word, idx in zip(words, indices):
            special = is_special(tokens[idx[0]])
            with_space = word.startswith(" ")
            punctuation = word.strip() in _PUNCTUATION
            if special or with_space or punctuation or not merged_words:
                merged_words.append(word)
                merged_indices.append(list(idx))
            else:
                merged_words[-1] += word
                merged_indices[-1].extend(idx)
        words, indices = merged_words, merged_indices
    merge_punctuations(words, indices)
    return words, indices


def _split_on_unicode(
    tokens: Sequence[int], decode: Callable[[Sequence[int]], str]
) -> tuple[list[str], list[list[int]]]:
    full = decode(tokens)
    replacement = "\ufffd"
    words: list[str] = []
    indices: list[list[int]] = []
    current: list[int] = []
    offset = 0
    for k in range(len(tokens)):
        current.append(k)
        text = decode([tokens[i] for i in current])
        if replacement not in text or full[offset + text.index(replacement)] == replacement:
            words.append(text)
            indices.append(current)
            current = []
            offset += len(text)
    return words, indices


def merge_punctuations(
    words: list[str],
    indices: list[list[int]],
    prepended: str = PREPEND_PUNCTUATIONS,
    appended: str = APPEND_PUNCTUATIONS,
) -> None:
    """openai-whisper's ``merge_punctuations`` (in place): opening marks join the next word, closing marks the previous."""
    i, j = len(words) - 2, len(words) - 1
    while i >= 0:
        if words[i].startswith(" ") and words[i].strip() in prepended:
            words[j] = words[i] + words[j]
            indices[j] = indices[i] + indices[j]
            words[i], indices[i] = "", []
        else:
            j = i
        i -= 1
    i, j = 0, 1
    while j < len(words):
        if not words[i].endswith(" ") and words[j] in appended:
            words[i] += words[j]
            indices[i] += indices[j]
            words[j], indices[j] = "", []
        else:
            i = j
        j += 1
    keep = [k for k, w in enumerate(words) if w]
    words[:] = [words[k] for k in keep]
    indices[:] = [indices[k] for k in keep if indices[k]]


def segment_words(
    tokens: Sequence[int],
    times: Sequence[float],
    probabilities: Sequence[float],
    *,
    decode: Callable[[Sequence[int]], str],
    is_stamp: Callable[[int], bool],
    is_special: Callable[[int], bool],
    language: str | None,
    offset: float,
    limit: float,
) -> tuple[Word, ...]:
    """The words of one segment.

    Args:
        tokens: the segment's generated ids (timestamps included).
        times: each token's time in seconds from the window's start (:func:`token_times`).
        probabilities: each token's probability among the text tokens.
        offset: the window's start in seconds.
        limit: no word ends after this (the audio's end).
    """
    positions = [k for k, t in enumerate(tokens) if not is_stamp(t) and not is_special(t)]
    if not positions:
        return ()
    text = [tokens[k] for k in positions]
    words, indices = split_words(text, decode, language=language, is_special=is_special)
    out = []
    for word, idx in zip(words, indices):
        first, last = positions[idx[0]], positions[idx[-1]]
        start = times[first - 1] if first > 0 else times[first]
        end = times[last]
        prob = float(np.mean([probabilities[positions[i]] for i in idx]))
        out.append(
            Word(
                min(round(offset + float(start), 2), limit),
                min(round(offset + float(end), 2), limit),
                word,
                prob,
            )
        )
    return tuple(out)
