"""gpt-oss's Harmony format in tests: a Harmony chat template, the gpt-oss fixture's tokenizer with
Harmony's special tokens, and a tiny random gpt-oss GGUF model whose vocabulary is laid out as gpt-oss's.

The gpt-oss fixtures (tests/fixtures/gguf/gptoss-*.gguf) carry a small trained BPE under the ``gpt-4o``
pre-tokenizer with three ChatML specials, not o200k_harmony's specials, and no chat template.
:func:`harmony_tokenizer` keeps the fixture's 1,000 regular tokens and merges and puts Harmony's 21
specials after them in o200k_harmony's order (``<|startoftext|>`` at 199998 there, 1000 here; ``<|return|>``
200002 / 1004; ``<|channel|>`` 200005 / 1007 ...), as llama.cpp's converter writes them (control tokens),
converted by the library's GGUF tokenizer code. The template is written for these tests after OpenAI's
description of Harmony: the real gpt-oss template is not among the fixtures.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import FIXTURES

ROOT = Path(__file__).resolve().parents[1]

HARMONY_TEMPLATE = """\
{#- Harmony, written for the tests: system and developer messages, tools as a TypeScript namespace,
    earlier turns with their reasoning and calls, tool results -#}
{%- macro ts_type(spec) -%}
{%- if spec.type == "string" and spec.enum is defined -%}{{ spec.enum | map("tojson") | join(" | ") }}
{%- elif spec.type == "string" -%}string
{%- elif spec.type in ["number", "integer"] -%}number
{%- elif spec.type == "boolean" -%}boolean
{%- elif spec.type == "array" -%}{{ ts_type(spec["items"]) if spec["items"] is defined else "any" }}[]
{%- elif spec.type == "object" and spec.properties is defined -%}
{ {%- for key, value in spec.properties.items() -%}
{{ key }}{{ "" if key in spec.get("required", []) else "?" }}: {{ ts_type(value) }}{{ ", " if not loop.last }}
{%- endfor -%} }
{%- else -%}any
{%- endif -%}
{%- endmacro -%}
{%- set ns = namespace(developer=none, last_call=none) -%}
{%- if messages and messages[0].role in ["system", "developer"] -%}
{%- set ns.developer = messages[0].content -%}
{%- set conversation = messages[1:] -%}
{%- else -%}
{%- set conversation = messages -%}
{%- endif -%}
<|start|>system<|message|>{{ model_identity | default("You are a helpful assistant.") }}
Knowledge cutoff: 2024-06
Current date: {{ strftime_now("%Y-%m-%d") }}

Reasoning: {{ reasoning_effort | default("medium") }}
{%- if builtin_tools %}

# Tools
{%- for tool in builtin_tools %}

## {{ tool }}
{%- endfor %}
{%- endif %}

# Valid channels: analysis, commentary, final. Channel must be included for every message.
{%- if tools %}
Calls to these tools must go to the commentary channel: 'functions'.
{%- endif -%}
<|end|>
{%- if ns.developer or tools -%}
<|start|>developer<|message|>
{%- if ns.developer %}# Instructions

{{ ns.developer }}
{% endif -%}
{%- if tools %}# Tools

## functions

namespace functions {
{%- for tool in tools %}
{%- set fn = tool.function if tool.function is defined else tool %}

// {{ fn.description | default("") }}
type {{ fn.name }} = (_: {{ ts_type(fn.parameters) if fn.parameters is defined else "{}" }}) => any;
{%- endfor %}

} // namespace functions
{%- endif -%}
<|end|>
{%- endif -%}
{%- for message in conversation -%}
{%- if message.role == "user" -%}
<|start|>user<|message|>{{ message.content }}<|end|>
{%- elif message.role == "assistant" and message.tool_calls -%}
{%- if message.content and message.thinking -%}
{{ raise_exception("Pass a calling turn's reasoning as thinking or its preamble as content, not both.") }}
{%- endif -%}
{%- if message.thinking -%}
<|start|>assistant<|channel|>analysis<|message|>{{ message.thinking }}<|end|>
{%- endif -%}
{%- if message.content -%}
<|start|>assistant<|channel|>commentary<|message|>{{ message.content }}<|end|>
{%- endif -%}
{%- for call in message.tool_calls -%}
{%- set fn = call.function if call.function is defined else call -%}
{%- set ns.last_call = fn.name -%}
<|start|>assistant to=functions.{{ fn.name }}<|channel|>commentary json<|message|>{{ fn.arguments | tojson }}<|call|>
{%- endfor -%}
{%- elif message.role == "assistant" -%}
<|start|>assistant<|channel|>final<|message|>{{ message.content }}<|end|>
{%- elif message.role == "tool" -%}
{%- if ns.last_call is none -%}
{{ raise_exception("A tool result needs an earlier assistant message with a tool call.") }}
{%- endif -%}
<|start|>functions.{{ message.name if message.name else ns.last_call }} to=assistant<|channel|>commentary<|message|>
{{- message.content }}<|end|>
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}<|start|>assistant{%- endif -%}
"""

# o200k_harmony's specials from id 199998 on (the rest of the 21 are reserved)
_HARMONY_SPECIALS = {
    0: "<|startoftext|>",
    1: "<|endoftext|>",
    4: "<|return|>",
    5: "<|constrain|>",
    7: "<|channel|>",
    8: "<|start|>",
    9: "<|end|>",
    10: "<|message|>",
    14: "<|call|>",
    20: "<|endofprompt|>",
}
_CONTROL = 3  # llama.cpp's token type of a special token


def harmony_metadata() -> dict:
    """The gpt-oss fixture's GGUF metadata with Harmony's specials in place of its three ChatML ones."""
    from inference4py.gguf.reader import GGUFFile

    metadata = dict(GGUFFile(FIXTURES / "gguf" / "gptoss-F32.gguf").metadata)
    regular = 1000
    tokens = list(metadata["tokenizer.ggml.tokens"][:regular])
    types = list(metadata["tokenizer.ggml.token_type"][:regular])
    specials = [_HARMONY_SPECIALS.get(k, f"<|reserved_{199998 + k}|>") for k in range(21)]
    metadata.update(
        {
            "tokenizer.ggml.tokens": tokens + specials,
            "tokenizer.ggml.token_type": types + [_CONTROL] * len(specials),
            "tokenizer.ggml.bos_token_id": regular + specials.index("<|startoftext|>"),
            "tokenizer.ggml.eos_token_id": regular + specials.index("<|return|>"),
            "tokenizer.ggml.padding_token_id": regular + specials.index("<|endoftext|>"),
            "tokenizer.chat_template": HARMONY_TEMPLATE,
        }
    )
    return metadata


def harmony_tokenizer(folder: Path):
    """The library's tokenizer of :func:`harmony_metadata`, written to ``folder`` as the converter writes it."""
    from inference4py.gguf.tokenizer import tokenizer_files
    from inference4py.tokenization import load_tokenizer

    folder.mkdir(parents=True, exist_ok=True)
    for name, content in tokenizer_files(harmony_metadata()).items():
        (folder / name).write_text(json.dumps(content, ensure_ascii=False), encoding="utf-8")
    return load_tokenizer(folder)


def tiny_gpt_oss(root: Path) -> Path:
    """A tiny random gpt-oss GGUF file with Harmony's vocabulary layout (tools/random_gguf.py's
    ``tiny-gpt-oss``: 2 layers, 4 experts; specials at o200k_harmony's places after 1,000 regular
    tokens), converted to a model folder."""
    from inference4py.gguf.convert import convert_gguf

    source = root / "tiny-gpt-oss.gguf"
    script = ROOT / "tools" / "random_gguf.py"
    args = [sys.executable, str(script), "--quiet", "--shape", "tiny-gpt-oss", "--mix", "q8_0", str(source)]
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return convert_gguf(source, root / "converted")


def scripted_gpt_oss(root: Path):
    """``model(script)``: the tiny gpt-oss model (:func:`tiny_gpt_oss`, converted once under ``root``) with the
    Harmony template, forced to write ``script`` (a random model writes no Harmony by itself)."""
    from inference4py import OnnxTextGenerator
    from tests.conftest import scripted

    folder = tiny_gpt_oss(root)
    plain = OnnxTextGenerator.builder().model_path(folder).chat_template(HARMONY_TEMPLATE).build()

    def model(script: str) -> OnnxTextGenerator:
        forced = scripted(plain.tokenizer, script, end="<|return|>")
        return (
            OnnxTextGenerator.builder()
            .model_path(folder)
            .chat_template(HARMONY_TEMPLATE)
            .logits_processor(forced)
            .build()
        )

    return model
