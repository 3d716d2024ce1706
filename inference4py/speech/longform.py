"""Long-form audio: 30 s windows of features, and where the next window starts.

The audio's features are cut in windows of 3000 mel frames (:func:`cut_window`); after each
window the output is split into segments at pairs of timestamp tokens and the next window
starts at the last complete segment's end (:func:`split_segments`, transformers'
``_retrieve_segment``).  Without timestamps (``timestamp_begin=None``) no token is a
timestamp: a window is one segment and the next window starts 30 s later.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

TIME_PRECISION = 0.02  # seconds per timestamp token step
FRAME_SECONDS = 0.01  # seconds per mel frame (hop 160 at 16 kHz)


@dataclass(frozen=True)
class _RawSegment:
    start: float
    end: float
    tokens: tuple[int, ...]


def split_segments(
    tokens: Sequence[int],
    *,
    timestamp_begin: int | None,
    seek: int,
    window_frames: int,
    input_stride: int = 2,
    timestamp_end: int | None = None,
) -> tuple[list[_RawSegment], int]:
    """Cut one window's output into segments; returns them and how many mel frames to advance.

    The twin of transformers' ``WhisperGenerationMixin._retrieve_segment``: a pair of
    consecutive timestamp tokens ends a segment and starts the next.  When the output
    ends inside a segment (no single timestamp before the end), that unfinished segment
    is dropped and the next window starts at the last complete segment's end;
    otherwise the next window starts ``window_frames`` later.

    Args:
        tokens: the window's generated ids without the prompt and without <|endoftext|>.
        timestamp_begin: id of ``<|0.00|>``; None when timestamps are off (no token is a timestamp).
        seek: the window's first mel frame in the whole audio.
        window_frames: mel frames of audio in this window (3000, less for the last window).
        input_stride: mel frames per encoder position (2 for Whisper).
        timestamp_end: one past the id of the last timestamp token (None: every id from
            ``timestamp_begin`` up, Whisper's own layout).
    """
    offset = seek * TIME_PRECISION / input_stride  # seconds, float64 like transformers
    toks = [int(t) for t in tokens]
    if timestamp_begin is None:  # timestamps off: the window is one segment, whatever its ids
        return [_RawSegment(offset, offset + _window_steps(window_frames) * TIME_PRECISION, tuple(toks))], window_frames
    end = timestamp_end
    is_ts = [timestamp_begin <= t and (end is None or t < end) for t in toks]
    single_ending = is_ts[-2:] == [False, True]
    cuts = [i + 1 for i in range(len(toks) - 1) if is_ts[i] and is_ts[i + 1]]
    if cuts:
        if single_ending:
            cuts.append(len(toks))
        else:
            cuts[-1] += 1  # keep the last timestamp in the last segment
        segments = []
        last = 0
        for i, cut in enumerate(cuts):
            piece = toks[last:cut]
            end_at = -2 if (i == len(cuts) - 1 and not single_ending) else -1
            segments.append(
                _RawSegment(
                    offset + (piece[0] - timestamp_begin) * TIME_PRECISION,
                    offset + (piece[end_at] - timestamp_begin) * TIME_PRECISION,
                    tuple(piece),
                )
            )
            last = cut
        advance = window_frames if single_ending else (toks[last - 2] - timestamp_begin) * input_stride
    else:
        stamps = [t for t, stamp in zip(toks, is_ts) if stamp]
        end_pos: float = _window_steps(window_frames)
        if stamps and stamps[-1] != timestamp_begin:
            end_pos = stamps[-1] - timestamp_begin
        segments = [_RawSegment(offset, offset + end_pos * TIME_PRECISION, tuple(toks))]
        advance = window_frames
    return segments, advance


def _window_steps(window_frames: int) -> int:
    """The window's length in timestamp steps (0.02 s)."""
    return int(window_frames * FRAME_SECONDS / TIME_PRECISION)


def cut_window(feats: np.ndarray, seek: int, window_frames: int) -> tuple[np.ndarray, int]:
    """The window of ``feats`` (``[n_mels, frames]``) starting at mel frame ``seek``, and its frames of audio.

    The window is ``[1, n_mels, window_frames]`` float32, zero-padded past the end of the audio.
    """
    n = window_frames
    frames = min(feats.shape[1] - seek, n)
    window = feats[:, seek : seek + frames]
    if frames < n:
        window = np.pad(window, ((0, 0), (0, n - frames)))
    return np.ascontiguousarray(window[None], dtype=np.float32), frames  # [1, n_mels, 3000]
