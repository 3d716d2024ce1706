"""A decoder state whose rows come and go: the KV side of continuous batching.

:class:`RowBatch` is a :class:`~inference4py.engine.decoder.DecoderState` (``step`` runs one
batched decode step over every row) that also admits a new sequence as a row and retires rows.
A row is prefilled alone, exactly as a call of its own would prefill it, and then decodes with
the others:

* growing-cache graphs (optimum exports): the batch cache is one left-padded tensor per cache
  input.  A newcomer's cache is padded and stacked on the batch axis (or the batch is padded when
  the newcomer is longer); a retired row is sliced out, and columns that became padding for every
  row are trimmed.  The mask hides padding and positions are per row.
* shared-buffer graphs (GroupQueryAttention: genai and fused folders): one pre-allocated
  ``[slots, kv_heads, capacity, head_size]`` buffer per cache input, rows right-padded, each with
  its own valid length.  A newcomer is copied into the next free slot, a retired row's slot is
  filled with the last row, and the step binds the first ``batch`` slots.

A newcomer's prompt runs in a state of its own (:class:`~inference4py.engine.prompt_pass.PromptPass`),
all at once (:meth:`RowBatch.admit`) or a piece at a time while the batch goes on stepping
(:meth:`RowBatch.begin`, then :meth:`RowBatch.join`).

A row may start from a cached prefix (:class:`KVPrefix`): its cache is copied in and only the
remaining tokens are prefilled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import onnxruntime as ort

from inference4py.engine.decoder import DecoderState
from inference4py.engine.kv_prefix import KVPrefix
from inference4py.engine.prompt_pass import PromptPass
from inference4py.engine.sessions import value_from_array
from inference4py.errors import InvalidInputError

if TYPE_CHECKING:
    from inference4py.engine.decoder import DecoderRuntime

__all__ = ["KVPrefix", "RowBatch"]

#: Positions from which a shared buffer far wider than its longest row is made smaller when a row leaves.
_SHRINK_FROM = 2048


class RowBatch(DecoderState):
    """A batch of independent sequences, admitted and retired one by one.

    Args:
        runtime: The loaded decoder.
        max_rows: Rows held at most (sizes the shared buffers' slots).
    """

    def __init__(self, runtime: DecoderRuntime, max_rows: int) -> None:
        super().__init__(runtime, 0)
        self.max_rows = max(1, int(max_rows)) if self.mixes_lengths(runtime) else 1
        self._store: dict[str, np.ndarray] = {}  # shared mode: [slots, kv_heads, capacity, head_size]

    @staticmethod
    def mixes_lengths(runtime: DecoderRuntime) -> bool:
        """Whether rows of different lengths can share a step: the graph takes positions, or shares a buffer.

        A graph without a position input derives positions from the cache's width, so a padded
        row would see its tokens shifted; such models decode one request at a time.
        """
        return runtime.shared_kv or runtime.rest.has_positions

    # ------------------------------------------------------------------ admit
    def begin(
        self, prompt: np.ndarray, *, reserve: int = 0, prefix: KVPrefix | None = None, all_logits: bool = False
    ) -> PromptPass:
        """A new row's prompt, to prefill piece by piece (:class:`~inference4py.engine.prompt_pass.PromptPass`)
        while this batch goes on stepping, then :meth:`join`.

        ``reserve`` is the room the row will need (prompt + max_new_tokens), a hint for the
        buffers; ``prefix`` a cached start of ``prompt`` (only the rest is prefilled);
        ``all_logits`` keeps every prefilled position's logits.
        """
        return PromptPass(self.rt, prompt, reserve=reserve, prefix=prefix, all_logits=all_logits)

    def join(self, prompt: PromptPass) -> tuple[np.ndarray, np.ndarray | None]:
        """Take a finished prompt as the new last row; ``(last logits [1, vocab], all logits or None)``."""
        if self.batch >= self.max_rows:
            raise InvalidInputError(f"The batch already holds {self.max_rows} rows.")
        logits = prompt.logits()
        self._vocab = prompt.state._vocab
        if self.shared_buffer:
            self._take_shared(prompt.state, len(prompt.ids), prompt.reserve)
        else:
            self._stack(prompt.state)
        prompt.close()
        return logits

    def admit(
        self, prompt: np.ndarray, *, reserve: int = 0, prefix: KVPrefix | None = None, all_logits: bool = False
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Prefill ``prompt`` (``[n]`` ids) as a new last row at once (:meth:`begin`, every piece, :meth:`join`)."""
        if self.batch >= self.max_rows:
            raise InvalidInputError(f"The batch already holds {self.max_rows} rows.")
        pending = self.begin(prompt, reserve=reserve, prefix=prefix, all_logits=all_logits)
        while not pending.finished:
            pending.run(self.rt.prefill_chunk)
        return self.join(pending)

    def _stack(self, single: DecoderState) -> None:
        """Growing mode: add ``single``'s one row below the batch, left-padding the shorter side."""
        entries = self.rt.layout.self_entries
        assert single._past is not None
        if self.batch == 0:  # the row's own cache values become the batch's (they keep their memory)
            mask = np.ones((1, single.length), dtype=self._mask_dtype)
            self._adopt(list(single._past), mask, single._next_pos.copy())
            return
        assert self._past is not None
        width = max(self.length, single.length)
        values = [
            value_from_array(
                np.concatenate(
                    [
                        _left_pad(np.asarray(a.numpy()), e.seq_axis, width - self.length),
                        _left_pad(np.asarray(b.numpy()), e.seq_axis, width - single.length),
                    ],
                    axis=e.batch_axis,
                )
            )
            for e, a, b in zip(entries, self._past, single._past)
        ]
        mask = np.zeros((self.batch + 1, width), dtype=self._mask_dtype)
        mask[:-1, width - self.length :] = self._maskbuf[:, : self.length]
        mask[-1, width - single.length :] = 1
        positions = np.concatenate([np.asarray(self._next_pos, dtype=np.int64), single._next_pos])
        self._adopt(values, mask, positions)

    def _adopt(self, values: list[Any], mask: np.ndarray, positions: np.ndarray) -> None:
        """Growing mode: take ``values`` (OrtValues) as the batch cache, ``mask`` ``[batch, length]`` and next positions."""
        self.batch, self.length = mask.shape
        self._past = values
        self._maskbuf = np.zeros((self.batch, self.length + 64), dtype=self._mask_dtype)
        self._maskbuf[:, : self.length] = mask
        self.capacity = self._maskbuf.shape[1]
        self._next_pos = np.array(positions, dtype=np.int64)
        self._valid = np.zeros(self.batch, dtype=np.int64)  # shared-mode bookkeeping, unused here but sized
        self._pad = np.zeros(self.batch, dtype=np.int64)
        self._step_ready = False

    def _take_shared(self, single: DecoderState, n: int, reserve: int) -> None:
        """Shared mode: copy ``single``'s one row of ``n`` positions into the next free slot."""
        b = self.batch
        self._reserve(b + 1, reserve)
        for entry in self.rt.layout.self_entries:
            self._store[entry.input][b, :, :n] = single._kv[entry.input][0][0, :, :n]
        self._valid = np.concatenate([self._valid[:b], [n]]).astype(np.int64)
        self._pad = np.zeros(b + 1, dtype=np.int64)
        mask = np.zeros((b + 1, self.capacity), dtype=self._mask_dtype)
        mask[:b] = self._maskbuf[:b, : self.capacity]
        mask[b, :n] = 1
        self._maskbuf = mask
        self.batch = b + 1
        self.length = int(self._valid.max())
        self._view(self.batch)
        self._step_ready = False

    def _reserve(self, slots: int, positions: int) -> None:
        """Shared mode: buffers with at least ``slots`` rows and ``positions`` capacity (rows kept)."""
        have_slots = next(iter(self._store.values())).shape[0] if self._store else 0
        if self._store and have_slots >= slots and self.capacity >= positions:
            return
        cap = self._want(positions) if positions > self.capacity or not self._store else self.capacity
        self._allocate(min(self.max_rows, max(slots, 2 * have_slots, 1)), cap)

    def _allocate(self, rows: int, cap: int) -> None:
        """Shared mode: new buffers of ``rows`` slots and ``cap`` positions, the rows' contents kept up to ``cap``."""
        layout = self.rt.layout
        for entry in layout.self_entries:
            empty = layout.empty(entry, 1)
            arr = np.zeros((rows, empty.shape[1], cap, empty.shape[3]), dtype=entry.dtype)
            old = self._store.get(entry.input)
            if old is not None and self.batch:
                keep = min(old.shape[2], cap)
                arr[: self.batch, :, :keep] = old[: self.batch, :, :keep]
            self._store[entry.input] = arr
        mask = np.zeros((self.batch, cap), dtype=self._mask_dtype)
        keep = min(self._maskbuf.shape[1], cap)
        mask[:, :keep] = self._maskbuf[: self.batch, :keep]
        self._maskbuf = mask
        self.capacity = cap
        if self._binding is not None:  # it holds the old buffers until the next step binds: they go now
            self._binding.clear()
        self._view(self.batch)
        self._step_ready = False

    def _view(self, rows: int) -> None:
        """Shared mode: bind the first ``rows`` slots (views: the step writes into the store itself)."""
        for name, arr in self._store.items():
            part = arr[:rows]
            self._kv[name] = (part, ort.OrtValue.ortvalue_from_numpy(part))

    def _grow(self, needed: int) -> None:
        """Shared mode: a step that needs more positions than the buffers hold grows the store."""
        self._reserve(self.batch, needed)

    # ------------------------------------------------------------------ retire
    def retire(self, rows: list[int]) -> list[int]:
        """Remove ``rows``; returns the new order (``order[i]`` is the old index of row ``i``)."""
        gone = set(rows)
        order = [r for r in range(self.batch) if r not in gone]
        if not gone:
            return order
        if not order:
            self._clear()
            return order
        if self.shared_buffer:
            return self._retire_shared(sorted(gone))
        self.reorder(np.asarray(order, dtype=np.int64))
        self._valid = np.zeros(self.batch, dtype=np.int64)
        self._trim()
        return order

    def _clear(self) -> None:
        self.batch = 0
        self._reset()
        # the buffers go: the pages a long row wrote would stay resident (new ones cost nothing until written)
        self._store = {}
        self.capacity = 0
        self._maskbuf = np.zeros((0, 0), dtype=self._mask_dtype)

    def _trim(self) -> None:
        """Growing mode: drop the leading columns that are padding for every row."""
        valid = self._maskbuf[:, : self.length].sum(axis=1)
        cut = self.length - int(valid.max())
        if cut <= 0:
            return
        assert self._past is not None
        values = []
        for entry, value in zip(self.rt.layout.self_entries, self._past):
            arr = np.asarray(value.numpy())
            index = [slice(None)] * arr.ndim
            index[entry.seq_axis] = slice(cut, None)
            # a copy when the cut is a view of ``value``'s memory, which goes with ``value``
            values.append(value_from_array(arr[tuple(index)]))
        self._adopt(values, self._maskbuf[:, cut : self.length], self._next_pos)

    def _retire_shared(self, gone: list[int]) -> list[int]:
        order = list(range(self.batch))
        last = self.batch - 1
        for r in reversed(gone):  # highest first: the last row moves into the freed slot
            if r != last:
                n = int(self._valid[last])
                for arr in self._store.values():
                    arr[r, :, :n] = arr[last, :, :n]
                self._valid[r] = self._valid[last]
                self._maskbuf[r] = self._maskbuf[last]
                order[r] = order[last]
            order.pop()
            last -= 1
        self.batch = last + 1
        self._valid = self._valid[: self.batch].copy()
        self._pad = np.zeros(self.batch, dtype=np.int64)
        self._maskbuf = np.ascontiguousarray(self._maskbuf[: self.batch])
        self.length = int(self._valid.max())
        if self.capacity > max(_SHRINK_FROM, 4 * self.length):  # a long row left: its positions' memory goes back
            self._allocate(next(iter(self._store.values())).shape[0], max(2 * self.length, self.rt.min_capacity, 2))
        self._view(self.batch)
        self._step_ready = False
        return order

    # ------------------------------------------------------------------ prefix cache
    def row_cache(self, row: int, length: int | None = None) -> KVPrefix:
        """A copy of row ``row``'s cache: its first ``length`` positions (every token fed to it so far: None)."""
        entries = self.rt.layout.self_entries
        held = self.row_length(row)
        n = held if length is None else min(held, length)
        if self.shared_buffer:
            arrays = tuple(self._store[e.input][row : row + 1, :, :n].copy() for e in entries)
            return KVPrefix(n, arrays, tuple(2 for _ in entries))
        assert self._past is not None
        out = []
        for entry, value in zip(entries, self._past):
            arr = np.asarray(value.numpy())
            index: list[slice | int] = [slice(None)] * arr.ndim
            index[entry.batch_axis] = slice(row, row + 1)
            index[entry.seq_axis] = slice(self.length - held, self.length - held + n)
            out.append(arr[tuple(index)].copy())
        return KVPrefix(n, tuple(out), tuple(e.seq_axis for e in entries))

    def row_length(self, row: int) -> int:
        """Tokens held in row ``row``'s cache."""
        if self.shared_buffer:
            return int(self._valid[row])
        return int(self._maskbuf[row, : self.length].sum())


def _left_pad(array: np.ndarray, axis: int, width: int) -> np.ndarray:
    """``array`` with ``width`` zero positions before its content on ``axis``."""
    if width <= 0:
        return array
    pad = [(0, 0)] * array.ndim
    pad[axis] = (width, 0)
    return np.pad(array, pad)
