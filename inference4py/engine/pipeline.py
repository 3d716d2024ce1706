"""PipelineSpec: what sessions a model folder has, when they run, what state they carry.

The runtime knows HOW to run a pipeline, never WHAT model it runs.  A pipeline
description (JSON, ``version`` 1, schema in ``pipeline_schema.json`` beside this
file) names ONNX sessions, a flow (``init`` runs once before the loop, ``step``
every token, ``final`` after it), the state carried between steps (KV cache
layout, cross-attention cache, position ids), special tokens and generation
defaults.  ``metadata`` is for humans: ``model_type`` never selects code.

Where a folder's description comes from, in order (:func:`load_pipeline`):

1. ``inference4py.json`` in the folder, written by hand or saved from
   ``inference4py inspect``;
2. onnxruntime-genai's ``genai_config.json``, translated (:func:`translate_genai_config`);
3. detection (:func:`detect_pipeline`): the file names exporters use, else the
   inputs/outputs of every ``*.onnx`` file ("detect, don't declare").

All three produce a description that goes through the same path: the preset
named by ``pipeline.extends`` is expanded, the user's fields override it, then
everything is validated against the folder and the graphs' input/output names
(read without loading weights, see ``_graph_io``).  The result is a fully
resolved :class:`PipelineSpec`; :meth:`PipelineSpec.describe` turns it back into
a description, which loads to the same spec.
"""

from __future__ import annotations

import copy
import json
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inference4py.errors import ModelFilesMissingError, ModelLoadError, ModelNotFoundError, PipelineSpecError

if TYPE_CHECKING:  # kv_cache imports onnxruntime; this module stays light until a folder is resolved
    from inference4py.engine.kv_cache import CacheNames

__all__ = [
    "SessionSpec",
    "FlowStep",
    "KVCacheSpec",
    "CrossCacheSpec",
    "PositionIdsSpec",
    "StateSpec",
    "TokenSpec",
    "PipelineSpec",
    "load_pipeline",
    "detect_pipeline",
    "resolve_description",
    "translate_genai_config",
    "read_model_config",
    "schema_path",
    "PRESETS",
    "FORMAT_VERSION",
    "DESCRIPTION_FILE",
]

FORMAT_VERSION = 1
SUPPORTED_VERSIONS = (1,)
DESCRIPTION_FILE = "inference4py.json"
GENAI_CONFIG = "genai_config.json"

PHASES = ("init", "step", "final")
STEP_MODES = ("all", "first", "later")
KV_FORMATS = ("auto", "separate", "combined")
POSITION_STRATEGIES = ("auto", "default", "none")
MAX_FLOW_STEPS = 10

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
    (``first``: the prompt only, ``later``: every step after it, ``all``)."""

    run: str
    when: str
    steps: str = "all"

    def to_json(self) -> dict[str, str]:
        out = {"run": self.run, "when": self.when}
        if self.steps != "all":
            out["steps"] = self.steps
        return out


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

    # ------------------------------------------------------------------ roles
    @property
    def flow(self) -> dict[str, tuple[str, ...]]:
        """Phase -> session names, in flow order (e.g. ``{"init": ("encoder",), "step": ("decoder",)}``)."""
        out: dict[str, tuple[str, ...]] = {}
        for step in self.steps:
            out[step.when] = out.get(step.when, ()) + (step.run,)
        return out

    @property
    def roles(self) -> dict[str, str]:
        """Role -> session name: ``encoder``, ``decoder`` and ``decoder_with_past`` when present."""
        out: dict[str, str] = {}
        for step in self.steps:
            if step.when == "init":
                out.setdefault("encoder", step.run)
            elif step.when == "step":
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
        if self.context_length:
            pipeline["context_length"] = self.context_length
        pipeline["state"] = self.state.to_json()
        out: dict[str, Any] = {"version": FORMAT_VERSION, "pipeline": pipeline}
        tokens = self.tokens.to_json()
        if tokens:
            out["tokens"] = tokens
        if self.generation:
            out["generation"] = dict(self.generation)
        out["metadata"] = {**dict(self.metadata), "resolved_from": self.source}
        return out

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
        return replace(self, sessions=sessions, steps=steps, state=state, source="", metadata={})


def schema_path() -> Path:
    """The published JSON Schema of the description format (shipped with the package)."""
    return Path(__file__).with_name("pipeline_schema.json")


# --------------------------------------------------------------------------- files


def read_model_config(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """config.json of a folder (empty dict when absent)."""
    path = Path(folder) / "config.json"
    if not path.is_file():
        return {}
    return _read_json_object(path, ModelLoadError, "Re-download the model or fix the file.")


def _read_json_object(path: Path, error: type[Exception], fix: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except json.JSONDecodeError as exc:
        raise error(f"{path} is not valid JSON ({exc}). {fix}") from exc
    except OSError as exc:
        raise error(f"{path} cannot be read ({exc}). {fix}") from exc
    if not isinstance(data, dict):
        raise error(f"{path} must contain a JSON object. {fix}")
    return data


def load_pipeline(folder: str | os.PathLike[str]) -> PipelineSpec:
    """Resolve a folder's pipeline: ``inference4py.json``, else ``genai_config.json``, else detection.

    Raises:
        ModelNotFoundError: the folder does not exist.
        ModelFilesMissingError: a file the pipeline needs is missing (or no known layout is present).
        PipelineSpecError: the description is invalid (the message says how to fix it).
    """
    root = _existing_folder(folder)
    own = root / DESCRIPTION_FILE
    if own.is_file():
        raw = _read_json_object(own, PipelineSpecError, f"Fix {DESCRIPTION_FILE} or delete it to use detection.")
        return resolve_description(raw, root, source=DESCRIPTION_FILE)
    genai = root / GENAI_CONFIG
    if genai.is_file():
        raw = translate_genai_config(_read_json_object(genai, ModelLoadError, "Re-download the model."))
        return resolve_description(raw, root, source=GENAI_CONFIG)
    return detect_pipeline(root)


def detect_pipeline(folder: str | os.PathLike[str]) -> PipelineSpec:
    """Work out a folder's pipeline from its files and their graphs, ignoring any description file.

    Rules, first match wins (files are looked for at the top level, then in ``onnx/``):

    1. ``encoder_model.onnx`` + ``decoder_model_merged.onnx`` (or ``decoder_model.onnx``
       [+ ``decoder_with_past_model.onnx``]): encoder-decoder; ``speech-seq2seq`` when
       the encoder takes ``input_features``.
    2. ``model.onnx``, else ``decoder_model_merged.onnx``, else ``decoder_model.onnx``
       [+ ``decoder_with_past_model.onnx``]: autoregressive decoder.
    3. Any other ``*.onnx``: classified by their inputs/outputs (an encoder has no
       ``logits``; a decoder has ``input_ids`` -> ``logits``, with or without a KV
       cache; it attends to an encoder when it takes ``encoder_hidden_states``,
       ``encoder_attention_mask`` or a cross-attention cache).

    The KV cache names then come from the graph (see ``kv_cache``).

    Raises:
        ModelNotFoundError, ModelFilesMissingError: as :func:`load_pipeline`.
        PipelineSpecError: several graphs could be the decoder (an ``inference4py.json`` must say which).
    """
    root = _existing_folder(folder)
    raw = _detect_description(root)
    return resolve_description(raw, root, source="detected")


def _existing_folder(folder: str | os.PathLike[str]) -> Path:
    root = Path(folder)
    if not root.is_dir():
        raise ModelNotFoundError(
            f"Model folder {root} does not exist. Pass an existing folder to model_path(...), or a Hugging Face "
            "model id to model_id(...)."
        )
    return root


# --------------------------------------------------------------------------- detection

_SUBFOLDERS = ("", "onnx")
_SPEECH_INPUTS = ("input_features", "audio_features")  # optimum / onnxruntime-genai speech encoders


def _find(folder: Path, name: str) -> str | None:
    for sub in _SUBFOLDERS:
        candidate = folder / sub / name if sub else folder / name
        if candidate.is_file():
            return f"{sub}/{name}" if sub else name
    return None


def _detect_description(root: Path) -> dict[str, Any]:
    config = read_model_config(root)
    metadata: dict[str, Any] = {}
    if config.get("model_type"):
        metadata["model_type"] = config["model_type"]
    description: dict[str, Any] = {"version": FORMAT_VERSION, "metadata": metadata}

    encoder = _find(root, "encoder_model.onnx")
    merged = _find(root, "decoder_model_merged.onnx")
    plain = _find(root, "decoder_model.onnx")
    with_past = _find(root, "decoder_with_past_model.onnx")
    single = _find(root, "model.onnx")

    if encoder:
        seq2seq_decoder = merged or plain
        if seq2seq_decoder is None:
            raise _missing(
                root,
                "an encoder-decoder model",
                ["decoder_model_merged.onnx", "or decoder_model.onnx (+ decoder_with_past_model.onnx)"],
            )
        speech = _is_speech(root / encoder, config)
        description["pipeline"] = _pipeline_dict(
            "speech-seq2seq" if speech else "encoder-decoder", encoder, seq2seq_decoder, None if merged else with_past
        )
        return description
    one_graph = single or merged or (plain if not with_past else None)
    if one_graph:
        description["pipeline"] = _pipeline_dict("autoregressive-decoder", None, one_graph, None)
        return description
    if plain and with_past:
        description["pipeline"] = _pipeline_dict("autoregressive-decoder", None, plain, with_past)
        return description
    pipeline = _detect_from_graphs(root, config)
    if pipeline is None:
        raise _missing(
            root,
            "a model",
            [
                "model.onnx (decoder-only)",
                "decoder_model_merged.onnx",
                "encoder_model.onnx + decoder_model_merged.onnx (encoder-decoder)",
            ],
        )
    description["pipeline"] = pipeline
    return description


def _pipeline_dict(preset: str, encoder: str | None, decoder: str, with_past: str | None) -> dict[str, Any]:
    sessions: dict[str, Any] = {}
    flow: list[dict[str, str]] = []
    if encoder:
        sessions["encoder"] = {"file": encoder}
        flow.append({"run": "encoder", "when": "init"})
    sessions["decoder"] = {"file": decoder}
    if with_past:
        sessions["decoder_with_past"] = {"file": with_past}
        flow += [
            {"run": "decoder", "when": "step", "steps": "first"},
            {"run": "decoder_with_past", "when": "step", "steps": "later"},
        ]
    else:
        flow.append({"run": "decoder", "when": "step"})
    return {"extends": preset, "sessions": sessions, "flow": flow}


def _detect_from_graphs(root: Path, config: Mapping[str, Any]) -> dict[str, Any] | None:
    """Classify every ``*.onnx`` of the folder (or of ``onnx/``) by its inputs and outputs."""
    from inference4py.engine._graph_io import read_graph_io
    from inference4py.engine.kv_cache import detect_cache_names

    for sub in _SUBFOLDERS:
        base = root / sub if sub else root
        files = sorted(p for p in base.glob("*.onnx") if p.is_file()) if base.is_dir() else []
        if not files:
            continue
        encoders, cross, plain_past, plain_nopast, merged = [], [], [], [], []
        for path in files:
            rel = f"{sub}/{path.name}" if sub else path.name
            io = read_graph_io(path)
            if io is None:
                continue
            inputs, outputs = io
            self_names, cross_names = detect_cache_names(inputs, outputs)
            has_past = self_names is not None
            if "logits" not in outputs:
                speech = any(name in inputs for name in _SPEECH_INPUTS)
                if ("input_ids" in inputs or speech) and not has_past:
                    encoders.append((rel, speech))
                continue
            if "input_ids" not in inputs:
                continue
            if cross_names is not None or "encoder_hidden_states" in inputs or "encoder_attention_mask" in inputs:
                cross.append((rel, has_past, "use_cache_branch" in inputs))
            elif "use_cache_branch" in inputs:
                merged.append(rel)
            elif has_past:
                plain_past.append(rel)
            else:
                plain_nopast.append(rel)
        if len(encoders) == 1 and cross:
            enc, speech = encoders[0]
            merged_x = [f for f, _, m in cross if m]
            past_x = [f for f, p, m in cross if p and not m]
            nopast_x = [f for f, p, m in cross if not p and not m]
            preset = "speech-seq2seq" if speech else "encoder-decoder"
            if len(merged_x) == 1:
                return _pipeline_dict(preset, enc, merged_x[0], None)
            if len(past_x) == 1 and len(nopast_x) == 1:
                return _pipeline_dict(preset, enc, nopast_x[0], past_x[0])
            _ambiguous(root, [f for f, _, _ in cross])
        if len(plain_past) == 1 and len(plain_nopast) == 1 and not merged:  # prompt graph + with-past graph
            return _pipeline_dict("autoregressive-decoder", None, plain_nopast[0], plain_past[0])
        decoders = merged + plain_past
        if len(decoders) == 1:
            return _pipeline_dict("autoregressive-decoder", None, decoders[0], None)
        if decoders:
            _ambiguous(root, decoders + plain_nopast)
        if len(plain_nopast) == 1:  # runs, but without a cache (the runtime says how to re-export)
            return _pipeline_dict("autoregressive-decoder", None, plain_nopast[0], None)
    return None


def _ambiguous(root: Path, files: list[str]) -> None:
    raise PipelineSpecError(
        f"{root} holds several decoder graphs ({', '.join(files)}) and detection cannot tell which one to run. "
        f"Add an {DESCRIPTION_FILE} that names it, e.g. "
        f'{{"version": 1, "pipeline": {{"extends": "autoregressive-decoder", "sessions": {{"decoder": {{"file": "{files[0]}"}}}}}}}}.'
    )


def _is_speech(encoder: Path, config: Mapping[str, Any]) -> bool:
    # A speech encoder is announced by its input (log-mel features), not by a model name.
    from inference4py.engine._graph_io import read_graph_io

    io = read_graph_io(encoder)
    if io is not None:
        return any(name in io[0] for name in _SPEECH_INPUTS)
    return "num_mel_bins" in config


def _folder_generation_defaults(root: Path, config: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Tokens and generation defaults of generation_config.json (ids fall back to config.json),
    as transformers resolves them: the layer under what a description declares."""
    gen_path = root / "generation_config.json"
    if gen_path.is_file():
        data = _read_json_object(gen_path, ModelLoadError, "Re-download the model or fix the file.")
        generation = {k: v for k, v in data.items() if k in GENERATION_KEYS and _valid_generation_value(k, v)}
        for hf_name in _TOKEN_KEYS.values():
            if data.get(hf_name) is None and config.get(hf_name) is not None:
                data[hf_name] = config[hf_name]
    else:
        data = dict(config)
        generation = {}
    tokens: dict[str, Any] = {}
    for key, hf_name in _TOKEN_KEYS.items():
        value = data.get(hf_name)
        if key == "eos":
            values = value if isinstance(value, list) else [value]
            if values and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
                tokens[key] = values
        elif isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            tokens[key] = value
    return tokens, generation


def _valid_generation_value(key: str, value: Any) -> bool:
    types = GENERATION_KEYS[key]
    return isinstance(value, types) and (bool in types or not isinstance(value, bool))


def _missing(root: Path, what: str, expected: list[str]) -> ModelFilesMissingError:
    present = sorted(p.name for p in root.iterdir())[:30]
    onnx_sub = root / "onnx"
    if onnx_sub.is_dir():
        present += [f"onnx/{p.name}" for p in sorted(onnx_sub.iterdir())[:20]]
    return ModelFilesMissingError(
        f"{root} does not hold {what} in a layout inference4py knows. Expected one of: {'; '.join(expected)} "
        f"(at the top level or in onnx/). Found: {', '.join(present) or 'nothing'}. "
        f"Download the complete model, or add an {DESCRIPTION_FILE} pipeline description.",
        expected,
    )


# --------------------------------------------------------------------------- onnxruntime-genai

_GENAI_PROVIDERS = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "dml": "DmlExecutionProvider",
    "rocm": "ROCMExecutionProvider",
    "openvino": "OpenVINOExecutionProvider",
    "qnn": "QNNExecutionProvider",
    "webgpu": "WebGpuExecutionProvider",
    "coreml": "CoreMLExecutionProvider",
    "nvtensorrtrtx": "NvTensorRTRTXExecutionProvider",
}
_GENAI_SEARCH_KEYS = (
    "max_length",
    "min_length",
    "do_sample",
    "temperature",
    "top_k",
    "top_p",
    "repetition_penalty",
    "no_repeat_ngram_size",
    "num_beams",
    "num_return_sequences",
    "length_penalty",
    "early_stopping",
)


def translate_genai_config(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """A description equivalent to onnxruntime-genai's ``genai_config.json``.

    Decoder-only and encoder-decoder folders translate; multimodal ones
    (vision / speech / embedding sessions) and multi-stage decoder pipelines
    are refused with a pointer to ``inference4py_genai``.

    Raises:
        PipelineSpecError: the config has no usable ``model.decoder`` section, or a
            layout the native loop does not run.
    """
    model = cfg.get("model")
    if not isinstance(model, dict) or not isinstance(model.get("decoder"), dict):
        raise PipelineSpecError(
            f"{GENAI_CONFIG} has no model.decoder section: it is not an onnxruntime-genai model folder. "
            f"Re-download the model, or add an {DESCRIPTION_FILE} pipeline description."
        )
    extra = [k for k in ("vision", "speech", "embedding") if k in model]
    decoder = model["decoder"]
    if extra or "pipeline" in decoder:
        what = f"{', '.join(extra)} sessions" if extra else "a multi-stage decoder pipeline"
        raise PipelineSpecError(
            f"This onnxruntime-genai folder has {what}; inference4py's native loop runs decoder-only and "
            "encoder-decoder models. Use inference4py_genai (pip install inference4py[genai]) for it."
        )
    inputs = decoder.get("inputs") or {}
    outputs = decoder.get("outputs") or {}
    for role, table, default in (
        ("input_ids", inputs, "input_ids"),
        ("attention_mask", inputs, "attention_mask"),
        ("logits", outputs, "logits"),
    ):
        if table.get(role, default) != default:
            raise PipelineSpecError(
                f"{GENAI_CONFIG} renames the decoder's {role!r} to {table[role]!r}; the native loop feeds "
                f"{default!r}. Use inference4py_genai for this model."
            )

    sessions: dict[str, Any] = {"decoder": _genai_session(decoder)}
    flow: list[dict[str, str]] = [{"run": "decoder", "when": "step"}]
    preset = "autoregressive-decoder"
    state: dict[str, Any] = {"kv_cache": _genai_kv(inputs, outputs)}
    encoder = model.get("encoder")
    if isinstance(encoder, dict) and encoder.get("filename"):
        sessions = {"encoder": _genai_session(encoder), **sessions}
        flow.insert(0, {"run": "encoder", "when": "init"})
        enc_inputs = encoder.get("inputs") or {}
        preset = (
            "speech-seq2seq" if "audio_features" in enc_inputs or "input_features" in enc_inputs else "encoder-decoder"
        )
        cross: dict[str, Any] = {"source": "encoder", "frozen": True}
        if inputs.get("cross_past_key_names"):
            enc_outputs = encoder.get("outputs") or {}
            present_key = enc_outputs.get(
                "cross_present_key_names", inputs["cross_past_key_names"].replace("past", "present")
            )
            present_value = enc_outputs.get(
                "cross_present_value_names", inputs.get("cross_past_value_names", "").replace("past", "present")
            )
            cross.update(
                past_key_pattern=_template(inputs["cross_past_key_names"]),
                past_value_pattern=_template(inputs.get("cross_past_value_names", "")),
                present_key_pattern=_template(present_key),
                present_value_pattern=_template(present_value),
            )
        state["cross_cache"] = cross
    if decoder.get("num_key_value_heads"):
        state["kv_cache"]["num_kv_heads"] = decoder["num_key_value_heads"]
    if decoder.get("head_size"):
        state["kv_cache"]["head_size"] = decoder["head_size"]
    search_raw = cfg.get("search")
    search: dict[str, Any] = search_raw if isinstance(search_raw, dict) else {}
    if search.get("past_present_share_buffer"):
        state["kv_cache"]["share_buffer"] = True
    window = decoder.get("sliding_window")
    if isinstance(window, dict) and isinstance(window.get("window_size"), int) and window["window_size"] > 0:
        state["kv_cache"]["sliding_window"] = window["window_size"]
    position = inputs.get("position_ids")
    state["position_ids"] = {"strategy": "default", "input_name": position} if position else {"strategy": "none"}

    pipeline: dict[str, Any] = {"extends": preset, "sessions": sessions, "flow": flow, "state": state}
    if isinstance(model.get("context_length"), int):
        pipeline["context_length"] = model["context_length"]
    tokens: dict[str, Any] = {}
    for key, hf_name in _TOKEN_KEYS.items():
        value = model.get(hf_name)
        if value is None:
            continue
        if key == "eos":
            tokens[key] = value if isinstance(value, list) else [value]
        else:
            tokens[key] = value
    generation = {k: search[k] for k in _GENAI_SEARCH_KEYS if k in search}
    metadata = {"source": "onnxruntime-genai"}
    if model.get("type"):
        metadata["model_type"] = model["type"]
    out = {
        "version": FORMAT_VERSION,
        "pipeline": pipeline,
        "tokens": tokens,
        "generation": generation,
        "metadata": metadata,
    }
    return out


def _template(genai_name: str) -> str:
    return genai_name.replace("%d", "{layer}")


def _genai_kv(inputs: Mapping[str, Any], outputs: Mapping[str, Any]) -> dict[str, Any]:
    if inputs.get("past_key_names") and outputs.get("present_key_names"):
        return {
            "format": "separate",
            "past_key_pattern": _template(inputs["past_key_names"]),
            "past_value_pattern": _template(inputs.get("past_value_names", "")),
            "present_key_pattern": _template(outputs["present_key_names"]),
            "present_value_pattern": _template(outputs.get("present_value_names", "")),
        }
    if inputs.get("past_names") and outputs.get("present_names"):
        return {
            "format": "combined",
            "past_pattern": _template(inputs["past_names"]),
            "present_pattern": _template(outputs["present_names"]),
        }
    return {"format": "auto"}


def _genai_session(section: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"file": section["filename"]}
    options = section.get("session_options") or {}
    for entry in options.get("provider_options") or []:
        if isinstance(entry, dict) and entry:
            name, provider_options = next(iter(entry.items()))
            out["execution_provider"] = _GENAI_PROVIDERS.get(str(name).lower(), f"{name}ExecutionProvider")
            if isinstance(provider_options, dict) and provider_options:
                out["provider_options"] = {str(k): str(v) for k, v in provider_options.items()}
            break
    settings = {
        k: options[k]
        for k in ("intra_op_num_threads", "inter_op_num_threads", "enable_cpu_mem_arena", "enable_mem_pattern")
        if k in options
    }
    if settings:
        out["session_options"] = settings
    return out


# --------------------------------------------------------------------------- resolution


def resolve_description(
    raw: Mapping[str, Any], folder: str | os.PathLike[str], *, source: str = DESCRIPTION_FILE
) -> PipelineSpec:
    """Expand, validate and resolve a description (a parsed ``inference4py.json``) against a folder.

    Raises:
        PipelineSpecError: invalid description (unknown preset, version, session,
            position-ids strategy, KV names; a path leaving the folder; ...).
        ModelFilesMissingError: a session's file does not exist.
    """
    root = _existing_folder(folder)
    where = source if source != "detected" else "the detected pipeline"
    if not isinstance(raw, Mapping):
        raise PipelineSpecError(f"{where}: a pipeline description must be a JSON object.")
    _check_keys(raw, {"$schema", "version", "pipeline", "tokens", "generation", "metadata"}, where, "the top level")
    version = raw.get("version")
    if version is None:
        raise PipelineSpecError(f'{where}: "version" is missing. Add "version": {FORMAT_VERSION} at the top level.')
    if version not in SUPPORTED_VERSIONS or isinstance(version, bool):
        raise PipelineSpecError(
            f"{where} has version {version!r}, but this inference4py reads version(s) "
            f"{', '.join(map(str, SUPPORTED_VERSIONS))}. Upgrade inference4py, or rewrite the description for "
            f'version {FORMAT_VERSION} (run "inference4py inspect FOLDER" on the folder without it to get one).'
        )
    user = raw.get("pipeline")
    if user is None:
        user = {}
    if not isinstance(user, Mapping):
        raise PipelineSpecError(f'{where}: "pipeline" must be an object.')
    _check_keys(user, {"extends", "sessions", "flow", "state", "context_length"}, where, '"pipeline"')
    preset_name = user.get("extends")
    merged: dict[str, Any] = {}
    if preset_name is not None:
        if preset_name not in PRESETS:
            raise PipelineSpecError(
                f'{where}: unknown pipeline preset "{preset_name}" in pipeline.extends. Built-in presets: '
                f"{', '.join(PRESETS)}."
            )
        merged = copy.deepcopy(dict(PRESETS[preset_name]))
    for key, value in user.items():
        if key == "extends":
            continue
        if key == "state" and isinstance(value, Mapping) and isinstance(merged.get("state"), Mapping):
            merged["state"] = _deep_merge(merged["state"], value)
        else:
            merged[key] = copy.deepcopy(value)

    sessions = _parse_sessions(merged.get("sessions"), root, where)
    steps = _parse_flow(merged.get("flow"), sessions, where)
    context_length = merged.get("context_length")
    if context_length is not None and (
        not isinstance(context_length, int) or isinstance(context_length, bool) or context_length <= 0
    ):
        raise PipelineSpecError(f"{where}: pipeline.context_length must be a positive integer, got {context_length!r}.")
    state_raw = merged.get("state") or {}
    if not isinstance(state_raw, Mapping):
        raise PipelineSpecError(f'{where}: "pipeline.state" must be an object.')
    _check_keys(state_raw, {"kv_cache", "cross_cache", "position_ids"}, where, "pipeline.state")
    # Under what the description declares: the folder's generation_config.json (ids falling back to
    # config.json), so the resolved spec shows the tokens and defaults a generation will use.
    file_tokens, file_generation = _folder_generation_defaults(root, read_model_config(root))
    tokens = _parse_tokens({**file_tokens, **_mapping_or_error(raw.get("tokens"), where, "tokens")}, where)
    generation = _parse_generation(
        {**file_generation, **_mapping_or_error(raw.get("generation"), where, "generation")}, where
    )
    metadata = raw.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise PipelineSpecError(f'{where}: "metadata" must be an object.')
    metadata = {k: v for k, v in metadata.items() if k != "resolved_from"}

    spec = PipelineSpec(
        preset=preset_name or "",
        folder=root,
        sessions=sessions,
        steps=steps,
        source=source,
        metadata=metadata,
        tokens=tokens,
        generation=generation,
        context_length=context_length,
    )
    state = _parse_state(state_raw, spec, where)
    spec = replace(spec, state=state)
    return _resolve_from_graphs(spec, explicit_preset=preset_name is not None, where=where)


def _mapping_or_error(value: Any, where: str, key: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PipelineSpecError(f'{where}: "{key}" must be an object.')
    _check_keys(value, set(_TOKEN_KEYS) if key == "tokens" else set(GENERATION_KEYS), where, f'"{key}"')
    return value


def _deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _check_keys(obj: Mapping[str, Any], allowed: set[str], where: str, what: str) -> None:
    unknown = sorted(set(obj) - allowed)
    if unknown:
        raise PipelineSpecError(
            f"{where}: unknown key(s) {', '.join(repr(k) for k in unknown)} in {what}. Allowed: "
            f"{', '.join(sorted(allowed))}."
        )


def _safe_file(root: Path, file: Any, name: str, where: str) -> str:
    if not isinstance(file, str) or not file.strip():
        raise PipelineSpecError(
            f'{where}: session "{name}" needs a "file": the ONNX file, relative to the model folder.'
        )
    posix = file.replace("\\", "/")
    if posix.startswith("/") or Path(file).is_absolute() or (len(posix) > 1 and posix[1] == ":"):
        raise PipelineSpecError(
            f'{where}: session "{name}" has the absolute path "{file}". Session files must be relative to the model '
            "folder: copy the file into the folder and give its relative path."
        )
    if ".." in posix.split("/"):
        raise PipelineSpecError(
            f'{where}: session "{name}" file "{file}" leaves the model folder (".."). Session files must stay inside '
            "the model folder: copy the file into it and give its relative path."
        )
    path = root / posix
    try:
        target = path.resolve()
        inside = any(target.is_relative_to(allowed) for allowed in _allowed_roots(root))
    except OSError:
        inside = False
    if not inside:
        raise PipelineSpecError(
            f'{where}: session "{name}" file "{file}" is a link that points outside the model folder '
            f"({path.resolve()}). Session files must stay inside the model folder: copy the file in instead of linking it."
        )
    if not path.is_file():
        onnx = sorted(str(p.relative_to(root)) for p in root.rglob("*.onnx"))[:10]
        raise ModelFilesMissingError(
            f'{where}: session "{name}" needs {file}, which is not in {root}. ONNX files present: '
            f"{', '.join(onnx) or 'none'}. Fix the file name in the description or download the missing file.",
            [posix],
        )
    return posix


def _allowed_roots(root: Path) -> list[Path]:
    """Where a session file may live: the folder, and for a Hugging Face cache snapshot
    (``models--org--name/snapshots/<rev>``, whose files are links) the repo's ``blobs``."""
    allowed = [root.resolve()]
    if root.parent.name == "snapshots" and (root.parent.parent / "blobs").is_dir():
        allowed.append((root.parent.parent / "blobs").resolve())
    return allowed


def _parse_sessions(value: Any, root: Path, where: str) -> dict[str, SessionSpec]:
    if not isinstance(value, Mapping) or not value:
        raise PipelineSpecError(
            f'{where}: the pipeline needs at least one session. Add "sessions": {{"decoder": {{"file": "model.onnx"}}}} '
            'to "pipeline", or "extends": "autoregressive-decoder".'
        )
    sessions: dict[str, SessionSpec] = {}
    for name, body in value.items():
        if not isinstance(body, Mapping):
            raise PipelineSpecError(f'{where}: session "{name}" must be an object like {{"file": "model.onnx"}}.')
        _check_keys(
            body, {"file", "execution_provider", "provider_options", "session_options"}, where, f'session "{name}"'
        )
        file = _safe_file(root, body.get("file"), name, where)
        provider = body.get("execution_provider")
        if provider is not None and (not isinstance(provider, str) or not provider):
            raise PipelineSpecError(
                f'{where}: session "{name}" execution_provider must be a provider name such as "CUDAExecutionProvider".'
            )
        provider_options = body.get("provider_options") or {}
        if not isinstance(provider_options, Mapping):
            raise PipelineSpecError(f'{where}: session "{name}" provider_options must be an object of strings.')
        options = body.get("session_options") or {}
        if not isinstance(options, Mapping):
            raise PipelineSpecError(f'{where}: session "{name}" session_options must be an object.')
        for key, opt in options.items():
            if key not in SESSION_OPTION_KEYS:
                raise PipelineSpecError(
                    f'{where}: unknown session option "{key}" in session "{name}". Known: {", ".join(SESSION_OPTION_KEYS)}.'
                )
            types = SESSION_OPTION_KEYS[key]
            if not isinstance(opt, types) or (bool not in types and isinstance(opt, bool)):
                raise PipelineSpecError(f'{where}: session option "{key}" of "{name}" has the wrong type ({opt!r}).')
            if key == "graph_optimization_level" and opt not in GRAPH_OPTIMIZATION_LEVELS:
                raise PipelineSpecError(
                    f'{where}: graph_optimization_level "{opt}" is unknown. Valid: {", ".join(GRAPH_OPTIMIZATION_LEVELS)}.'
                )
            if key.endswith("_threads") and isinstance(opt, int) and opt < 0:
                raise PipelineSpecError(f"{where}: {key} must be >= 0 (0 lets onnxruntime choose).")
        sessions[str(name)] = SessionSpec(file, provider, dict(provider_options), dict(options))
    return sessions


def _parse_flow(value: Any, sessions: Mapping[str, SessionSpec], where: str) -> tuple[FlowStep, ...]:
    if not isinstance(value, list) or not value:
        raise PipelineSpecError(
            f'{where}: the pipeline needs a "flow", e.g. [{{"run": "{next(iter(sessions))}", "when": "step"}}] '
            '(or "extends": "autoregressive-decoder").'
        )
    if len(value) > MAX_FLOW_STEPS:
        raise PipelineSpecError(f"{where}: the flow has {len(value)} steps; at most {MAX_FLOW_STEPS} are allowed.")
    steps = []
    for item in value:
        if not isinstance(item, Mapping):
            raise PipelineSpecError(
                f'{where}: flow entries look like {{"run": "decoder", "when": "step"}}, got {item!r}.'
            )
        _check_keys(item, {"run", "when", "steps"}, where, "a flow entry")
        run, when, mode = item.get("run"), item.get("when"), item.get("steps", "all")
        if run not in sessions:
            raise PipelineSpecError(
                f'{where}: flow step references session "{run}" but no such session is declared in pipeline.sessions '
                f"(declared: {', '.join(sessions)}). Declare it, or fix the name in the flow."
            )
        if when not in PHASES:
            raise PipelineSpecError(f'{where}: flow step "{run}" has when={when!r}. Valid phases: {", ".join(PHASES)}.')
        if mode not in STEP_MODES or (mode != "all" and when != "step"):
            raise PipelineSpecError(
                f'{where}: flow step "{run}" has steps={mode!r}; "steps" applies to "step" sessions and is one of '
                f"{', '.join(STEP_MODES)}."
            )
        steps.append(FlowStep(str(run), when, mode))
    unused = [name for name in sessions if name not in {s.run for s in steps}]
    if unused:
        raise PipelineSpecError(
            f"{where}: session(s) {', '.join(unused)} are declared but never run. Add them to the flow "
            f'(e.g. {{"run": "{unused[0]}", "when": "step"}}) or remove them.'
        )
    # What the runtimes run today: at most one init session, one step session reading the prompt,
    # at most one for the later steps, nothing after the loop.
    init = [s for s in steps if s.when == "init"]
    first = [s for s in steps if s.when == "step" and s.steps in ("all", "first")]
    later = [s for s in steps if s.when == "step" and s.steps in ("all", "later")]
    if any(s.when == "final" for s in steps):
        raise PipelineSpecError(
            f'{where}: "final" sessions are not supported by inference4py\'s runtimes yet; remove them from the flow.'
        )
    if len(init) > 1:
        raise PipelineSpecError(
            f"{where}: {len(init)} init sessions ({', '.join(s.run for s in init)}); the "
            "runtimes support one (the encoder)."
        )
    if len(first) != 1 or len(later) != 1:
        raise PipelineSpecError(
            f'{where}: the flow needs exactly one "step" session for the prompt and one for the following tokens: '
            'either one with "steps": "all" (the default), or one with "steps": "first" and one with "steps": "later".'
        )
    return tuple(steps)


def _parse_names(obj: Mapping[str, Any], fmt: str, where: str, what: str) -> CacheNames | None:
    from inference4py.engine.kv_cache import CacheNames

    separate = ("past_key_pattern", "past_value_pattern", "present_key_pattern", "present_value_pattern")
    combined = ("past_pattern", "present_pattern")
    given_sep = [k for k in separate if obj.get(k)]
    given_comb = [k for k in combined if obj.get(k)]
    if fmt == "auto":
        if given_sep or given_comb:
            raise PipelineSpecError(
                f'{where}: {what} gives name patterns with "format": "auto". Set "format": "separate" (key/value '
                'patterns) or "combined" (past_pattern/present_pattern) to use them.'
            )
        return None
    needed = separate if fmt == "separate" else combined
    missing = [k for k in needed if not obj.get(k)]
    if missing:
        raise PipelineSpecError(
            f"{where}: {what} with format {fmt!r} needs {', '.join(needed)}; missing {', '.join(missing)}. "
            'Use "{layer}" where the layer index goes, e.g. "past_key_values.{layer}.key".'
        )
    wrong = given_comb if fmt == "separate" else given_sep
    if wrong:
        raise PipelineSpecError(f"{where}: {what} with format {fmt!r} does not take {', '.join(wrong)}.")
    try:
        if fmt == "separate":
            return CacheNames.separate(*(obj[k] for k in separate))
        return CacheNames.combined(obj["past_pattern"], obj["present_pattern"])
    except PipelineSpecError as exc:
        raise PipelineSpecError(f"{where}: {exc}") from exc


def _positive_int_or_none(value: Any, where: str, what: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise PipelineSpecError(f"{where}: {what} must be a positive integer, got {value!r}.")
    return value


def _parse_state(raw: Mapping[str, Any], spec: PipelineSpec, where: str) -> StateSpec:
    kv_raw = raw.get("kv_cache") or {}
    if not isinstance(kv_raw, Mapping):
        raise PipelineSpecError(f"{where}: state.kv_cache must be an object.")
    _check_keys(
        kv_raw,
        {
            "format",
            "past_key_pattern",
            "past_value_pattern",
            "present_key_pattern",
            "present_value_pattern",
            "past_pattern",
            "present_pattern",
            "num_kv_heads",
            "head_size",
            "share_buffer",
            "sliding_window",
        },
        where,
        "state.kv_cache",
    )
    fmt = kv_raw.get("format", "auto")
    if fmt not in KV_FORMATS:
        raise PipelineSpecError(f'{where}: unknown kv_cache format "{fmt}". Valid formats: {", ".join(KV_FORMATS)}.')
    names = _parse_names(kv_raw, fmt, where, "state.kv_cache")
    share = kv_raw.get("share_buffer", False)
    if not isinstance(share, bool):
        raise PipelineSpecError(f"{where}: state.kv_cache.share_buffer must be true or false.")
    kv = KVCacheSpec(
        fmt,
        names,
        _positive_int_or_none(kv_raw.get("num_kv_heads"), where, "state.kv_cache.num_kv_heads"),
        _positive_int_or_none(kv_raw.get("head_size"), where, "state.kv_cache.head_size"),
        share,
        _positive_int_or_none(kv_raw.get("sliding_window"), where, "state.kv_cache.sliding_window"),
    )

    cross = None
    cross_raw = raw.get("cross_cache")
    init = [s.run for s in spec.steps if s.when == "init"]
    if cross_raw is not None:
        if not isinstance(cross_raw, Mapping):
            raise PipelineSpecError(f"{where}: state.cross_cache must be an object.")
        _check_keys(
            cross_raw,
            {
                "source",
                "frozen",
                "past_key_pattern",
                "past_value_pattern",
                "present_key_pattern",
                "present_value_pattern",
            },
            where,
            "state.cross_cache",
        )
        if init:
            source = cross_raw.get("source", init[0])
            if source not in init:
                raise PipelineSpecError(
                    f'{where}: state.cross_cache.source "{source}" is not an init session of the flow '
                    f"(init sessions: {', '.join(init)}). Name the encoder session there."
                )
            frozen = cross_raw.get("frozen", True)
            if frozen is not True:
                raise PipelineSpecError(
                    f"{where}: state.cross_cache.frozen must be true: the runtimes compute the "
                    "cross-attention cache once per generation."
                )
            has_patterns = any(
                cross_raw.get(k)
                for k in ("past_key_pattern", "past_value_pattern", "present_key_pattern", "present_value_pattern")
            )
            cross_names = _parse_names(cross_raw, "separate" if has_patterns else "auto", where, "state.cross_cache")
            cross = CrossCacheSpec(source, True, cross_names)
    elif init:
        cross = CrossCacheSpec(init[0], True, None)

    pos_raw = raw.get("position_ids") or {}
    if not isinstance(pos_raw, Mapping):
        raise PipelineSpecError(f"{where}: state.position_ids must be an object.")
    _check_keys(pos_raw, {"strategy", "input_name"}, where, "state.position_ids")
    strategy = pos_raw.get("strategy", "auto")
    if strategy not in POSITION_STRATEGIES:
        raise PipelineSpecError(
            f'{where}: unknown position_ids strategy "{strategy}". Valid options: {", ".join(POSITION_STRATEGIES)} '
            '("auto" feeds 1-D positions when the graph has the input, "default" requires it, "none" means the graph '
            "computes positions itself)."
        )
    input_name = pos_raw.get("input_name", "position_ids")
    if not isinstance(input_name, str) or not input_name:
        raise PipelineSpecError(f"{where}: state.position_ids.input_name must be the name of a graph input.")
    return StateSpec(kv, cross, PositionIdsSpec(strategy, input_name))


def _token_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _parse_tokens(raw: Any, where: str) -> TokenSpec:
    if raw is None:
        return TokenSpec()
    if not isinstance(raw, Mapping):
        raise PipelineSpecError(f'{where}: "tokens" must be an object like {{"eos": [2], "pad": 0}}.')
    _check_keys(raw, set(_TOKEN_KEYS), where, '"tokens"')
    values: dict[str, Any] = {}
    for key in _TOKEN_KEYS:
        value = raw.get(key)
        if value is None:
            continue
        if key == "eos":
            ids = value if isinstance(value, list) else [value]
            if not ids or not all(_token_id(v) for v in ids):
                raise PipelineSpecError(
                    f"{where}: tokens.eos must be a token id or a list of token ids, got {value!r}."
                )
            values[key] = tuple(ids)
        elif not _token_id(value):
            raise PipelineSpecError(f"{where}: tokens.{key} must be a non-negative token id, got {value!r}.")
        else:
            values[key] = value
    return TokenSpec(**values)


def _parse_generation(raw: Any, where: str) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise PipelineSpecError(f'{where}: "generation" must be an object like {{"max_length": 256}}.')
    _check_keys(raw, set(GENERATION_KEYS), where, '"generation"')
    for key, value in raw.items():
        if not _valid_generation_value(key, value):
            raise PipelineSpecError(f"{where}: generation.{key} has the wrong type ({value!r}).")
    return dict(raw)


def _resolve_from_graphs(spec: PipelineSpec, *, explicit_preset: bool, where: str) -> PipelineSpec:
    """Check the description against the graphs' inputs/outputs and fill in what detection finds."""
    from inference4py.engine._graph_io import read_graph_io
    from inference4py.engine.kv_cache import check_cache_names, detect_cache_names

    roles = spec.roles
    cached_role = "decoder_with_past" if "decoder_with_past" in roles else "decoder"
    cached = read_graph_io(spec.path(cached_role))
    state = spec.state
    if cached is not None:
        inputs, outputs = cached
        graph = f"{spec.session(cached_role).file}"
        detected_self, detected_cross = detect_cache_names(inputs, outputs)
        kv = state.kv_cache
        if kv.names is None and detected_self is not None:
            check_cache_names(inputs, outputs, detected_self, graph_name=graph, declared=False)
            kv = replace(kv, format=detected_self.format, names=detected_self)
        elif kv.names is not None:
            check_cache_names(inputs, outputs, kv.names, graph_name=graph, declared=True)
        cross = state.cross_cache
        if cross is not None and cross.names is None and detected_cross is not None:
            cross = replace(cross, names=detected_cross)
        position = state.position_ids
        has_position = position.input_name in inputs
        if position.strategy == "default" and not has_position:
            raise PipelineSpecError(
                f'{where}: position_ids strategy "default" but {graph} has no input "{position.input_name}" '
                f'(inputs: {", ".join(sorted(inputs)[:10])}). Set the right input_name, or "strategy": "none" '
                "when the graph computes positions itself."
            )
        if position.strategy == "none" and has_position:
            raise PipelineSpecError(
                f'{where}: position_ids strategy "none" but {graph} takes "{position.input_name}". Use "auto" or '
                '"default" so the runtime feeds it.'
            )
        state = replace(state, kv_cache=kv, cross_cache=cross)
    preset = spec.preset
    if not explicit_preset:  # named after the structure: an init session makes it an encoder-decoder
        if "encoder" in roles:
            speech = _is_speech(spec.path("encoder"), read_model_config(spec.folder))
            preset = "speech-seq2seq" if speech else "encoder-decoder"
        else:
            preset = "autoregressive-decoder"
    for name, session in spec.sessions.items():
        if session.provider:
            _check_provider(session.provider, name, where)
    return replace(spec, state=state, preset=preset)


def _check_provider(provider: str, name: str, where: str) -> None:
    try:
        import onnxruntime as ort
    except ImportError:  # pragma: no cover - onnxruntime is a dependency
        return
    if provider not in ort.get_available_providers():
        warnings.warn(
            f'{where}: session "{name}" asks for {provider}, which this onnxruntime build lacks '
            f"(available: {', '.join(ort.get_available_providers())}); it will run on the CPU. Install the "
            "matching onnxruntime package to use it.",
            RuntimeWarning,
            stacklevel=4,
        )
