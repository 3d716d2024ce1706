"""Quality of the int8 KV cache (``kv_cache("int8")``) against the float32 cache on one GGUF model.

    python benchmarks/kv_quality.py --gguf FILE.gguf --text TEXT.txt [--ctx 512] [--chunks 8] [--new 48]

Two measures, float32 cache and int8 cache on the same converted folder (``gguf_folder``, cached):

* perplexity on ``--text`` (llama.cpp's recipe: chunks of ``--ctx`` tokens, BOS first when the
  model adds one, the second half of each scored), twice: with :func:`benchmarks.quality.our_perplexity`
  (one run of the graph file per chunk: with int8, attention reads rounded keys and values at every
  position), and as the engine runs it (:func:`engine_perplexity`: the first half is a prompt, which
  an int8 model runs on its float twin and rounds into the cache, the second half continues it and
  reads the int8 cache, as the decode steps of a served request do);
* greedy agreement on a few chat prompts: the share of the float model's greedy tokens the int8
  model also ranks first when fed the same tokens (teacher forcing), and how many tokens the two
  free-running greedy answers share before they first differ.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.quality import our_perplexity  # noqa: E402

PROMPTS = [
    "What is the capital of France? Answer in one sentence.",
    "Write a Python function that reverses a string.",
    "Explain why the sky is blue to a ten-year-old.",
    "List three uses of copper.",
    "Summarize the plot of Romeo and Juliet in two sentences.",
]


def agreement(float_gen, int8_gen, prompt: str, new: int) -> tuple[float, int, int]:
    """(teacher-forced agreement, common prefix of the free-running answers, tokens compared)."""
    # a chat when the model has a template; the text itself otherwise (a GGUF may carry none)
    messages = [{"role": "user", "content": prompt}] if float_gen.tokenizer.chat_template else prompt
    ids = float_gen.encode_prompt(messages)
    ref = list(float_gen.generate(messages, max_new_tokens=new, do_sample=False).token_ids)
    mine = list(int8_gen.generate(messages, max_new_tokens=new, do_sample=False).token_ids)
    state = int8_gen.runtime.new_state(1, capacity=len(ids) + len(ref) + 1)
    logits = state.prefill(np.array([ids]))
    same = 0
    for token in ref:
        same += int(logits.argmax()) == token
        logits = state.step(np.array([token]))
    common = next((i for i, (a, b) in enumerate(zip(ref, mine)) if a != b), min(len(ref), len(mine)))
    return same / max(1, len(ref)), common, len(ref)


def engine_perplexity(gen, tokens: list[int], ctx: int, chunks: int, bos: int | None) -> float:
    """Perplexity of the second half of each chunk, prefilled after the first half on the engine's state."""
    first = ctx // 2
    nll, count = 0.0, 0
    for c in range(chunks):
        ids = np.array(tokens[c * ctx : (c + 1) * ctx], dtype=np.int64)
        if bos is not None:
            ids[0] = bos
        state = gen.runtime.new_state(1, capacity=ctx + 1)
        state.prefill(ids[None, :first])
        state.keep_prefill_logits = True
        state.prefill(ids[None, first:])
        scored = np.asarray(state.prefill_logits, dtype=np.float64)[0, :-1]  # positions first .. ctx-2
        top = scored.max(axis=-1, keepdims=True)
        logsumexp = top[:, 0] + np.log(np.exp(scored - top).sum(axis=-1))
        nll += float((logsumexp - scored[np.arange(len(scored)), ids[first + 1 :]]).sum())
        count += len(scored)
    return float(np.exp(nll / count))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gguf", required=True, type=Path)
    ap.add_argument("--text", required=True, type=Path)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=8)
    ap.add_argument("--new", type=int, default=48, help="greedy tokens per prompt")
    args = ap.parse_args(argv)

    from inference4py import OnnxTextGenerator
    from inference4py.gguf.convert import gguf_folder
    from inference4py.gguf.reader import GGUFFile
    from inference4py.optimize.kv_int8 import int8_kv_folder
    from inference4py.tokenization import load_tokenizer

    folder = gguf_folder(args.gguf)
    quantized = int8_kv_folder(folder)
    gguf = GGUFFile(args.gguf)
    bos = int(gguf.get("tokenizer.ggml.bos_token_id")) if gguf.get("tokenizer.ggml.add_bos_token", False) else None
    tokens = load_tokenizer(folder).encode(args.text.read_text(encoding="utf-8"), add_special_tokens=False)
    chunks = min(args.chunks, len(tokens) // args.ctx)
    for name, path in (("float32 KV", folder), ("int8 KV", quantized)):
        result = our_perplexity(path, tokens, args.ctx, chunks, bos)
        print(f"{name}: perplexity {result['ppl']:.4f} over {result['tokens_scored']} tokens ({chunks} x {args.ctx})")
    with (
        OnnxTextGenerator.builder().model_path(str(folder)).build() as float_gen,
        OnnxTextGenerator.builder().model_path(str(folder)).kv_cache("int8").build() as int8_gen,
    ):
        for name, gen in (("float32 KV", float_gen), ("int8 KV", int8_gen)):
            ppl = engine_perplexity(gen, tokens, args.ctx, chunks, bos)
            print(f"{name}, as the engine runs it: perplexity {ppl:.4f} ({chunks} x {args.ctx}, second halves)")
        scores = []
        for prompt in PROMPTS:
            share, common, count = agreement(float_gen, int8_gen, prompt, args.new)
            scores.append(share)
            print(
                f"{prompt[:40]!r}: teacher-forced agreement {share:.3f}, identical free-running prefix {common}/{count}"
            )
        print(f"mean teacher-forced agreement {np.mean(scores):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
