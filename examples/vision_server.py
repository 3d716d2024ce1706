"""Ask a vision-language model about an image, in Python and through the server's OpenAI and Anthropic APIs.

python examples/vision_server.py --model tests/fixtures/models/llava-tiny \\
    --image tests/fixtures/models/llava-tiny/images/sunset.png          # offline, the tests' tiny LLaVA
python examples/vision_server.py --model inference4j/phi-3.5-vision-instruct --image photo.jpg

The folder is then served (uvicorn on a free local port, as ``inference4py serve --model FOLDER``)
and asked the same question with the official clients: an OpenAI chat with an ``image_url`` data URL,
and an Anthropic message with a base64 ``image`` block. Greedy decoding gives the same answer each way.
"""

import argparse
import base64
import mimetypes
import socket
import threading
import time
from pathlib import Path

import anthropic
import openai

from inference4py import VisionLanguageModel
from inference4py.serve import create_app, load_models

QUESTION = "Describe this image."


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True, help="a vision-language model folder or hub id")
    parser.add_argument("--image", required=True, help="an image file (PNG, JPEG, WebP, ...)")
    parser.add_argument("--max-tokens", type=int, default=12)
    args = parser.parse_args()

    builder = VisionLanguageModel.builder()
    builder = builder.model_path(args.model) if Path(args.model).is_dir() else builder.model_id(args.model)
    with builder.build() as vlm:
        local = vlm.generate(args.image, QUESTION, max_new_tokens=args.max_tokens).text
        folder = vlm.folder
    print(f"python:    {local!r}")

    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    models = load_models([str(folder)], ["vlm"])
    server = uvicorn.Server(uvicorn.Config(create_app(models), port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    data = base64.b64encode(Path(args.image).read_bytes()).decode()
    media_type = mimetypes.guess_type(args.image)[0] or "image/png"
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none")
        content = [
            {"type": "image_url", "image_url": {"url": f"data:{media_type};base64,{data}"}},
            {"type": "text", "text": QUESTION},
        ]
        chat = client.chat.completions.create(
            model="vlm", messages=[{"role": "user", "content": content}], max_tokens=args.max_tokens
        )
        claude = anthropic.Anthropic(base_url=f"http://127.0.0.1:{port}", api_key="none")
        blocks = [
            {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}},
            {"type": "text", "text": QUESTION},
        ]
        message = claude.messages.create(
            model="vlm", max_tokens=args.max_tokens, messages=[{"role": "user", "content": blocks}]
        )
    finally:
        server.should_exit = True
    answers = [chat.choices[0].message.content, message.content[0].text]  # type: ignore[union-attr]
    print(f"openai:    {answers[0]!r}")
    print(f"anthropic: {answers[1]!r}")
    print(f"same answer through the server: {answers == [local, local]}")


if __name__ == "__main__":
    main()
