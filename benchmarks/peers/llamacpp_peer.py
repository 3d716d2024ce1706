"""llama.cpp through llama-cpp-python (benchmark-only, never a dependency): a GGUF file, greedy, EOS masked.

The loop is llama-cpp-python's low-level path, the least work around llama.cpp per token:
``Llama.eval(prompt_ids)`` (the prefill, in ``n_batch`` chunks), then for each token the last
position's logits (``llama_get_logits_ith(ctx, -1)``, a view, no copy), EOS ids set to -inf,
argmax in numpy, ``Llama.eval([token])``.  ``reset()`` before every generation, so no KV prefix
is reused from an earlier call (``Llama.eval`` drops the cache from position ``n_tokens`` on).

Spec keys: ``folder`` (the .gguf file), ``threads`` (``n_threads`` = ``n_threads_batch``; default:
all cores), ``n_ctx`` (default 4096), ``eos_ids`` (extra ids to mask, e.g. the ONNX folders' EOS
list so every peer suppresses the same ids), ``n_batch`` (default: llama-cpp-python's 512).
Only greedy is run (``sample`` / ``beam4`` are reported as unsupported).
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from benchmarks.peers.common import Peer, Timed, Unsupported


def load(spec: dict[str, Any]) -> Peer:
    import llama_cpp

    path = Path(spec["folder"])
    if path.suffix != ".gguf" or not path.is_file():
        raise Unsupported(f"{path} is not a GGUF file")
    threads = int(spec.get("threads") or os.cpu_count() or 1)
    kwargs: dict[str, Any] = {
        "model_path": str(path),
        "n_ctx": int(spec.get("n_ctx") or 4096),
        "n_threads": threads,
        "n_threads_batch": threads,
        "verbose": False,
    }
    if spec.get("n_batch"):
        kwargs["n_batch"] = int(spec["n_batch"])
        kwargs["n_ubatch"] = int(spec["n_batch"])
    llm = llama_cpp.Llama(**kwargs)
    n_vocab = llm.n_vocab()
    eos = sorted({int(llm.token_eos())} | {int(i) for i in spec.get("eos_ids", ()) if 0 <= int(i) < n_vocab})
    eos_arr = np.asarray(eos, dtype=np.int64)
    neg_inf = np.float32(-np.inf)

    def last_logits() -> np.ndarray:  # [n_vocab] float32, a view of llama.cpp's buffer
        ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(n_vocab,))

    def choose() -> int:
        logits = np.array(last_logits(), dtype=np.float32, copy=True)
        logits[eos_arr] = neg_inf  # min_new_tokens == max_new_tokens: EOS never allowed
        return int(logits.argmax())

    def run_ids(ids: Sequence[int], max_new_tokens: int, setting: str) -> Timed:
        if setting != "greedy":
            raise Unsupported("the llama.cpp peer runs greedy only")
        ids = [int(t) for t in ids]
        llm.reset()
        timed = Timed(time.perf_counter())
        llm.eval(ids)
        token = choose()
        timed.tick(token)
        for _ in range(max_new_tokens - 1):
            llm.eval([token])
            token = choose()
            timed.tick(token)
        timed.ended = time.perf_counter()
        timed.prompt_tokens = len(ids)
        return timed

    def no_prompt() -> list[int]:
        raise Unsupported("the llama.cpp peer takes token ids (benchmarks/sizes.py), not a text prompt")

    info = {
        "llama_cpp_python": llama_cpp.__version__,
        "n_ctx": llm.n_ctx(),
        "n_batch": llm.n_batch,
        "n_threads": threads,
        "eos_masked": eos,
        "gguf": str(path),
    }
    with contextlib.suppress(Exception):  # informational only
        info["system_info"] = llama_cpp.llama_print_system_info().decode(errors="replace").strip()
    return Peer(generate=lambda n, s: run_ids(no_prompt(), n, s), generate_ids=run_ids, prompt_ids=no_prompt,
                info=info)

