"""onnxruntime-genai: its native C++ loop on a folder made by its model builder."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Sequence

from benchmarks.peers.common import SETTINGS, Peer, Timed, Unsupported


def load(spec: dict[str, Any]) -> Peer:
    import onnxruntime_genai as og

    folder = Path(spec["folder"])
    if not (folder / "genai_config.json").is_file():
        raise Unsupported(f"{folder} is not a genai folder")
    model = og.Model(str(folder))
    tok = og.Tokenizer(model)
    # genai's sliding-window attention (Gemma 3) wants a KV capacity of at least the window:
    # a shorter max_length fails in GroupQueryAttention, so the loop below counts the tokens
    decoder = json.loads((folder / "genai_config.json").read_text(encoding="utf-8"))["model"]["decoder"]
    window = int((decoder.get("sliding_window") or {}).get("window_size", 0))
    prompt = spec["prompt"]

    def encode() -> list[int]:
        if "messages" in prompt:
            text = tok.apply_chat_template(json.dumps(prompt["messages"]), add_generation_prompt=True)
        else:
            text = prompt["text"]
        return [int(t) for t in tok.encode(text)]

    def run_ids(ids: Sequence[int] | None, max_new_tokens: int, setting: str) -> Timed:
        if SETTINGS[setting].get("num_beams", 1) > 1:
            raise Unsupported("beam search is not benchmarked for genai")
        timed = Timed(time.perf_counter())
        if ids is None:
            ids = encode()
        s = SETTINGS[setting]
        params = og.GeneratorParams(model)
        total = len(ids) + max_new_tokens
        capacity = max(total, window + 1 if window else 0)
        opts: dict[str, Any] = {"max_length": capacity, "min_length": total, "do_sample": s["do_sample"], "batch_size": 1}
        if s["do_sample"]:
            opts.update(temperature=s["temperature"], top_k=s["top_k"], top_p=s["top_p"], random_seed=s["seed"])
        params.set_search_options(**opts)
        gen = og.Generator(model, params)
        gen.append_tokens(list(ids))
        for _ in range(max_new_tokens):
            if gen.is_done():
                break
            gen.generate_next_token()
            timed.tick(int(gen.get_next_tokens()[0]))
        timed.ended = time.perf_counter()
        timed.prompt_tokens = len(ids)
        del gen
        return timed

    return Peer(generate=lambda n, s: run_ids(None, n, s), generate_ids=run_ids, prompt_ids=encode,
                info={"onnxruntime_genai": og.__version__})
