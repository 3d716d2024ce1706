"""From a folder to a :class:`PipelineSpec`: the three sources, preset expansion, checks against the graphs.

Where a folder's description comes from, in order (:func:`load_pipeline`):
``inference4py.json``, else ``genai_config.json`` (:mod:`.genai`), else detection
(:mod:`.detect`).  :func:`resolve_description` expands the preset named by
``pipeline.extends``, lets the user's fields override it, validates every section
(:mod:`.parse`) and checks the result against the graphs' input/output names.
"""

from __future__ import annotations

import copy
import os
import warnings
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from inference4py.engine.pipeline.detect import _detect_description, _is_speech
from inference4py.engine.pipeline.folder import (
    _existing_folder,
    _folder_generation_defaults,
    read_json_object,
    read_model_config,
)
from inference4py.engine.pipeline.genai import translate_genai_config
from inference4py.engine.pipeline.parse import (
    _check_flow,
    _check_keys,
    _mapping_or_error,
    _parse_dataflow,
    _parse_flow,
    _parse_generation,
    _parse_sessions,
    _parse_state,
    _parse_tokens,
)
from inference4py.engine.pipeline.spec import (
    DESCRIPTION_FILE,
    FORMAT_VERSION,
    GENAI_CONFIG,
    GENERATION_SOURCE,
    PRESETS,
    SUPPORTED_VERSIONS,
    PipelineSpec,
)
from inference4py.errors import ModelLoadError, PipelineSpecError, UnsupportedModelError

if TYPE_CHECKING:
    from inference4py.engine.graph_io import ExpertNode


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
        raw = read_json_object(own, PipelineSpecError, f"Fix {DESCRIPTION_FILE} or delete it to use detection.")
        return resolve_description(raw, root, source=DESCRIPTION_FILE)
    genai = root / GENAI_CONFIG
    if genai.is_file():
        raw = translate_genai_config(read_json_object(genai, ModelLoadError, "Re-download the model."))
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
    _check_keys(user, {"extends", "sessions", "flow", "dataflow", "state", "context_length"}, where, '"pipeline"')
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
    steps = _parse_flow(merged.get("flow"), sessions, where, version=version)
    dataflow = _parse_dataflow(merged.get("dataflow"), sessions, steps, where, version=version)
    _check_flow(steps, dataflow, where)
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
        dataflow=dataflow,
    )
    state = _parse_state(state_raw, spec, where)
    spec = replace(spec, state=state)
    return _resolve_from_graphs(spec, explicit_preset=preset_name is not None, where=where)


def _deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _resolve_from_graphs(spec: PipelineSpec, *, explicit_preset: bool, where: str) -> PipelineSpec:
    """Check the description against the graphs' inputs/outputs and fill in what detection finds."""
    from inference4py.engine.graph_io import read_graph_io
    from inference4py.engine.kv_cache import check_cache_names, detect_cache_names

    roles = spec.roles
    cached_role = "decoder_with_past" if "decoder_with_past" in roles else "decoder"
    cached = read_graph_io(spec.path(cached_role)) if cached_role in roles else None
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
        if "decoder" not in roles:
            preset = "single-pass"
        elif "encoder" in roles:
            speech = _is_speech(spec.path("encoder"), read_model_config(spec.folder))
            preset = "speech-seq2seq" if speech else "encoder-decoder"
        else:
            preset = "autoregressive-decoder"
    for name, session in spec.sessions.items():
        if session.provider:
            _check_provider(session.provider, name, where)
    _check_dataflow_graphs(spec, where)
    _check_expert_nodes(spec)
    return replace(spec, state=state, preset=preset)


#: Where each expert tensor sits among a node's inputs, by operator (onnxruntime's contrib-op schemas).
_EXPERT_INPUTS = {
    "MoE": {2: "fc1 weights", 3: "fc1 bias", 4: "fc2 weights", 5: "fc2 bias", 6: "fc3 weights", 7: "fc3 bias"},
    "QMoE": {
        2: "fc1 weights",
        3: "fc1 scales",
        4: "fc1 bias",
        5: "fc2 weights",
        6: "fc2 scales",
        7: "fc2 bias",
        8: "fc3 weights",
        9: "fc3 scales",
        10: "fc3 bias",
        11: "fc1 zero points",
        12: "fc2 zero points",
        13: "fc3 zero points",
    },
}
#: config.json's names for the expert count and the experts chosen per token.
_CONFIG_EXPERTS = ("num_local_experts", "num_experts", "n_routed_experts")
_CONFIG_TOP_K = ("num_experts_per_tok", "moe_topk")


def _check_expert_nodes(spec: PipelineSpec) -> None:
    """Each com.microsoft ``MoE`` / ``QMoE`` node agrees with itself, its router and config.json.

    The expert count is the first dim of the node's fc1 weights.  Every other expert tensor, the
    router scores' last dim (as declared) and config.json's expert count must be the same, and the
    node's ``k`` must lie in 1..experts and equal config.json's experts per token.  onnxruntime
    finds the first two only when the node first runs, in the middle of a generation; config.json
    it never reads.

    Raises:
        ModelLoadError: naming the graph, the node, the tensor and both numbers.
    """
    from inference4py.engine.graph_io import read_expert_nodes

    config = read_model_config(spec.folder)
    declared_experts = next((config[k] for k in _CONFIG_EXPERTS if isinstance(config.get(k), int)), None)
    declared_top_k = next((config[k] for k in _CONFIG_TOP_K if isinstance(config.get(k), int)), None)
    for role in ("decoder", "decoder_with_past"):
        if role not in spec.roles:
            continue
        graph = spec.session(role).file
        for node in read_expert_nodes(spec.path(role)) or []:
            _check_expert_node(node, graph, declared_experts, declared_top_k)


def _check_expert_node(node: ExpertNode, graph: str, declared_experts: int | None, declared_top_k: int | None) -> None:
    where = f"{graph}: {node.op_type} node {node.name!r}"
    fix = "The graph's experts do not match; rebuild the folder with onnxruntime-genai's model builder."
    slots = _EXPERT_INPUTS[node.op_type]
    fc1 = node.inputs[2] if len(node.inputs) > 2 else ""
    fc1_shape = node.shapes.get(fc1)
    if not fc1_shape or not isinstance(fc1_shape[0], int):
        return  # computed weights: onnxruntime checks them when it runs
    experts = fc1_shape[0]
    for slot, role in slots.items():
        tensor = node.inputs[slot] if slot < len(node.inputs) else ""
        shape = node.shapes.get(tensor) if tensor else None
        if shape and isinstance(shape[0], int) and shape[0] != experts:
            raise ModelLoadError(
                f"{where}: its {role} {tensor!r} hold {shape[0]} experts, its fc1 weights {fc1!r} {experts}. {fix}"
            )
    router = node.inputs[1] if len(node.inputs) > 1 else ""
    width = (node.shapes.get(router) or (None,))[-1]
    if isinstance(width, int) and width != experts:
        raise ModelLoadError(
            f"{where}: its router scores {router!r} have {width} columns, but its weights hold {experts} experts "
            f"({fc1!r}: {list(fc1_shape)}). {fix}"
        )
    if declared_experts is not None and declared_experts != experts:
        raise ModelLoadError(
            f"{where}: its weights hold {experts} experts ({fc1!r}: {list(fc1_shape)}), but config.json says "
            f"{declared_experts}. Fix config.json or rebuild the folder."
        )
    k = node.attributes.get("k", 1)
    if not 1 <= k <= experts:
        raise ModelLoadError(f"{where}: k={k} experts per token, but it has {experts} experts (1..{experts}). {fix}")
    if declared_top_k is not None and declared_top_k != k:
        raise ModelLoadError(
            f"{where}: k={k} experts per token, but config.json says num_experts_per_tok={declared_top_k}. "
            "Fix config.json or rebuild the folder."
        )


#: Inputs of a step session the runtime feeds itself (the tokens of each run).
_RUNTIME_STEP_INPUTS = ("input_ids",)


def _check_dataflow_graphs(spec: PipelineSpec, where: str) -> None:
    """Check every wire against the graphs: both tensors exist, and their dtypes and shapes agree.

    A decoder without ``input_ids`` must have ``inputs_embeds`` wired from a step session;
    a session fed by wires (other than an init session, whose open inputs the caller gives)
    must have every input fed.  Graphs that cannot be read without loading are skipped here
    (the runtime checks them when the sessions exist).
    """
    from inference4py.engine.graph_io import read_graph_io

    io: dict[str, Any] = {}

    def graph(name: str) -> Any:
        if name not in io:
            io[name] = read_graph_io(spec.path(name))
        return io[name]

    phase = {s.run: s.when for s in spec.steps}
    for w in spec.dataflow:
        dst = graph(w.target)
        if dst is not None and w.input not in dst[0]:
            raise PipelineSpecError(
                f'{where}: Dataflow wire references input "{w.input}" but session "{w.target}" has no such input '
                f"(available inputs: {', '.join(dst[0])})."
            )
        if w.source == GENERATION_SOURCE:
            if dst is not None and not np.issubdtype(dst[0][w.input].dtype, np.integer):
                raise PipelineSpecError(
                    f'{where}: dataflow wire "{w.origin}" → "{w.target}.{w.input}": the generated ids are integers '
                    f"but the input is {np.dtype(dst[0][w.input].dtype).name}. Feed them to an integer input "
                    "(int64 or int32)."
                )
            continue
        src = graph(w.source)
        if src is not None and w.output not in src[1]:
            raise PipelineSpecError(
                f'{where}: Dataflow wire references output "{w.output}" but session "{w.source}" has no such output '
                f"(available outputs: {', '.join(src[1])})."
            )
        if src is None or dst is None:
            continue
        out, inp = src[1][w.output], dst[0][w.input]
        label = f'dataflow wire "{w.origin}" → "{w.target}.{w.input}"'
        if np.dtype(out.dtype) != np.dtype(inp.dtype):
            raise PipelineSpecError(
                f"{where}: {label}: dtype mismatch, the output is {np.dtype(out.dtype).name} and the input is "
                f"{np.dtype(inp.dtype).name}. Export both graphs with the same precision (or add a Cast to one)."
            )
        if out.shape and inp.shape:
            fixed = [
                i
                for i, (a, b) in enumerate(zip(out.shape, inp.shape))
                if isinstance(a, int) and isinstance(b, int) and a > 0 and b > 0 and a != b
            ]
            if len(out.shape) != len(inp.shape) or fixed:
                raise PipelineSpecError(
                    f"{where}: {label}: shape mismatch, the output is {_shape(out.shape)} and the input is "
                    f"{_shape(inp.shape)}. Wire tensors of the same shape."
                )
    wired = {(w.target, w.input) for w in spec.dataflow}
    feeders = set(spec.step_feeders)
    decoders = {spec.roles.get("decoder"), spec.roles.get("decoder_with_past")} - {None}
    for name in spec.sessions:
        g = graph(name)
        if g is None:
            continue
        inputs = g[0]
        if name in decoders:
            if "input_ids" not in inputs and (name, "inputs_embeds") not in wired and spec.source == "detected":
                raise UnsupportedModelError(
                    f"{spec.session(name).file} takes no input_ids (inputs: {', '.join(inputs)}), so it is not a "
                    "decoder inference4py can run from its files alone. Export it with input_ids (optimum: "
                    "--task text-generation-with-past), or, if another graph of the folder embeds the tokens, "
                    f"describe the pipeline in an {DESCRIPTION_FILE} with that embedding session wired to "
                    f"{name}.inputs_embeds (docs/pipelines.md)."
                )
            if "input_ids" not in inputs and (name, "inputs_embeds") not in wired:
                raise PipelineSpecError(
                    f'{where}: the decoder "{name}" takes no input_ids, so its token embeddings must be wired: add '
                    f'{{"from": "embedding.inputs_embeds", "to": "{name}.inputs_embeds"}} to "dataflow" with a step '
                    "session that embeds the tokens (inputs: " + ", ".join(inputs) + ")."
                )
            for w in spec.dataflow:
                if w.target == name and phase.get(w.source) == "init" and w.input == "inputs_embeds":
                    raise PipelineSpecError(
                        f'{where}: "{name}.inputs_embeds" is fed by the init session "{w.source}", which runs once; '
                        "the decoder needs the embeddings of every new token. Run the embedding session at "
                        f'"step", before "{name}" in the flow.'
                    )
        elif name in feeders or phase.get(name) == "final":
            missing = [
                i for i in inputs if (name, i) not in wired and not (name in feeders and i in _RUNTIME_STEP_INPUTS)
            ]
            if missing:
                fed_by_runtime = "input_ids (the tokens of each run)" if name in feeders else "nothing"
                raise PipelineSpecError(
                    f'{where}: input "{missing[0]}" of session "{name}" is not fed: wire it in "dataflow" '
                    f'(e.g. {{"from": "{GENERATION_SOURCE}.ids", "to": "{name}.{missing[0]}"}} for a final session). '
                    f"The runtime feeds {fed_by_runtime} itself."
                )


def _shape(shape: tuple[Any, ...]) -> str:
    return "[" + ", ".join(str(d) if d not in (None, "") else "?" for d in shape) + "]"


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
