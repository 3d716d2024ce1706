"""Constraint kinds compiled to llguidance grammars, checked before any model or token is involved.

:func:`compile_grammar` turns exactly one of ``json_schema``, ``json_object``, ``regex``,
``grammar`` (Lark, or an llguidance JSON grammar) or ``choices`` into the grammar text llguidance
takes, and validates it: a bad schema, regex or grammar is a ConfigurationError naming the fix.
``llguidance`` is imported only here, lazily; without it the error names the extra to install.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from inference4py.errors import ConfigurationError
from inference4py.generation.constraints.bounds import bounded_schema

__all__ = ["JSON_DEFAULTS", "ConstraintKind", "choices_lark", "compile_grammar", "schema_dict"]

ConstraintKind = Literal["json_schema", "json_object", "regex", "grammar", "choices"]

_INSTALL = 'pip install "inference4py[structured]"'
# JSON output without free whitespace: a model (a random one above all) cannot wander into
# endless spaces and newlines.  A schema's own "x-guidance" options override these.
JSON_DEFAULTS: dict[str, Any] = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def _llguidance() -> Any:
    try:
        import llguidance
    except ImportError as exc:
        raise ConfigurationError(
            "Structured output (json_schema, json_object, regex, grammar, choices) needs the llguidance package: "
            f"{_INSTALL} (or pip install llguidance)."
        ) from exc
    return llguidance


def compile_grammar(
    *,
    json_schema: Mapping[str, Any] | str | None = None,
    json_object: bool = False,
    regex: str | None = None,
    grammar: str | None = None,
    choices: Sequence[str] | None = None,
) -> tuple[ConstraintKind, str] | None:
    """Check the constraint options and compile them into one llguidance grammar.

    Needs no tokenizer, so a configuration can be validated before a model is loaded.

    Args:
        json_schema: A JSON Schema, as a dict or a JSON string.
        json_object: Any JSON object (OpenAI's ``response_format={"type": "json_object"}``).
        regex: A regular expression the whole output must match (Rust ``regex`` syntax,
            which is Python's for the common cases; no look-around or backreferences).
        grammar: A Lark grammar (llguidance's dialect, rule ``start``), or an
            llguidance JSON grammar (``{"grammars": [...]}``).
        choices: The output is exactly one of these strings.

    Returns:
        ``(kind, grammar)``, or None when no option is set.

    Raises:
        ConfigurationError: Two options at once, an invalid schema, regex or
            grammar, empty choices; or llguidance is not installed.
    """
    given: list[ConstraintKind] = []
    if json_schema is not None:
        given.append("json_schema")
    if json_object:
        given.append("json_object")
    if regex is not None:
        given.append("regex")
    if grammar is not None:
        given.append("grammar")
    if choices is not None:
        given.append("choices")
    if not given:
        return None
    if len(given) > 1:
        raise ConfigurationError(
            f"Only one output constraint at a time, got {', '.join(given)}: keep one of them "
            "(a JSON schema can express choices and patterns too)."
        )
    kind = given[0]
    llg = _llguidance()
    matcher = llg.LLMatcher
    if kind == "json_schema":
        schema = bounded_schema(schema_dict(json_schema))  # every value ends (see bounds.py)
        try:
            compiled = matcher.grammar_from_json_schema(schema, defaults=JSON_DEFAULTS)
        except ValueError as exc:
            raise ConfigurationError(f"json_schema is not a valid JSON Schema ({exc}). Fix the schema.") from exc
    elif kind == "json_object":
        compiled = matcher.grammar_from_json_schema({"type": "object"}, defaults=JSON_DEFAULTS)
    elif kind == "regex":
        if not isinstance(regex, str) or not regex:
            raise ConfigurationError(f"regex must be a non-empty string, got {regex!r}.")
        compiled = matcher.grammar_from_regex(regex)
    elif kind == "grammar":
        compiled = _grammar_text(grammar)
    else:
        compiled = matcher.grammar_from_lark(choices_lark(choices))
    error = matcher.validate_grammar(compiled)
    if error:
        raise ConfigurationError(_invalid_message(kind, error))
    return kind, compiled


def schema_dict(schema: Any) -> dict[str, Any]:
    """A ``json_schema`` option (a dict, a JSON string, or true / false) as a dict of the schema.

    Raises:
        ConfigurationError: the string is not JSON, or the schema is not an object.
    """
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as exc:
            raise ConfigurationError(
                f"json_schema is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}). "
                "Pass a dict, or a JSON string of the schema."
            ) from exc
    if isinstance(schema, bool):  # true / false are valid schemas: anything / nothing
        schema = {} if schema else {"not": {}}
    if not isinstance(schema, Mapping):
        raise ConfigurationError(
            f"json_schema must be a JSON object (a dict), got {type(schema).__name__}. "
            'Example: {"type": "object", "properties": {"name": {"type": "string"}}}.'
        )
    return dict(schema)


def _grammar_text(grammar: Any) -> str:
    if not isinstance(grammar, str) or not grammar.strip():
        raise ConfigurationError(f"grammar must be a non-empty Lark grammar string, got {grammar!r}.")
    stripped = grammar.lstrip()
    if stripped.startswith("{"):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError:
            data = None
        if isinstance(data, dict) and "grammars" in data:
            return grammar  # already an llguidance JSON grammar
    matcher: Any = _llguidance().LLMatcher
    return str(matcher.grammar_from_lark(grammar))


def choices_lark(choices: Any) -> str:
    """A ``choices`` option (non-empty strings) as a Lark grammar whose start is one of them.

    Raises:
        ConfigurationError: not a list of non-empty strings, or empty.
    """
    if isinstance(choices, str) or not isinstance(choices, Iterable):
        raise ConfigurationError(f"choices must be a list of strings, got {choices!r}.")
    items = list(choices)
    if not items:
        raise ConfigurationError("choices is empty: give at least one string the output may be.")
    for item in items:
        if not isinstance(item, str) or not item:
            raise ConfigurationError(f"choices must be non-empty strings, got {item!r}.")
    # JSON string escapes are valid Lark string literals.
    return "start: " + " | ".join(json.dumps(item) for item in dict.fromkeys(items))


def _invalid_message(kind: ConstraintKind, error: str) -> str:
    detail = error.strip()
    if len(detail) > 600:
        detail = detail[:600] + " ..."
    fix = {
        "json_schema": "Fix the JSON schema (llguidance supports JSON Schema draft 2020-12's common keywords).",
        "json_object": "This is a bug: please report it.",
        "regex": "Fix the regular expression (Rust regex syntax: no look-around, no backreferences).",
        "grammar": "Fix the grammar (Lark syntax as llguidance reads it, with a `start` rule).",
        "choices": "Check the choice strings.",
    }[kind]
    return f"Invalid {kind} constraint: {detail}\n{fix}"
