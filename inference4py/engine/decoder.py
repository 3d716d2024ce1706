"""Decoder-only step functions: ``prefill(tokens)`` and ``step(token)`` -> last-position logits.

The KV cache never leaves onnxruntime during normal decoding: each step's
``present`` OrtValues are bound as the next step's ``past`` inputs through IO
binding, so no cache tensor is copied through numpy.  Only the last position's
logits are read back.

:class:`DecoderRuntime` loads a decoder pipeline's sessions and decides how its cache is
kept; :class:`DecoderState` is one decoding call.  The state's entry points (prefill, step,
reorder, discard, rewind) live here and serve both cache modes; what is particular to each
mode lives apart: :mod:`~inference4py.engine.growing_kv` (any graph) and
:mod:`~inference4py.engine.shared_kv` (one buffer shared by past and present,
GroupQueryAttention graphs), over the fields of :mod:`~inference4py.engine.decoder_base`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import onnxruntime as ort

from inference4py.engine.decoder_base import _Graph
from inference4py.engine.float_prompt import SCALES, FloatPrompt, find_float_prompt
from inference4py.engine.flow import FlowRunner, open_session
from inference4py.engine.graph_io import has_op, read_node_int_attributes
from inference4py.engine.growing_kv import _GrowingCache
from inference4py.engine.kv_cache import check_cache_names
from inference4py.engine.pipeline import PipelineSpec, single_pass_refusal
from inference4py.engine.prompt_tiles import PREFILL_CHUNK, query_tile
from inference4py.engine.sessions import SessionOptions, create_session, value_from_array
from inference4py.engine.shared_kv import _SharedBuffer
from inference4py.errors import InvalidInputError, ModelLoadError, UnsupportedModelError

__all__ = ["DecoderRuntime", "DecoderState", "context_length", "open_session"]


def context_length(config: Mapping[str, Any]) -> int | None:
    """The model's maximum sequence length according to config.json."""
    cfg = dict(config)
    if isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg, **cfg["text_config"]}
    for key in (
        "max_position_embeddings",
        "n_positions",
        "n_ctx",
        "max_sequence_length",
        "seq_length",
        "context_length",
    ):
        value = cfg.get(key)
        if isinstance(value, int) and value > 0:
            return value
    return None


class DecoderRuntime:
    """Loaded sessions of a decoder-only pipeline; creates per-call states.

    Sessions are shared and thread-safe; all mutable decoding state lives in
    :class:`DecoderState`, one per generation call.

    A pipeline with more than its decoder (version 2: wired init sessions such as a vision
    encoder, step sessions feeding the decoder such as an embedding session for an
    ``inputs_embeds`` decoder, final sessions) runs those through :attr:`flow`
    (:class:`~inference4py.engine.flow.FlowRunner`); ``flow`` is None otherwise.  A state
    takes the init sessions' inputs with :meth:`DecoderState.set_inputs` and runs the final
    sessions with :meth:`DecoderState.run_final`.
    """

    def __init__(self, spec: PipelineSpec, config: Mapping[str, Any], options: SessionOptions | None = None) -> None:
        if not spec.has("decoder"):
            raise UnsupportedModelError(single_pass_refusal(spec))
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
            _Graph(
                open_session(spec, "decoder_with_past", options), config, spec.session("decoder_with_past").file, spec
            )
            if spec.has("decoder_with_past")
            else self.first
        )
        self.layout = self.rest.layout
        decoders = [spec.roles[r] for r in ("decoder", "decoder_with_past") if r in spec.roles]
        others = set(spec.sessions) - set(decoders)
        self.flow: FlowRunner | None = (
            FlowRunner(spec, decoders, options, decoder_inputs=self.first.inputs) if others else None
        )
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

        # One scan of the graph file serves both questions (it can hold the weights: hundreds of MB).
        path = spec.path("decoder")
        gqa = read_node_int_attributes(path, "GroupQueryAttention")
        has_gqa = bool(gqa) if gqa is not None else has_op(path, b"GroupQueryAttention")  # unparsable: byte scan
        self.shared_kv = self._shares_buffer(spec, has_gqa)
        self.min_capacity = self._window(spec, gqa or [])
        # where a cached prefix is continued exactly depends on the prompt pass's query tile (prompt_tiles.py)
        self.prompt_tile = query_tile(self.layout.head_dim) if has_gqa else 1
        self.prefill_chunk = PREFILL_CHUNK  # tokens per run of a long prompt (shared-buffer graphs)
        self.float_prompt = self._float_prompt(spec, config, options) if self.shared_kv else None

    def _float_prompt(
        self, spec: PipelineSpec, config: Mapping[str, Any], options: SessionOptions | None
    ) -> FloatPrompt[_Graph] | None:
        """An int8-cache folder's float twin for first prompts (:mod:`~inference4py.engine.float_prompt`), if it has one."""
        found = find_float_prompt(spec.path("decoder").parent)
        if found is None:
            return None
        path, scales = found
        session = spec.session("decoder")
        graph = _Graph(
            create_session(
                path,
                options,
                provider=session.provider,
                provider_options=session.provider_options,
                settings=session.options,
            ),
            config,
            path.name,
            spec,
        )
        names = [e.input for e in self.layout.self_entries]
        if [e.input for e in graph.layout.self_entries] != names or any(n not in scales for n in names):
            raise ModelLoadError(
                f"{path} is not the float twin of {self.rest.name} (other cache inputs, or scales missing from "
                f"{path.parent / SCALES}). Delete the folder {path.parent} so that it is made again."
            )
        return FloatPrompt(graph, scales)

    def _window(self, spec: PipelineSpec, gqa: list[dict[str, int]]) -> int:
        """The fewest positions a shared KV buffer may hold: the widest sliding window, 0 when none.

        onnxruntime-genai's builder marks local layers' GroupQueryAttention nodes with
        ``local_window_size`` and ``sliding_window_cache=1``, and onnxruntime then refuses a buffer
        smaller than the window.  The window comes from the graph itself and from the description
        (genai_config.json's ``sliding_window``).  The buffer still holds the whole sequence, so
        old tokens are never evicted: the window is applied by the kernel's mask.
        """
        declared = spec.state.kv_cache.sliding_window or 0
        windowed = [n.get("local_window_size", -1) for n in gqa if n.get("sliding_window_cache")]
        window = max([declared, *windowed])
        if windowed and not self.shared_kv:
            raise UnsupportedModelError(
                f"{self.rest.name} keeps a sliding-window KV cache (GroupQueryAttention with sliding_window_cache=1), "
                "which the native loop runs only with one shared past/present buffer, and this graph's inputs do not "
                "allow one. Run the folder with inference4py_genai, or rebuild it with onnxruntime-genai's builder "
                "option --extra_options windowed_kv_cache=false."
            )
        return window if self.shared_kv else 0

    def _shares_buffer(self, spec: PipelineSpec, has_gqa: bool) -> bool:
        """True when past and present can be one pre-allocated buffer per layer (GroupQueryAttention graphs).

        onnxruntime's GroupQueryAttention writes the new keys/values into ``present`` at each row's
        ``seqlens_k`` offset and accepts ``present`` being the very tensor bound as ``past``
        (onnxruntime-genai's ``past_present_share_buffer``).  Detected from the graph (a
        GroupQueryAttention node) or forced by ``state.kv_cache.share_buffer``.
        """
        g = self.rest
        if (
            self.first is not self.rest
            or not g.has_mask
            or g.layout.cross_entries
            or g.has_cache_branch
            or len(g.outputs["logits"].shape) != 3
            or any(e.kind != "self" for e in g.layout.self_entries)
        ):
            return False
        return spec.state.kv_cache.share_buffer or has_gqa

    def new_state(self, batch_size: int = 1, capacity: int | None = None) -> DecoderState:
        """A fresh decoding state; ``capacity`` (prompt + max_new_tokens) sizes the pre-allocated buffers.

        Buffers grow when more tokens arrive than ``capacity`` says; None picks a small default.
        """
        return DecoderState(self, batch_size, capacity)


def write_step_ids(buffer: np.ndarray, tokens: np.ndarray | int) -> None:
    """Write one token per row into a bound ``[batch, 1]`` ids buffer (the usual ``[batch]`` array: no reshape)."""
    if isinstance(tokens, np.ndarray) and tokens.ndim == 1:
        buffer[:, 0] = tokens
    else:
        buffer[:, 0] = np.reshape(tokens, -1)


class DecoderState(_SharedBuffer, _GrowingCache):
    """The state of one decoding call: KV cache, attention mask, positions.

    ``prefill`` feeds the prompt (``[batch, n]``, left-padded with ``attention_mask``
    for batches) and ``step`` feeds one token per row; both return the logits of
    the last position, ``[batch, vocab]`` float32.  The array returned by ``step``
    is reused by the next call: copy it to keep it.

    Two cache modes:

    * growing (any graph): each step's ``present`` OrtValues are bound as the next
      step's ``past`` (kept as a list aligned with the layout's self entries);
    * shared buffer (GroupQueryAttention graphs, ``shared_buffer`` is True): one
      ``[batch, kv_heads, capacity, head_size]`` buffer per cache tensor, bound as
      both past and present; rows are kept right-padded (each row's valid length
      is the sum of its attention-mask row, which is what the graph reads).
    """

    rt: DecoderRuntime

    def __init__(self, runtime: DecoderRuntime, batch_size: int, capacity: int | None = None) -> None:
        super().__init__(runtime, batch_size, capacity)

    # ------------------------------------------------------------------ public
    def set_inputs(self, inputs: Mapping[str, Any]) -> None:
        """Give the pipeline's init sessions their inputs for the next prefill from an empty cache.

        For a pipeline with wired init sessions (a vision encoder): keys are ``"session.input"``
        (``runtime.flow.caller_inputs`` lists them, e.g. ``"vision.pixel_values"``), values numpy
        arrays (a list of arrays, one per image, for a ``per_image`` session).  The init sessions
        run on the first prefill; their outputs reach the step sessions through the dataflow (an
        embedding session's ``image_features``) for that prefill only.  A session given none of
        its inputs is skipped and its consumers receive empty tensors (a text-only prompt).

        A step feeder's output (``runtime.flow.prompt_outputs``, e.g. ``"embedding.inputs_embeds"``,
        ``[batch, prompt, hidden]``) may be given too: it replaces what the session would compute
        for the first prefill (a task class that merges image features into the prompt's
        embeddings itself); the following tokens go through the session as usual.

        Raises:
            InvalidInputError: the pipeline has no such input.
        """
        flow = self._flow
        known_keys = (flow.caller_inputs + flow.prompt_outputs) if flow is not None else ()
        unknown = [k for k in inputs if k not in known_keys]
        if unknown:
            known = ", ".join(known_keys)
            raise InvalidInputError(
                f"Unknown pipeline input(s) {', '.join(unknown)}. This pipeline takes: {known or 'none'}."
            )
        self._given = dict(inputs)

    @property
    def has_final_phase(self) -> bool:
        """Whether the pipeline has ``final`` sessions to run after generation (:meth:`run_final`)."""
        return self._flow is not None and self._flow.has_final

    def run_final(self, prompt_ids: Any, generated_ids: Any) -> dict[str, np.ndarray]:
        """Run the pipeline's ``final`` sessions on a finished sequence.

        ``generation.ids`` is fed ``generated_ids`` (``[1, generated]``), ``generation.sequence``
        the prompt and the generated ids; the init sessions' outputs of this state are there too.
        Returns ``{"session.output": array}`` for every output of every final session (empty
        when the pipeline has none).
        """
        if self._flow is None or not self._flow.has_final:
            return {}
        return self._flow.run_final(list(prompt_ids), list(generated_ids), self._values)

    def prefill(self, input_ids: np.ndarray, attention_mask: np.ndarray | None = None) -> np.ndarray:
        """Feed the prompt (``[batch, n]``) and return last-position logits ``[batch, vocab]``."""
        ids = np.asarray(input_ids, dtype=np.int64)
        if ids.ndim == 1:
            ids = ids[None, :]
        if ids.shape[0] != self.batch or ids.shape[1] == 0:
            raise InvalidInputError(f"prefill expects [batch={self.batch}, n>0] token ids, got shape {ids.shape}.")
        if self.length == 0 and self._flow is not None and (self._flow.init or self._given):
            self._values = self._flow.run_init(self._given)  # init sessions, and prompt outputs given
        mask = np.ones_like(ids) if attention_mask is None else np.asarray(attention_mask, dtype=np.int64)
        if not self.shared_buffer:
            return self._prefill_growing(ids, mask)
        if self.length > 0 and self.batch > 1 and ids.shape[1] > 1:
            if not mask.all():
                raise InvalidInputError("A batch continuing a cached prefix cannot take padded tokens.")
            logits = None
            for j in range(ids.shape[1]):  # GroupQueryAttention takes one token per row once a batch has a past
                logits = self.step(ids[:, j])
            assert logits is not None
            return logits.copy()
        return self._prefill_shared(ids, mask)

    def step(self, tokens: np.ndarray | int) -> np.ndarray:
        """Feed one token per row (``[batch]``) and return the next logits ``[batch, vocab]``."""
        if self.length == 0:
            return self.prefill(np.asarray(tokens, dtype=np.int64).reshape(self.batch, 1))
        if not self._step_ready:
            self._bind_step()
        write_step_ids(self._step_ids, tokens)
        fast = self._binding
        assert fast is not None
        g = self.rt.rest
        if self.shared_buffer:
            top = self._top_valid  # the longest row (python int: no numpy reduction per step)
            if top + 1 > self.capacity:
                self._grow(top + 1)
                self._bind_step()
                write_step_ids(self._step_ids, tokens)
            if self.batch == 1:
                self._maskbuf[0, top] = 1
            else:
                self._maskbuf[self._rows, self._valid] = 1
            if self._step_pos is not None:
                self._step_pos[:, 0] = self._valid
            self._valid += 1
            self._top_valid = top + 1
            if self._feeds_decoder:
                self._feed_step(fast)
            fast.run(what=g.name)
        else:
            # Per step: the mask view and the cache are rebound, everything else was bound
            # once by _bind_step (ids, positions, logits write into arrays bound in place).
            length = self.length
            if length >= self._maskbuf.shape[1]:
                self._ensure_mask(length + 1)
            mask = self._maskbuf
            if self.batch == 1:
                mask[0, length] = 1
                if g.has_mask:
                    fast.bind_view("attention_mask", mask[:, : length + 1], mask)  # [1, length + 1]
            else:
                mask[:, length] = 1
                if g.has_mask:
                    fast.bind_array("attention_mask", np.ascontiguousarray(mask[:, : length + 1]))
            assert self._past is not None
            fast.rebind_cache(g.cache_names, self._past)
            if self._feeds_decoder:
                self._feed_step(fast)
            fast.run(what=g.name)
            self._past = fast.outputs(1)  # logits are bound first, then the presents in layout order
            self._next_pos += 1  # (a view of the bound positions, see _bind_step)
        self.length += 1
        out = self._step_out
        assert out is not None
        return out if self._step_f32 else out.astype(np.float32)

    def reorder(self, indices: np.ndarray) -> None:
        """Reorder (and possibly repeat) batch rows, e.g. for beam search: row i <- row indices[i]."""
        idx = np.asarray(indices, dtype=np.int64)
        if self.shared_buffer:
            for name, (arr, _) in list(self._kv.items()):
                new = np.ascontiguousarray(np.take(arr, idx, axis=0))
                self._kv[name] = (new, ort.OrtValue.ortvalue_from_numpy(new))
            self._maskbuf = np.ascontiguousarray(self._maskbuf[idx])
            self._valid = self._valid[idx]
            self._pad = self._pad[idx]
        else:
            assert self._past is not None
            self._past = [
                ort.OrtValue.ortvalue_from_numpy(
                    np.ascontiguousarray(np.take(value.numpy(), idx, axis=entry.batch_axis))
                )
                for entry, value in zip(self.rt.layout.self_entries, self._past)
            ]
            self._maskbuf = np.ascontiguousarray(self._maskbuf[idx])
            self._next_pos = self._next_pos[idx]
        self.batch = len(idx)
        self._step_ready = False

    def discard(self, count: int) -> None:
        """Forget the last ``count`` tokens fed (a batch of one), e.g. drafts a speculative pass rejected.

        A shared buffer only lowers its length (as :meth:`rewind`).  A growing cache whose graph
        takes position ids keeps the tokens' columns and masks them out instead of copying the
        cache down to size: the next tokens get the positions that follow the kept ones, and the
        masked columns are never attended to.  ``length`` then still counts those columns.
        """
        if not 0 <= count <= self.length:
            raise InvalidInputError(f"Cannot discard {count} tokens: the cache holds {self.length}.")
        g = self.rt.rest
        if self.shared_buffer or self.batch != 1 or not (g.has_mask and g.has_positions):
            self.rewind(self.length - count)
            return
        if count:
            self._maskbuf[:, self.length - count : self.length] = 0
            self._next_pos = self._maskbuf[:, : self.length].sum(axis=1).astype(np.int64)
            self._step_ready = False

    def rewind(self, length: int) -> None:
        """Forget everything after the first ``length`` cached tokens."""
        if not 0 <= length <= self.length:
            raise InvalidInputError(f"Cannot rewind to {length}: the cache holds {self.length} tokens.")
        if length == self.length:
            return
        self._step_ready = False
        if length == 0:
            if self.shared_buffer:  # keep the buffers: the next prefill overwrites them
                self.length = 0
                self._valid[:] = 0
                self._pad[:] = 0
                self._maskbuf[:] = 0
            else:
                self._reset()
            return
        if self.shared_buffer:
            self._valid = np.maximum(length - self._pad, 0)
            self._maskbuf[:] = 0
            self._maskbuf[np.arange(self.capacity)[None, :] < self._valid[:, None]] = 1
            self.length = length
            return
        assert self._past is not None
        new_past = []
        for entry, value in zip(self.rt.layout.self_entries, self._past):
            arr = value.numpy()
            sl = [slice(None)] * arr.ndim
            sl[entry.seq_axis] = slice(0, length)
            new_past.append(value_from_array(arr[tuple(sl)]))  # a view of the value dropped here: copied
        self._past = new_past
        self._maskbuf[:, length:] = 0
        self._next_pos = self._maskbuf[:, :length].sum(axis=1).astype(np.int64)
        self.length = length

    # ------------------------------------------------------------------ internals
    def _bind_step(self) -> None:
        """Bind what stays the same from step to step (done again after prefill / reorder / rewind / growth)."""
        g = self.rt.rest
        fast = self._new_binding(g)
        fast.clear()
        binding = fast.binding
        self._step_ids = np.zeros((self.batch, 1), dtype=g.ids_dtype)
        self._rows = np.arange(self.batch)
        self._top_valid = int(self._valid.max()) if self.batch else 0
        if g.takes_ids:  # else step() binds the wired embeddings of each token (_feed_step)
            binding.bind_ortvalue_input("input_ids", ort.OrtValue.ortvalue_from_numpy(self._step_ids))
        self._step_pos = None
        if g.has_positions:
            self._step_pos = np.zeros((self.batch, 1), dtype=self._pos_dtype)
            binding.bind_ortvalue_input(g.position_name, ort.OrtValue.ortvalue_from_numpy(self._step_pos))
        if g.has_cache_branch:
            self._branch = np.array([True], dtype=np.bool_)
            binding.bind_ortvalue_input("use_cache_branch", ort.OrtValue.ortvalue_from_numpy(self._branch))
        if g.logits_to_keep:
            self._keep = np.array(1, dtype=g.inputs[g.logits_to_keep].dtype)
            binding.bind_ortvalue_input(g.logits_to_keep, ort.OrtValue.ortvalue_from_numpy(self._keep))
        vocab = self._vocab
        shape = (self.batch, 1, vocab) if self._logits_rank == 3 else (self.batch, vocab)
        self._step_logits = np.empty(shape, dtype=g.logits_dtype)
        self._step_out = self._step_logits[:, 0, :] if self._logits_rank == 3 else self._step_logits
        binding.bind_ortvalue_output("logits", ort.OrtValue.ortvalue_from_numpy(self._step_logits))
        if self.shared_buffer:
            # Full-width mask: the graph reads each row's sum (seqlens_k) and its width (total_sequence_length).
            binding.bind_ortvalue_input("attention_mask", ort.OrtValue.ortvalue_from_numpy(self._maskbuf))
            for entry in g.layout.self_entries:
                value = self._kv[entry.input][1]
                binding.bind_ortvalue_input(entry.input, value)
                binding.bind_ortvalue_output(entry.output, value)
        else:
            for _, present in g.cache_names:  # after logits: step() reads them from output 1 on
                binding.bind_output(present, "cpu")
            if self._step_pos is not None:
                # The next positions live in the bound array itself: step() adds 1 after each run.
                self._step_pos[:, 0] = self._next_pos
                self._next_pos = self._step_pos[:, 0]  # [batch] view
        self._step_f32 = self._step_logits.dtype == np.float32
        self._step_ready = True
