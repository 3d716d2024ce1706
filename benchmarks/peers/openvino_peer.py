"""OpenVINO GenAI: ``LLMPipeline`` on a folder exported by ``optimum-cli export openvino``, or on a GGUF file.

Runs only in its own interpreter (the row's ``python``, a venv with openvino-genai and
optimum-intel: see benchmarks/README.md); neither inference4py nor onnxruntime is imported here.
Same protocol as the other peers: the chat template is rendered by the pipeline's tokenizer
(the model's own template, like onnxruntime-genai's ``apply_chat_template``) and encoded
inside the timed call; tokens arrive through a ``StreamerBase`` (token ids, no per-token
detokenization, as the genai peer); greedy; EOS suppressed (``min_new_tokens`` =
``max_new_tokens`` and ``ignore_eos``), so exactly ``max_new_tokens`` tokens.
Token ids (``generate_ids``, as benchmarks/sizes.py calls it, and ``run_ids`` of the llama.cpp peer): the
given ids as they are, an ``ov.Tensor`` in ``TokenizedInputs`` (no template, no BOS added), same config.
Threads: ``INFERENCE_NUM_THREADS`` (the task's ``threads``, default all cores).  KV cache: the CPU
plugin's default (``KV_CACHE_PRECISION`` u8, an 8-bit cache), or the task's ``kv_cache_precision``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.peers.common import SETTINGS, Peer, Timed, Unsupported, cpu_flags

# What the CPU plugin decided for itself (not set here): recorded in the result's info.
_PLUGIN_PROPERTIES = (
    "INFERENCE_PRECISION_HINT",
    "KV_CACHE_PRECISION",
    "DYNAMIC_QUANTIZATION_GROUP_SIZE",
    "PERFORMANCE_HINT",
    "INFERENCE_NUM_THREADS",
)


def load(spec: dict[str, Any]) -> Peer:
    import numpy as np
    import openvino as ov
    import openvino_genai as ov_genai

    folder = Path(spec["folder"])
    if folder.suffix == ".gguf" and folder.is_file():
        pass  # LLMPipeline reads a GGUF file itself (its weights as the file holds them, its tokenizer)
    elif not (folder / "openvino_model.xml").is_file():
        raise Unsupported(f"{folder} is not an OpenVINO export (no openvino_model.xml) nor a .gguf file")
    elif not (folder / "openvino_tokenizer.xml").is_file():
        raise Unsupported(f"{folder} has no openvino_tokenizer.xml (export with openvino-tokenizers installed)")
    threads = int(spec.get("threads") or os.cpu_count() or 1)
    device = "CPU"
    properties: dict[str, Any] = {"INFERENCE_NUM_THREADS": threads}
    if spec.get("kv_cache_precision"):  # the plugin's default on CPU is u8 (an 8-bit KV cache)
        properties["KV_CACHE_PRECISION"] = spec["kv_cache_precision"]
    pipeline: dict[str, Any] = {}
    backend = os.environ.get("INFERENCE4PY_OV_ATTENTION_BACKEND", "")  # "" : the library's default (PA on CPU)
    prefix_caching = os.environ.get("INFERENCE4PY_OV_PREFIX_CACHING", "0") == "1"
    if backend:
        pipeline["ATTENTION_BACKEND"] = backend
    if backend != "SDPA":
        # The default backend on CPU is paged attention with LLMPipeline's latency scheduler config
        # (no limit on batched tokens, prefix caching ON). Prefix caching would let every repeated
        # benchmark prompt skip its prefill after the warm-up (measured: a 953-token prompt's
        # first token in ~0.1 s instead of seconds), which no other peer does: the same config with
        # prefix caching off, unless INFERENCE4PY_OV_PREFIX_CACHING=1.
        sc = ov_genai.SchedulerConfig()
        sc.max_num_batched_tokens = 2**64 - 1  # size_t max, as get_latency_oriented_scheduler_config()
        sc.enable_prefix_caching = prefix_caching
        pipeline["scheduler_config"] = sc
    pipe = ov_genai.LLMPipeline(str(folder), device, **properties, **pipeline)
    tok = pipe.get_tokenizer()
    prompt = spec["prompt"]

    def encode() -> list[int]:
        if "messages" in prompt:
            text = tok.apply_chat_template(prompt["messages"], add_generation_prompt=True)
            # The rendered template holds its special tokens already (transformers: add_special_tokens=False).
            enc = tok.encode(text, add_special_tokens=False)
        else:
            enc = tok.encode(prompt["text"])
        return [int(t) for t in enc.input_ids.data.reshape(-1)]

    class Streamer(ov_genai.StreamerBase):
        def __init__(self, timed: Timed) -> None:
            super().__init__()
            self.timed = timed

        def write(self, token: Any) -> ov_genai.StreamingStatus:
            for t in token if isinstance(token, (list, tuple)) else (token,):
                self.timed.tick(int(t))
            return ov_genai.StreamingStatus.RUNNING

        def end(self) -> None:
            pass

    def config(max_new_tokens: int, setting: str) -> ov_genai.GenerationConfig:
        s = SETTINGS[setting]
        if s.get("num_beams", 1) > 1:
            raise Unsupported("beam search is not benchmarked for openvino (no per-token stream)")
        cfg = pipe.get_generation_config()
        cfg.max_new_tokens = max_new_tokens
        cfg.min_new_tokens = max_new_tokens
        cfg.ignore_eos = True
        cfg.apply_chat_template = False  # ids are given; the template was applied in encode()
        cfg.num_return_sequences = 1
        cfg.stop_strings = set()
        cfg.stop_token_ids = set()  # ignore_eos covers eos_token_id; the config's other stop ids too
        cfg.repetition_penalty = 1.0  # plain greedy / sampling, whatever generation_config.json says
        cfg.do_sample = bool(s["do_sample"])
        if s["do_sample"]:
            cfg.temperature, cfg.top_k, cfg.top_p, cfg.rng_seed = s["temperature"], s["top_k"], s["top_p"], s["seed"]
        return cfg

    def run_ids(ids: Sequence[int] | None, max_new_tokens: int, setting: str) -> Timed:
        cfg = config(max_new_tokens, setting)
        timed = Timed(time.perf_counter())
        if ids is None:
            ids = encode()
        arr = np.asarray([list(ids)], dtype=np.int64)
        inputs = ov_genai.TokenizedInputs(ov.Tensor(arr), ov.Tensor(np.ones_like(arr)))
        pipe.generate(inputs, cfg, Streamer(timed))
        timed.ended = time.perf_counter()
        timed.prompt_tokens = len(ids)
        if len(timed.token_ids) != max_new_tokens:
            raise RuntimeError(f"openvino made {len(timed.token_ids)} tokens, not {max_new_tokens}")
        return timed

    core = ov.Core()
    core.set_property(device, properties)
    plugin: dict[str, Any] = {}
    for name in _PLUGIN_PROPERTIES:
        try:
            plugin[name] = _plain(core.get_property(device, name))
        except Exception as exc:  # a property this version does not know
            plugin[name] = f"n/a ({type(exc).__name__})"
    info = {
        "openvino": ov.get_version(),
        "openvino_genai": ov_genai.__version__,
        "device": device,
        "threads": threads,
        "attention_backend": backend or "PA (default)",
        "prefix_caching": prefix_caching if backend != "SDPA" else None,
        "plugin": plugin,
        "isa": cpu_flags(),
    }
    return Peer(generate=lambda n, s: run_ids(None, n, s), generate_ids=run_ids, prompt_ids=encode, info=info)


def _plain(value: Any) -> str:
    """'f32', 'u8', 'LATENCY' rather than "<Type: 'float32'>" or 'PerformanceMode.LATENCY'."""
    if hasattr(value, "get_type_name"):  # openvino.Type
        return str(value.get_type_name())
    return str(getattr(value, "name", value))

