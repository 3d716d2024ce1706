"""A prompt prefilled a piece at a time, so that other rows can decode between its pieces.

A :class:`PromptPass` prefills one new row's prompt into a decoding state of its own (batch of one),
the way :meth:`~inference4py.engine.rows.RowBatch.admit` always did; :meth:`PromptPass.run` feeds
the next piece only.  Pieces end at whole query tiles (:func:`~inference4py.engine.prompt_tiles.next_cut`),
so the logits and the cache are those of one run, bit for bit, however the prompt was cut.  The
batch takes the finished row with :meth:`~inference4py.engine.rows.RowBatch.join`; until then the
batch's own rows never see it, so the scheduler may step them between two pieces.

A prompt that cannot be cut runs as one piece: a growing cache (no query tiles), a graph fed by
other sessions (embeddings), and the first prompt of an int8 cache (its float twin holds a float
cache for the whole prompt only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from inference4py.engine.decoder import DecoderState
from inference4py.engine.prompt_tiles import next_cut
from inference4py.engine.sessions import shrinking_run, value_from_array
from inference4py.errors import InvalidInputError

if TYPE_CHECKING:
    from inference4py.engine.decoder import DecoderRuntime
    from inference4py.engine.kv_prefix import KVPrefix

__all__ = ["PromptPass"]


class PromptPass:
    """One prompt on its way into a batch.

    Args:
        runtime: The loaded decoder.
        prompt: ``[n]`` token ids.
        reserve: Positions the row will need (prompt + max_new_tokens), a hint for the buffers.
        prefix: A cached start of ``prompt``; only the rest is prefilled.
        all_logits: Keep every prefilled position's logits (prompt log-probabilities).
    """

    def __init__(
        self,
        runtime: DecoderRuntime,
        prompt: np.ndarray,
        *,
        reserve: int = 0,
        prefix: KVPrefix | None = None,
        all_logits: bool = False,
    ) -> None:
        self.ids = np.asarray(prompt, dtype=np.int64).reshape(-1)
        self.start = prefix.length if prefix is not None else 0
        if not 0 <= self.start < len(self.ids):
            raise InvalidInputError(
                f"A row needs at least one token to prefill (prompt {len(self.ids)}, prefix {self.start})."
            )
        self.done = self.start  # prompt tokens in the state so far
        self.reserve = max(reserve, len(self.ids))
        self.state = DecoderState(runtime, 1, capacity=self.reserve)
        self.state.keep_prefill_logits = all_logits
        if prefix is not None:
            self._load(prefix)
        state = self.state
        cuttable = state.shared_buffer and not state._feeds_decoder
        cuttable = cuttable and (runtime.float_prompt is None or self.start > 0)
        self.tile = runtime.prompt_tile if cuttable else 0  # 0: one piece
        self._last: np.ndarray | None = None
        self._all: list[np.ndarray] = []

    @property
    def left(self) -> int:
        """Prompt tokens not prefilled yet."""
        return len(self.ids) - self.done

    @property
    def finished(self) -> bool:
        return self.done == len(self.ids)

    def next_piece(self, limit: int) -> int:
        """Tokens the next :meth:`run` with ``limit`` would feed (one tile at least; all when it cannot cut)."""
        if not self.tile:
            return self.left
        rest = len(self.ids) - self.start
        return next_cut(self.done - self.start, rest, self.tile, limit) - (self.done - self.start)

    def run(self, limit: int) -> int:
        """Prefill the next piece, about ``limit`` tokens (:meth:`next_piece`); the tokens fed."""
        if self.finished:
            return 0
        end = self.done + self.next_piece(limit)
        # the last piece gives the arena's growth back (activations and logits of the pieces)
        self.state.run_options = shrinking_run() if end == len(self.ids) else None
        self._last = self.state.prefill(self.ids[None, self.done : end])
        if self.state.keep_prefill_logits:
            assert self.state.prefill_logits is not None
            self._all.append(self.state.prefill_logits)
        fed, self.done = end - self.done, end
        return fed

    def logits(self) -> tuple[np.ndarray, np.ndarray | None]:
        """A finished pass's last logits ``[1, vocab]`` and, with ``all_logits``, every prefilled position's
        ``[1, n - prefix, vocab]``."""
        if not self.finished or self._last is None:
            raise InvalidInputError("The prompt is not prefilled yet.")
        everything = np.concatenate(self._all, axis=1) if self._all else None
        return self._last.copy(), everything

    def close(self) -> None:
        """Free the pass's own cache (a batch that joined it holds a copy)."""
        self.state._reset()

    def _load(self, prefix: KVPrefix) -> None:
        """Put a cached prefix into the state, as if its tokens had been prefilled."""
        state, start = self.state, prefix.length
        if state.shared_buffer:
            state._grow(state.capacity)
            for entry, cached in zip(state.rt.layout.self_entries, prefix.arrays):
                state._kv[entry.input][0][0, :, :start] = cached[0, :, :start]
            state._maskbuf[0, :start] = 1
            state._valid[:] = start
        else:
            state._past = [value_from_array(a) for a in prefix.arrays]
            state._maskbuf = np.ones((1, start), dtype=state._maskbuf.dtype)
            state._next_pos = np.array([start], dtype=np.int64)
        state.length = start
