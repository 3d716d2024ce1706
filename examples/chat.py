"""A multi-turn chat loop with a chat model (type an empty line to quit).

python examples/chat.py
python examples/chat.py --model tests/fixtures/models/qwen2 --max-new-tokens 16 < questions.txt
"""

import argparse
import sys
from pathlib import Path

from inference4py import OnnxTextGenerator


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=None, help="hub id or local folder (default: the qwen2 preset)")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--system", default="You are a concise assistant.")
    args = parser.parse_args()

    builder = OnnxTextGenerator.qwen2()
    if args.model:
        builder = builder.model_path(args.model) if Path(args.model).is_dir() else builder.model_id(args.model)
    messages = [{"role": "system", "content": args.system}]
    with builder.max_new_tokens(args.max_new_tokens).build() as gen:
        for line in sys.stdin:
            if not line.strip():
                break
            messages.append({"role": "user", "content": line.strip()})
            print("assistant: ", end="", flush=True)
            reply = gen.generate(messages, on_token=lambda piece: print(piece, end="", flush=True))
            print()
            messages.append({"role": "assistant", "content": reply.text})


if __name__ == "__main__":
    main()
