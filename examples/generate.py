"""Generate text with a decoder-only model, streaming it to the terminal.

python examples/generate.py                                   # SmolLM2-360M-Instruct from the Hub
python examples/generate.py --model tests/fixtures/models/qwen2 --prompt "Hello"   # offline
"""

import argparse
from pathlib import Path

from inference4py import OnnxTextGenerator


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=None, help="hub id or local folder (default: the smolLM2 preset)")
    parser.add_argument("--prompt", default="What is Java?")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    args = parser.parse_args()

    builder = OnnxTextGenerator.smolLM2()
    if args.model:
        builder = builder.model_path(args.model) if Path(args.model).is_dir() else builder.model_id(args.model)
    with builder.max_new_tokens(args.max_new_tokens).temperature(0.7).top_p(0.9).seed(7).build() as gen:
        result = gen.generate(args.prompt, on_token=lambda piece: print(piece, end="", flush=True))
        print()
        print(
            f"[{result.finish_reason}] {result.prompt_tokens} prompt tokens, {result.generated_tokens} generated, "
            f"first token after {result.time_to_first_token * 1000:.0f} ms, {result.tokens_per_second:.1f} tokens/s"
        )


if __name__ == "__main__":
    main()
