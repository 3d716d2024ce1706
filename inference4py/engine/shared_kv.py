"""The shared KV buffer of GroupQueryAttention graphs: one pre-allocated buffer per cache tensor.

onnxruntime's GroupQueryAttention writes the new keys and values into ``present`` at each row's
``seqlens_k`` offset and accepts ``present`` being the very tensor bound as ``past``
(onnxruntime-genai's ``past_present_share_buffer``).  So each cache tensor is one
``[batch, kv_heads, capacity, head_size]`` buffer bound as both; rows are kept right-padded, and
each row's valid length is the sum of its attention-mask row, which is what the graph reads.  On
sliding-window graphs the buffer never holds fewer positions than the window, and padded rows are
prefilled one by one, each into its slot.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime as ort

from inference4py.engine.decoder_base import _Graph, _StateCore
from inference4py.engine.prompt_tiles import prefill_bounds


class _SharedBuffer(_StateCore):
    """Shared-buffer mode of :class:`~inference4py.engine.decoder.DecoderState`: growth, prefill, runs."""

    def _grow(self, needed: int) -> None:
        """Shared mode: buffers of at least ``needed`` positions (contents kept)."""
        cap = self._want(needed) if (needed > self.capacity or not self._kv) else self.capacity
        layout = self.rt.layout
        for entry in layout.self_entries:
            old = self._kv.get(entry.input)
            if old is not None and old[0].shape[0] == self.batch and old[0].shape[2] == cap:
                continue
            empty = layout.empty(entry, self.batch)
            arr = np.zeros((self.batch, empty.shape[1], cap, empty.shape[3]), dtype=entry.dtype)
            if old is not None and old[0].shape[0] == self.batch:
                keep = min(old[0].shape[2], cap)
                arr[:, :, :keep] = old[0][:, :, :keep]
            self._kv[entry.input] = (arr, ort.OrtValue.ortvalue_from_numpy(arr))
        if self._maskbuf.shape != (self.batch, cap):
            buf = np.zeros((self.batch, cap), dtype=self._mask_dtype)
            keep = min(self._maskbuf.shape[1], cap)
            if self._maskbuf.shape[0] == self.batch:
                buf[:, :keep] = self._maskbuf[:, :keep]
            self._maskbuf = buf
        self.capacity = cap
        self._step_ready = False

    def _prefill_shared(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Feed ``ids`` ``[batch, n]`` (left-padded by ``mask``) as right-padded rows; last logits ``[batch, vocab]``."""
        n = ids.shape[1]
        counts = mask.sum(axis=1).astype(np.int64)  # new valid tokens per row
        if not mask.all():  # left-padded -> right-padded rows (the graph reads valid lengths only)
            packed = np.zeros_like(ids)
            for b in range(self.batch):
                row = ids[b][mask[b] != 0]
                packed[b, : len(row)] = row
            ids = packed
        first = self.length == 0
        if first:
            self._pad = n - counts
            self._valid[:] = 0
        needed = int((self._valid + counts).max()) if len(counts) else n
        if not self._kv or needed > self.capacity or self._maskbuf.shape[0] != self.batch:
            self._grow(needed)  # the requested capacity is a hint, clamped to the context length by _want
        # this chunk's mask: the sum of row b is its valid length after this run
        # the first prompt: total_sequence_length == sequence_length; later, a batch of one: past + n
        width = n if first else int(self._valid.max()) + n
        self._maskbuf[:] = 0
        new_valid = self._valid + counts
        self._maskbuf[np.arange(self.capacity)[None, :] < new_valid[:, None]] = 1
        self._step_ready = False
        if self.rt.min_capacity and self.batch > 1 and not (counts == n).all():
            # A sliding-window cache refuses padded rows in one run (seqlens_k below the chunk
            # length): each row is prefilled alone, straight into its slot of the shared buffer.
            rows = [
                self._run_shared(
                    ids[b : b + 1, : counts[b]],
                    np.ones((1, counts[b]), self._mask_dtype),
                    self._valid[b : b + 1],
                    slot=b,
                )[:, -1, :]
                for b in range(self.batch)
            ]
            last = np.concatenate(rows, axis=0)
        else:
            # rows of different lengths end at different positions: then every position is kept
            keep_all = self.keep_prefill_logits or not (counts == n).all()
            logits = self._run_shared(
                ids, np.ascontiguousarray(self._maskbuf[:, :width]), self._valid, keep_all=keep_all
            )  # [batch, n, vocab] ([batch, 1, vocab] when the graph keeps the last position only)
            if self.keep_prefill_logits:
                self.prefill_logits = np.array(logits, dtype=np.float32)
            if logits.shape[1] == n and (self.batch > 1 or counts[0] != n):
                last = logits[np.arange(self.batch), np.maximum(counts - 1, 0)]
            else:
                last = logits[:, -1, :]
        self._valid = new_valid
        self.length += n
        return np.ascontiguousarray(last, dtype=np.float32)

    def _run_shared(
        self,
        ids: np.ndarray,
        chunk_mask: np.ndarray,
        past: np.ndarray,
        slot: int | None = None,
        *,
        keep_all: bool = False,
    ) -> np.ndarray:
        """One run of the step graph on the shared buffers; ``slot`` binds only that row's part of them.

        ``past`` holds each row's valid tokens before the run (``[rows]``); returns ``[rows, n, vocab]``
        logits, or ``[rows, 1, vocab]`` when the graph takes ``num_logits_to_keep`` and ``keep_all`` is False.
        A long prompt of one row runs in pieces (:func:`~inference4py.engine.prompt_tiles.prefill_bounds`):
        then, without ``keep_all``, the logits are the last piece's (its last position is the prompt's).
        """
        if self.rt.float_prompt is not None and ids.shape[1] > 1 and not past.any():
            return self._run_float_prompt(ids, chunk_mask, past, slot, keep_all=keep_all)
        n = ids.shape[1]
        bounds = prefill_bounds(n, self.rt.prompt_tile, self.rt.prefill_chunk)
        if len(bounds) == 2 or ids.shape[0] != 1 or self._feeds_decoder or not chunk_mask.all():
            return self._run_shared_once(ids, chunk_mask, past, slot, keep_all=keep_all, prompt=self.length == 0)
        # a long prompt of one row: in runs of whole tiles (engine/prompt_tiles.py), the logits of one run
        parts = []
        for a, b in zip(bounds, bounds[1:]):
            width = chunk_mask.shape[1] - (n - b)
            out = self._run_shared_once(
                ids[:, a:b],
                chunk_mask[:, :width],
                past + a,
                slot,
                keep_all=keep_all,
                prompt=self.length == 0 and a == 0,
            )
            if keep_all:
                parts.append(out)
        return np.concatenate(parts, axis=1) if keep_all else out

    def _run_shared_once(
        self,
        ids: np.ndarray,
        chunk_mask: np.ndarray,
        past: np.ndarray,
        slot: int | None,
        *,
        keep_all: bool,
        prompt: bool,
    ) -> np.ndarray:
        g = self.rt.rest
        fast = self._new_binding(g)
        fast.clear()
        binding = fast.binding
        feeds = self._run_feeds(g, ids, chunk_mask, past, prompt=prompt, keep_all=keep_all)
        keep: list[Any] = list(feeds.values())
        for name, value in feeds.items():
            binding.bind_cpu_input(name, value)
        binding.bind_output("logits", "cpu")
        for entry in g.layout.self_entries:
            arr, value = self._kv[entry.input]
            if slot is not None:  # a view of one row: same memory, written in place
                value = ort.OrtValue.ortvalue_from_numpy(arr[slot : slot + 1])
                keep.append(value)
            binding.bind_ortvalue_input(entry.input, value)
            binding.bind_ortvalue_output(entry.output, value)
        fast.run(what=g.name, options=self.run_options)
        logits = binding.get_outputs()[0].numpy()
        self._vocab = logits.shape[-1]
        return logits

    def _run_feeds(
        self, g: _Graph, ids: np.ndarray, chunk_mask: np.ndarray, past: np.ndarray, *, prompt: bool, keep_all: bool
    ) -> dict[str, np.ndarray]:
        """A run's inputs but the cache: the tokens (or what the dataflow makes of them), the mask, each
        row's positions from ``past`` on, and how many positions' logits to keep."""
        n = ids.shape[1]
        feeds = {name: np.ascontiguousarray(value) for name, value in self._token_feeds(g, ids, prompt=prompt).items()}
        feeds["attention_mask"] = chunk_mask
        if g.has_positions:
            feeds[g.position_name] = np.ascontiguousarray(
                (past[:, None] + np.arange(n)[None, :]).astype(self._pos_dtype)
            )
        if g.logits_to_keep:  # 0 keeps every position (transformers' meaning)
            feeds[g.logits_to_keep] = np.array(0 if keep_all else 1, dtype=g.inputs[g.logits_to_keep].dtype)
        return feeds

    def _run_float_prompt(
        self, ids: np.ndarray, chunk_mask: np.ndarray, past: np.ndarray, slot: int | None, *, keep_all: bool
    ) -> np.ndarray:
        """A first prompt of an int8-cache graph on its float twin (:mod:`~inference4py.engine.float_prompt`)."""
        prompt = self.rt.float_prompt
        assert prompt is not None
        n = ids.shape[1]
        bounds = [0, n]
        if ids.shape[0] == 1 and not self._feeds_decoder and chunk_mask.all():  # a long prompt: in pieces
            bounds = prefill_bounds(n, self.rt.prompt_tile, self.rt.prefill_chunk)
        pieces = [
            self._run_feeds(
                prompt.graph,
                ids[:, a:b],
                chunk_mask[:, : chunk_mask.shape[1] - (n - b)],
                past + a,
                prompt=a == 0,
                keep_all=keep_all,
            )
            for a, b in zip(bounds, bounds[1:])
        ]
        rows = slice(slot, slot + 1) if slot is not None else slice(0, ids.shape[0])
        stores = {e.input: self._kv[e.input][0][rows] for e in self.rt.layout.self_entries}
        logits = prompt.run(pieces, stores, n, max(n, self.rt.min_capacity), options=self.run_options)
        self._vocab = logits[-1].shape[-1]
        return np.concatenate(logits, axis=1) if keep_all else logits[-1]
