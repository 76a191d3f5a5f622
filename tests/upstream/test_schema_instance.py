"""The simulator's JSON Schema instances: valid (judged by jsonschema with format checks) and the
same every time, over hand-written schemas, Pydantic models' schemas and generated ones."""

from __future__ import annotations

import datetime
import enum
import uuid
from typing import Any, Literal

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.lib._pydantic import to_strict_json_schema
from pydantic import BaseModel, Field

from modelgate.upstream.schema_instance import instance_of

FORMATS = jsonschema.Draft202012Validator.FORMAT_CHECKER


def assert_valid(schema: Any) -> Any:
    value = instance_of(schema)
    jsonschema.validate(value, schema, cls=jsonschema.Draft202012Validator, format_checker=FORMATS)
    assert instance_of(schema) == value  # deterministic
    return value


SCHEMAS: list[Any] = [
    {},
    True,
    {"type": "null"},
    {"type": "boolean"},
    {"type": ["null", "integer"]},
    {"type": "string", "minLength": 20},
    {"type": "string", "maxLength": 3},
    {"type": "string", "minLength": 0, "maxLength": 0},
    {"type": "integer", "minimum": 7, "multipleOf": 5},
    {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 2},
    {"type": "integer", "maximum": -3},
    {"type": "integer", "multipleOf": 2.5},
    {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
    {"type": "number", "minimum": -10, "maximum": -5, "multipleOf": 0.5},
    {"type": "number", "minimum": 1000.5},
    {"const": {"fixed": [1, 2]}},
    {"enum": ["x", 3, None]},
    {"type": "string", "enum": [1, "one"]},
    {"type": "array", "items": {"enum": ["x", "y", "z"]}, "minItems": 3, "uniqueItems": True},
    {"type": "array", "items": {"type": "integer"}, "minItems": 4, "uniqueItems": True},
    {"type": "array", "items": {"type": "string"}, "minItems": 3, "maxItems": 3, "uniqueItems": True},
    {"type": "array", "maxItems": 0},
    {"type": "array", "contains": {"const": 5}},
    {"type": "array", "items": {"type": "integer"}, "contains": {"minimum": 7}, "minItems": 3},
    {"type": "array", "prefixItems": [{"const": "x"}], "contains": {"type": "integer"}},
    {
        "type": "array",
        "prefixItems": [{"type": "integer"}, {"type": "boolean"}],
        "items": False,
        "minItems": 2,
    },
    {"type": "object", "minProperties": 3, "additionalProperties": {"type": "integer"}},
    {"type": "object", "properties": {"a": {}, "b": {}, "c": {}}, "required": ["c"], "maxProperties": 1},
    {
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "required": ["a", "b"],
        "additionalProperties": {"type": "number"},
    },
    {
        "allOf": [
            {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]},
            {"required": ["y"]},
        ]
    },
    {"allOf": [{"type": ["number", "string"]}, {"type": "integer"}, {"minimum": 4}]},
    {"anyOf": [{"type": "string", "format": "date-time"}, {"type": "null"}], "description": "when"},
    {
        "oneOf": [
            {"type": "object", "properties": {"kind": {"const": "a"}}, "required": ["kind"]},
            {"type": "object", "properties": {"kind": {"const": "b"}}, "required": ["kind"]},
        ]
    },
    # Recursive: a tree, and linked lists whose end is either branch.
    {
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {
                    "v": {"type": "integer"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                },
                "required": ["v", "children"],
            }
        },
        "$ref": "#/$defs/Node",
    },
    {
        "definitions": {
            "L": {
                "anyOf": [
                    {
                        "type": "object",
                        "properties": {"next": {"$ref": "#/definitions/L"}},
                        "required": ["next"],
                    },
                    {"type": "null"},
                ]
            }
        },
        "$ref": "#/definitions/L",
    },
    {"type": "object", "properties": {"self": {"$ref": "#"}}, "additionalProperties": False},
    *(
        {"type": "string", "format": fmt}
        for fmt in (
            "date",
            "time",
            "date-time",
            "duration",
            "email",
            "hostname",
            "ipv4",
            "ipv6",
            "uri",
            "uuid",
        )
    ),
    {"type": "array", "items": {"type": "string", "format": "uuid"}, "minItems": 3, "uniqueItems": True},
    {"type": "string", "pattern": "^sim"},
    *(
        {"type": "string", "pattern": pattern, **({"minLength": low} if low else {})}
        for pattern, low in [
            (r"^[A-Z]{3}-\d{4}$", 0),
            (r"^\+?[1-9]\d{1,14}$", 0),
            (r"^[a-z0-9._%+-]+@[a-z0-9.-]+\.[a-z]{2,}$", 0),
            (r"^(foo|bar)+baz$", 0),
            (r"^[^\s@]+$", 0),
            (r"^(?:[01]\d|2[0-3]):[0-5]\d$", 0),
            (r"^#[0-9a-fA-F]{6}$", 0),
            (r"^(a|b)\1$", 0),
            (r"^\w+\s\w+$", 0),
            (r"^[^a-z0-9]$", 0),
            (r"^\d+$", 12),
            (r"^(x{2}y?)+$", 7),
            (r"^[A-Z][a-z]*$", 5),
        ]
    ),
]


@pytest.mark.parametrize("schema", SCHEMAS, ids=range(len(SCHEMAS)))
def test_each_schema_gets_a_valid_instance(schema: Any) -> None:
    assert_valid(schema)


def test_patterns_give_the_text_they_describe() -> None:
    assert instance_of({"type": "string", "pattern": r"^[A-Z]{3}-\d{4}$"}) == "AAA-0000"
    assert instance_of({"type": "string", "pattern": r"^\d+$", "minLength": 5}) == "00000"
    # A pattern Python cannot parse falls back to the usual text; a hostile one stays short and quick.
    assert instance_of({"type": "string", "pattern": r"^\p{L}+$"}) == "simulated"
    assert len(instance_of({"type": "string", "pattern": "((a{100}){100}){100}"})) == 256


def test_what_the_instances_look_like() -> None:
    assert instance_of({"type": "object", "properties": {"a": {"type": "string"}}}) == {"a": "simulated"}
    assert instance_of({"type": ["string", "null"]}) == "simulated"  # the informative type first
    assert instance_of({"anyOf": [{"type": "integer"}, {"type": "null"}]}) == 1  # first branch
    deep = instance_of(
        {
            "$defs": {"n": {"type": ["object", "null"], "properties": {"n": {"$ref": "#/$defs/n"}}}},
            "$ref": "#/$defs/n",
        }
    )
    depth = 0
    while isinstance(deep, dict):
        deep, depth = deep.get("n"), depth + 1
    assert 1 < depth < 12  # nested a few levels, then ends


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Line(BaseModel):
    sku: str = Field(min_length=3, max_length=8)
    quantity: int = Field(ge=1, le=99)
    price: float = Field(gt=0, multiple_of=0.25)


class Order(BaseModel):
    id: uuid.UUID
    placed: datetime.datetime
    due: datetime.date
    lines: list[Line] = Field(min_length=2)
    color: Color
    note: str | None
    kind: Literal["retail", "wholesale"]
    parent: Order | None = None
    extra: dict[str, int] = {}


@pytest.mark.parametrize("strict", [True, False])
def test_pydantic_models_schemas_give_instances_the_model_accepts(strict: bool) -> None:
    schema = to_strict_json_schema(Order) if strict else Order.model_json_schema()
    value = assert_valid(schema)
    order = Order.model_validate(value)
    assert len(order.lines) == 2 and order.kind == "retail"


# Generated schemas: random combinations of the supported keywords, each satisfiable by
# construction (bounds ordered, wide enough for their step).

_leaf = st.one_of(
    st.just({"type": "null"}),
    st.just({"type": "boolean"}),
    st.builds(
        lambda low, span, fmt: (
            {"type": "string", "minLength": low, "maxLength": low + span}
            | ({"format": fmt} if fmt and low == 0 and span >= 40 else {})
        ),
        st.integers(0, 30),
        st.integers(0, 50),
        st.sampled_from([None, "date", "date-time", "email", "uri", "uuid", "ipv4"]),
    ),
    st.builds(
        lambda low, span, step, kind, open_low: {
            "type": kind,
            **({"exclusiveMinimum": low} if open_low else {"minimum": low}),
            "maximum": low + span * step + step,
            "multipleOf": step,
        },
        st.integers(-1000, 1000),
        st.integers(1, 20),
        st.sampled_from([1, 2, 3, 5, 10]),
        st.sampled_from(["integer", "number"]),
        st.booleans(),
    ),
    st.builds(
        lambda values: {"enum": values},
        st.lists(st.one_of(st.integers(), st.text(max_size=5), st.none()), min_size=1),
    ),
    st.builds(lambda value: {"const": value}, st.one_of(st.integers(), st.text(max_size=5), st.booleans())),
)


def _compound(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    names = st.text(alphabet="abcdefgh", min_size=1, max_size=4)
    return st.one_of(
        st.builds(
            lambda props, required, closed: {
                "type": "object",
                "properties": props,
                "required": [n for n in props if n in required],
                **({"additionalProperties": False} if closed else {}),
            },
            st.dictionaries(names, children, max_size=4),
            st.sets(names),
            st.booleans(),
        ),
        st.builds(
            lambda item, low, span: {"type": "array", "items": item, "minItems": low, "maxItems": low + span},
            children,
            st.integers(0, 3),
            st.integers(0, 3),
        ),
        st.builds(lambda branches: {"anyOf": branches}, st.lists(children, min_size=1, max_size=3)),
        st.builds(
            lambda inner: {
                "type": [inner.get("type", "string"), "null"],
                **{k: v for k, v in inner.items() if k != "type"},
            },
            _leaf.filter(lambda s: "type" in s and s["type"] != "null"),
        ),
        st.builds(lambda inner: {"allOf": [inner]}, children),
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.recursive(_leaf, _compound, max_leaves=12), st.booleans())
def test_generated_schemas_get_valid_instances(schema: Any, by_reference: bool) -> None:
    assert_valid({"$defs": {"d": schema}, "$ref": "#/$defs/d"} if by_reference else schema)
