"""Encoder-decoder step functions (T5, BART, Marian, Whisper).

The encoder runs once per generation (the pipeline's ``init``).  The decoder
carries two caches:

* self-attention (``past_key_values.{i}.decoder.*``): grows by one position per step;
* cross-attention (``past_key_values.{i}.encoder.*``): produced by the first decoder
  run from the encoder output, then frozen (or, when the encoder outputs it as
  ``present.{i}.encoder.*``, taken from the encoder and the decoder is one graph
  without a first-run branch).  Later steps bind the very same OrtValues again: it
  is never recomputed nor copied.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import onnxruntime as ort

from inference4py.engine.decoder import context_length, open_session, write_step_ids
from inference4py.engine.decoder_base import _Graph
from inference4py.engine.pipeline import PipelineSpec, single_pass_refusal
from inference4py.engine.sessions import (
    SessionOptions,
    StepBinding,
    graph_inputs,
    graph_outputs,
    run_binding,
    value_from_array,
)
from inference4py.errors import InvalidInputError, PromptTooLongError, UnsupportedModelError

__all__ = ["DecoderGraph", "Seq2SeqRuntime", "Seq2SeqState"]

_ENCODER_INPUTS = ("input_ids", "input_features")


class DecoderGraph(_Graph):
    """A decoder graph of an encoder-decoder pipeline: what it takes from the encoder side."""

    def __init__(
        self, session: ort.InferenceSession, config: Mapping[str, Any], name: str, spec: PipelineSpec | None = None
    ) -> None:
        super().__init__(session, config, name, spec)
        self.has_cache_branch = "use_cache_branch" in self.inputs
        self.takes_hidden = "encoder_hidden_states" in self.inputs
        self.takes_mask = "encoder_attention_mask" in self.inputs
        self.takes_decoder_mask = "decoder_attention_mask" in self.inputs
        # Cross-attention entries this graph can emit (first run) vs only consume (later runs).
        self.cross_outputs = [e for e in self.layout.cross_entries if e.output in self.outputs]
        if not self.layout.entries:
            # decoder_model.onnx of the three-file layout takes no past but emits present.*
            self.emitted = [n for n in self.outputs if n.startswith("present")]
        else:
            self.emitted = []


class Seq2SeqRuntime:
    """Loaded sessions of an encoder-decoder pipeline; creates per-call states."""

    def __init__(self, spec: PipelineSpec, config: Mapping[str, Any], options: SessionOptions | None = None) -> None:
        if not spec.has("decoder"):
            raise UnsupportedModelError(single_pass_refusal(spec))
        if not spec.has("encoder"):
            raise UnsupportedModelError(
                f"{spec.folder} holds a decoder-only model ({spec.session('decoder').file}), not an encoder-decoder one. "
                "Use OnnxTextGenerator for it, or point this class at a T5 / BART / Marian export "
                "(encoder_model.onnx + decoder_model_merged.onnx)."
            )
        roles = set(spec.roles.values())
        extra = [name for name in spec.sessions if name not in roles]
        if spec.dataflow or extra:
            raise UnsupportedModelError(
                f"{spec.folder}: the encoder-decoder runtime runs an encoder and its decoder(s) only; this pipeline "
                f"also has {', '.join(extra) or 'dataflow wires'}. Describe the encoder-decoder without "
                '"dataflow" and extra sessions (dataflow, wired init sessions and final sessions run on decoder-only '
                "pipelines: OnnxTextGenerator)."
            )
        self.spec = spec
        self.config = dict(config)
        self.encoder = open_session(spec, "encoder", options)
        enc_inputs = graph_inputs(self.encoder)
        self.encoder_input = next((n for n in _ENCODER_INPUTS if n in enc_inputs), None)
        if self.encoder_input is None or not graph_outputs(self.encoder):
            raise UnsupportedModelError(
                f"{spec.session('encoder').file} does not look like an encoder (inputs: {sorted(enc_inputs)}); "
                "expected 'input_ids' or 'input_features'."
            )
        self.encoder_inputs = enc_inputs
        encoder_outputs = graph_outputs(self.encoder)
        self.encoder_output = next(iter(encoder_outputs.values()))
        self.first = DecoderGraph(open_session(spec, "decoder", options), config, spec.session("decoder").file, spec)
        self.rest = (
            DecoderGraph(
                open_session(spec, "decoder_with_past", options), config, spec.session("decoder_with_past").file, spec
            )
            if spec.has("decoder_with_past")
            else self.first
        )
        self.layout = self.rest.layout
        # cross cache the encoder hands over (input name -> the encoder's output), when it outputs one
        wanted = {e.input: e.input.replace("past_key_values", "present") for e in self.layout.cross_entries}
        self.encoder_cross = {i: o for i, o in wanted.items() if o in encoder_outputs}
        if self.encoder_cross and len(self.encoder_cross) != len(wanted):
            raise UnsupportedModelError(
                f"{spec.session('encoder').file} outputs part of the cross-attention cache "
                f"({len(self.encoder_cross)} of {len(wanted)} tensors): export it whole, or not at all."
            )
        if not self.layout.self_entries:
            raise UnsupportedModelError(
                f"{self.rest.name} has no self-attention cache inputs; export the model with past key values "
                "(optimum: --task text2text-generation-with-past)."
            )
        vocab = self.first.outputs["logits"].dim(-1) or self.config.get("vocab_size")
        self.vocab_size: int | None = int(vocab) if vocab else None
        # Relative position buckets (T5) have no fixed limit; learned position tables
        # (BART / Marian / Whisper) do.  Read the structure, not the model name.
        absolute = "relative_attention_num_buckets" not in self.config
        self.max_source_positions = self.config.get("max_source_positions") or (
            context_length(self.config) if self.encoder_input == "input_ids" and absolute else None
        )
        self.max_target_positions = (
            spec.context_length
            or self.config.get("max_target_positions")
            or (context_length(self.config) if absolute else None)
        )
        self.encoder_runs = 0  # observable: tests check the encoder runs once per generation

    # ------------------------------------------------------------------ encoder
    def encode(
        self, inputs: np.ndarray, attention_mask: np.ndarray | None = None
    ) -> tuple[ort.OrtValue, np.ndarray, dict[str, ort.OrtValue]]:
        """Run the encoder: (hidden states, attention mask ``[batch, src_len]``, the cross cache it outputs:
        decoder input name -> value, empty when the first decoder run makes it)."""
        arr = np.asarray(inputs)
        if self.encoder_input == "input_ids":
            arr = arr.astype(self.encoder_inputs["input_ids"].dtype, copy=False)
            if arr.ndim == 1:
                arr = arr[None, :]
            if arr.shape[1] == 0:
                raise InvalidInputError("The input is empty: pass some text or token ids.")
            if self.max_source_positions and arr.shape[1] > self.max_source_positions:
                raise PromptTooLongError(
                    f"The input has {arr.shape[1]} tokens but the encoder accepts at most {self.max_source_positions}. "
                    "Shorten the text, or build with .truncate() (CLI: --truncate) to keep only the first "
                    f"{self.max_source_positions} tokens."
                )
            mask = (
                np.ones(arr.shape, dtype=np.int64)
                if attention_mask is None
                else np.asarray(attention_mask, dtype=np.int64)
            )
        else:  # speech: [batch, mel_bins, frames]
            arr = arr.astype(self.encoder_inputs["input_features"].dtype, copy=False)
            if arr.ndim == 2:
                arr = arr[None]
            mask = np.ones((arr.shape[0], 1), dtype=np.int64)
        binding = self.encoder.io_binding()
        binding.bind_cpu_input(self.encoder_input, np.ascontiguousarray(arr))
        if "attention_mask" in self.encoder_inputs and self.encoder_input == "input_ids":
            binding.bind_cpu_input(
                "attention_mask", mask.astype(self.encoder_inputs["attention_mask"].dtype, copy=False)
            )
        binding.bind_output(self.encoder_output.name, "cpu")
        for name in self.encoder_cross.values():
            binding.bind_output(name, "cpu")
        run_binding(self.encoder, binding, what=f"encoder ({self.spec.session('encoder').file})")
        self.encoder_runs += 1
        outputs = binding.get_outputs()
        return outputs[0], mask, dict(zip(self.encoder_cross, outputs[1:]))

    def new_state(self, inputs: np.ndarray, attention_mask: np.ndarray | None = None) -> Seq2SeqState:
        """Encode ``inputs`` and return a fresh decoding state attending to them."""
        return Seq2SeqState(self, *self.encode(inputs, attention_mask))


class Seq2SeqState:
    """Decoding state of one call: frozen encoder output + cross cache, growing self cache.

    One-token steps run through a :class:`StepBinding` of the step graph, set up once
    (after the first run, a reorder, a rewind or a source expansion): token ids are
    written in place into a bound array; the encoder output, its mask, the cache branch
    flag and the frozen cross cache stay bound; each step rebinds only the decoder mask
    and the self cache (``rt.rest.cache_names``).
    """

    _ones: np.ndarray  # a reusable run of ones; decoder_attention_mask views its start

    def __init__(
        self,
        runtime: Seq2SeqRuntime,
        hidden: ort.OrtValue,
        encoder_mask: np.ndarray,
        cross: dict[str, Any] | None = None,
    ) -> None:
        self.rt = runtime
        self.hidden = hidden  # [batch, src_len, d_model]
        self.encoder_mask = encoder_mask  # [batch, src_len]
        self.batch = encoder_mask.shape[0]
        self.length = 0
        # self cache: one OrtValue (native or wrapped, see StepBinding) per entry of
        # rt.layout.self_entries, in that order; None before the first run
        self._self: list[Any] | None = None
        # input name -> OrtValue: from the encoder (``cross``), else set once by the first decoder run
        self.cross: dict[str, Any] = dict(cross or {})
        self._cross_from_encoder = bool(cross)
        self.cross_computations = 0
        self._binding: StepBinding | None = None  # the step graph's binding, made once
        self._step_ready = False
        # Outputs of the step graph beyond logits and cache (e.g. Whisper's ``cross_attentions.{i}``) that a
        # caller wants after each one-token step; set before decoding, read from ``extras`` after each step.
        self.extra_outputs: tuple[str, ...] = ()
        self.extras: list[Any] = []

    def prefill(self, input_ids: np.ndarray, attention_mask: np.ndarray | None = None) -> np.ndarray:
        """Feed the decoder start tokens ``[batch, n]``; returns last-position logits."""
        ids = np.asarray(input_ids, dtype=np.int64)
        if ids.ndim == 1:
            ids = ids[None, :]
        return self._run(ids)

    def step(self, tokens: np.ndarray | int) -> np.ndarray:
        """Feed one token per row; returns the next logits ``[batch, vocab]``."""
        if self.length == 0:
            return self._run(np.asarray(tokens, dtype=np.int64).reshape(self.batch, 1))
        if not self._step_ready:
            self._bind_step()
        write_step_ids(self._step_ids, tokens)
        fast = self._binding
        assert fast is not None and self._self is not None
        g = self.rt.rest
        if g.takes_decoder_mask:
            n = self.batch * (self.length + 1)
            if n > self._ones.size:
                self._ones = np.ones(2 * n, dtype=self._ones.dtype)
            ones = self._ones
            fast.bind_view("decoder_attention_mask", ones[:n].reshape(self.batch, self.length + 1), ones)
        fast.rebind_cache(g.cache_names, self._self)
        fast.run(what=g.name)
        outputs = fast.outputs()  # logits first, the presents in layout order, then extra_outputs (see _bind_step)
        n_cache = len(g.cache_names)
        self._self = outputs[1 : 1 + n_cache]
        self.extras = outputs[1 + n_cache :]
        self.length += 1
        logits = outputs[0].numpy()
        return (logits[:, -1, :] if logits.ndim == 3 else logits).astype(np.float32, copy=False)

    def reorder(self, indices: np.ndarray) -> None:
        """Row i <- row indices[i] for the self cache; the cross cache follows only if rows change source."""
        idx = np.asarray(indices, dtype=np.int64)
        if self._self is not None:
            self._self = [
                ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(np.take(value.numpy(), idx, axis=0)))
                for value in self._self
            ]
        self.batch = len(idx)
        self._step_ready = False

    def rewind(self, length: int) -> None:
        """Forget decoder positions after the first ``length`` (the cross cache is kept)."""
        if not 0 <= length <= self.length:
            raise InvalidInputError(f"Cannot rewind to {length}: the decoder cache holds {self.length} tokens.")
        if length == self.length:
            return
        self._step_ready = False
        if length == 0:
            self._self = None
            if not self._cross_from_encoder:
                self.cross = {}  # recomputed by the next first run
            self.length = 0
            return
        assert self._self is not None
        self._self = [value_from_array(value.numpy()[:, :, :length, :]) for value in self._self]
        self.length = length

    def expand_source(self, indices: np.ndarray) -> None:
        """Repeat encoder rows (e.g. once per beam): done once, before decoding starts."""
        idx = np.asarray(indices, dtype=np.int64)
        hidden = np.ascontiguousarray(np.take(self.hidden.numpy(), idx, axis=0))
        self.hidden = ort.OrtValue.ortvalue_from_numpy(hidden)
        self._hidden_np = hidden
        self.encoder_mask = np.ascontiguousarray(self.encoder_mask[idx])
        for name, value in list(self.cross.items()):
            arr = np.ascontiguousarray(np.take(value.numpy(), idx, axis=0))
            self.cross[name] = ort.OrtValue.ortvalue_from_numpy(arr)
        self.batch = len(idx)
        self._step_ready = False

    def _bind_step(self) -> None:
        """Bind what stays the same from step to step (again after the first run / reorder / rewind / expansion)."""
        g = self.rt.rest
        if self._binding is None:
            self._binding = StepBinding(g.session)
        fast = self._binding
        fast.clear()
        binding = fast.binding
        self._step_ids = np.zeros((self.batch, 1), dtype=g.ids_dtype)
        binding.bind_ortvalue_input("input_ids", ort.OrtValue.ortvalue_from_numpy(self._step_ids))
        if g.takes_mask:
            self._step_mask = np.ascontiguousarray(
                self.encoder_mask.astype(g.inputs["encoder_attention_mask"].dtype, copy=False)
            )
            fast.bind_array("encoder_attention_mask", self._step_mask)
        if g.takes_hidden:
            fast.bind_value("encoder_hidden_states", self.hidden)
        if g.takes_decoder_mask:
            dtype = g.inputs["decoder_attention_mask"].dtype
            self._ones = np.ones(max(64, 2 * self.batch * (self.length + 1)), dtype=dtype)
        if g.has_cache_branch:
            self._branch = np.array([True], dtype=np.bool_)
            binding.bind_ortvalue_input("use_cache_branch", ort.OrtValue.ortvalue_from_numpy(self._branch))
        for entry in g.layout.cross_entries:  # frozen: the very same OrtValues for every step
            fast.bind_value(entry.input, self.cross[entry.input])
        binding.bind_output("logits", "cpu")
        for _, present in g.cache_names:  # after logits: step() reads them from output 1 on
            binding.bind_output(present, "cpu")
        for name in self.extra_outputs:  # last
            binding.bind_output(name, "cpu")
        self._step_ready = True

    def _run(self, ids: np.ndarray) -> np.ndarray:
        """Several tokens per row (prefill), or the first run: a one-off binding with every input."""
        first_run = self.length == 0
        g = self.rt.first if first_run else self.rt.rest
        fast = StepBinding(g.session)
        binding = fast.binding
        self._step_ready = False
        bind = fast.bind_input
        bind("input_ids", ids.astype(g.ids_dtype, copy=False))
        if g.takes_mask:
            bind(
                "encoder_attention_mask", self.encoder_mask.astype(g.inputs["encoder_attention_mask"].dtype, copy=False)
            )
        if g.takes_hidden:
            fast.bind_value("encoder_hidden_states", self.hidden)
        if g.takes_decoder_mask:
            bind("decoder_attention_mask", np.ones((self.batch, self.length + ids.shape[1]), dtype=np.int64))
        if g.has_cache_branch:
            bind("use_cache_branch", np.array([not first_run], dtype=np.bool_))
        self_values = dict(zip((e.input for e in self.rt.layout.self_entries), self._self or ()))
        for entry in g.layout.entries:
            source = self_values if entry.kind != "cross" else self.cross
            value = source.get(entry.input)
            if value is None:
                bind(entry.input, g.layout.empty(entry, self.batch))  # unused by the no-cache branch
            else:
                fast.bind_value(entry.input, value)
        out_names = ["logits"]
        if g.layout.entries:
            out_names += [e.output for e in g.layout.self_entries]
            if first_run and not self._cross_from_encoder:
                out_names += [e.output for e in g.cross_outputs]
        else:
            out_names += g.emitted
        for name in out_names:
            binding.bind_output(name, "cpu")
        fast.run(what=g.name)
        produced = dict(zip(out_names, fast.outputs()))
        self._self = [produced[entry.output] for entry in self.rt.layout.self_entries]
        if first_run and not self._cross_from_encoder:
            for entry in self.rt.layout.cross_entries:
                out = entry.output or entry.input.replace("past_key_values", "present")
                self.cross[entry.input] = produced[out]
            self.cross_computations += 1
        self.length += ids.shape[1]
        logits = produced["logits"].numpy()
        return (logits[:, -1, :] if logits.ndim == 3 else logits).astype(np.float32, copy=False)
