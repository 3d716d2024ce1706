"""The sessions of a pipeline around its decoder: init sessions, step feeders and final sessions.

A decoder-only pipeline may hold more than the decoder (version 2 of the description):

* ``init`` sessions wired by ``dataflow`` (a vision encoder) run once, on the first prefill of
  a state, from the inputs the caller gave (``"vision.pixel_values"``) and the outputs of the
  init sessions before them;
* ``step`` sessions that feed the decoder (an embedding session: ``input_ids`` ->
  ``inputs_embeds``) run before every decoder run, on that run's tokens; on the first prefill
  they also read the init sessions' outputs, on later runs those inputs are empty (first axis 0:
  no image in one new token);
* ``final`` sessions run once after the generation loop, on ``generation.ids`` /
  ``generation.sequence`` and the init sessions' outputs.

Values travel as numpy arrays keyed ``"session.tensor"``; a wire ``a.x -> b.y`` reads key
``"a.x"`` when ``b`` runs.  The decoder itself (its KV cache, mask and positions) stays in
``decoder.py``: :class:`FlowRunner` only hands it the inputs wired into it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnxruntime as ort

from inference4py.engine.pipeline import PipelineSpec
from inference4py.engine.pipeline.spec import GENERATION_SOURCE, FlowStep, Wire
from inference4py.engine.sessions import SessionOptions, TensorInfo, create_session, graph_inputs, run_session
from inference4py.errors import InvalidInputError

__all__ = ["FlowRunner", "open_session"]


def open_session(spec: PipelineSpec, role: str, options: SessionOptions | None = None) -> ort.InferenceSession:
    """Create the session of ``role`` (or name) with the description's provider and session options.

    The caller's explicit providers / threads (``options``) win over the description's; a
    provider this onnxruntime lacks falls back to the CPU (the load warned about it).
    """
    session = spec.session(role)
    return create_session(
        spec.path(role),
        options,
        provider=session.provider,
        provider_options=session.provider_options,
        settings=session.options,
    )


class FlowRunner:
    """Runs a decoder pipeline's init, step-feeder and final sessions (see the module docstring).

    Args:
        spec: the resolved pipeline.
        decoders: the names of the decoder sessions (``spec.roles``' decoder and decoder_with_past).
        options: the caller's session options.
        decoder_inputs: the decoder graph's inputs (to shape an empty tensor wired into it).

    Attributes:
        init: the wired init sessions, in flow order.
        feeders: the step sessions feeding the decoder, in flow order.
        final: the final sessions, in flow order.
        caller_inputs: ``"session.input"`` names the caller may give to :meth:`run_init`
            (the init sessions' inputs no wire feeds), e.g. ``("vision.pixel_values",)``.
        prompt_outputs: ``"session.output"`` names of the step feeders' outputs the caller may
            give instead for the first prefill, e.g. ``("embedding.inputs_embeds",)``: a task that
            merges image features into the prompt's embeddings itself hands them over this way.
    """

    def __init__(
        self,
        spec: PipelineSpec,
        decoders: Sequence[str],
        options: SessionOptions | None = None,
        *,
        decoder_inputs: Mapping[str, TensorInfo] | None = None,
    ) -> None:
        self.spec = spec
        encoder = spec.roles.get("encoder")
        feeders = set(spec.step_feeders)
        self.init: tuple[FlowStep, ...] = tuple(s for s in spec.steps if s.when == "init" and s.run != encoder)
        self.feeders: tuple[str, ...] = tuple(s.run for s in spec.steps if s.run in feeders)
        self.final: tuple[str, ...] = tuple(s.run for s in spec.steps if s.when == "final")
        self._decoders = tuple(decoders)
        self._sessions: dict[str, ort.InferenceSession] = {}
        self._inputs: dict[str, dict[str, TensorInfo]] = {}
        for name in [s.run for s in self.init] + list(self.feeders) + list(self.final):
            session = open_session(spec, name, options)
            self._sessions[name] = session
            self._inputs[name] = graph_inputs(session)
        for name in self._decoders:
            self._inputs.setdefault(name, dict(decoder_inputs or {}))
        self._wires: dict[str, tuple[Wire, ...]] = {}
        for w in spec.dataflow:
            self._wires[w.target] = self._wires.get(w.target, ()) + (w,)
        wired = {(w.target, w.input) for w in spec.dataflow}
        self.caller_inputs: tuple[str, ...] = tuple(
            f"{s.run}.{name}" for s in self.init for name in self._inputs[s.run] if (s.run, name) not in wired
        )
        self._outputs: dict[str, list[str]] = {
            name: [o.name for o in session.get_outputs()] for name, session in self._sessions.items()
        }
        self.prompt_outputs: tuple[str, ...] = tuple(f"{n}.{o}" for n in self.feeders for o in self._outputs[n])

    @property
    def feeds_decoder(self) -> bool:
        """Whether any wire ends at a decoder (then the decoder's wired inputs come from :meth:`decoder_inputs`)."""
        return any(w.target in self._decoders for w in self.spec.dataflow)

    @property
    def has_final(self) -> bool:
        """Whether the pipeline has ``final`` sessions (:meth:`run_final`)."""
        return bool(self.final)

    # ------------------------------------------------------------------ phases
    def run_init(self, given: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Run the wired init sessions; returns every output as ``{"session.output": array}``.

        Args:
            given: arrays keyed ``"session.input"`` for the init sessions' open inputs
                (:attr:`caller_inputs`).  A ``per_image`` session takes a list (one array per
                image) or an array whose first axis is the images.  An init session none of whose
                open inputs were given (a text-only prompt) is skipped: what it feeds receives an
                empty tensor.

        Raises:
            InvalidInputError: an unknown key, or a session given only part of its inputs.
        """
        unknown = [k for k in given if k not in self.caller_inputs and k not in self.prompt_outputs]
        if unknown:
            raise InvalidInputError(
                f"Unknown pipeline input(s) {', '.join(unknown)}. This pipeline takes: "
                f"{', '.join(self.caller_inputs + self.prompt_outputs) or 'none'}."
            )
        # given step-feeder outputs replace what the feeder computes at the first prefill
        values: dict[str, np.ndarray] = {k: np.asarray(v) for k, v in given.items() if k in self.prompt_outputs}
        for step in self.init:
            name = step.run
            own = [k for k in self.caller_inputs if k.startswith(name + ".")]
            if own and not any(k in given for k in own):
                continue  # nothing for it (no image): consumers get empty tensors
            missing = [k for k in own if k not in given]
            if missing:
                raise InvalidInputError(
                    f'Session "{name}" needs {", ".join(missing)} as well ({", ".join(own)} go together).'
                )
            feeds = self._feeds(name, values, given, prompt=True)
            values.update(self._per_image(name, feeds) if step.loop == "per_image" else self._run(name, feeds))
        return values

    def decoder_inputs(self, ids: np.ndarray, values: Mapping[str, np.ndarray], *, prompt: bool) -> dict[str, Any]:
        """Run the step feeders on ``ids`` (``[batch, n]``) and return the decoder's wired inputs by name.

        ``values`` are :meth:`run_init`'s outputs; with ``prompt`` False (a run after the first
        prefill) the init sessions' outputs are fed as empty tensors.
        """
        local: dict[str, np.ndarray] = dict(values) if prompt else {}
        for name in self.feeders:
            if prompt and all(f"{name}.{o}" in values for o in self._outputs[name]):
                continue  # the caller gave this prompt's outputs (set_inputs)
            local.update(self._run(name, self._feeds(name, local, {}, prompt=prompt, ids=ids)))
        decoder = self._decoders[0]
        out: dict[str, Any] = {}
        for w in self._wires.get(decoder, ()):
            out[w.input] = local[w.origin] if w.origin in local else self._empty(w)
        return out

    def run_final(
        self, prompt_ids: Sequence[int], generated_ids: Sequence[int], values: Mapping[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        """Run the final sessions after generation; returns their outputs as ``{"session.output": array}``.

        ``generation.ids`` is ``generated_ids`` as ``[1, generated]``, ``generation.sequence`` the
        prompt and the generated ids as ``[1, prompt + generated]``; ``values`` are the init outputs.
        """
        generated = np.asarray(list(generated_ids), dtype=np.int64).reshape(1, -1)
        sequence = np.asarray(list(prompt_ids) + list(generated_ids), dtype=np.int64).reshape(1, -1)
        local: dict[str, np.ndarray] = {
            **values,
            f"{GENERATION_SOURCE}.ids": generated,
            f"{GENERATION_SOURCE}.sequence": sequence,
        }
        results: dict[str, np.ndarray] = {}
        for name in self.final:
            outputs = self._run(name, self._feeds(name, local, {}, prompt=True))
            local.update(outputs)
            results.update(outputs)
        return results

    # ------------------------------------------------------------------ internals
    def _feeds(
        self,
        name: str,
        values: Mapping[str, np.ndarray],
        given: Mapping[str, Any],
        *,
        prompt: bool,
        ids: np.ndarray | None = None,
    ) -> dict[str, Any]:
        inputs = self._inputs[name]
        feeds: dict[str, Any] = {}
        for w in self._wires.get(name, ()):
            feeds[w.input] = values[w.origin] if w.origin in values else self._empty(w)
        for key, value in given.items():
            session, tensor = key.split(".", 1)
            if session == name:
                feeds[tensor] = value
        if ids is not None and "input_ids" in inputs and "input_ids" not in feeds:
            feeds["input_ids"] = ids
        for input_name, info in inputs.items():
            if input_name in feeds and not isinstance(feeds[input_name], list):
                feeds[input_name] = np.asarray(feeds[input_name], dtype=info.dtype)
        return feeds

    def _empty(self, wire: Wire) -> np.ndarray:
        """A tensor with no rows for a wire whose source did not run (no image; a run after the prompt)."""
        info = self._inputs.get(wire.target, {}).get(wire.input)
        if info is None:  # a graph whose inputs are not known here: a float tensor with no rows
            return np.zeros((0,), dtype=np.float32)
        shape = [0] + [d if isinstance(d, int) and d > 0 else 0 for d in info.shape[1:]]
        return np.zeros(shape, dtype=info.dtype)

    def _run(self, name: str, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        session = self._sessions[name]
        names = self._outputs[name]
        arrays = run_session(session, feeds, names, what=f'pipeline session "{name}"')
        return {f"{name}.{out}": np.asarray(arr) for out, arr in zip(names, arrays)}

    def _per_image(self, name: str, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """One run per image: list inputs are zipped, arrays sliced on their first axis (kept as size 1)."""
        counts = {len(v) if isinstance(v, list) else np.asarray(v).shape[0] for v in feeds.values()}
        if len(counts) != 1:
            raise InvalidInputError(
                f'Session "{name}" runs once per image, but its inputs hold different numbers of images '
                f"({sorted(counts)}): give one entry per image in each."
            )
        count = counts.pop()
        runs = []
        for i in range(count):
            one = {k: (np.asarray(v[i]) if isinstance(v, list) else np.asarray(v)[i : i + 1]) for k, v in feeds.items()}
            one = {k: v.astype(self._inputs[name][k].dtype, copy=False) for k, v in one.items()}
            runs.append(self._run(name, one))
        if not runs:
            return {}
        return {key: np.concatenate([r[key] for r in runs], axis=0) for key in runs[0]}
