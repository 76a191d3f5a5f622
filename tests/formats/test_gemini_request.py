"""Gemini request decoding: ``generateContent`` / ``countTokens`` bodies into the IR.

Bodies follow the shapes of the Gemini API reference and its curl examples (which write fields in
snake_case where the SDK writes lowerCamelCase: both are read).
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from modelgate import errors, ir
from modelgate.formats.gemini import CODEC
from modelgate.formats.gemini import request as gemini_request
from modelgate.formats.gemini.parts import signature_wire


def user(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "parts": list(parts)}


def decode(body: dict[str, Any], **kw: Any) -> ir.Request:
    return CODEC.decode_request(body, model=kw.pop("model", "aria-large"), **kw)


def refused(body: dict[str, Any], fragment: str) -> errors.InvalidRequest:
    with pytest.raises(errors.InvalidRequest) as info:
        decode(body)
    assert fragment in info.value.message
    return info.value


def test_text_conversation_with_system_and_generation_config() -> None:
    body = {
        "system_instruction": {"parts": [{"text": "You are a cat. Your name is Neko."}]},
        "contents": [
            user({"text": "Hello"}),
            {"role": "model", "parts": [{"text": "Great to meet you."}]},
            user({"text": "I have two dogs in my house."}),
        ],
        "generationConfig": {
            "stopSequences": ["Title"],
            "temperature": 1.0,
            "maxOutputTokens": 800,
            "topP": 0.8,
            "topK": 10,
        },
        "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
    }
    req = decode(body, stream=True)
    assert req.model == "aria-large" and req.stream is True
    assert req.system == ["You are a cat. Your name is Neko."]
    assert [(m.role, m.content) for m in req.messages] == [
        ("user", [ir.TextPart("Hello")]),
        ("assistant", [ir.TextPart("Great to meet you.")]),
        ("user", [ir.TextPart("I have two dogs in my house.")]),
    ]
    assert (req.max_tokens, req.temperature, req.top_p, req.top_k) == (800, 1.0, 0.8, 10)
    assert req.stop_sequences == ["Title"]


def test_model_and_stream_come_from_the_caller_not_the_body() -> None:
    req = CODEC.decode_request({"contents": [user({"text": "hi"})], "model": "x", "stream": True})
    assert (req.model, req.stream) == ("", False)


def test_snake_and_camel_spellings_mean_the_same() -> None:
    camel = decode({"contents": [user({"inlineData": {"mimeType": "image/png", "data": "iVBOR"}})]})
    snake = decode({"contents": [user({"inline_data": {"mime_type": "image/png", "data": "iVBOR"}})]})
    assert (
        camel.messages
        == snake.messages
        == [ir.Message("user", [ir.ImagePart(media_type="image/png", data="iVBOR")])]
    )
    refused(
        {"contents": [user({"text": "x"})], "generationConfig": {}, "generation_config": {}},
        "given twice",
    )


def test_url_safe_base64_media_become_standard() -> None:
    urlsafe = base64.urlsafe_b64encode(b"\xfb\xff\xfe\x00").decode()
    assert "-" in urlsafe and "_" in urlsafe
    part = (
        decode({"contents": [user({"inlineData": {"mimeType": "image/png", "data": urlsafe}})]})
        .messages[0]
        .content[0]
    )
    assert part == ir.ImagePart(media_type="image/png", data=base64.b64encode(b"\xfb\xff\xfe\x00").decode())


def test_media_parts() -> None:
    text = base64.b64encode(b"plain words").decode()
    req = decode(
        {
            "contents": [
                user(
                    {"inlineData": {"mimeType": "application/pdf", "data": "JVBERi0="}},
                    {"inlineData": {"mimeType": "text/plain", "data": text}},
                    {"fileData": {"mimeType": "image/jpeg", "fileUri": "https://example.com/cat.jpg"}},
                    {"fileData": {"mimeType": "application/pdf", "fileUri": "https://example.com/a.pdf"}},
                    {"text": "Summarise."},
                )
            ]
        }
    )
    assert req.messages[0].content == [
        ir.DocumentPart(media_type="application/pdf", data="JVBERi0="),
        ir.DocumentPart(text="plain words"),
        ir.ImagePart(url="https://example.com/cat.jpg"),
        ir.DocumentPart(url="https://example.com/a.pdf"),
        ir.TextPart("Summarise."),
    ]


@pytest.mark.parametrize(
    ("part", "fragment"),
    [
        (
            {
                "fileData": {
                    "mimeType": "video/mp4",
                    "fileUri": "https://generativelanguage.googleapis.com/v1beta/files/abc",
                }
            },
            "Gemini Files API",
        ),
        ({"fileData": {"mimeType": "image/png", "fileUri": "gs://bucket/cat.png"}}, "Cloud Storage"),
        ({"fileData": {"fileUri": "https://www.youtube.com/watch?v=9hE5-98ZeCg"}}, "only http(s) URLs"),
        ({"fileData": {"mimeType": "audio/mp3", "fileUri": "https://example.com/a.mp3"}}, "image or a PDF"),
        ({"inlineData": {"mimeType": "audio/mp3", "data": "AAAA"}}, "audio/mp3 is not supported"),
        ({"executableCode": {"language": "PYTHON", "code": "print(1)"}}, "executableCode: not supported"),
        ({"videoMetadata": {}}, "a part needs"),
    ],
)
def test_media_the_gateway_cannot_pass_on_is_refused_clearly(part: dict[str, Any], fragment: str) -> None:
    refused({"contents": [user(part)]}, fragment)


def test_function_calling_round_trip_with_and_without_ids() -> None:
    body = {
        "contents": [
            user({"text": "Weather in Paris and Lyon?"}),
            {
                "role": "model",
                "parts": [
                    {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}},
                    {"functionCall": {"name": "get_weather", "args": {"city": "Lyon"}}},
                    {"functionCall": {"id": "call_given", "name": "get_time", "args": {}}},
                ],
            },
            {
                "role": "user",
                "parts": [
                    {"functionResponse": {"name": "get_weather", "response": {"output": "sunny"}}},
                    {
                        "functionResponse": {
                            "id": "call_given",
                            "name": "get_time",
                            "response": {"output": "noon"},
                        }
                    },
                    {"functionResponse": {"name": "get_weather", "response": {"error": "no station"}}},
                ],
            },
        ],
        "tools": [
            {
                "functionDeclarations": [
                    {
                        "name": "get_weather",
                        "description": "Weather of a city.",
                        "parameters": {
                            "type": "OBJECT",
                            "properties": {"city": {"type": "STRING", "description": "City name."}},
                            "required": ["city"],
                            "propertyOrdering": ["city"],
                        },
                    },
                    {"name": "get_time", "parametersJsonSchema": {"type": "object", "properties": {}}},
                ]
            }
        ],
    }
    req = decode(body)
    calls = req.messages[1].content
    assert calls == [
        ir.ToolUsePart("call_1_0", "get_weather", {"city": "Paris"}),
        ir.ToolUsePart("call_1_1", "get_weather", {"city": "Lyon"}),
        ir.ToolUsePart("call_given", "get_time", {}),
    ]
    results = req.messages[2].content
    assert [(r.tool_use_id, r.is_error) for r in results if isinstance(r, ir.ToolResultPart)] == [
        ("call_1_0", False),
        ("call_given", False),
        ("call_1_1", True),
    ]
    first = results[0]
    assert isinstance(first, ir.ToolResultPart) and first.content == [ir.TextPart('{"output":"sunny"}')]
    assert req.tools == [
        ir.Tool(
            "get_weather",
            "Weather of a city.",
            {
                "type": "object",
                "properties": {"city": {"type": "string", "description": "City name."}},
                "required": ["city"],
            },
        ),
        ir.Tool("get_time", None, {"type": "object", "properties": {}}),
    ]
    # The same history gives the same ids (an upstream's prompt cache keeps matching).
    assert decode(body).messages == req.messages


def test_function_response_answering_nothing_is_refused() -> None:
    refused(
        {"contents": [user({"functionResponse": {"name": "ghost", "response": {}}})]},
        "answers no earlier functionCall",
    )


def test_function_response_images() -> None:
    body = {
        "contents": [
            {"role": "model", "parts": [{"functionCall": {"id": "c1", "name": "shot", "args": {}}}]},
            user(
                {
                    "functionResponse": {
                        "id": "c1",
                        "name": "shot",
                        "response": {"ok": True},
                        "parts": [{"inlineData": {"mimeType": "image/png", "data": "iVBOR"}}],
                    }
                }
            ),
        ]
    }
    result = decode(body).messages[1].content[0]
    assert isinstance(result, ir.ToolResultPart)
    assert result.content == [ir.TextPart('{"ok":true}'), ir.ImagePart(media_type="image/png", data="iVBOR")]


def test_openapi_schema_conversion() -> None:
    body = {
        "contents": [user({"text": "List cookies"})],
        "generationConfig": {
            "responseMimeType": "application/json",
            "responseSchema": {
                "type": "ARRAY",
                "items": {
                    "type": "OBJECT",
                    "properties": {
                        "recipe_name": {"type": "STRING", "example": "Shortbread"},
                        "rating": {"type": "INTEGER", "format": "int32", "nullable": True, "minimum": 0},
                        "kind": {"type": "STRING", "format": "enum", "enum": ["x", "y"]},
                        "when": {"type": "STRING", "format": "date-time"},
                        "tags": {
                            "type": "ARRAY",
                            "items": {"type": "STRING", "enum": ["a", "b"]},
                            "max_items": 3,
                        },
                        "alt": {"anyOf": [{"type": "STRING"}, {"type": "NUMBER"}], "nullable": True},
                    },
                    "propertyOrdering": ["recipe_name", "rating"],
                },
            },
        },
    }
    fmt = decode(body).response_format
    assert fmt == {
        "type": "json_schema",
        "name": "response",
        "schema": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "recipe_name": {"type": "string"},
                    "rating": {"type": ["integer", "null"], "minimum": 0},
                    "kind": {"type": "string", "enum": ["x", "y"]},
                    "when": {"type": "string", "format": "date-time"},
                    "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "maxItems": 3},
                    "alt": {"anyOf": [{"type": "string"}, {"type": "number"}, {"type": "null"}]},
                },
            },
        },
    }


def test_structured_output_variants() -> None:
    def fmt(config: dict[str, Any]) -> Any:
        return decode({"contents": [user({"text": "x"})], "generationConfig": config}).response_format

    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert fmt({"responseMimeType": "application/json", "responseJsonSchema": schema}) == {
        "type": "json_schema",
        "name": "response",
        "schema": schema,
    }
    assert fmt({"responseMimeType": "application/json"}) == {"type": "json_object"}
    assert fmt({"responseMimeType": "text/plain"}) is None
    refused(
        {"contents": [user({"text": "x"})], "generationConfig": {"responseMimeType": "text/x.enum"}},
        "text/x.enum is not supported",
    )
    refused(
        {"contents": [user({"text": "x"})], "generationConfig": {"responseSchema": schema}},
        "needs application/json",
    )


@pytest.mark.parametrize(
    ("config", "effort"),
    [
        ({"thinkingBudget": 0}, "minimal"),
        ({"thinkingBudget": 1024}, "low"),
        ({"thinkingBudget": 8192}, "medium"),
        ({"thinkingBudget": 24576}, "high"),
        ({"thinkingBudget": -1}, None),
        ({"includeThoughts": True}, None),
        ({"thinkingLevel": "LOW"}, "low"),
        ({"thinking_level": "high"}, "high"),
    ],
)
def test_thinking_config(config: dict[str, Any], effort: str | None) -> None:
    body = {"contents": [user({"text": "x"})], "generationConfig": {"thinkingConfig": config}}
    assert decode(body).reasoning_effort == effort
    assert gemini_request.shows_thoughts(body) is (config.get("includeThoughts") is True)


def test_thought_parts_and_signatures_round_trip() -> None:
    signature = "EqMBCkYIBxgCKkDa/anthropic+signature=="
    body = {
        "contents": [
            user({"text": "think"}),
            {
                "role": "model",
                "parts": [
                    {"text": "Let me see.", "thought": True, "thoughtSignature": signature_wire(signature)},
                    {"text": "", "thought": True, "thoughtSignature": "////"},  # not ours: dropped
                    {"thoughtSignature": "AAAA"},  # a signature-only part
                    {"text": "Done."},
                ],
            },
        ]
    }
    assert decode(body).messages[1].content == [
        ir.ThinkingPart("Let me see.", signature),
        ir.ThinkingPart("", None),
        ir.TextPart("Done."),
    ]
    # The SDK sends bytes back URL-safe encoded.
    urlsafe = base64.urlsafe_b64encode(signature.encode()).decode()
    body["contents"][1]["parts"] = [{"text": "t", "thought": True, "thoughtSignature": urlsafe}]
    assert decode(body).messages[1].content == [ir.ThinkingPart("t", signature)]


def test_tools_hosted_and_tool_config() -> None:
    decls = [{"name": "a"}, {"name": "b"}, {"name": "c"}]
    base: dict[str, Any] = {
        "contents": [user({"text": "x"})],
        "tools": [
            {"functionDeclarations": decls},
            {"googleSearch": {"excludeDomains": ["spam.example"]}},
            {"codeExecution": {}},
            {"url_context": {}},
        ],
    }
    req = decode(base)
    assert [t.name for t in req.tools] == ["a", "b", "c"]
    assert req.web_search == ir.WebSearchTool(client_type="googleSearch", blocked_domains=["spam.example"])
    assert req.hosted_tools == ["codeExecution", "urlContext"]
    assert CODEC.offers_web_search(base) and not CODEC.offers_web_search({"tools": [{"codeExecution": {}}]})

    def choice(config: dict[str, Any]) -> tuple[ir.ToolChoice | None, list[str]]:
        got = decode({**base, "toolConfig": {"functionCallingConfig": config}})
        return got.tool_choice, [t.name for t in got.tools]

    assert choice({"mode": "AUTO"}) == (ir.ToolChoice("auto"), ["a", "b", "c"])
    assert choice({"mode": "NONE"}) == (ir.ToolChoice("none"), ["a", "b", "c"])
    assert choice({"mode": "ANY"}) == (ir.ToolChoice("any"), ["a", "b", "c"])
    assert choice({"mode": "ANY", "allowedFunctionNames": ["b"]}) == (ir.ToolChoice("tool", "b"), ["b"])
    assert choice({"mode": "ANY", "allowedFunctionNames": ["c", "a"]}) == (ir.ToolChoice("any"), ["a", "c"])
    assert choice({"mode": "VALIDATED"}) == (ir.ToolChoice("auto"), ["a", "b", "c"])
    for bad, fragment in [
        ({"mode": "SOMETIMES"}, "expected AUTO, ANY, NONE or VALIDATED"),
        ({"mode": "AUTO", "allowedFunctionNames": ["a"]}, "only allowed with mode ANY"),
        ({"mode": "ANY", "allowedFunctionNames": ["zzz"]}, "not a declared function"),
    ]:
        refused({**base, "toolConfig": {"functionCallingConfig": bad}}, fragment)


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"contents": []}, "contents: required non-empty list"),
        ({"contents": [user({"text": "x"})], "cachedContent": "cachedContents/abc"}, "context caches"),
        ({"contents": [user({"text": "x"})], "generationConfig": {"candidateCount": 2}}, "only 1 candidate"),
        (
            {"contents": [user({"text": "x"})], "generationConfig": {"responseModalities": ["IMAGE"]}},
            "only TEXT output",
        ),
        ({"contents": [{"role": "system", "parts": [{"text": "x"}]}]}, "expected user or model"),
        ({"contents": [{"role": ["user"], "parts": [{"text": "x"}]}]}, "expected user or model"),
        ({"contents": [{"role": "user", "parts": []}]}, "required non-empty list"),
        ({"contents": [user({"text": "x"})], "generationConfig": {"maxOutputTokens": 2**40}}, "from 1 to"),
        ({"contents": [user({"text": "x"})], "generationConfig": {"maxOutputTokens": "--5"}}, "from 1 to"),
        (
            {"contents": [user({"text": "x"})], "generationConfig": {"temperature": "hot"}},
            "expected a number",
        ),
        ({"contents": [user({"text": "x"})], "generationConfig": {"temperature": 1e308}}, "from 0.0 to 2.0"),
        ({"contents": [user({"text": "x"})], "generationConfig": {"topP": 1.5}}, "from 0.0 to 1.0"),
        (
            {"contents": [user({"text": "x"})], "systemInstruction": {"parts": [{"inlineData": {}}]}},
            "only text",
        ),
        (
            {"contents": [user({"text": "x"})], "generationConfig": {"stopSequences": ["a"] * 6}},
            "at most 5",
        ),
        (
            {
                "contents": [user({"text": "x"})],
                "tools": [
                    {"functionDeclarations": [{"name": "f", "parameters": {}, "parametersJsonSchema": {}}]}
                ],
            },
            "not both",
        ),
    ],
)
def test_refusals_name_the_field(body: dict[str, Any], fragment: str) -> None:
    refused(body, fragment)


def test_numbers_in_proto_json_spellings() -> None:
    config = {"maxOutputTokens": "256", "topK": 40.0, "candidateCount": 1}
    req = decode({"contents": [user({"text": "x"})], "generationConfig": config})
    assert (req.max_tokens, req.top_k) == (256, 40)


def test_count_tokens_bodies() -> None:
    plain = CODEC.decode_count_request({"contents": [user({"text": "hi"})]}, model="aria")
    wrapped = CODEC.decode_count_request(
        {
            "generateContentRequest": {
                "model": "models/aria",
                "contents": [user({"text": "hi"})],
                "systemInstruction": {"parts": [{"text": "sys"}]},
            }
        },
        model="aria",
    )
    assert plain.messages == wrapped.messages and wrapped.system == ["sys"] and plain.model == "aria"
    with pytest.raises(errors.InvalidRequest, match="not both"):
        CODEC.decode_count_request({"contents": [user({"text": "a"})], "generateContentRequest": {}})


def test_validate_checks_what_the_gateway_relies_on() -> None:
    good = {"contents": [user({"text": "x"})], "generationConfig": {"maxOutputTokens": 64}}
    CODEC.validate(good)
    assert CODEC.requested_max_tokens(good) == 64
    assert CODEC.requested_max_tokens({"contents": []}) is None
    CODEC.validate({"generateContentRequest": good}, counting=True)
    for bad in (
        {},
        {"contents": "hi"},
        {"contents": [user({"text": "x"})], "generationConfig": {"maxOutputTokens": -1}},
        {"contents": [user({"text": "x"})], "generationConfig": {"candidateCount": 3}},
        {"contents": [user({"text": "x"})], "cachedContent": "cachedContents/1"},
        {"contents": [user({"text": "x"})], "generationConfig": []},
    ):
        with pytest.raises(errors.InvalidRequest):
            CODEC.validate(bad)


def test_streamed_thought_pieces_are_one_block_up_to_the_signature() -> None:
    first, second = "sig-one", "sig-two"
    parts = [
        {"text": "Think", "thought": True},
        {"text": "ing.", "thought": True},
        {"text": "", "thought": True, "thoughtSignature": signature_wire(first)},
        {"text": "Again.", "thought": True, "thoughtSignature": signature_wire(second)},
        {"text": "Answer."},
        {"text": "Late.", "thought": True},
    ]
    body = {"contents": [user({"text": "q"}), {"role": "model", "parts": parts}]}
    assert decode(body).messages[1].content == [
        ir.ThinkingPart("Thinking.", first),
        ir.ThinkingPart("Again.", second),
        ir.TextPart("Answer."),
        ir.ThinkingPart("Late.", None),
    ]
