"""A deterministic instance of a JSON Schema: what the simulator answers for structured output.

``instance_of(schema)`` returns a JSON value valid against ``schema`` for the keywords structured
output uses (OpenAI strict schemas, Pydantic's, Anthropic's): ``type`` (a list makes a nullable
value), ``properties``/``required``/``additionalProperties``/``min|maxProperties``, ``enum``,
``const``, ``anyOf``/``oneOf`` (the first branch that yields a value), ``allOf`` (merged), local
``$ref`` into ``$defs``/``definitions``, ``items``/``prefixItems`` (and draft-7 item lists),
``min|maxItems``, ``uniqueItems``, ``contains``, ``min|maxLength``, ``minimum``/``maximum`` and the exclusive
bounds (draft 4 booleans too), ``multipleOf``, and ``format`` date, time, date-time, duration,
email, hostname, ipv4, ipv6, uri, uuid. ``pattern`` (``schema_pattern``: the shortest text the
pattern describes, lookarounds aside; lengths are then not adjusted); ``not``, ``if``/``then`` and ``dependentSchemas`` are ignored. Numeric bounds
a description ends with (``{minLength: 12, minimum: 5}``: the Anthropic SDK moves the constraints
its API does not take there, for the model to follow) are honoured as the keywords would be.

The same schema always gives the same instance. Optional properties are included near the top
and left out deeper down, arrays hold one item unless bounds say otherwise, and a nullable or
optional branch is taken once nesting is deep, so recursive schemas (a tree of nodes) end.
It never raises: a schema it cannot satisfy (contradictory bounds) still gets a best effort.

No installed or maintained library does this deterministically (the generators on PyPI draw
random values for property tests), so this small walker is the project's own.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Any

from modelgate.upstream.schema_pattern import pattern_text

#: Nesting below which optional properties and one array item are still generated.
_RICH_DEPTH = 4
#: Nesting from which the smallest value is taken (null branches, required properties only).
_DEEP = 8
#: Hard stop for ``$ref`` cycles that cannot end (every branch recursive and required).
_LIMIT = 32
#: Bounds on the work and size of one instance, whatever the schema asks (a request's schema is
#: untrusted: ``minItems: 1e9`` or a schema that refers to itself from several required
#: properties). Past them the instance is cut short and may not be valid.
_MAX_VALUES = 5_000
_MAX_ITEMS = 64
_MAX_LENGTH = 4_096
#: Characters of string values that cost as much as one value against ``_MAX_VALUES``.
_CHARS_PER_VALUE = 64

_FORMATS = {
    "date": "2026-01-01",
    "time": "12:00:00Z",
    "date-time": "2026-01-01T12:00:00Z",
    "duration": "P1D",
    "email": "simulator@example.com",
    "idn-email": "simulator@example.com",
    "hostname": "example.com",
    "idn-hostname": "example.com",
    "ipv4": "192.0.2.1",
    "ipv6": "2001:db8::1",
    "uri": "https://example.com/simulated",
    "iri": "https://example.com/simulated",
    "uri-reference": "https://example.com/simulated",
    "url": "https://example.com/simulated",
    "uuid": "00000000-0000-4000-8000-000000000000",
}
_BOUNDS = frozenset(
    {
        "minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties",
        "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
    }
)  # fmt: skip
_DESCRIBED = re.compile(r"\{([^{}]*)\}\s*$")
_NUMBER = re.compile(r"-?\d+(\.\d+)?([eE][-+]?\d+)?")
_TYPES = ("object", "array", "string", "integer", "number", "boolean", "null")


class _Walk:
    def __init__(self, root: Any) -> None:
        self.root = root
        self.left = _MAX_VALUES

    # references and combinators --------------------------------------------------------------

    def resolve(self, schema: Any, seen: int = 0) -> dict[str, Any]:
        """``schema`` as a dict with its local ``$ref`` followed (siblings of the ref kept)."""
        if schema is True or not isinstance(schema, dict):
            return {}
        ref = schema.get("$ref")
        if not isinstance(ref, str) or seen > _LIMIT:
            return schema
        target = self.pointer(ref)
        if target is None:
            return {k: v for k, v in schema.items() if k != "$ref"}
        siblings = {k: v for k, v in schema.items() if k != "$ref"}
        resolved = self.resolve(target, seen + 1)
        return merge(resolved, siblings) if siblings else resolved

    def pointer(self, ref: str) -> Any:
        if not ref.startswith("#"):
            return None
        node = self.root
        for raw in ref[1:].split("/")[1:] if ref != "#" else []:
            key = raw.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and key in node:
                node = node[key]
            elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
                node = node[int(key)]
            else:
                return None
        return node

    def flatten(self, schema: Any, seen: int = 0) -> dict[str, Any]:
        """``schema`` resolved, with ``allOf`` merged into it."""
        result = self.resolve(schema)
        parts = result.get("allOf")
        if isinstance(parts, list):
            result = {k: v for k, v in result.items() if k != "allOf"}
            for part in parts if seen < _LIMIT else []:
                result = merge(result, self.flatten(part, seen + 1))
        return result

    # values ----------------------------------------------------------------------------------

    def value(self, schema: Any, depth: int, index: int = 0) -> Any:
        if schema is False:
            return None
        self.left -= 1
        if depth > _LIMIT or self.left < 0:
            return None
        node = described_bounds(self.flatten(schema))
        if "const" in node:
            return node["const"]
        enum = node.get("enum")
        if isinstance(enum, list) and enum:
            allowed = [v for v in enum if _type_fits(v, node.get("type"))] or enum
            return allowed[index % len(allowed)]
        for key in ("anyOf", "oneOf"):
            branches = node.get(key)
            if isinstance(branches, list) and branches:
                rest = {k: v for k, v in node.items() if k not in ("anyOf", "oneOf")}
                return self.value(merge(rest, self.branch(branches, depth)), depth + 1, index)
        kind = self.kind(node, depth)
        if kind == "object":
            return self.object(node, depth)
        if kind == "array":
            return self.array(node, depth)
        if kind == "string":
            text = _string(node, index)
            self.left -= len(text) // _CHARS_PER_VALUE
            return text
        if kind in ("integer", "number"):
            return _number(node, index, kind == "integer")
        if kind == "boolean":
            return index % 2 == 0
        return None

    def branch(self, branches: list[Any], depth: int) -> dict[str, Any]:
        """The branch to take: the first, or deep down the first that ends recursion (null, or
        one without references)."""
        if depth >= _DEEP:
            for candidate in branches:
                node = self.resolve(candidate)
                if node.get("type") == "null" or "$ref" not in str(candidate):
                    return node
        return self.resolve(branches[0])

    def kind(self, node: dict[str, Any], depth: int) -> str:
        declared = node.get("type")
        if isinstance(declared, list):
            kinds = [k for k in declared if k in _TYPES]
            if depth >= _DEEP and "null" in kinds:
                return "null"
            concrete = [k for k in kinds if k != "null"]
            return concrete[0] if concrete else "null"
        if isinstance(declared, str):
            return declared
        if any(k in node for k in ("properties", "required", "additionalProperties", "minProperties")):
            return "object"
        if any(k in node for k in ("items", "prefixItems", "minItems", "maxItems", "contains")):
            return "array"
        if any(
            k in node for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
        ):
            return "number"
        return "string"

    def object(self, node: dict[str, Any], depth: int) -> dict[str, Any]:
        properties = node.get("properties")
        properties = properties if isinstance(properties, dict) else {}
        required = [r for r in node.get("required") or [] if isinstance(r, str)]
        extra = node.get("additionalProperties", True)
        names = list(properties) if depth < _RICH_DEPTH else [n for n in properties if n in required]
        names += [r for r in required if r not in names]
        maximum = node.get("maxProperties")
        if isinstance(maximum, int) and len(names) > maximum:
            names = [n for n in names if n in required] + [n for n in names if n not in required]
            names = names[: max(maximum, len(required))]
        result: dict[str, Any] = {}
        for name in names:
            result[name] = self.value(
                properties.get(name, extra if isinstance(extra, dict) else True), depth + 1
            )
        minimum = node.get("minProperties")
        if isinstance(minimum, int) and extra is not False:
            spare = [n for n in properties if n not in result]
            while len(result) < min(minimum, _MAX_ITEMS):
                name = spare.pop(0) if spare else f"key{len(result) + 1}"
                result[name] = self.value(
                    properties.get(name, extra if isinstance(extra, dict) else True), depth + 1
                )
        return result

    def array(self, node: dict[str, Any], depth: int) -> list[Any]:
        prefix = node.get("prefixItems")
        items = node.get("items", True)
        if isinstance(items, list):  # draft 4-7 tuple form
            prefix, items = items, node.get("additionalItems", True)
        prefix = prefix if isinstance(prefix, list) else []
        low = _count(node, "minItems") or 0
        high = _count(node, "maxItems")
        count = min(max(low, 1 if depth < _RICH_DEPTH else 0), _MAX_ITEMS)
        if items is False:
            count = min(count, len(prefix))
        if high is not None:
            count = min(count, high)
        unique = node.get("uniqueItems") is True
        contains = node.get("contains")
        result: list[Any] = []
        for i in range(count):
            schema = prefix[i] if i < len(prefix) else items
            if i == len(prefix) and isinstance(contains, dict):
                schema = {"allOf": [schema, contains]}  # one item also satisfies ``contains``
            result.append(self.value(schema, depth + 1, i if unique else 0))
        if isinstance(contains, dict) and count <= len(prefix) and (high is None or count < high):
            result.append(self.value({"allOf": [items, contains]}, depth + 1, count if unique else 0))
        return result


def described_bounds(node: dict[str, Any]) -> dict[str, Any]:
    """``node`` with the numeric bounds a description ends with as ``{minLength: 12, ...}`` (how
    the Anthropic SDK passes on constraints the API does not take, for the model to follow)."""
    description = node.get("description")
    # Only the end is read: the pattern stays linear, whatever the description's length.
    found = _DESCRIBED.search(description[-400:]) if isinstance(description, str) else None
    if found is None:
        return node
    extra: dict[str, Any] = {}
    for pair in found.group(1).split(", "):
        key, _, raw = pair.partition(": ")
        if key in _BOUNDS and key not in node and _NUMBER.fullmatch(raw):
            number = float(raw)
            extra[key] = int(number) if number.is_integer() else number
    return {**node, **extra} if extra else node


def merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """Both schemas' constraints in one (``allOf``): properties and required unioned, types
    intersected, the tighter bound kept, anything else from ``extra``."""
    result = dict(base)
    for key, value in extra.items():
        old = result.get(key)
        if key == "properties" and isinstance(old, dict) and isinstance(value, dict):
            result[key] = {**old, **value}
        elif key == "required" and isinstance(old, list) and isinstance(value, list):
            result[key] = old + [r for r in value if r not in old]
        elif key == "type" and old is not None and value is not None:
            left = old if isinstance(old, list) else [old]
            right = value if isinstance(value, list) else [value]
            both = [t for t in left if t in right or (t == "integer" and "number" in right)]
            both += [t for t in right if t == "integer" and "number" in left and t not in both]
            result[key] = both if len(both) != 1 else both[0]
        elif key in (
            "minimum",
            "minLength",
            "minItems",
            "minProperties",
            "exclusiveMinimum",
        ) and _both_numbers(old, value):
            result[key] = max(old, value)
        elif key in (
            "maximum",
            "maxLength",
            "maxItems",
            "maxProperties",
            "exclusiveMaximum",
        ) and _both_numbers(old, value):
            result[key] = min(old, value)
        else:
            result[key] = value
    return result


def _count(node: dict[str, Any], key: str) -> int | None:
    value = node.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _both_numbers(a: Any, b: Any) -> bool:
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in (a, b))


def _type_fits(value: Any, declared: Any) -> bool:
    if declared is None:
        return True
    kinds = declared if isinstance(declared, list) else [declared]
    return any(_is(value, k) for k in kinds)


def _is(value: Any, kind: str) -> bool:
    if kind == "null":
        return value is None
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer()
        )
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    if kind == "array":
        return isinstance(value, list)
    return isinstance(value, dict) if kind == "object" else False


def _string(node: dict[str, Any], index: int) -> str:
    pattern = node.get("pattern")
    low = node.get("minLength")
    wanted = low if isinstance(low, int) and not isinstance(low, bool) else 0
    text = pattern_text(pattern, wanted) if isinstance(pattern, str) else None
    if text is not None:
        return text  # what the pattern describes; lengths are not adjusted (anchors would break)
    fmt = node.get("format")
    text = _FORMATS.get(fmt, "simulated") if isinstance(fmt, str) else "simulated"
    if index and fmt not in _FORMATS:
        text = f"{text} {index + 1}"
    elif index and fmt == "uuid":
        text = f"00000000-0000-4000-8000-{index:012d}"
    low = node.get("minLength")
    high = node.get("maxLength")
    if isinstance(low, int) and len(text) < low:
        text += "x" * (min(low, _MAX_LENGTH) - len(text))
    if isinstance(high, int) and len(text) > high:
        text = text[:high] if not index else (text[: max(high - len(str(index)), 0)] + str(index))[-high:]
    return text


def _number(node: dict[str, Any], index: int, integer: bool) -> int | float:
    low, low_open = _bound(node, "minimum", "exclusiveMinimum", lower=True)
    high, high_open = _bound(node, "maximum", "exclusiveMaximum", lower=False)
    raw_step = node.get("multipleOf")
    step = Fraction(str(raw_step)) if _both_numbers(raw_step, 1) and Fraction(str(raw_step)) > 0 else None
    if integer:
        # k * p/q is whole exactly when k is a multiple of q: the whole multiples are those of p.
        step = Fraction(step.numerator) if step is not None else Fraction(1)
    start = Fraction(1 + index)
    if low is not None and (start < low or (low_open and start == low)):
        start = low
    if high is not None and (start > high or (high_open and start == high)):
        start = high if low is None or high > low else low
    value = _fit(start, step, low, low_open, high, high_open)
    if integer and abs(value) < 2**63:
        return int(value)
    return int(value) if value.denominator == 1 and abs(value) < 2**53 else float(value)


def _bound(
    node: dict[str, Any], inclusive: str, exclusive: str, *, lower: bool
) -> tuple[Fraction | None, bool]:
    """The tighter of the inclusive and exclusive bound, and whether it is open."""
    bound: Fraction | None = None
    open_ = False
    value = node.get(inclusive)
    if _both_numbers(value, 0):
        bound = Fraction(str(value))
        if node.get(exclusive) is True:  # draft 4: a boolean beside the bound
            open_ = True
    other = node.get(exclusive)
    if _both_numbers(other, 0):
        candidate = Fraction(str(other))
        tighter = bound is None or (candidate >= bound if lower else candidate <= bound)
        if tighter:
            bound, open_ = candidate, True
    return bound, open_


def _fit(
    start: Fraction,
    step: Fraction | None,
    low: Fraction | None,
    low_open: bool,
    high: Fraction | None,
    high_open: bool,
) -> Fraction:
    """A value at or just inside ``start`` that lies within the bounds (and on ``step``)."""
    unit = step or Fraction(1)
    value = start
    if step is not None:
        value = Fraction(math.ceil(value / step)) * step
    elif low is not None and low_open and value == low:
        value = low + (unit if high is None or high - low > unit else (high - low) / 2)
    if step is not None and low is not None and (value < low or (low_open and value == low)):
        value = (Fraction(math.floor(low / step)) + 1) * step
    if high is not None and (value > high or (high_open and value == high)):
        value = Fraction(math.floor(high / step)) * step if step is not None else high
        if high_open and value == high:
            value -= unit if low is None or high - low > unit else (high - low) / 2
    return value


def instance_of(schema: Any) -> Any:
    """A JSON value valid against ``schema`` (see the module docstring for what is honoured)."""
    try:
        return _Walk(schema).value(schema, 0)
    except (ArithmeticError, ValueError):  # bounds too large for a float, and the like
        return {}
