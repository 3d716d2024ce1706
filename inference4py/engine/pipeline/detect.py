"""Detection: a folder's description from the files present, else from every graph's inputs/outputs.

Rules, first match wins (files are looked for at the top level, then in ``onnx/``):
the file names exporters use (``encoder_model.onnx`` + a decoder, ``model.onnx``,
``decoder_model_merged.onnx``, ``decoder_model.onnx`` [+ ``decoder_with_past_model.onnx``]),
then any ``*.onnx`` classified by its inputs and outputs ("detect, don't declare").
The result is a description like any other; :mod:`.resolve` expands and checks it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from inference4py.engine.pipeline.folder import read_model_config
from inference4py.engine.pipeline.spec import DESCRIPTION_FILE, FORMAT_VERSION
from inference4py.errors import ModelFilesMissingError, PipelineSpecError

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
    if one_graph and _is_single_pass(root / one_graph):
        description["pipeline"] = _single_pass_dict(one_graph)
        return description
    if one_graph:
        description["pipeline"] = _with_embedding(root, _pipeline_dict("autoregressive-decoder", None, one_graph, None))
        return description
    if plain and with_past:
        description["pipeline"] = _with_embedding(
            root, _pipeline_dict("autoregressive-decoder", None, plain, with_past)
        )
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


def _with_embedding(root: Path, pipeline: dict[str, Any]) -> dict[str, Any]:
    """A decoder that takes ``inputs_embeds`` instead of ``input_ids`` gets the folder's embedding graph.

    The embedding graph is the one graph beside the decoder with ``input_ids`` in and
    ``inputs_embeds`` out (optimum's ``embed_tokens.onnx``, genai's ``embedding.onnx``); it runs as
    a ``step`` session wired to every decoder.  Graphs whose outputs are named like one of its
    other inputs (a vision encoder's ``image_features``) become ``init`` sessions wired to it by
    name.  Graphs that feed nothing by name (optimum's ``vision_encoder.onnx``, whose features a
    task class merges into the embeddings itself) are left out: the pipeline runs the text.
    Without exactly one embedding graph the description stays as it is, and the load-time check
    says what to wire.
    """
    from inference4py.engine.graph_io import read_graph_io

    decoder_file = pipeline["sessions"]["decoder"]["file"]
    decoder = root / decoder_file
    io = read_graph_io(decoder)
    if io is None or "input_ids" in io[0] or "inputs_embeds" not in io[0]:
        return pipeline
    prefix = decoder_file.rsplit("/", 1)[0] + "/" if "/" in decoder_file else ""
    graphs: dict[str, Any] = {}
    used = {body["file"] for body in pipeline["sessions"].values()}
    for path in sorted(decoder.parent.glob("*.onnx")):
        rel = prefix + path.name
        if rel not in used and path.is_file():
            graph_io = read_graph_io(path)
            if graph_io is not None and "logits" not in graph_io[1]:
                graphs[rel] = graph_io
    embeddings = [rel for rel, (i, o) in graphs.items() if "input_ids" in i and "inputs_embeds" in o]
    if len(embeddings) != 1:
        return pipeline
    embedding = embeddings[0]
    wanted = [name for name in graphs[embedding][0] if name != "input_ids"]
    sessions: dict[str, Any] = {}
    init: list[dict[str, str]] = []
    dataflow: list[dict[str, str]] = []
    for rel, (_, outputs) in graphs.items():
        feeds = [name for name in wanted if name in outputs]
        if rel == embedding or not feeds:
            continue
        name = f"init{len(init)}" if len(init) else "vision"
        sessions[name] = {"file": rel}
        init.append({"run": name, "when": "init"})
        dataflow += [{"from": f"{name}.{t}", "to": f"embedding.{t}"} for t in feeds]
        wanted = [t for t in wanted if t not in feeds]
    sessions["embedding"] = {"file": embedding}
    sessions.update(pipeline["sessions"])
    dataflow += [{"from": "embedding.inputs_embeds", "to": f"{name}.inputs_embeds"} for name in pipeline["sessions"]]
    return {
        **pipeline,
        "sessions": sessions,
        "flow": [*init, {"run": "embedding", "when": "step"}, *pipeline["flow"]],
        "dataflow": dataflow,
    }


def _detect_from_graphs(root: Path, config: Mapping[str, Any]) -> dict[str, Any] | None:
    """Classify every ``*.onnx`` of the folder (or of ``onnx/``) by its inputs and outputs."""
    from inference4py.engine.graph_io import read_graph_io
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
            return _with_embedding(root, _pipeline_dict("autoregressive-decoder", None, decoders[0], None))
        if decoders:
            _ambiguous(root, decoders + plain_nopast)
        if len(plain_nopast) == 1:  # runs, but without a cache (the runtime says how to re-export)
            return _pipeline_dict("autoregressive-decoder", None, plain_nopast[0], None)
        if len(encoders) == 1 and not encoders[0][1] and not cross:  # a text encoder alone: single pass
            return _single_pass_dict(encoders[0][0])
    return None


def _is_single_pass(path: Path) -> bool:
    """A text encoder run once (a sentence encoder): ``input_ids`` in, no ``logits`` and no KV cache out."""
    from inference4py.engine.graph_io import read_graph_io
    from inference4py.engine.kv_cache import detect_cache_names

    io = read_graph_io(path)
    if io is None:
        return False
    inputs, outputs = io
    return "input_ids" in inputs and "logits" not in outputs and detect_cache_names(inputs, outputs)[0] is None


def _single_pass_dict(file: str) -> dict[str, Any]:
    return {
        "extends": "single-pass",
        "sessions": {"encoder": {"file": file}},
        "flow": [{"run": "encoder", "when": "init"}],
    }


def _ambiguous(root: Path, files: list[str]) -> None:
    raise PipelineSpecError(
        f"{root} holds several decoder graphs ({', '.join(files)}) and detection cannot tell which one to run. "
        f"Add an {DESCRIPTION_FILE} that names it, e.g. "
        f'{{"version": 1, "pipeline": {{"extends": "autoregressive-decoder", "sessions": {{"decoder": {{"file": "{files[0]}"}}}}}}}}.'
    )


def _is_speech(encoder: Path, config: Mapping[str, Any]) -> bool:
    # A speech encoder is announced by its input (log-mel features), not by a model name.
    from inference4py.engine.graph_io import read_graph_io

    io = read_graph_io(encoder)
    if io is not None:
        return any(name in io[0] for name in _SPEECH_INPUTS)
    return "num_mel_bins" in config


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
