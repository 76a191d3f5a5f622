"""Gemini ``Schema`` (the OpenAPI 3.0 subset of ``parameters`` and ``responseSchema``) -> JSON
Schema, the IR's schema language.

Types are upper case (``OBJECT``, ``STRING``; lower case is accepted too), ``nullable: true``
adds ``null`` to the type; ``propertyOrdering``, ``example`` and the OpenAPI-only ``format``
values have no JSON Schema meaning and are dropped.
Keywords are read in either JSON spelling (``maxItems`` / ``max_items``) and written in JSON
Schema's; anything unknown is kept as sent (the upstream judges it).
"""

from __future__ import annotations

from typing import Any

from modelgate.formats.gemini.wire import invalid
from modelgate.formats.jsonutil import Json

#: Gemini spelling -> JSON Schema keyword, where they differ.
_RENAMED = {
    "any_of": "anyOf",
    "max_items": "maxItems",
    "min_items": "minItems",
    "max_length": "maxLength",
    "min_length": "minLength",
    "max_properties": "maxProperties",
    "min_properties": "minProperties",
    "additional_properties": "additionalProperties",
    "defs": "$defs",
    "$defs": "$defs",
    "ref": "$ref",
}
_DROPPED = frozenset({"nullable", "propertyOrdering", "property_ordering", "type", "example"})
#: OpenAPI ``format`` values JSON Schema does not have (``enum`` marks a string enum, the others
#: number widths); strict schema checkers upstream refuse unknown formats.
_OPENAPI_FORMATS = frozenset({"enum", "int32", "int64", "float", "double"})
#: Keywords whose value is a map of names to schemas.
_SCHEMA_MAPS = frozenset({"properties", "$defs"})
#: Keywords whose value is one schema or a list of schemas.
_SCHEMA_VALUES = frozenset({"items", "additionalProperties", "not"})
_SCHEMA_LISTS = frozenset({"anyOf", "oneOf", "allOf"})
#: Deeper than this a schema is refused (bodies are depth-checked before decoding; this keeps the
#: recursion bounded when the decoder runs on its own).
MAX_DEPTH = 64


def to_json_schema(schema: Any, param: str, depth: int = 0) -> Json:
    if not isinstance(schema, dict):
        raise invalid(f"{param}: expected a schema object", param)
    if depth > MAX_DEPTH:
        raise invalid(f"{param}: schema nested too deeply", param)
    out: Json = {}
    kind = schema.get("type")
    if kind is not None:
        if not isinstance(kind, str):
            raise invalid(f"{param}.type: expected a type name such as OBJECT or STRING", f"{param}.type")
        name = kind.lower()
        if name not in ("type_unspecified", ""):
            out["type"] = [name, "null"] if schema.get("nullable") is True and name != "null" else name
    for key, value in schema.items():
        if key in _DROPPED or (key == "format" and isinstance(value, str) and value in _OPENAPI_FORMATS):
            continue
        target = _RENAMED.get(str(key), str(key))
        where = f"{param}.{key}"
        if target in _SCHEMA_MAPS:
            if not isinstance(value, dict):
                raise invalid(f"{where}: expected an object of schemas", where)
            out[target] = {
                str(name): to_json_schema(sub, f"{where}.{name}", depth + 1) for name, sub in value.items()
            }
        elif target in _SCHEMA_LISTS:
            if not isinstance(value, list):
                raise invalid(f"{where}: expected a list of schemas", where)
            out[target] = [to_json_schema(sub, f"{where}.{i}", depth + 1) for i, sub in enumerate(value)]
        elif target in _SCHEMA_VALUES and isinstance(value, dict):
            out[target] = to_json_schema(value, where, depth + 1)
        else:
            out[target] = value
    if "type" not in out and schema.get("nullable") is True and "anyOf" in out:
        out["anyOf"].append({"type": "null"})
    return out
