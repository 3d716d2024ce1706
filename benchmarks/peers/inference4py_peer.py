"""inference4py: OnnxTextGenerator (decoder-only) or the encoder-decoder task (T5/BART), stream_chunks."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.peers.common import SETTINGS, Peer, Timed, Unsupported
from inference4py.errors import ConfigurationError


def _overrides(max_new_tokens: int, setting: str) -> dict[str, Any]:
    # min_new_tokens == max_new_tokens blocks EOS at every step (transformers' MinNewTokensLength):
    # every peer makes exactly max_new_tokens tokens.
    return {"max_new_tokens": max_new_tokens, "min_new_tokens": max_new_tokens, **SETTINGS[setting]}


def _session_providers(task: Any) -> list[str] | None:
    """The execution providers of the decoder's onnxruntime session (OnnxTextGenerator's private runtime), or None."""
    session = getattr(getattr(getattr(task, "_runtime", None), "rest", None), "session", None)
    return list(session.get_providers()) if session is not None else None


def load(spec: dict[str, Any]) -> Peer:
    folder = Path(spec["folder"])
    prompt = spec["prompt"]
    if spec.get("seq2seq"):
        from inference4py.tasks.seq2seq_base import Seq2SeqTask

        task = Seq2SeqTask.builder().model_path(folder).build()
        source: Any = prompt["text"]
        encode = task.encode_source
    else:
        from inference4py import OnnxTextGenerator

        builder = OnnxTextGenerator.builder().model_path(folder)
        if spec.get("fuse") is not None:
            builder = builder.fuse_attention(spec["fuse"])
        if spec.get("providers"):  # e.g. OpenVINOExecutionProvider (onnxruntime-openvino, in its own venv)
            builder = builder.providers(list(spec["providers"]))
        if spec.get("gguf_bits") is not None:  # a .gguf file: the weights of its conversion
            builder = builder.gguf_bits(spec["gguf_bits"])
        if spec.get("kv_cache"):  # "int8": the quantized KV cache
            builder = builder.kv_cache(spec["kv_cache"])
        if "messages" in prompt:
            builder = builder.chat_template()
        task = builder.build()
        source = prompt.get("messages", prompt.get("text"))
        encode = task.encode_prompt

    def run(src: Any, max_new_tokens: int, setting: str) -> Timed:
        overrides = _overrides(max_new_tokens, setting)
        timed = Timed(time.perf_counter())
        try:
            chunks = task.stream_chunks(src, **overrides)
            for chunk in chunks:
                if chunk.token_id is not None:
                    timed.tick(chunk.token_id)
        except (ConfigurationError, NotImplementedError) as exc:
            if overrides.get("num_beams", 1) > 1:  # beam search not (yet) available in this engine
                raise Unsupported(f"beam search is not available: {exc}") from exc
            raise
        if overrides.get("num_beams", 1) > 1 and len(timed.token_ids) != max_new_tokens:
            raise Unsupported(f"num_beams was not honoured ({len(timed.token_ids)} tokens)")
        timed.ended = time.perf_counter()
        timed.prompt_tokens = len(encode(src))
        return timed

    def generate_ids(ids: Sequence[int], max_new_tokens: int, setting: str) -> Timed:
        return run(list(ids), max_new_tokens, setting)

    info: dict[str, Any] = {"class": type(task).__name__, "model_folder": str(getattr(task, "folder", ""))}
    if spec.get("providers"):
        import onnxruntime

        actual = _session_providers(task)
        info["providers_requested"] = list(spec["providers"])
        info["providers"] = actual if actual is not None else list(spec["providers"])
        info["providers_source"] = "session" if actual is not None else "requested"
        info["onnxruntime"] = onnxruntime.__version__
    return Peer(
        generate=lambda n, s: run(source, n, s),
        generate_ids=generate_ids,
        prompt_ids=lambda: list(encode(source)),
        info=info,
    )
