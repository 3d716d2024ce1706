"""Tool calling: tools in OpenAI form, rendered by the model's chat template, calls parsed from its output.

The model's own chat template renders the tools (the ``tools`` variable, as
transformers' ``apply_chat_template`` passes it) and the conversation, including
assistant turns that carry ``tool_calls`` and ``role: "tool"`` results.  What the
model writes back is parsed by a small function per template family, chosen by
a marker in the template source:

=============== ============================================== =====================================
family          output format                                  template marker
=============== ============================================== =====================================
``hermes``      ``<tool_call>\\n{"name": .., "arguments": ..}   ``<tool_call>`` (Qwen2.5, Qwen3,
                \\n</tool_call>`` (one block per call)          Hermes 2 Pro / 3)
``llama3_json`` ``{"name": .., "parameters": ..}``, optionally  ``"parameters"`` and
                after ``<|python_tag|>``, several joined by ``;`` ``<|start_header_id|>`` (Llama 3.x)
``mistral``     ``[TOOL_CALLS] [{"name": .., "arguments": ..}]`` ``[TOOL_CALLS]`` (Mistral v0.3)
``mistral_args`` ``[TOOL_CALLS]name[ARGS]{..}`` (one per call)  ``[TOOL_CALLS]`` and ``[ARGS]``
``harmony``     ``<|channel|>commentary to=functions.NAME      ``<|channel|>`` and ``<|message|>``
                <|constrain|>json<|message|>{..}`` (gpt-oss;    (gpt-oss; a model whose vocabulary
                one call per turn, its reasoning on the         is Harmony's gets this family
                ``analysis`` channel)                           whatever its template)
=============== ============================================== =====================================

Parsing never raises on model output: a call that is not valid JSON, or not a
``name`` with object arguments, stays in the text.  With ``tool_choice="required"``
or a named function, :func:`tool_call_constraint` gives an llguidance Lark grammar
that admits exactly the family's call format with arguments valid against the
function's ``parameters`` schema.

Example:
    >>> request = prepare_tools(tools, "auto", tokenizer.chat_templates.get("tool_use", tokenizer.chat_template))  # doctest: +SKIP
    >>> prompt = tokenizer.apply_chat_template(messages_for_template(messages), tools=request.tools)  # doctest: +SKIP
    >>> content, calls = request.parse(generated_text)  # doctest: +SKIP
"""

from __future__ import annotations

from inference4py.tasks.tools.calls import ToolCall as ToolCall
from inference4py.tasks.tools.grammar import tool_call_constraint as tool_call_constraint
from inference4py.tasks.tools.parsers import TOOL_FAMILIES as TOOL_FAMILIES
from inference4py.tasks.tools.parsers import detect_tool_family as detect_tool_family
from inference4py.tasks.tools.parsers import parse_harmony_tool_calls as parse_harmony_tool_calls
from inference4py.tasks.tools.parsers import parse_hermes_tool_calls as parse_hermes_tool_calls
from inference4py.tasks.tools.parsers import parse_llama3_tool_calls as parse_llama3_tool_calls
from inference4py.tasks.tools.parsers import parse_mistral_tool_calls as parse_mistral_tool_calls
from inference4py.tasks.tools.parsers import parse_tool_calls as parse_tool_calls
from inference4py.tasks.tools.parsers import template_supports_tools as template_supports_tools
from inference4py.tasks.tools.render import messages_for_template as messages_for_template
from inference4py.tasks.tools.request import ToolRequest as ToolRequest
from inference4py.tasks.tools.request import prepare_tools as prepare_tools
from inference4py.tasks.tools.spec import ToolChoice as ToolChoice
from inference4py.tasks.tools.spec import validate_tool_choice as validate_tool_choice
from inference4py.tasks.tools.spec import validate_tools as validate_tools

__all__ = [
    "ToolCall",
    "ToolChoice",
    "ToolRequest",
    "TOOL_FAMILIES",
    "validate_tools",
    "validate_tool_choice",
    "template_supports_tools",
    "detect_tool_family",
    "prepare_tools",
    "parse_tool_calls",
    "parse_hermes_tool_calls",
    "parse_llama3_tool_calls",
    "parse_mistral_tool_calls",
    "parse_harmony_tool_calls",
    "messages_for_template",
    "tool_call_constraint",
]
