"""Gemini answers: whole responses, countTokens, errors and model lists, judged by the
``google-genai`` SDK's own types (``extra='forbid'``: a field the SDK does not know fails)."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from google.genai import types

from modelgate import catalogue, errors, ir
from modelgate.formats import DIALECTS
from modelgate.formats.base import ClientRequest, Codec
from modelgate.formats.gemini import CODEC, models, paths, wire
from modelgate.formats.gemini import response as gemini_response

#: The codec meets ``formats.base.Codec``.
AS_CODEC: Codec = CODEC


def client(body: dict[str, Any] | None = None) -> ClientRequest:
    return ClientRequest(
        AS_CODEC, body or {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}, "aria-large"
    )


def sdk(body: dict[str, Any]) -> types.GenerateContentResponse:
    """Parsed as the SDK parses a JSON answer body (base64 bytes decoded)."""
    return types.GenerateContentResponse.model_validate_json(orjson.dumps(body))


def answer(
    *content: ir.OutputPart, stop: ir.StopReason = ir.StopReason.END_TURN, **usage: int
) -> ir.Response:
    return ir.Response("resp1", "aria-large", list(content), stop, ir.Usage(**usage))


def test_text_answer_matches_the_wire_shape() -> None:
    resp = answer(ir.TextPart("Hello there."), input_tokens=8, output_tokens=3)
    body = CODEC.encode_response(resp, client())
    assert body == {
        "candidates": [
            {
                "content": {"role": "model", "parts": [{"text": "Hello there."}]},
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": {"promptTokenCount": 8, "candidatesTokenCount": 3, "totalTokenCount": 11},
        "modelVersion": "aria-large",
        "responseId": "resp1",
    }
    parsed = sdk(body)
    assert parsed.text == "Hello there."
    assert parsed.candidates and parsed.candidates[0].finish_reason == types.FinishReason.STOP
    assert parsed.usage_metadata and parsed.usage_metadata.total_token_count == 11
    assert parsed.model_version == "aria-large" and parsed.response_id == "resp1"


def test_function_calls_carry_id_and_args() -> None:
    resp = answer(
        ir.TextPart("Checking."),
        ir.ToolUsePart("toolu_1", "get_weather", {"city": "Paris"}),
        ir.ToolUsePart("toolu_2", "get_weather", {"city": "Lyon"}),
        stop=ir.StopReason.TOOL_USE,
    )
    parsed = sdk(CODEC.encode_response(resp, client()))
    calls = parsed.function_calls or []
    assert [(c.id, c.name, c.args) for c in calls] == [
        ("toolu_1", "get_weather", {"city": "Paris"}),
        ("toolu_2", "get_weather", {"city": "Lyon"}),
    ]
    assert parsed.candidates and parsed.candidates[0].finish_reason == types.FinishReason.STOP


@pytest.mark.parametrize(
    ("stop", "finish"),
    [
        (ir.StopReason.END_TURN, "STOP"),
        (ir.StopReason.STOP_SEQUENCE, "STOP"),
        (ir.StopReason.MAX_TOKENS, "MAX_TOKENS"),
        (ir.StopReason.CONTEXT_WINDOW, "MAX_TOKENS"),
        (ir.StopReason.REFUSAL, "SAFETY"),
        (ir.StopReason.PAUSE_TURN, "STOP"),
        (ir.StopReason.TOOL_USE, "STOP"),
    ],
)
def test_every_stop_reason_has_a_finish_reason_the_sdk_knows(stop: ir.StopReason, finish: str) -> None:
    parsed = sdk(CODEC.encode_response(answer(stop=stop), client()))
    assert parsed.candidates and parsed.candidates[0].finish_reason == types.FinishReason(finish)
    # No content still has a part: the SDK's chat history keeps only turns with parts.
    content = parsed.candidates[0].content
    assert content is not None and content.parts and content.parts[0].text == ""


def test_usage_counts_cache_inside_prompt_and_thoughts_outside_candidates() -> None:
    usage = ir.Usage(
        input_tokens=100,
        output_tokens=50,
        cache_read_input_tokens=400,
        cache_creation_input_tokens=20,
        reasoning_tokens=30,
    )
    meta = wire.usage_metadata(usage)
    assert meta == {
        "promptTokenCount": 520,
        "candidatesTokenCount": 20,
        "totalTokenCount": 570,
        "cachedContentTokenCount": 400,
        "thoughtsTokenCount": 30,
    }
    back = wire.decode_usage(meta)
    assert (back.total_input, back.output_tokens, back.cache_read_input_tokens, back.reasoning_tokens) == (
        520,
        50,
        400,
        30,
    )
    assert CODEC.usage_of({"usageMetadata": meta}).output_tokens == 50
    assert types.GenerateContentResponseUsageMetadata.model_validate(meta).thoughts_token_count == 30


def test_thoughts_only_when_asked_for() -> None:
    signature = "EqMBCkYIBxgCKkD+sig/=="
    resp = answer(
        ir.ThinkingPart("Pondering.", signature), ir.RedactedThinkingPart("opaque"), ir.TextPart("42")
    )
    hidden = CODEC.encode_response(resp, client())
    assert hidden["candidates"][0]["content"]["parts"] == [{"text": "42"}]
    asked = {
        "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
        "generationConfig": {"thinkingConfig": {"includeThoughts": True}},
    }
    parsed = sdk(CODEC.encode_response(resp, client(asked)))
    assert parsed.candidates and parsed.candidates[0].content and parsed.candidates[0].content.parts
    thought, text = parsed.candidates[0].content.parts
    assert (thought.thought, thought.text, text.text) == (True, "Pondering.", "42")
    # The SDK holds the signature as bytes; they are the signature's text.
    assert thought.thought_signature == signature.encode()
    assert parsed.text == "42"


def test_web_search_becomes_grounding_metadata() -> None:
    result = ir.WebSearchResult(
        [ir.WebSearchSource("https://a.example", "A"), ir.WebSearchSource("https://b.example")]
    )
    resp = answer(
        ir.WebSearchCallPart("srv_1", "weather paris", result),
        ir.TextPart(
            "Sunny.", citations=[ir.Citation("https://a.example", "A"), ir.Citation("https://c.example", "C")]
        ),
    )
    parsed = sdk(CODEC.encode_response(resp, client()))
    assert parsed.candidates
    grounding = parsed.candidates[0].grounding_metadata
    assert grounding is not None and grounding.web_search_queries == ["weather paris"]
    assert [(c.web.uri, c.web.title) for c in grounding.grounding_chunks or [] if c.web] == [
        ("https://a.example", "A"),
        ("https://b.example", None),
        ("https://c.example", "C"),
    ]


def test_count_tokens_answer() -> None:
    assert gemini_response.encode_count(31) == {"totalTokens": 31}
    parsed = types.CountTokensResponse.model_validate(gemini_response.encode_count(31, 7))
    assert (parsed.total_tokens, parsed.cached_content_token_count) == (31, 7)


@pytest.mark.parametrize(
    ("error", "code", "status"),
    [
        (errors.InvalidRequest("bad"), 400, "INVALID_ARGUMENT"),
        (errors.AuthenticationFailed("who"), 401, "UNAUTHENTICATED"),
        (errors.BillingRefused("broke"), 402, "FAILED_PRECONDITION"),
        (errors.PermissionDenied("no"), 403, "PERMISSION_DENIED"),
        (errors.NotFound("gone"), 404, "NOT_FOUND"),
        (errors.MethodNotAllowed("verb"), 405, "UNIMPLEMENTED"),
        (errors.RequestTimeout("slow"), 408, "DEADLINE_EXCEEDED"),
        (errors.RequestTooLarge("big"), 413, "INVALID_ARGUMENT"),
        (errors.RateLimited("wait"), 429, "RESOURCE_EXHAUSTED"),
        (errors.InternalError("oops"), 500, "INTERNAL"),
        (errors.UpstreamFailed("upstream"), 502, "UNAVAILABLE"),
        (errors.Unavailable("down"), 503, "UNAVAILABLE"),
        (errors.UpstreamTimeout("late"), 504, "DEADLINE_EXCEEDED"),
        (errors.Overloaded("busy"), 503, "UNAVAILABLE"),
        (errors.UpstreamFailed("teapot", status=422), 422, "FAILED_PRECONDITION"),
    ],
)
def test_errors_in_googles_shape(error: errors.GatewayError, code: int, status: str) -> None:
    body = orjson.loads(CODEC.render_error(error, "req_1"))
    assert body == {"error": {"code": code, "message": error.message, "status": status}}
    # The status the gateway's replies use for this format agrees with the body.
    assert CODEC.http_status(error) == code == error.http_status(portable=True)


def test_every_error_kind_has_a_google_status() -> None:
    for kind in errors.ERROR_KINDS:
        body = wire.kind_error_object(kind, "m")["error"]
        assert body["status"] in wire.STATUS_NAMES.values() and 400 <= body["code"] < 600


def test_rate_limit_error_carries_retry_info() -> None:
    error = errors.RateLimited("slow down", headers={"retry-after": "12"})
    body = orjson.loads(CODEC.render_error(error, "req_1"))
    assert body["error"]["details"] == [
        {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "12s"}
    ]


def model(model_id: str, context: int | None = 200_000) -> catalogue.Model:
    price = catalogue.Price(input=1, output=2, cache_write=1, cache_read=1)
    return catalogue.Model(model_id, "aria", model_id.title(), 1_700_000_000, price, context, 8192, 8192)


def test_model_list_pages() -> None:
    listed = [model(f"aria-{i}") for i in range(5)] + [model("nova-1", None)]
    first = models.models_page(listed, models.page_size("4"), None)
    assert [m["name"] for m in first["models"]] == [f"models/aria-{i}" for i in range(4)]
    second = models.models_page(listed, 4, first["nextPageToken"])
    assert [m["name"] for m in second["models"]] == ["models/aria-4", "models/nova-1"]
    assert "nextPageToken" not in second
    assert first["models"][0] == {
        "name": "models/aria-0",
        "baseModelId": "aria-0",
        "version": "1",
        "displayName": "Aria-0",
        "outputTokenLimit": 8192,
        "supportedGenerationMethods": ["generateContent", "streamGenerateContent", "countTokens"],
        "inputTokenLimit": 200_000,
    }
    assert "inputTokenLimit" not in second["models"][1]
    assert models.page_size(None) == 50 and models.page_size("0") == 50 and models.page_size("5000") == 1000
    for bad in ("x", "-1", "1" * 20):
        with pytest.raises(errors.InvalidRequest):
            models.page_size(bad)
    for token in ("garbage", base64.urlsafe_b64encode(b"o1x").decode(), "!!!"):
        with pytest.raises(errors.InvalidRequest):
            models.models_page(listed, 4, token)
    assert models.model_id("models/aria-1") == models.model_id("aria-1") == "aria-1"


def test_paths_credentials_and_stream_flag() -> None:
    call = paths.parse_call("/v1beta/models/aria-large:streamGenerateContent")
    assert call == paths.Call("v1beta", "aria-large", "streamGenerateContent")
    assert paths.parse_call("/v1/models/aria:countTokens") == paths.Call("v1", "aria", "countTokens")
    for other in (
        "/v1beta/models/aria:embedContent",
        "/v2/models/aria:generateContent",
        "/v1beta/models/a/b:generateContent",
    ):
        assert paths.parse_call(other) is None
    assert paths.wants_stream("streamGenerateContent", {"alt": "sse"}) is True
    assert paths.wants_stream("generateContent", {}) is False
    with pytest.raises(errors.InvalidRequest, match="alt=sse"):
        paths.wants_stream("streamGenerateContent", {})
    assert paths.api_key({"x-goog-api-key": " k1 "}, {"key": "k2"}) == "k1"
    assert paths.api_key({}, {"key": "k2"}) == "k2"
    assert paths.api_key({}, {}) is None
    assert paths.redact_query("alt=sse&key=sk-secret&x=1") == "alt=sse&key=REDACTED&x=1"
    assert paths.redact_query("key=sk-secret") == "key=REDACTED"
    assert paths.redact_query("monkey=1") == "monkey=1"
    assert paths.is_gemini_client({"x-goog-api-key": "k"}, {}) and paths.is_gemini_client({}, {"key": "k"})
    assert not paths.is_gemini_client({"authorization": "Bearer k"}, {})
    assert paths.owns_path("/v1beta/models") and paths.owns_path("/v1beta/anything/else")
    assert paths.owns_path("/v1/models/aria:embedContent")
    assert paths.owns_path("/v1/models/../..:generateContent")
    assert not paths.owns_path("/v1/models") and not paths.owns_path("/v1/chat/completions")


def test_upstream_side_is_refused_not_faked() -> None:
    """No upstream speaks Gemini: the upstream-side methods say so instead of pretending."""
    req = ir.Request("aria", [ir.Message("user", [ir.TextPart("hi")])])
    calls: list[Callable[[], object]] = [
        lambda: CODEC.encode_request(req, "aria"),
        lambda: CODEC.decode_response({"candidates": []}),
        lambda: CODEC.stream_decoder(),
        lambda: CODEC.passthrough_fields(
            {}, upstream_model="a", max_tokens=1, stream=False, legacy_limit=False
        ),
        lambda: CODEC.stream_tap("aria", client(), None, None),  # type: ignore[arg-type]
    ]
    for call in calls:
        with pytest.raises(errors.InternalError, match="inbound only"):
            call()
    assert CODEC.runs_hosted == frozenset()
    assert sorted(CODEC.preferred_dialects) == sorted(DIALECTS)
