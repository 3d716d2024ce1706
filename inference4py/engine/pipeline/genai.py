"""onnxruntime-genai's ``genai_config.json``, translated into a pipeline description."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from inference4py.engine.pipeline.spec import _TOKEN_KEYS, DESCRIPTION_FILE, FORMAT_VERSION, GENAI_CONFIG
from inference4py.errors import PipelineSpecError

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

    Decoder-only and encoder-decoder folders translate; so do vision-language ones
    (``vision`` + ``embedding`` + an ``inputs_embeds`` decoder), as a
    version-2 description: the vision session at ``init`` wired to the embedding session's
    inputs of the same name, the embedding session at ``step`` wired to the decoder.  Speech
    sessions and multi-stage decoder pipelines are refused with a pointer to ``inference4py_genai``.

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
    extra = [k for k in ("speech",) if k in model]
    if "vision" in model and not isinstance(model.get("embedding"), dict):
        extra.append("vision (without an embedding)")
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
    dataflow = _genai_multimodal(model, sessions, flow, inputs)
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
    if dataflow:
        pipeline["dataflow"] = dataflow
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


def _genai_multimodal(
    model: Mapping[str, Any], sessions: dict[str, Any], flow: list[dict[str, str]], decoder_inputs: Mapping[str, Any]
) -> list[dict[str, str]]:
    """Add the ``embedding`` (and ``vision``) sessions of a vision-language folder; returns the wires.

    genai's sections map a role to the graph's tensor name (``{"image_features": "image_features"}``):
    a vision output and an embedding input with the same role are wired, and so are the
    embedding's ``inputs_embeds`` and the decoder's.
    """
    embedding = model.get("embedding")
    if not isinstance(embedding, dict) or not embedding.get("filename"):
        return []
    emb_inputs = embedding.get("inputs") or {}
    emb_outputs = embedding.get("outputs") or {}
    wires = [
        {
            "from": f"embedding.{emb_outputs.get('inputs_embeds', 'inputs_embeds')}",
            "to": f"decoder.{decoder_inputs.get('inputs_embeds', 'inputs_embeds')}",
        }
    ]
    added = {"embedding": _genai_session(embedding)}
    steps = [{"run": "embedding", "when": "step"}]
    vision = model.get("vision")
    if isinstance(vision, dict) and vision.get("filename"):
        vision_outputs = vision.get("outputs") or {}
        feeds = [
            {"from": f"vision.{vision_outputs[role]}", "to": f"embedding.{emb_inputs[role]}"}
            for role in vision_outputs
            if role in emb_inputs
        ]
        if feeds:
            added = {"vision": _genai_session(vision), **added}
            steps.insert(0, {"run": "vision", "when": "init"})
            wires = feeds + wires
    sessions_before = dict(sessions)
    sessions.clear()
    sessions.update({**added, **sessions_before})
    flow[:0] = steps
    return wires


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
