"""Decoder-only step functions: ``prefill(tokens)`` and ``step(token)`` -> last-position logits.

The KV cache never leaves onnxruntime during normal decoding: each step's
``present`` OrtValues are bound as the next step's ``past`` inputs through IO
binding, so no cache tensor is copied through numpy.  Only the last position's
logits are read back.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import onnxruntime as ort

from inference4py.engine.kv_cache import KVLayout, check_cache_names, discover_layout
from inference4py.engine.pipeline import PipelineSpec
from inference4py.engine.sessions import SessionOptions, TensorInfo, create_session, graph_inputs, graph_outputs, run_binding
from inference4py.errors import InvalidInputError, PipelineSpecError, UnsupportedModelError

__all__ = ["DecoderRuntime", "DecoderState", "context_length", "open_session"]

_LOGITS_TO_KEEP = ("num_logits_to_keep", "logits_to_keep")


def context_length(config: Mapping[str, Any]) -> int | None:
    """The model's maximum sequence length according to config.json."""
    cfg = dict(config)
    if isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg, **cfg["text_config"]}
    for key in ("max_position_embeddings", "n_positions", "n_ctx", "max_sequence_length", "seq_length", "context_length"):
        value = cfg.get(key)
        if isinstance(value, int) and value > 0:
            return value
    return None


def open_session(spec: PipelineSpec, role: str, options: SessionOptions | None = None) -> ort.InferenceSession:
    """Create the session of ``role`` with the description's provider and session options.

    The caller's explicit providers / threads (``options``) win over the description's.
    """
    session = spec.session(role)
    return create_session(spec.path(role), options, provider=session.provider,
                          provider_options=session.provider_options, settings=session.options)


class _Graph:
    """One decoder graph and what it expects."""

    def __init__(self, session: ort.InferenceSession, config: Mapping[str, Any], name: str,
                 spec: PipelineSpec | None = None) -> None:
        self.session = session
        self.name = name
        self.inputs: dict[str, TensorInfo] = graph_inputs(session)
        self.outputs: dict[str, TensorInfo] = graph_outputs(session)
        if "input_ids" not in self.inputs or "logits" not in self.outputs:
            raise UnsupportedModelError(
                f"{name} is not a text decoder: it needs an 'input_ids' input and a 'logits' output "
                f"(inputs: {sorted(self.inputs)[:8]}, outputs: {sorted(self.outputs)[:8]}). "
                "Use the task class that matches this model, or describe it in an inference4py.json pipeline file."
            )
        state = spec.state if spec is not None else None
        cross = state.cross_cache if state is not None else None
        self.layout: KVLayout = discover_layout(
            self.inputs, self.outputs, config, graph_name=name,
            names=state.kv_cache.names if state else None,
            cross_names=cross.names if cross else None,
            num_kv_heads=state.kv_cache.num_kv_heads if state else None,
            head_size=state.kv_cache.head_size if state else None,
        )
        self.ids_dtype = self.inputs["input_ids"].dtype
        self.has_mask = "attention_mask" in self.inputs
        position = spec.state.position_ids if spec is not None else None
        self.position_name = position.input_name if position else "position_ids"
        self.has_positions = self.position_name in self.inputs and (position is None or position.strategy != "none")
        if position is not None and position.strategy == "default" and not self.has_positions:
            raise PipelineSpecError(
                f'The pipeline description sets the position_ids strategy "default", but {name} has no input '
                f'"{self.position_name}". Fix state.position_ids.input_name, or use "strategy": "none" when the graph '
                "computes positions itself."
            )
        self.has_cache_branch = "use_cache_branch" in self.inputs
        self.logits_to_keep = next((n for n in _LOGITS_TO_KEEP if n in self.inputs), None)
        self.logits_dtype = self.outputs["logits"].dtype


class DecoderRuntime:
    """Loaded sessions of a decoder-only pipeline; creates per-call states.

    Sessions are shared and thread-safe; all mutable decoding state lives in
    :class:`DecoderState`, one per generation call.
    """

    def __init__(self, spec: PipelineSpec, config: Mapping[str, Any], options: SessionOptions | None = None) -> None:
        if spec.has("encoder"):
            raise UnsupportedModelError(
                f"{spec.folder} holds an encoder-decoder model ({spec.session('encoder').file}); a decoder-only "
                "text generator cannot run it. Use FlanT5TextGenerator, BartSummarizer, MarianTranslator or the "
                "matching encoder-decoder task class."
            )
        self.spec = spec
        self.config = dict(config)
        self.first = _Graph(open_session(spec, "decoder", options), config, spec.session("decoder").file, spec)
        self.rest = (
            _Graph(open_session(spec, "decoder_with_past", options), config, spec.session("decoder_with_past").file, spec)
            if spec.has("decoder_with_past")
            else self.first
        )
        self.layout = self.rest.layout
        names = spec.state.kv_cache.names
        if names is not None:  # declared (or detected before the session existed): must match this graph
            check_cache_names(self.rest.inputs, self.rest.outputs, names, graph_name=self.rest.name, declared=True)
        if not self.layout.self_entries:
            raise UnsupportedModelError(
                f"{self.rest.name} has no KV-cache inputs (past_key_values.*), so every token would recompute the "
                "whole sequence. Export the model with its cache (optimum: --task text-generation-with-past)."
            )
        vocab = self.first.outputs["logits"].dim(-1) or self.config.get("vocab_size")
        self.vocab_size: int | None = int(vocab) if vocab else None
        self.max_positions = spec.context_length or context_length(self.config)

    def new_state(self, batch_size: int = 1) -> "DecoderState":
        return DecoderState(self, batch_size)


class DecoderState:
    """The growing state of one decoding call: KV cache, attention mask, positions.

    ``prefill`` feeds the prompt (``[batch, n]``, left-padded with ``attention_mask``
    for batches) and ``step`` feeds one token per row; both return the logits of
    the last position, ``[batch, vocab]`` float32.
    """

    def __init__(self, runtime: DecoderRuntime, batch_size: int) -> None:
        self.rt = runtime
        self.batch = batch_size
        self.length = 0  # tokens in the cache (including padding)
        self._past: dict[str, Any] = {}  # input name -> OrtValue (or ndarray for the first run)
        self._mask = np.zeros((batch_size, 0), dtype=np.int64)
        self._next_pos = np.zeros((batch_size,), dtype=np.int64)

    # ------------------------------------------------------------------ public
    def prefill(self, input_ids: np.ndarray, attention_mask: np.ndarray | None = None) -> np.ndarray:
        """Feed the prompt (``[batch, n]``) and return last-position logits ``[batch, vocab]``."""
        ids = np.asarray(input_ids, dtype=np.int64)
        if ids.ndim == 1:
            ids = ids[None, :]
        if ids.shape[0] != self.batch or ids.shape[1] == 0:
            raise InvalidInputError(f"prefill expects [batch={self.batch}, n>0] token ids, got shape {ids.shape}.")
        mask = np.ones_like(ids) if attention_mask is None else np.asarray(attention_mask, dtype=np.int64)
        full_mask = np.concatenate([self._mask, mask], axis=1)
        if self.length == 0:
            positions = np.cumsum(full_mask, axis=1) - 1
            positions[full_mask == 0] = 1  # padded slots: any valid index, they are masked out
        else:
            positions = self._next_pos[:, None] + np.cumsum(mask, axis=1) - 1
            positions = np.maximum(positions, 0)
        positions = positions[:, -ids.shape[1]:]
        return self._run(ids, full_mask, positions)

    def step(self, tokens: np.ndarray | int) -> np.ndarray:
        """Feed one token per row (``[batch]``) and return the next logits ``[batch, vocab]``."""
        ids = np.asarray(tokens, dtype=np.int64).reshape(self.batch, 1)
        full_mask = np.concatenate([self._mask, np.ones((self.batch, 1), dtype=np.int64)], axis=1)
        return self._run(ids, full_mask, self._next_pos[:, None].copy())

    def reorder(self, indices: np.ndarray) -> None:
        """Reorder (and possibly repeat) batch rows, e.g. for beam search: row i <- row indices[i]."""
        idx = np.asarray(indices, dtype=np.int64)
        new_past = {}
        for entry in self.rt.layout.self_entries:
            arr = self._as_numpy(entry.input)
            new_past[entry.input] = ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(np.take(arr, idx, axis=entry.batch_axis)))
        self._past = new_past
        self._mask = self._mask[idx]
        self._next_pos = self._next_pos[idx]
        self.batch = len(idx)

    def rewind(self, length: int) -> None:
        """Forget everything after the first ``length`` cached tokens."""
        if not 0 <= length <= self.length:
            raise InvalidInputError(f"Cannot rewind to {length}: the cache holds {self.length} tokens.")
        if length == self.length:
            return
        if length == 0:
            self.__init__(self.rt, self.batch)  # type: ignore[misc]
            return
        new_past = {}
        for entry in self.rt.layout.self_entries:
            arr = self._as_numpy(entry.input)
            sl = [slice(None)] * arr.ndim
            sl[entry.seq_axis] = slice(0, length)
            new_past[entry.input] = ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(arr[tuple(sl)]))
        self._past = new_past
        self._mask = self._mask[:, :length]
        self._next_pos = self._mask.sum(axis=1).astype(np.int64)
        self.length = length

    # ------------------------------------------------------------------ internals
    def _as_numpy(self, name: str) -> np.ndarray:
        value = self._past[name]
        return value.numpy() if isinstance(value, ort.OrtValue) else value

    def _run(self, ids: np.ndarray, full_mask: np.ndarray, positions: np.ndarray) -> np.ndarray:
        first_run = self.length == 0
        g = self.rt.first if first_run else self.rt.rest
        binding = g.session.io_binding()
        keep_alive = []

        def bind(name: str, array: np.ndarray) -> None:
            array = np.ascontiguousarray(array)
            keep_alive.append(array)
            binding.bind_cpu_input(name, array)

        bind("input_ids", ids.astype(g.ids_dtype, copy=False))
        if g.has_mask:
            bind("attention_mask", full_mask.astype(g.inputs["attention_mask"].dtype, copy=False))
        if g.has_positions:
            bind(g.position_name, positions.astype(g.inputs[g.position_name].dtype, copy=False))
        if g.has_cache_branch:
            bind("use_cache_branch", np.array([not first_run], dtype=np.bool_))
        if g.logits_to_keep:
            bind(g.logits_to_keep, np.array(1, dtype=g.inputs[g.logits_to_keep].dtype))
        for entry in g.layout.self_entries:
            past = self._past.get(entry.input)
            if past is None:
                bind(entry.input, g.layout.empty(entry, self.batch))
            elif isinstance(past, ort.OrtValue):
                binding.bind_ortvalue_input(entry.input, past)
            else:
                bind(entry.input, past)
        binding.bind_output("logits", "cpu")
        for entry in g.layout.self_entries:
            binding.bind_output(entry.output, "cpu")
        # Graphs without past inputs (first graph of a three-file layout) still emit present.*
        if not g.layout.self_entries:
            for entry in self.rt.layout.self_entries:
                if entry.output in g.outputs:
                    binding.bind_output(entry.output, "cpu")

        run_binding(g.session, binding, what=g.name)
        outputs = binding.get_outputs()
        names = ["logits"] + [e.output for e in (g.layout.self_entries or [e for e in self.rt.layout.self_entries if e.output in g.outputs])]
        produced = dict(zip(names, outputs))
        logits = produced["logits"].numpy()
        # [batch, seq, vocab] (or [batch, vocab] for graphs that already keep one position)
        last = logits[:, -1, :] if logits.ndim == 3 else logits
        self._past = {e.input: produced[e.output] for e in self.rt.layout.self_entries}
        self._mask = full_mask
        self._next_pos = positions[:, -1] + 1
        self.length = full_mask.shape[1]
        return last.astype(np.float32, copy=False)
