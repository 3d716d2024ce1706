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
from typing import Any

from inference4py.engine.pipeline.detect import _detect_description, _is_speech
from inference4py.engine.pipeline.folder import (
    _existing_folder,
    _folder_generation_defaults,
    _read_json_object,
    read_model_config,
)
from inference4py.engine.pipeline.genai import translate_genai_config
from inference4py.engine.pipeline.parse import (
    _check_keys,
    _mapping_or_error,
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
    PRESETS,
    SUPPORTED_VERSIONS,
    PipelineSpec,
)
from inference4py.errors import ModelLoadError, PipelineSpecError


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
