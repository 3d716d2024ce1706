"""Bounds that make every JSON value a schema admits end: what keeps constrained output from running on.

A schema that says ``{"type": "number", "maximum": 100}`` still admits ``11.1111…`` with as many
digits as the token budget allows, and a model caught in a loop writes exactly that. Before a schema
is compiled, :func:`bounded_schema` adds a bound to every leaf that has none:

============ ================================================ ===========================================
type         bound added (only when the schema sets none)     why this one
============ ================================================ ===========================================
``string``   ``maxLength`` 1,024 characters                   a field, not a document; set your own
             (not with ``enum``, ``const``, ``pattern``,       ``maxLength`` for longer text
             ``format``: those are bounded already)
``integer``  ``minimum`` / ``maximum`` ±(2^53 - 1)             JSON's safe integers (JavaScript's range)
``number``   ``minimum`` / ``maximum`` ±1e15, and             15 significant digits before the point, 9
             ``multipleOf`` 1e-9                               after it: a double's precision
``array``    ``maxItems`` 1,024                               a list a reader can use
============ ================================================ ===========================================

The schema given is never modified; a bound it sets is kept as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["MAX_ITEMS", "MAX_STRING", "bounded_schema"]

MAX_STRING = 1024
MAX_ITEMS = 1024
_SAFE_INTEGER = 2**53 - 1
_MAX_NUMBER = 1e15
_NUMBER_STEP = 1e-9

# keywords whose value is a schema, a list of schemas, or a name -> schema map
_ONE = ("items", "additionalProperties", "not", "contains", "propertyNames", "if", "then", "else")
_LIST = ("anyOf", "oneOf", "allOf", "prefixItems")
_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_BOUNDED_STRING = ("maxLength", "enum", "const", "pattern", "format")
_RANGE = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


def bounded_schema(schema: Any) -> Any:
    """A copy of ``schema`` with a bound on every string, number, integer and array that has none.

    Example:
        >>> bounded_schema({"type": "number", "maximum": 100})["multipleOf"]
        1e-09
    """
    if not isinstance(schema, Mapping):
        return schema
    out = dict(schema)
    for key in _ONE:
        if isinstance(out.get(key), Mapping):
            out[key] = bounded_schema(out[key])
    for key in _LIST:
        if isinstance(out.get(key), list):
            out[key] = [bounded_schema(s) for s in out[key]]
    for key in _MAP:
        if isinstance(out.get(key), Mapping):
            out[key] = {name: bounded_schema(s) for name, s in out[key].items()}
    types = out.get("type")
    kinds = set(types) if isinstance(types, list) else {types}
    if "string" in kinds and not any(k in out for k in _BOUNDED_STRING):
        out["maxLength"] = MAX_STRING
    if "array" in kinds and "maxItems" not in out:
        out["maxItems"] = max(MAX_ITEMS, int(out.get("minItems", 0)))
    if "enum" in out or "const" in out:
        return out
    if "number" in kinds:
        _bound_range(out, _MAX_NUMBER)
        out.setdefault("multipleOf", _NUMBER_STEP)
    elif "integer" in kinds:
        _bound_range(out, _SAFE_INTEGER)
    return out


def _bound_range(schema: dict[str, Any], limit: float) -> None:
    if not any(k in schema for k in ("minimum", "exclusiveMinimum")):
        schema["minimum"] = -limit
    if not any(k in schema for k in ("maximum", "exclusiveMaximum")):
        schema["maximum"] = limit
