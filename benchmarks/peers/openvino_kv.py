"""OpenVINO GenAI at long context, its KV cache at the CPU plugin's default (u8) or f32: the peer of kv_speed.py.

    /work/ov-venv/bin/python benchmarks/peers/openvino_kv.py --folder ~/.cache/inference4py/openvino/smollm2-fp32 \
        [--contexts 1024,4096] [--new 64] [--repeats 3]

Runs in OpenVINO's own venv (benchmarks/README.md, "OpenVINO GenAI"): ``LLMPipeline(folder, "CPU")``
with ``KV_CACHE_PRECISION`` u8 (the plugin's default on CPU) and then f32, fp32 inference precision
(``INFERENCE_PRECISION_HINT`` f32, as our graphs compute) and the machine's cores. The prompt is
kv_speed.py's text, tokenized by the pipeline's tokenizer and cut to each length (each run its own
window of it, so that the pipeline's prefix cache answers none of them); greedy,
``min_new_tokens = max_new_tokens``, ``ignore_eos``. The time to first token is stamped by a streamer
(the first token's arrival), decode ms/token from the rest. Prints one JSON line per cache type.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.kv_speed import TEXT  # noqa: E402


def main() -> int:
    import numpy as np
    import openvino as ov
    import openvino_genai as ov_genai

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", required=True)
    parser.add_argument("--contexts", default="1024,4096")
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    contexts = [int(c) for c in args.contexts.split(",")]
    for precision in ("u8", "f32"):
        pipe = ov_genai.LLMPipeline(
            args.folder,
            "CPU",
            KV_CACHE_PRECISION=precision,
            INFERENCE_PRECISION_HINT="f32",
            INFERENCE_NUM_THREADS=os.cpu_count() or 1,
        )
        tokenizer = pipe.get_tokenizer()
        base = np.array(tokenizer.encode(TEXT * 400, add_special_tokens=False).input_ids.data)[0]
        config = pipe.get_generation_config()
        config.max_new_tokens = args.new
        config.min_new_tokens = args.new
        config.ignore_eos = True
        config.do_sample = False
        out = {"kv_cache": f"openvino {precision}", "contexts": {}}
        for n in contexts:

            def prompt(offset: int, n: int = n) -> ov_genai.TokenizedInputs:
                # each run its own window of the text: the pipeline's prefix cache must not answer a prompt
                arr = base[offset : offset + n].reshape(1, -1).astype(np.int64)
                return ov_genai.TokenizedInputs(ov.Tensor(arr), ov.Tensor(np.ones_like(arr)))

            stamps: list[float] = []

            def stamp(token: int) -> bool:
                stamps.append(time.perf_counter())
                return False  # go on

            small = pipe.get_generation_config()
            small.max_new_tokens = small.min_new_tokens = 4
            small.ignore_eos = True
            pipe.generate(prompt(0), small)  # warm-up at this length
            ttft, decode = [], []
            for run in range(args.repeats):
                stamps.clear()
                started = time.perf_counter()
                pipe.generate(prompt(7 * (run + 1)), config, stamp)
                ttft.append((stamps[0] - started) * 1000)
                decode.append((stamps[-1] - stamps[0]) * 1000 / max(1, len(stamps) - 1))
            out["contexts"][n] = {"ttft_ms": statistics.median(ttft), "decode_ms_per_token": statistics.median(decode)}
        print(json.dumps(out), flush=True)
        del pipe
    return 0


if __name__ == "__main__":
    sys.exit(main())
