"""A call's constraint options as onnxruntime-genai's own guidance (``GeneratorParams.set_guidance``).

genai also runs llguidance, so ``json_schema``, ``response_format``, ``regex``, ``grammar`` and
``choices`` pass through after inference4py's compiler has checked them: a bad schema gets the
same error as on the native loop. Tool calling stays on the native loop.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from inference4py.errors import ConfigurationError
from inference4py_genai._base import Guidance

__all__ = ["genai_guidance"]


def genai_guidance(options: Mapping[str, Any]) -> Guidance | None:
    """A call's constraint options as onnxruntime-genai's guidance; tools are refused with the fix.

    The options are checked first with inference4py's own compiler, so a bad schema, regex or
    grammar gets the same error as on the native loop.
    """
    if not options:
        return None
    tool_keys = sorted(k for k in ("tools", "tool_choice", "parallel_tool_calls") if k in options)
    if tool_keys:
        raise ConfigurationError(
            f"{', '.join(tool_keys)}: tool calling runs on inference4py's own loop: load this folder with "
            "inference4py.OnnxTextGenerator (it runs genai folders too)."
        )
    from inference4py.generation.constraints.grammar import JSON_DEFAULTS, choices_lark, schema_dict
    from inference4py.tasks.output_control import output_control

    control = output_control(options, template=None)  # validates; one kind at most
    kinds = dict(control.grammar or {})
    if "json_object" in kinds:
        kinds = {"json_schema": {"type": "object"}}
    if "json_schema" in kinds:
        schema = schema_dict(kinds["json_schema"])
        schema["x-guidance"] = {**JSON_DEFAULTS, **schema.get("x-guidance", {})}
        return ("json_schema", json.dumps(schema))
    if "regex" in kinds:
        return ("regex", str(kinds["regex"]))
    if "grammar" in kinds:
        return ("lark_grammar", str(kinds["grammar"]))
    if "choices" in kinds:
        return ("lark_grammar", choices_lark(kinds["choices"]))
    return None
