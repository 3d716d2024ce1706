"""The growing KV cache, which any decoder graph can run: each run's ``present`` is the next ``past``.

The cache tensors stay inside onnxruntime: the ``present`` OrtValues of one run are bound as the
``past`` inputs of the next through IO binding, and grow by the tokens fed.  Batches are
left-padded; the mask buffer ``[batch, capacity]`` holds which columns are real and positions are
counted per row.
"""

from __future__ import annotations

import numpy as np

from inference4py.engine.decoder_base import _StateCore


class _GrowingCache(_StateCore):
    """Growing-cache mode of :class:`~inference4py.engine.decoder.DecoderState`: prefill and its runs."""

    def _prefill_growing(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Feed ``ids`` ``[batch, n]`` (left-padded by ``mask``) after what is cached; last logits ``[batch, vocab]``."""
        n = ids.shape[1]
        self._ensure_mask(self.length + n)
        full_mask = self._maskbuf[:, : self.length + n]
        full_mask[:, self.length :] = mask
        if self.length == 0:
            positions = np.cumsum(full_mask, axis=1) - 1
            positions[full_mask == 0] = 1  # padded slots: any valid index, they are masked out
        else:
            positions = self._next_pos[:, None] + np.cumsum(mask, axis=1) - 1
            positions = np.maximum(positions, 0)
        positions = positions[:, -n:]
        return self._run(ids, full_mask, positions)

    def _ensure_mask(self, needed: int) -> None:
        """Growing mode: the mask buffer holds at least ``needed`` columns."""
        if needed <= self._maskbuf.shape[1]:
            return
        cap = self._want(needed)
        buf = np.zeros((self.batch, cap), dtype=self._mask_dtype)
        buf[:, : self.length] = self._maskbuf[:, : self.length]
        self._maskbuf = buf
        self.capacity = cap
        self._step_ready = False

    def _run(self, ids: np.ndarray, full_mask: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """Growing mode, several tokens per row (prefill)."""
        first_run = self.length == 0
        g = self.rt.first if first_run else self.rt.rest
        fast = self._new_binding(g)
        fast.clear()
        binding = fast.binding
        self._step_ready = False
        bind = fast.bind_input
        for name, value in self._token_feeds(g, ids, prompt=first_run).items():
            bind(name, value)
        if g.has_mask:
            bind("attention_mask", full_mask.astype(g.inputs["attention_mask"].dtype, copy=False))
        if g.has_positions:
            bind(g.position_name, positions.astype(g.inputs[g.position_name].dtype, copy=False))
        if g.has_cache_branch:
            bind("use_cache_branch", np.array([not first_run], dtype=np.bool_))
        if g.logits_to_keep:  # 0 keeps every position (transformers' meaning), for prompt log-probabilities
            keep = 0 if self.keep_prefill_logits else 1
            bind(g.logits_to_keep, np.array(keep, dtype=g.inputs[g.logits_to_keep].dtype))
        # A cache exists only once something ran, and then g is the step graph (rt.layout's).
        for i, entry in enumerate(g.layout.self_entries):
            if self._past is None:
                bind(entry.input, g.layout.empty(entry, self.batch))
            else:
                fast.bind_value(entry.input, self._past[i])
        binding.bind_output("logits", "cpu")
        for entry in g.layout.self_entries:
            binding.bind_output(entry.output, "cpu")
        # Graphs without past inputs (first graph of a three-file layout) still emit present.*
        if not g.layout.self_entries:
            for entry in self.rt.layout.self_entries:
                if entry.output in g.outputs:
                    binding.bind_output(entry.output, "cpu")

        fast.run(what=g.name, options=self.run_options)
        outputs = fast.outputs()
        names = ["logits"] + [
            e.output
            for e in (g.layout.self_entries or [e for e in self.rt.layout.self_entries if e.output in g.outputs])
        ]
        produced = dict(zip(names, outputs))
        logits = produced["logits"].numpy()
        self._vocab = logits.shape[-1]
        if self.keep_prefill_logits and logits.ndim == 3:
            self.prefill_logits = np.array(logits, dtype=np.float32)  # [batch, seq, vocab]
        # [batch, seq, vocab] (or [batch, vocab] for graphs that already keep one position)
        last = logits[:, -1, :] if logits.ndim == 3 else logits
        self._past = [produced[e.output] for e in self.rt.layout.self_entries]
        self._next_pos = positions[:, -1] + 1
        self.length = full_mask.shape[1]
        return last.astype(np.float32, copy=False)
