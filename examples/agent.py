"""A small agent loop over the three APIs the server speaks: the model calls a tool, gets its result, answers.

The same loop runs through OpenAI's chat completions, OpenAI's Responses API and Anthropic's
Messages API, with each API's official client, against `inference4py serve` (started here on a
free port, or one you run: --base-url).

python examples/agent.py --model qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
python examples/agent.py --base-url http://127.0.0.1:8000 --served-name qwen2.5-coder
python examples/agent.py --model tests/fixtures/models/qwen2 --tool-choice required   # random weights
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator

import anthropic
import openai

QUESTION = "What's the weather in Paris?"
ANSWER = "none"  # after the tool's result: answer in text (a real agent would loop with "auto")
WEATHER = {
    "name": "get_weather",
    "description": "The current weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 40}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


def get_weather(city: str = "?") -> str:
    """The tool: a real agent would call a weather service here."""
    return json.dumps({"city": city, "temperature_c": 18, "sky": "sunny"})


def run_tool(name: str, arguments: dict) -> str:
    if name != "get_weather":
        return json.dumps({"error": f"no tool named {name}"})
    return get_weather(**{k: v for k, v in arguments.items() if k == "city"})


def chat_completions(client: openai.OpenAI, model: str, choice: str, max_tokens: int) -> str:
    tools = [{"type": "function", "function": WEATHER}]
    messages: list[dict] = [{"role": "user", "content": QUESTION}]
    first = client.chat.completions.create(
        model=model, messages=messages, tools=tools, tool_choice=choice, max_tokens=max_tokens
    )
    message = first.choices[0].message
    if first.choices[0].finish_reason == "length":
        return "cut by max_tokens before the turn ended: raise --max-tokens"
    if not message.tool_calls:
        return f"answered without a tool: {message.content!r}"
    messages.append(message.model_dump(exclude_none=True))
    for call in message.tool_calls:
        result = run_tool(call.function.name, json.loads(call.function.arguments))
        print(f"  tool {call.function.name}({call.function.arguments}) -> {result}")
        messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    final = client.chat.completions.create(
        model=model, messages=messages, tools=tools, tool_choice=ANSWER, max_tokens=max_tokens
    )
    return final.choices[0].message.content or ""


def responses(client: openai.OpenAI, model: str, choice: str, max_tokens: int) -> str:
    tools = [{"type": "function", **WEATHER}]
    first = client.responses.create(
        model=model, input=QUESTION, tools=tools, tool_choice=choice, max_output_tokens=max_tokens
    )
    if first.status == "incomplete":
        return "cut by max_output_tokens before the turn ended: raise --max-tokens"
    calls = [item for item in first.output if item.type == "function_call"]
    if not calls:
        return f"answered without a tool: {first.output_text!r}"
    outputs = []
    for call in calls:
        result = run_tool(call.name, json.loads(call.arguments))
        print(f"  tool {call.name}({call.arguments}) -> {result}")
        outputs.append({"type": "function_call_output", "call_id": call.call_id, "output": result})
    final = client.responses.create(  # the conversation so far is kept by the server
        model=model,
        previous_response_id=first.id,
        input=outputs,
        tools=tools,
        tool_choice=ANSWER,
        max_output_tokens=max_tokens,
    )
    return final.output_text


def messages_api(client: anthropic.Anthropic, model: str, choice: str, max_tokens: int) -> str:
    tools = [{"name": WEATHER["name"], "description": WEATHER["description"], "input_schema": WEATHER["parameters"]}]
    tool_choice = {"type": "any"} if choice == "required" else {"type": choice}
    conversation: list[dict] = [{"role": "user", "content": QUESTION}]
    first = client.messages.create(
        model=model, messages=conversation, tools=tools, tool_choice=tool_choice, max_tokens=max_tokens
    )
    if first.stop_reason == "max_tokens":
        return "cut by max_tokens before the turn ended: raise --max-tokens"
    uses = [block for block in first.content if block.type == "tool_use"]
    if not uses:
        return f"answered without a tool: {[b.model_dump() for b in first.content]!r}"
    conversation.append({"role": "assistant", "content": [block.model_dump() for block in first.content]})
    results = []
    for use in uses:
        result = run_tool(use.name, dict(use.input))
        print(f"  tool {use.name}({json.dumps(use.input)}) -> {result}")
        results.append({"type": "tool_result", "tool_use_id": use.id, "content": result})
    conversation.append({"role": "user", "content": results})
    final = client.messages.create(
        model=model, messages=conversation, tools=tools, tool_choice={"type": ANSWER}, max_tokens=max_tokens
    )
    return "".join(block.text for block in final.content if block.type == "text")


@contextlib.contextmanager
def local_server(model: str) -> Iterator[tuple[str, str]]:
    """`inference4py serve --model MODEL` in this process, on a free port: (base URL, served name)."""
    import uvicorn

    from inference4py.serve import create_app, load_models

    models = load_models([model])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(models), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}", next(iter(models))
    finally:
        server.should_exit = True
        thread.join()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", help="a GGUF file or model folder to serve here")
    parser.add_argument("--base-url", help="a running inference4py server instead (e.g. http://127.0.0.1:8000)")
    parser.add_argument("--served-name", help="the model's name on that server")
    parser.add_argument("--tool-choice", default="auto", choices=["auto", "required"])
    parser.add_argument("--max-tokens", type=int, default=120)
    args = parser.parse_args()
    if not args.model and not (args.base_url and args.served_name):
        parser.error("give --model, or --base-url and --served-name")

    with contextlib.ExitStack() as stack:
        if args.base_url:
            base, name = args.base_url.rstrip("/"), args.served_name
        else:
            base, name = stack.enter_context(local_server(args.model))
        oai = openai.OpenAI(base_url=f"{base}/v1", api_key="none")
        claude = anthropic.Anthropic(base_url=base, api_key="none")
        for api, run in (
            ("chat completions", lambda: chat_completions(oai, name, args.tool_choice, args.max_tokens)),
            ("responses", lambda: responses(oai, name, args.tool_choice, args.max_tokens)),
            ("messages", lambda: messages_api(claude, name, args.tool_choice, args.max_tokens)),
        ):
            print(f"{api}: {QUESTION}")
            print(f"  answer: {run()!r}")


if __name__ == "__main__":
    main()
