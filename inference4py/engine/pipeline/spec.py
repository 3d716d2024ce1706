"""The resolved pipeline: frozen dataclasses, the description format's constants and the built-in presets.

A :class:`PipelineSpec` is what every source of a description (``inference4py.json``,
``genai_config.json``, detection) resolves to; :meth:`PipelineSpec.describe`
turns it back into a description, which loads to the same spec.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # kv_cache imports onnxruntime; this module stays light until a folder is resolved
    from inference4py.engine.kv_cache import CacheNames

FORMAT_VERSION = 2
SUPPORTED_VERSIONS = (1, 2)
DESCRIPTION_FILE = "inference4py.json"
GENAI_CONFIG = "genai_config.json"

PHASES = ("init", "step", "final")
STEP_MODES = ("all", "first", "later")
KV_FORMATS = ("auto", "separate", "combined")
POSITION_STRATEGIES = ("auto", "default", "none")
MAX_FLOW_STEPS = 10
#: ``loop`` of an init session: run once on every input (``batched``) or once per image (``per_image``).
LOOP_MODES = ("batched", "per_image")
#: The pseudo-session a final session's wires read the finished generation from:
#: ``generation.ids`` (the generated ids, ``[1, generated]``) and ``generation.sequence``
#: (prompt + generated ids, ``[1, prompt + generated]``), both int64.
GENERATION_SOURCE = "generation"
GENERATION_OUTPUTS = ("ids", "sequence")

#: Built-in presets: expanded at load time; the description's own fields override them.
#: ``sessions`` and ``flow`` are replaced as a whole, ``state`` is merged key by key.
PRESETS: Mapping[str, Mapping[str, Any]] = {
    "autoregressive-decoder": {
        "sessions": {"decoder": {"file": "model.onnx"}},
        "flow": [{"run": "decoder", "when": "step"}],
        "state": {"kv_cache": {"format": "auto"}, "position_ids": {"strategy": "auto"}},
    },
    "encoder-decoder": {
        "sessions": {"encoder": {"file": "encoder_model.onnx"}, "decoder": {"file": "decoder_model_merged.onnx"}},
        "flow": [{"run": "encoder", "when": "init"}, {"run": "decoder", "when": "step"}],
        "state": {
            "kv_cache": {"format": "auto"},
            "cross_cache": {"frozen": True},
            "position_ids": {"strategy": "auto"},
        },
    },
    # One session run once on the input, no generation loop: a sentence encoder (OnnxEmbedder).
    "single-pass": {
        "sessions": {"encoder": {"file": "model.onnx"}},
        "flow": [{"run": "encoder", "when": "init"}],
    },
    "speech-seq2seq": {
        "sessions": {"encoder": {"file": "encoder_model.onnx"}, "decoder": {"file": "decoder_model_merged.onnx"}},
        "flow": [{"run": "encoder", "when": "init"}, {"run": "decoder", "when": "step"}],
        "state": {
            "kv_cache": {"format": "auto"},
            "cross_cache": {"frozen": True},
            "position_ids": {"strategy": "auto"},
        },
    },
}

#: Generation defaults a description may set (transformers' names; values are checked by GenerationConfig).
GENERATION_KEYS: Mapping[str, tuple[type, ...]] = {
    "max_length": (int,),
    "min_length": (int,),
    "max_new_tokens": (int,),
    "min_new_tokens": (int,),
    "do_sample": (bool,),
    "temperature": (int, float),
    "top_k": (int,),
    "top_p": (int, float),
    "min_p": (int, float),
    "repetition_penalty": (int, float),
    "no_repeat_ngram_size": (int,),
    "num_beams": (int,),
    "num_return_sequences": (int,),
    "length_penalty": (int, float),
    "early_stopping": (bool,),
}

#: onnxruntime session options a description may set per session.
SESSION_OPTION_KEYS: Mapping[str, tuple[type, ...]] = {
    "intra_op_num_threads": (int,),
    "inter_op_num_threads": (int,),
    "graph_optimization_level": (str,),
    "enable_cpu_mem_arena": (bool,),
    "enable_mem_pattern": (bool,),
}
GRAPH_OPTIMIZATION_LEVELS = ("disable", "basic", "extended", "all")

_TOKEN_KEYS = {
    "bos": "bos_token_id",
    "eos": "eos_token_id",
    "pad": "pad_token_id",
    "decoder_start": "decoder_start_token_id",
}


# --------------------------------------------------------------------------- the resolved spec


@dataclass(frozen=True)
class SessionSpec:
    """One ONNX graph of a pipeline, relative to the model folder.

    ``provider`` is an onnxruntime execution provider preferred for this
    session (falls back to CPU when this build lacks it); ``options`` are
    onnxruntime session options (:data:`SESSION_OPTION_KEYS`).
    """

    file: str
    provider: str | None = None
    provider_options: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"file": self.file}
        if self.provider:
            out["execution_provider"] = self.provider
        if self.provider_options:
            out["provider_options"] = dict(self.provider_options)
        if self.options:
            out["session_options"] = dict(self.options)
        return out


@dataclass(frozen=True)
class FlowStep:
    """``run`` session ``name`` at phase ``when``; ``steps`` picks which generation steps
    (``first``: the prompt only, ``later``: every step after it, ``all``); ``loop`` says how an
    init session takes several images (``batched``: one run, ``per_image``: one run per image,
    the outputs concatenated on their first axis)."""

    run: str
    when: str
    steps: str = "all"
    loop: str = "batched"

    def to_json(self) -> dict[str, str]:
        out = {"run": self.run, "when": self.when}
        if self.steps != "all":
            out["steps"] = self.steps
        if self.loop != "batched":
            out["loop"] = self.loop
        return out


@dataclass(frozen=True)
class Wire:
    """One dataflow wire: output ``output`` of session ``source`` feeds input ``input`` of ``target``.

    ``source`` may be :data:`GENERATION_SOURCE` (``generation.ids`` / ``generation.sequence``)
    for a final session.
    """

    source: str
    output: str
    target: str
    input: str

    @property
    def origin(self) -> str:
        """``"session.output"``, as the description writes it."""
        return f"{self.source}.{self.output}"

    def to_json(self) -> dict[str, str]:
        return {"from": self.origin, "to": f"{self.target}.{self.input}"}


@dataclass(frozen=True)
class KVCacheSpec:
    """Self-attention cache: ``names`` holds the past/present templates once resolved.

    ``format`` is ``auto`` only when the graphs could not be read before the
    sessions exist; the runtime then detects the names itself.
    """

    format: str = "auto"
    names: CacheNames | None = None
    num_kv_heads: int | None = None
    head_size: int | None = None
    share_buffer: bool = False
    sliding_window: int | None = None  # tokens a local layer attends to; a shared buffer holds at least this many

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = self.names.to_json() if self.names is not None else {"format": self.format}
        if self.num_kv_heads:
            out["num_kv_heads"] = self.num_kv_heads
        if self.head_size:
            out["head_size"] = self.head_size
        if self.share_buffer:
            out["share_buffer"] = True
        if self.sliding_window:
            out["sliding_window"] = self.sliding_window
        return out


@dataclass(frozen=True)
class CrossCacheSpec:
    """Cross-attention cache of an encoder-decoder: computed from ``source``'s output, then frozen."""

    source: str
    frozen: bool = True
    names: CacheNames | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"source": self.source, "frozen": self.frozen}
        if self.names is not None:
            out.update({k: v for k, v in self.names.to_json().items() if k != "format"})
        return out


@dataclass(frozen=True)
class PositionIdsSpec:
    """``auto``: feed 1-D positions when the graph has the input; ``default``: the graph must have it;
    ``none``: the graph computes positions itself (it must not have the input)."""

    strategy: str = "auto"
    input_name: str = "position_ids"

    def to_json(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "input_name": self.input_name}


@dataclass(frozen=True)
class StateSpec:
    kv_cache: KVCacheSpec = field(default_factory=KVCacheSpec)
    cross_cache: CrossCacheSpec | None = None
    position_ids: PositionIdsSpec = field(default_factory=PositionIdsSpec)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kv_cache": self.kv_cache.to_json()}
        if self.cross_cache is not None:
            out["cross_cache"] = self.cross_cache.to_json()
        out["position_ids"] = self.position_ids.to_json()
        return out


@dataclass(frozen=True)
class TokenSpec:
    """Special token ids: the description's, over generation_config.json's (None / empty: unknown)."""

    bos: int | None = None
    eos: tuple[int, ...] = ()
    pad: int | None = None
    decoder_start: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in _TOKEN_KEYS:
            value = getattr(self, key)
            if value is not None and value != ():
                out[key] = list(value) if key == "eos" else value
        return out


@dataclass(frozen=True)
class PipelineSpec:
    """A resolved pipeline description.

    ``sessions`` maps the description's session names to their graphs; the
    runtimes address sessions by role, derived from ``steps`` (the flow):
    ``encoder`` (the ``init`` session), ``decoder`` (the ``step`` session that
    reads the prompt) and ``decoder_with_past`` (a ``step`` session for the
    steps after the first, inference4j's three-file layout).  :meth:`has`,
    :meth:`path` and :meth:`session` accept a role or a session name.
    """

    preset: str
    folder: Path
    sessions: Mapping[str, SessionSpec]
    steps: tuple[FlowStep, ...]
    source: str = "detected"
    metadata: Mapping[str, Any] = field(default_factory=dict)
    state: StateSpec = field(default_factory=StateSpec)
    tokens: TokenSpec = field(default_factory=TokenSpec)
    generation: Mapping[str, Any] = field(default_factory=dict)
    context_length: int | None = None
    dataflow: tuple[Wire, ...] = ()

    # ------------------------------------------------------------------ roles
    @property
    def flow(self) -> dict[str, tuple[str, ...]]:
        """Phase -> session names, in flow order (e.g. ``{"init": ("encoder",), "step": ("decoder",)}``)."""
        out: dict[str, tuple[str, ...]] = {}
        for step in self.steps:
            out[step.when] = out.get(step.when, ()) + (step.run,)
        return out

    @property
    def step_feeders(self) -> tuple[str, ...]:
        """``step`` sessions whose outputs feed another ``step`` session through the dataflow
        (an embedding session in front of an ``inputs_embeds`` decoder), in flow order."""
        return feeding_sessions(self.steps, self.dataflow)

    @property
    def roles(self) -> dict[str, str]:
        """Role -> session name: ``encoder``, ``decoder`` and ``decoder_with_past`` when present.

        The encoder is an ``init`` session no dataflow wire reads from (an encoder-decoder's
        encoder feeds its decoder implicitly); an ``init`` session with wires (a vision encoder)
        has no role.  The decoders are the ``step`` sessions that feed no other step session.
        """
        out: dict[str, str] = {}
        sources = {w.source for w in self.dataflow}
        feeders = set(self.step_feeders)
        for step in self.steps:
            if step.when == "init" and step.run not in sources:
                out.setdefault("encoder", step.run)
            elif step.when == "step" and step.run not in feeders:
                out.setdefault("decoder_with_past" if step.steps == "later" else "decoder", step.run)
        return out

    def _name(self, role: str) -> str | None:
        name = self.roles.get(role)
        if name is not None:
            return name
        return role if role in self.sessions else None

    def has(self, role: str) -> bool:
        """Whether the pipeline has a session with this role (or name)."""
        return self._name(role) is not None

    def session(self, role: str) -> SessionSpec:
        """The session with this role (or name)."""
        name = self._name(role)
        if name is None:
            raise KeyError(f"{self.folder} has no {role!r} session (sessions: {', '.join(self.sessions)})")
        return self.sessions[name]

    def path(self, role: str) -> Path:
        """Absolute path of the ONNX file of the session with this role (or name)."""
        return self.folder / self.session(role).file

    # ------------------------------------------------------------------ generation defaults
    def generation_defaults(self) -> dict[str, Any]:
        """Tokens and generation defaults of the resolved spec, under transformers' names.

        They are the folder's ``generation_config.json`` values with the
        description's on top; tasks layer them over that file (see
        ``tasks.base.resolve_generation_defaults``), so what the description says wins.
        """
        out: dict[str, Any] = dict(self.generation)
        for key, hf_name in _TOKEN_KEYS.items():
            value = getattr(self.tokens, key)
            if key == "eos":
                if value:
                    out[hf_name] = list(value)
            elif value is not None:
                out[hf_name] = value
        return out

    # ------------------------------------------------------------------ output
    def describe(self) -> dict[str, Any]:
        """The spec as a description (what ``inference4py inspect`` prints); it loads back to this spec."""
        pipeline: dict[str, Any] = {
            "extends": self.preset,
            "sessions": {name: s.to_json() for name, s in self.sessions.items()},
            "flow": [s.to_json() for s in self.steps],
        }
        if self.dataflow:
            pipeline["dataflow"] = [w.to_json() for w in self.dataflow]
        if self.context_length:
            pipeline["context_length"] = self.context_length
        if self.has("decoder"):  # a single-pass pipeline carries no state
            pipeline["state"] = self.state.to_json()
        # Version 1 while nothing of version 2 is used: older readers keep reading what they can run.
        out: dict[str, Any] = {"version": FORMAT_VERSION if self.uses_version_2 else 1, "pipeline": pipeline}
        tokens = self.tokens.to_json()
        if tokens:
            out["tokens"] = tokens
        if self.generation:
            out["generation"] = dict(self.generation)
        out["metadata"] = {**dict(self.metadata), "resolved_from": self.source}
        return out

    @property
    def uses_version_2(self) -> bool:
        """Whether the spec needs version 2 of the format (dataflow, ``loop`` or ``final`` sessions)."""
        return bool(self.dataflow) or any(s.loop != "batched" or s.when == "final" for s in self.steps)

    def normalized(self) -> PipelineSpec:
        """This spec with sessions named by role and no metadata: two specs that run
        the same way compare equal after this."""
        rename = {name: role for role, name in self.roles.items()}
        sessions = {rename.get(n, n): s for n, s in self.sessions.items()}
        steps = tuple(replace(s, run=rename.get(s.run, s.run)) for s in self.steps)
        state = self.state
        if state.cross_cache is not None:
            state = replace(
                state,
                cross_cache=replace(
                    state.cross_cache, source=rename.get(state.cross_cache.source, state.cross_cache.source)
                ),
            )
        dataflow = tuple(
            replace(w, source=rename.get(w.source, w.source), target=rename.get(w.target, w.target))
            for w in self.dataflow
        )
        return replace(self, sessions=sessions, steps=steps, state=state, dataflow=dataflow, source="", metadata={})


def feeding_sessions(steps: tuple[FlowStep, ...], dataflow: tuple[Wire, ...]) -> tuple[str, ...]:
    """The ``step`` sessions with a wire into another ``step`` session, in flow order."""
    phase = {s.run: s.when for s in steps}
    feeding = {w.source for w in dataflow if phase.get(w.source) == "step" and phase.get(w.target) == "step"}
    return tuple(s.run for s in steps if s.when == "step" and s.run in feeding)


def schema_path() -> Path:
    """The published JSON Schema of the description format (shipped with the package)."""
    return Path(__file__).parent.with_name("pipeline_schema.json")  # engine/pipeline_schema.json


def _valid_generation_value(key: str, value: Any) -> bool:
    types = GENERATION_KEYS[key]
    return isinstance(value, types) and (bool in types or not isinstance(value, bool))


def single_pass_refusal(spec: PipelineSpec) -> str:
    """What a generation runtime says about a single-pass pipeline (no decoder to loop over)."""
    file = spec.session("encoder").file if spec.has("encoder") else "its graph"
    return (
        f"{spec.folder} holds a single-pass model ({file}: run once on the input, no generation loop), such as a "
        "sentence encoder; a text generator cannot run it. Load it with OnnxEmbedder.builder().model_path(...)."
    )
