"""Chat templates carried by the instruct presets.

They are a fallback: when a model folder has its own template (tokenizer_config.json
or chat_template.jinja) that one is used, since it is the model author's.
"""

from __future__ import annotations

__all__ = ["CHATML_SMOL", "CHATML_QWEN", "ZEPHYR", "GEMMA"]


def _chatml(default_system: str) -> str:
    return (
        "{%- for message in messages -%}"
        "{%- if loop.first and message['role'] != 'system' -%}"
        "{{ '<|im_start|>system\\n" + default_system + "<|im_end|>\\n' }}"
        "{%- endif -%}"
        "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
    )


CHATML_SMOL = _chatml("You are a helpful AI assistant named SmolLM, trained by Hugging Face")
CHATML_QWEN = _chatml("You are Qwen, created by Alibaba Cloud. You are a helpful assistant.")

ZEPHYR = (
    "{%- for message in messages -%}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + eos_token + '\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|assistant|>\\n' }}{%- endif -%}"
)

GEMMA = (
    "{{ bos_token }}"
    "{%- set offset = 0 -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'system' -%}{{ raise_exception('Gemma has no system role: put the instructions in the first user message.') }}{%- endif -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}"
)
