"""Generate text on onnxruntime-genai's loop (inference4py_genai), optionally timing it against inference4py's own.

    pip install "inference4py[genai]"
    python examples/genai_generate.py                                            # Phi-3 mini from the Hub
    python examples/genai_generate.py --model tests/fixtures/models/genai-llama --prompt "The old house"  # offline
    python examples/genai_generate.py --model tests/fixtures/models/genai-llama --compare     # both backends, tokens/s

``--compare`` runs the same greedy call on both backends (a genai folder runs on
both) and prints the median decode speed and time to first token of each.
"""

import argparse
import statistics
from pathlib import Path

from inference4py import OnnxTextGenerator
from inference4py_genai import TextGenerator


def _time(gen, prompt: str, max_new_tokens: int, runs: int) -> tuple[float, float, tuple[int, ...]]:
    gen.generate(prompt, max_new_tokens=max_new_tokens)  # warm-up
    results = [gen.generate(prompt, max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens) for _ in range(runs)]
    speed = statistics.median(r.tokens_per_second for r in results)
    first = statistics.median(r.time_to_first_token for r in results)
    return speed, first, results[0].token_ids


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=None, help="hub id or local genai folder (default: the phi3Mini preset)")
    parser.add_argument("--prompt", default="What is ONNX?")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None, help="intra-op threads of both backends")
    parser.add_argument(
        "--chat", action="store_true", help="with --model: wrap the prompt in the model's chat template"
    )
    parser.add_argument("--compare", action="store_true", help="time both backends on the same folder")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    builder = TextGenerator.phi3Mini()
    if args.model:
        builder = TextGenerator.builder()
        builder = builder.model_path(args.model) if Path(args.model).is_dir() else builder.model_id(args.model)
        if args.chat:
            builder = builder.chat_template()
    if args.threads:
        builder = builder.intra_op_threads(args.threads)
    with builder.max_new_tokens(args.max_new_tokens).build() as gen:
        if not args.compare:
            result = gen.generate(args.prompt, on_token=lambda piece: print(piece, end="", flush=True))
            print()
            print(
                f"[{result.finish_reason}] {result.prompt_tokens} prompt tokens, {result.generated_tokens} generated, "
                f"{result.tokens_per_second:.1f} tokens/s"
            )
            return
        native_builder = OnnxTextGenerator.builder().model_path(gen.folder)
        if args.chat or not args.model:
            native_builder = native_builder.chat_template()
        if args.threads:
            native_builder = native_builder.intra_op_threads(args.threads)
        with native_builder.build() as native:
            rows = [
                ("onnxruntime-genai (inference4py_genai)", *_time(gen, args.prompt, args.max_new_tokens, args.runs)),
                ("native loop (inference4py)", *_time(native, args.prompt, args.max_new_tokens, args.runs)),
            ]
    print(f"{'backend':40} {'tokens/s':>10} {'first token':>12}")
    for name, speed, first, _ in rows:
        print(f"{name:40} {speed:10.0f} {first * 1000:10.2f} ms")
    print("same ids:", rows[0][3] == rows[1][3])


if __name__ == "__main__":
    main()
