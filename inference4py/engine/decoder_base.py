"""What a decoder state is made of: the graph it runs, what it reads of its runtime, and the
bookkeeping its two cache modes share.

:class:`_StateCore` holds the fields of a decoding call (batch, length, the mask buffer, the step
binding, the pipeline's inputs) and the helpers both modes use; the modes themselves are
:mod:`~inference4py.engine.growing_kv` (any graph) and :mod:`~inference4py.engine.shared_kv`
(GroupQueryAttention graphs), and :class:`~inference4py.engine.decoder.DecoderState` puts them
together behind ``prefill`` and ``step``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import onnxruntime as ort

from inference4py.engine.flow import FlowRunner
from inference4py.engine.kv_cache import KVLayout, discover_layout
from inference4py.engine.pipeline import PipelineSpec
from inference4py.engine.sessions import StepBinding, TensorInfo, graph_inputs, graph_outputs
from inference4py.errors import PipelineSpecError, UnsupportedModelError

if TYPE_CHECKING:  # float_prompt imports _Graph from here
    from inference4py.engine.float_prompt import FloatPrompt

_LOGITS_TO_KEEP = ("num_logits_to_keep", "logits_to_keep")
_DEFAULT_EXTRA = 64  # capacity beyond the first prefill when the caller does not say


class _Graph:
    """One decoder graph and what it expects."""

    def __init__(
        self, session: ort.InferenceSession, config: Mapping[str, Any], name: str, spec: PipelineSpec | None = None
    ) -> None:
        self.session = session
        self.name = name
        self.inputs: dict[str, TensorInfo] = graph_inputs(session)
        self.outputs: dict[str, TensorInfo] = graph_outputs(session)
        wired = spec is not None and any(w.input == "inputs_embeds" for w in spec.dataflow)
        # A decoder reads token ids, or embeddings a step session computes from them (dataflow).
        self.takes_ids = "input_ids" in self.inputs
        if not (self.takes_ids or ("inputs_embeds" in self.inputs and wired)) or "logits" not in self.outputs:
            raise UnsupportedModelError(
                f"{name} is not a text decoder: it needs an 'input_ids' input (or 'inputs_embeds' wired from an "
                "embedding session in the pipeline's dataflow) and a 'logits' output "
                f"(inputs: {sorted(self.inputs)[:8]}, outputs: {sorted(self.outputs)[:8]}). "
                "Use the task class that matches this model, or describe it in an inference4py.json pipeline file."
            )
        state = spec.state if spec is not None else None
        cross = state.cross_cache if state is not None else None
        self.layout: KVLayout = discover_layout(
            self.inputs,
            self.outputs,
            config,
            graph_name=name,
            names=state.kv_cache.names if state else None,
            cross_names=cross.names if cross else None,
            num_kv_heads=state.kv_cache.num_kv_heads if state else None,
            head_size=state.kv_cache.head_size if state else None,
        )
        self.ids_dtype = self.inputs["input_ids"].dtype if self.takes_ids else np.int64
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
        # (past input, present output) of each self-attention cache tensor, in layout order
        self.cache_names: tuple[tuple[str, str], ...] = tuple((e.input, e.output) for e in self.layout.self_entries)
        self.logits_to_keep = next((n for n in _LOGITS_TO_KEEP if n in self.inputs), None)
        self.logits_dtype = self.outputs["logits"].dtype


class _Runtime(Protocol):
    """What a state reads of its runtime (:class:`~inference4py.engine.decoder.DecoderRuntime`)."""

    @property
    def first(self) -> _Graph: ...

    @property
    def rest(self) -> _Graph: ...

    @property
    def layout(self) -> KVLayout: ...

    @property
    def flow(self) -> FlowRunner | None: ...

    @property
    def shared_kv(self) -> bool: ...

    @property
    def min_capacity(self) -> int: ...

    @property
    def max_positions(self) -> int | None: ...

    @property
    def float_prompt(self) -> FloatPrompt[_Graph] | None: ...

    @property
    def prompt_tile(self) -> int: ...

    @property
    def prefill_chunk(self) -> int: ...


class _StateCore:
    """The fields of one decoding call and the helpers both cache modes use."""

    # bound by _bind_step (after prefill / reorder / rewind / growth), read by step()
    _step_ids: np.ndarray  # [batch, 1]
    _step_pos: np.ndarray | None  # [batch, 1] when the graph takes positions
    _rows: np.ndarray  # [batch]
    _top_valid: int  # shared mode: the longest row's valid length
    _vocab: int  # the logits' last dimension, known after the first run

    def __init__(self, runtime: _Runtime, batch_size: int, capacity: int | None = None) -> None:
        self.rt = runtime
        # With keep_prefill_logits, a prefill keeps every position's logits in prefill_logits
        # ([batch, n, vocab]), for prompt log-probabilities (OpenAI's echo).
        self.keep_prefill_logits = False
        self.prefill_logits: np.ndarray | None = None
        # Options of the prompt runs (a prompt pass's last piece shrinks the arena: engine/prompt_pass.py)
        self.run_options: ort.RunOptions | None = None
        self.batch = batch_size
        self.capacity = int(capacity) if capacity else 0
        self.shared_buffer = runtime.shared_kv
        self.length = 0  # tokens in the cache, left-padded view (including padding)
        g = runtime.rest
        self._ids_dtype = g.ids_dtype
        self._mask_dtype = g.inputs["attention_mask"].dtype if g.has_mask else np.int64
        self._pos_dtype = g.inputs[g.position_name].dtype if g.has_positions else np.int64
        self._logits_rank = len(g.outputs["logits"].shape)
        # Pipelines with sessions around the decoder (see FlowRunner): the caller's inputs for the
        # init sessions (set_inputs) and what those produced on the first prefill.
        self._flow = runtime.flow
        self._feeds_decoder = self._flow is not None and self._flow.feeds_decoder
        self._given: dict[str, Any] = {}
        self._values: dict[str, np.ndarray] = {}
        self._reset()

    def _reset(self) -> None:
        self.length = 0
        # growing mode: one OrtValue (native or wrapped, see StepBinding) per entry of
        # rt.layout.self_entries, in that order; None before the first run
        self._past: list[Any] | None = None
        self._maskbuf = np.zeros((self.batch, 0), dtype=self._mask_dtype)  # [batch, cap]
        self._next_pos = np.zeros((self.batch,), dtype=np.int64)
        self._binding: StepBinding | None = None  # the step graph's binding, made once
        self._step_ready = False
        self._step_logits: np.ndarray | None = None
        self._step_out: np.ndarray | None = None  # [batch, vocab] view of _step_logits
        self._step_f32 = True  # whether _step_out is float32 already
        # shared mode: cache input -> (its [batch, kv_heads, capacity, head_size] buffer, that buffer as an OrtValue)
        self._kv: dict[str, tuple[np.ndarray, ort.OrtValue]] = {}
        self._valid = np.zeros((self.batch,), dtype=np.int64)  # valid tokens per row
        self._pad = np.zeros((self.batch,), dtype=np.int64)  # left padding per row (left-padded view)

    def _token_feeds(self, g: _Graph, ids: np.ndarray, *, prompt: bool) -> dict[str, np.ndarray]:
        """The decoder inputs that carry a run's tokens: ``input_ids``, and/or what the dataflow
        wires into the decoder (an embedding session's ``inputs_embeds`` for these ids)."""
        feeds: dict[str, np.ndarray] = {}
        if g.takes_ids:
            feeds["input_ids"] = ids.astype(g.ids_dtype, copy=False)
        if self._feeds_decoder:
            assert self._flow is not None
            for name, value in self._flow.decoder_inputs(ids, self._values, prompt=prompt).items():
                feeds[name] = np.asarray(value, dtype=g.inputs[name].dtype) if name in g.inputs else value
        return feeds

    def _feed_step(self, fast: StepBinding) -> None:
        """Step mode: run the step sessions feeding the decoder on the bound step ids and bind their outputs."""
        for name, value in self._token_feeds(self.rt.rest, self._step_ids, prompt=False).items():
            if name != "input_ids":  # bound once by _bind_step
                fast.bind_array(name, np.ascontiguousarray(value))

    def _want(self, needed: int) -> int:
        """The capacity to allocate when ``needed`` positions must fit (the caller's hint, doubled, clamped)."""
        cap = max(needed, self.capacity or needed + _DEFAULT_EXTRA)
        if needed > self.capacity and self.capacity:
            cap = max(needed, 2 * self.capacity)
        cap = max(cap, 2)  # a one-wide buffer would make every step look like a first prompt
        if self.shared_buffer and self.rt.max_positions:
            cap = max(needed, min(cap, self.rt.max_positions))
        if self.shared_buffer:
            cap = max(cap, self.rt.min_capacity)  # a sliding-window cache needs room for its window
        return cap

    def _new_binding(self, g: _Graph) -> StepBinding:
        if g is self.rt.rest:
            if self._binding is None:
                self._binding = StepBinding(g.session)
            return self._binding
        return StepBinding(g.session)
