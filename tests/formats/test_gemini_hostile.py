"""Hostile Gemini bodies: whatever a client sends, decoding gives an IR request or an
``InvalidRequest`` naming the field, never another exception (which would be a 500).

Bodies are valid ones with parts replaced by arbitrary JSON (values as ``orjson`` parses them:
integers up to 64 bits, finite floats), plus hand-picked shapes: wrong types, huge numbers,
unknown roles, deep schemas.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modelgate import errors, ir
from modelgate.formats.gemini import CODEC
from modelgate.formats.gemini import request as gemini_request

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.sampled_from(
        ["user", "model", "ANY", "AUTO", "application/json", "image/png", "OBJECT", "https://x.io/a.png"]
    ),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)

VALID: dict[str, Any] = {
    "systemInstruction": {"parts": [{"text": "sys"}]},
    "contents": [
        {
            "role": "user",
            "parts": [{"text": "hi"}, {"inlineData": {"mimeType": "image/png", "data": "iVBOR"}}],
        },
        {
            "role": "model",
            "parts": [
                {"text": "t", "thought": True, "thoughtSignature": "c2ln"},
                {"functionCall": {"id": "c1", "name": "f", "args": {"a": 1}}},
            ],
        },
        {"role": "user", "parts": [{"functionResponse": {"id": "c1", "name": "f", "response": {"ok": 1}}}]},
    ],
    "tools": [
        {
            "functionDeclarations": [
                {
                    "name": "f",
                    "description": "d",
                    "parameters": {"type": "OBJECT", "properties": {"a": {"type": "INTEGER"}}},
                }
            ]
        },
        {"googleSearch": {}},
    ],
    "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["f"]}},
    "generationConfig": {
        "maxOutputTokens": 100,
        "temperature": 0.5,
        "topP": 0.9,
        "topK": 3,
        "stopSequences": ["x"],
        "candidateCount": 1,
        "responseMimeType": "application/json",
        "responseSchema": {
            "type": "OBJECT",
            "properties": {"a": {"type": "STRING", "format": "enum", "nullable": True}},
        },
        "thinkingConfig": {"thinkingBudget": 100, "includeThoughts": True},
    },
    "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
}


def paths_of(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for key, sub in value.items():
            out += paths_of(sub, (*prefix, key))
    elif isinstance(value, list):
        for i, sub in enumerate(value):
            out += paths_of(sub, (*prefix, i))
    return out


PATHS = paths_of(VALID)[1:]


def replaced(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    body = copy.deepcopy(VALID)
    target: Any = body
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return body


def outcome(body: Any) -> None:
    """Decoding, validating, counting and the encoders' body reads: refusals are InvalidRequest,
    and what decodes can be written as JSON again (tool schemas and inputs go to an upstream)."""
    for check in (
        lambda: CODEC.validate(body),
        lambda: CODEC.validate(body, counting=True),
        lambda: CODEC.requested_max_tokens(body),
        lambda: CODEC.decode_count_request(body, model="aria"),
    ):
        with contextlib.suppress(errors.InvalidRequest):
            check()
    with contextlib.suppress(errors.InvalidRequest):
        req = CODEC.decode_request(body, model="aria", stream=True)
        orjson.dumps([t.input_schema for t in req.tools])
        orjson.dumps([p.input for m in req.messages for p in m.content if isinstance(p, ir.ToolUsePart)])
        orjson.dumps(req.response_format)
    CODEC.offers_web_search(body)
    gemini_request.shows_thoughts(body)
    CODEC.usage_of(body)


def test_odd_schema_keywords_pass_through() -> None:
    schema = {
        "type": "OBJECT",
        "format": {"x": [1]},
        "properties": {"a": {"type": "STRING", "format": ["enum"]}},
    }
    tool = {"functionDeclarations": [{"name": "f", "parameters": schema}]}
    req = CODEC.decode_request({"contents": [{"parts": [{"text": "x"}]}], "tools": [tool]}, model="aria")
    assert req.tools[0].input_schema == {
        "type": "object",
        "format": {"x": [1]},
        "properties": {"a": {"type": "string", "format": ["enum"]}},
    }


def test_the_valid_body_decodes() -> None:
    req = CODEC.decode_request(VALID, model="aria")
    assert req.tool_choice is not None and req.tool_choice.name == "f"
    orjson.dumps(req.tools[0].input_schema)


@settings(max_examples=600, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.sampled_from(PATHS), JSON_VALUES)
def test_any_field_replaced_by_any_json(path: tuple[Any, ...], value: Any) -> None:
    outcome(replaced(path, value))


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(
            [
                "contents", "systemInstruction", "system_instruction", "tools", "toolConfig", "generationConfig",
                "generation_config", "cachedContent", "safetySettings", "generateContentRequest",
            ]
        ),
        JSON_VALUES,
    )
)  # fmt: skip
def test_any_top_level_fields(body: dict[str, Any]) -> None:
    outcome(body)


def nested_schema(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "STRING"}
    for _ in range(depth):
        schema = {"type": "OBJECT", "properties": {"a": schema}}
    return schema


@pytest.mark.parametrize(
    "body",
    [
        {"contents": [{"role": "assistant", "parts": [{"text": "x"}]}]},
        {"contents": [{"role": 7, "parts": [{"text": "x"}]}]},
        {"contents": [{"role": {"a": 1}, "parts": [{"text": "x"}]}]},
        {"contents": [{"role": "user", "parts": [{"text": "x"}]}], "generationConfig": {"maxOutputTokens": 2**63}},
        {"contents": [{"role": "user", "parts": [{"text": "x"}]}], "generationConfig": {"maxOutputTokens": 1e300}},
        {"contents": [{"role": "user", "parts": [{"text": "x"}]}], "generationConfig": {"topK": 1.5}},
        {"contents": [{"role": "user", "parts": [{"text": "x"}]}], "generationConfig": {"thinkingConfig": {"thinkingBudget": -5}}},
        {"contents": [{"role": "user", "parts": [{"text": "x"}]}], "tools": [{"functionDeclarations": [{"name": "f", "parameters": nested_schema(500)}]}]},
        {"contents": [{"role": "user", "parts": [{"text": "x"}]}], "toolConfig": {"functionCallingConfig": {"mode": ["ANY"]}}},
        {"contents": [{"role": "user", "parts": [{"text": 5}]}]},
        {"contents": [{"role": "user", "parts": [{"inlineData": {"mimeType": "text/plain", "data": "!!!"}}]}]},
        {"contents": [{"role": "user", "parts": [{"inlineData": {"mimeType": "text/plain", "data": "/w=="}}]}]},
        {"contents": [{"role": "user", "parts": [{"functionCall": {"name": "f", "args": [1]}}]}]},
        {"contents": [{"role": "user", "parts": [{"functionResponse": {"name": "f", "id": "x", "response": "ok"}}]}]},
    ],
)  # fmt: skip
def test_hand_picked_hostile_bodies_are_invalid_requests(body: dict[str, Any]) -> None:
    with pytest.raises(errors.InvalidRequest):
        CODEC.decode_request(body, model="aria")
