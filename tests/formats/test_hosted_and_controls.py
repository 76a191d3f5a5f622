"""Hosted tools and reasoning controls in the codecs (docs/wire-formats.md, "Hosted tools" and
"Claude Code's content and controls"): decoding into the IR, encoding for each dialect, the
dropping and refusing done when translating, and the web search stream events."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from modelgate import errors, ir
from modelgate.formats import CODECS, ClientRequest
from modelgate.formats.chat import request as chat_request
from modelgate.formats.messages import request as messages_request
from modelgate.formats.messages import stream as messages_stream
from modelgate.formats.responses import decoder as responses_decoder
from modelgate.formats.responses import encoder as responses_encoder
from modelgate.formats.responses import request as responses_request
from modelgate.formats.sse import SSEParser
from modelgate.gateway.translate import build_body

STREAM_EVENT = TypeAdapter(ResponseStreamEvent)


def messages_body(**extra: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}], **extra}


def responses_body(**extra: Any) -> dict[str, Any]:
    return {"model": "m", "input": "hi", **extra}


def test_responses_web_search_and_other_hosted_tools_decode() -> None:
    tools = [
        {"type": "function", "name": "f", "parameters": {"type": "object"}},
        {"type": "web_search_preview", "user_location": {"city": "Oslo", "type": "approximate"}},
        {"type": "web_search", "filters": {"allowed_domains": ["b.example"]}},  # a second one: ignored
        {"type": "mcp", "server_label": "x"},
        {"type": "custom", "name": "apply_patch"},
    ]
    req = responses_request.decode_request(responses_body(tools=tools))
    assert [t.name for t in req.tools] == ["f"]
    assert req.web_search == ir.WebSearchTool(
        "web_search_preview", user_location={"type": "approximate", "city": "Oslo"}
    )
    assert req.hosted_tools == ["mcp", "custom"]
    forced = responses_request.decode_request(
        responses_body(tools=tools, tool_choice={"type": "web_search_preview"})
    )
    assert forced.tool_choice == ir.ToolChoice("tool", ir.WEB_SEARCH_NAME, hosted="web_search_preview")
    other = responses_request.decode_request(
        responses_body(tools=tools, tool_choice={"type": "mcp", "server_label": "x"})
    )
    assert other.tool_choice == ir.ToolChoice("tool", None, hosted="mcp")
    allowed = responses_request.decode_request(
        responses_body(tool_choice={"type": "allowed_tools", "tools": []})
    )
    assert allowed.tool_choice == ir.ToolChoice("auto")


@pytest.mark.parametrize(
    ("tool", "param"),
    [
        ({"type": "web_search", "filters": 5}, "tools[0].filters"),
        ({"type": "web_search", "filters": {"allowed_domains": [5]}}, "tools[0].filters.allowed_domains"),
        ({"type": "web_search", "user_location": "oslo"}, "tools[0].user_location"),
        ({"type": "web_search", "user_location": {"city": 5}}, "tools[0].user_location.city"),
    ],
)
def test_hostile_responses_web_search_fields_are_400s(tool: dict[str, Any], param: str) -> None:
    with pytest.raises(errors.InvalidRequest) as caught:
        responses_request.decode_request(responses_body(tools=[tool]))
    assert caught.value.param == param


def test_messages_server_tools_decode() -> None:
    tools = [
        {"name": "f", "input_schema": {"type": "object"}},
        {
            "type": "web_search_20260209",
            "name": "web_search",
            "max_uses": 2,
            "blocked_domains": ["x.example"],
        },
        {"type": "code_execution_20250825", "name": "code_execution"},
        {"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"},
    ]
    req = messages_request.decode_request(
        messages_body(tools=tools, tool_choice={"type": "tool", "name": "web_search"})
    )
    assert [t.name for t in req.tools] == ["f"]
    assert req.web_search == ir.WebSearchTool(
        "web_search_20260209", max_uses=2, blocked_domains=["x.example"]
    )
    assert req.hosted_tools == ["code_execution_20250825", "tool_search_tool_regex_20251119"]
    assert req.tool_choice == ir.ToolChoice("tool", ir.WEB_SEARCH_NAME, hosted="web_search_20260209")
    code = messages_request.decode_request(
        messages_body(tools=tools, tool_choice={"type": "tool", "name": "code_execution"})
    )
    assert code.tool_choice == ir.ToolChoice("tool", None, hosted="code_execution_20250825")


@pytest.mark.parametrize(
    ("tool", "param"),
    [
        ({"type": "web_search_20250305", "name": "web_search", "max_uses": 0}, "tools.0.max_uses"),
        (
            {"type": "web_search_20250305", "name": "web_search", "allowed_domains": "x"},
            "tools.0.allowed_domains",
        ),
        (
            {"type": "web_search_20250305", "name": "web_search", "user_location": [1]},
            "tools.0.user_location",
        ),
        ({"type": "web_search_20250305"}, "tools.0"),
    ],
)
def test_hostile_messages_web_search_fields_are_400s(tool: dict[str, Any], param: str) -> None:
    with pytest.raises(errors.InvalidRequest) as caught:
        messages_request.decode_request(messages_body(tools=[tool]))
    assert caught.value.param == param


def test_web_search_encodes_per_dialect() -> None:
    search = ir.WebSearchTool(
        "web_search",
        max_uses=4,
        allowed_domains=["a.example"],
        blocked_domains=["b.example"],
        user_location={"type": "approximate", "country": "NO"},
    )
    req = ir.Request("m", [ir.Message("user", [ir.TextPart("q")])], web_search=search)
    req.tool_choice = ir.ToolChoice("tool", ir.WEB_SEARCH_NAME, hosted="web_search")
    messages = messages_request.encode_request(req, "claude")
    # Only one of allowed and blocked domains may go to Anthropic: the allow list.
    assert messages["tools"] == [
        {
            "type": "web_search_20250305",
            "name": "web_search",
            "max_uses": 4,
            "allowed_domains": ["a.example"],
            "user_location": {"type": "approximate", "country": "NO"},
        }
    ]
    assert messages["tool_choice"] == {"type": "tool", "name": "web_search"}
    responses = responses_request.encode_request(req, "gpt")
    assert responses["tools"] == [
        {
            "type": "web_search",
            "filters": {"allowed_domains": ["a.example"]},
            "user_location": {"type": "approximate", "country": "NO"},
        }
    ]
    assert responses["max_tool_calls"] == 4
    assert responses["tool_choice"] == {
        "type": "allowed_tools",
        "mode": "required",
        "tools": [{"type": "web_search"}],
    }


def _build(
    fmt: str, body: dict[str, Any], dialect: str, policy: str = "drop"
) -> tuple[dict[str, Any], tuple[str, ...]]:
    codec = CODECS[fmt]
    built = build_body(
        ClientRequest(codec, body, "m"),
        orjson.dumps(body),
        dialect,
        upstream_model="up",
        max_tokens=10,
        stream=False,
        legacy_limit=False,
        hosted_tools=policy,  # type: ignore[arg-type]
    )
    return orjson.loads(built.body), built.dropped


def test_translation_drops_what_the_dialect_cannot_run_and_names_it() -> None:
    tools = [{"type": "web_search"}, {"type": "file_search"}, {"type": "function", "name": "f"}]
    body, dropped = _build("responses", responses_body(tools=tools), "chat")
    assert dropped == ("file_search", "web_search") and [t["function"]["name"] for t in body["tools"]] == [
        "f"
    ]
    body, dropped = _build("responses", responses_body(tools=tools), "messages")
    assert dropped == ("file_search",) and body["tools"][1] == {
        "type": "web_search_20250305",
        "name": "web_search",
    }
    with pytest.raises(errors.InvalidRequest) as refused:
        _build("responses", responses_body(tools=tools), "messages", "refuse")
    assert refused.value.param == "tools" and "file_search" in refused.value.message
    # Passthrough is untouched whatever the policy.
    body, dropped = _build("responses", responses_body(tools=tools), "responses", "refuse")
    assert body["tools"] == tools and dropped == ()


def test_a_drop_on_one_attempt_leaves_the_request_whole_for_the_next() -> None:
    client = ClientRequest(CODECS["responses"], responses_body(tools=[{"type": "web_search"}]), "m")
    common: Any = {"upstream_model": "up", "max_tokens": 10, "stream": False, "legacy_limit": False}
    assert build_body(client, b"", "chat", **common).dropped == ("web_search",)
    after = orjson.loads(build_body(client, b"", "messages", **common).body)
    assert after["tools"] == [{"type": "web_search_20250305", "name": "web_search"}]


@pytest.mark.parametrize("dialect", ["chat", "messages"])
def test_a_choice_forcing_a_hosted_tool_the_upstream_cannot_run_is_a_400(dialect: str) -> None:
    forced = responses_body(tools=[{"type": "file_search"}], tool_choice={"type": "file_search"})
    with pytest.raises(errors.InvalidRequest) as caught:
        _build("responses", forced, dialect)
    assert caught.value.param == "tool_choice" and "file_search" in caught.value.message
    search = responses_body(tools=[{"type": "web_search"}], tool_choice={"type": "web_search_preview"})
    if dialect == "chat":
        with pytest.raises(errors.InvalidRequest, match="web_search_preview"):
            _build("responses", search, dialect)
    else:
        assert _build("responses", search, dialect)[0]["tool_choice"] == {
            "type": "tool",
            "name": "web_search",
        }
    # Forcing a search that was never offered cannot be honoured either.
    with pytest.raises(errors.InvalidRequest):
        _build("responses", responses_body(tool_choice={"type": "web_search_preview"}), "messages")


def test_tool_reference_blocks_become_text_naming_the_tools() -> None:
    content = [
        {"type": "tool_reference", "tool_name": "WebFetch"},
        {"type": "tool_reference", "tool_name": "Grep"},
        {"type": "text", "text": "done"},
    ]
    turn = [{"type": "tool_result", "tool_use_id": "t1", "content": content}]
    req = messages_request.decode_request(messages_body(messages=[{"role": "user", "content": turn}]))
    result = req.messages[0].content[0]
    assert isinstance(result, ir.ToolResultPart)
    assert result.content == [
        ir.TextPart("Tool WebFetch is now available.\nTool Grep is now available."),
        ir.TextPart("done"),
    ]
    chat = chat_request.encode_request(req, "x")
    assert (
        chat["messages"][0]["content"] == "Tool WebFetch is now available.\nTool Grep is now available.\ndone"
    )


def test_deferred_tools_are_ordinary_and_the_placeholder_is_left_out() -> None:
    tools = [
        {"name": "WebFetch", "input_schema": {"type": "object"}, "defer_loading": True},
        {"name": "DeferredToolPlaceholder", "input_schema": {"type": "object"}, "defer_loading": True},
        {"name": "DeferredToolPlaceholder2", "input_schema": {"type": "object"}},
    ]
    req = messages_request.decode_request(messages_body(tools=tools))
    assert [t.name for t in req.tools] == ["WebFetch", "DeferredToolPlaceholder2"]


@pytest.mark.parametrize(
    ("effort", "messages_effort"),
    [("minimal", "low"), ("none", None), ("low", "low"), ("xhigh", "xhigh"), ("max", "max"), ("ultra", None)],
)
def test_openai_efforts_for_a_messages_upstream(effort: str, messages_effort: str | None) -> None:
    req = chat_request.decode_request(
        {"model": "m", "messages": [{"role": "user", "content": "q"}], "reasoning_effort": effort}
    )
    body = messages_request.encode_request(req, "claude")
    assert body.get("output_config", {}).get("effort") == messages_effort
    assert "thinking" not in body


def test_effort_of_the_wrong_type_is_a_400_in_every_format() -> None:
    with pytest.raises(errors.InvalidRequest) as messages:
        messages_request.decode_request(messages_body(output_config={"effort": 5}))
    assert messages.value.param == "output_config.effort"
    with pytest.raises(errors.InvalidRequest) as chat:
        chat_request.decode_request(
            {"model": "m", "messages": [{"role": "user", "content": "q"}], "reasoning_effort": 5}
        )
    assert chat.value.param == "reasoning_effort"
    with pytest.raises(errors.InvalidRequest) as responses:
        responses_request.decode_request(responses_body(reasoning={"effort": ["high"]}))
    assert responses.value.param == "reasoning.effort"


def _messages_sse(*events: tuple[str, dict[str, Any]]) -> bytes:
    return b"".join(
        b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, **data}) + b"\n\n"
        for kind, data in events
    )


SEARCH_STREAM = _messages_sse(
    ("message_start", {"message": {"id": "msg_1", "model": "c", "usage": {"input_tokens": 3, "output_tokens": 1}}}),
    ("content_block_start", {"index": 0, "content_block": {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}}),
    ("content_block_delta", {"index": 0, "delta": {"type": "input_json_delta", "partial_json": '{"query":"q"}'}}),
    ("content_block_stop", {"index": 0}),
    ("content_block_start", {"index": 1, "content_block": {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": {"type": "web_search_tool_result_error", "error_code": "max_uses_exceeded"}}}),
    ("content_block_stop", {"index": 1}),
    ("content_block_start", {"index": 2, "content_block": {"type": "server_tool_use", "id": "srvtoolu_2", "name": "web_search", "input": {"query": "r"}}}),
    ("content_block_stop", {"index": 2}),
    ("message_delta", {"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 4}}),
    ("message_stop", {}),
)  # fmt: skip


def test_search_stream_events_from_messages_to_responses() -> None:
    decoder = messages_stream.StreamDecoder()
    events = decoder.feed(SEARCH_STREAM) + decoder.finish()
    error = ir.WebSearchResult([], "max_uses_exceeded")
    assert events[1:8] == [
        ir.BlockStart(0, "web_search", "srvtoolu_1", "web_search"),
        ir.ToolArgsDelta(0, '{"query":"q"}'),
        ir.BlockStop(0),
        ir.BlockStart(1, "web_search_result", "srvtoolu_1", result=error),
        ir.BlockStop(1),
        ir.BlockStart(2, "web_search", "srvtoolu_2", "web_search"),
        ir.ToolArgsDelta(2, '{"query":"r"}'),
    ]
    encoder = responses_encoder.StreamEncoder(ir.Request("nova", []))
    sse = b"".join(encoder.encode(e) for e in events)
    parsed = [STREAM_EVENT.validate_python(orjson.loads(e.data)) for e in SSEParser().feed(sse)]
    kinds = [e.type for e in parsed]
    assert kinds.count("response.web_search_call.completed") == 2  # the second completes at the end
    assert encoder.completed is not None
    first, second = encoder.completed["output"]
    assert first["status"] == "failed" and first["action"] == {"type": "search", "query": "q", "sources": []}
    assert second["status"] == "completed" and second["action"] == {"type": "search", "query": "r"}
    # And back: a Responses upstream's stream gives the same blocks to a Messages client.
    decoder_back = responses_decoder.StreamDecoder()
    back = decoder_back.feed(sse) + decoder_back.finish()
    assert [(e.kind, e.tool_id) for e in back if isinstance(e, ir.BlockStart)] == [
        ("web_search", "srvtoolu_1"),
        ("web_search_result", "srvtoolu_1"),
        ("web_search", "srvtoolu_2"),
        ("web_search_result", "srvtoolu_2"),
    ]
    encoded = b"".join(messages_stream.StreamEncoder().encode(e) for e in back)
    assert b'"type":"server_tool_use"' in encoded and b'"error_code":"unavailable"' in encoded


@pytest.mark.parametrize("kind", [5, "x\r\nset-cookie: a=b", "t" * 65, "é"])
def test_a_hosted_tool_type_that_is_not_a_plain_name_is_a_400(kind: Any) -> None:
    """Dropped types are named in a response header: nothing but a plain name may get there."""
    with pytest.raises(errors.InvalidRequest) as responses:
        responses_request.decode_request(responses_body(tools=[{"type": kind}]))
    assert responses.value.param == "tools[0].type"
    with pytest.raises(errors.InvalidRequest) as choice:
        responses_request.decode_request(responses_body(tool_choice={"type": kind}))
    assert choice.value.param in ("tool_choice.type", "tool_choice")
    with pytest.raises(errors.InvalidRequest) as messages:
        messages_request.decode_request(messages_body(tools=[{"type": kind, "name": "n"}]))
    assert messages.value.param == "tools.0.type"


def test_the_responses_echo_shows_the_web_search_and_a_forced_choice_as_sent() -> None:
    from modelgate.formats.responses import response as responses_response

    tools = [{"type": "web_search_preview", "user_location": {"type": "approximate", "city": "Oslo"}}]
    req = responses_request.decode_request(
        responses_body(tools=tools, tool_choice={"type": "web_search_preview"})
    )
    answer = ir.Response("resp_1", "m", [ir.TextPart("ok")], ir.StopReason.END_TURN, ir.Usage())
    echo = responses_response.encode_response(answer, req)
    assert echo["tools"] == tools and echo["tool_choice"] == {"type": "web_search_preview"}


def test_max_tool_calls_bounds_the_searches_of_a_translated_web_search() -> None:
    tools = [{"type": "web_search"}]
    req = responses_request.decode_request(responses_body(tools=tools, max_tool_calls=3))
    assert req.web_search is not None and req.web_search.max_uses == 3
    assert messages_request.encode_request(req, "c")["tools"] == [
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
    ]
    # None allowed: the search is not on offer at all.
    assert responses_request.decode_request(responses_body(tools=tools, max_tool_calls=0)).web_search is None
    with pytest.raises(errors.InvalidRequest) as caught:
        responses_request.decode_request(responses_body(tools=tools, max_tool_calls="3"))
    assert caught.value.param == "max_tool_calls"


def test_only_consecutive_tool_references_share_a_text_part() -> None:
    content = [
        {"type": "text", "text": "Tool search results:"},
        {"type": "tool_reference", "tool_name": "A"},
        {"type": "text", "text": "and"},
        {"type": "tool_reference", "tool_name": "B"},
    ]
    turn = [{"type": "tool_result", "tool_use_id": "t1", "content": content}]
    req = messages_request.decode_request(messages_body(messages=[{"role": "user", "content": turn}]))
    result = req.messages[0].content[0]
    assert isinstance(result, ir.ToolResultPart)
    assert [p.text for p in result.content if isinstance(p, ir.TextPart)] == [
        "Tool search results:",
        "Tool A is now available.",
        "and",
        "Tool B is now available.",
    ]


def test_citations_become_url_citations_over_the_text_that_cited() -> None:
    from openai.types.responses import Response as OpenAIResponse

    from modelgate.formats.responses import response as responses_response

    source = ir.Citation("https://a.example", "A")
    answer = ir.Response(
        "resp_1",
        "m",
        [ir.TextPart("Plain. "), ir.TextPart("Cited.", citations=[source]), ir.TextPart(" Tail")],
        ir.StopReason.END_TURN,
        ir.Usage(),
    )
    body = responses_response.encode_response(answer, ir.Request("m", []))
    message = OpenAIResponse.model_validate(body).output[0]
    assert message.type == "message"
    text = message.content[0]
    assert text.type == "output_text"
    (annotation,) = text.annotations
    assert annotation.type == "url_citation"
    assert text.text[annotation.start_index : annotation.end_index] == "Cited."
    assert (annotation.url, annotation.title) == ("https://a.example", "A")
    # Messages decoding keeps web search citations only (document citations cite what is dropped).
    decoded = messages_response_decode(
        [
            {
                "type": "text",
                "text": "x",
                "citations": [{"type": "web_search_result_location", "url": "u", "title": "t"}],
            },
            {"type": "text", "text": "y", "citations": [{"type": "char_location", "document_index": 0}]},
        ]
    )
    assert [p.citations for p in decoded if isinstance(p, ir.TextPart)] == [[ir.Citation("u", "t")], []]


def messages_response_decode(content: list[dict[str, Any]]) -> list[ir.OutputPart]:
    from modelgate.formats.messages import response as messages_response

    body = {"id": "m", "model": "c", "content": content, "stop_reason": "end_turn", "usage": {}}
    return messages_response.decode_response(body).content


def test_a_translated_web_search_is_limited_to_the_searches_the_hold_covers() -> None:
    common: Any = {"upstream_model": "up", "max_tokens": 10, "stream": False, "legacy_limit": False}

    def sent(body: dict[str, Any], dialect: str, web_searches: int) -> dict[str, Any]:
        codec = CODECS["responses"] if "input" in body else CODECS["messages"]
        built = build_body(ClientRequest(codec, body, "m"), b"", dialect, web_searches=web_searches, **common)
        return dict(orjson.loads(built.body))

    codex = responses_body(tools=[{"type": "web_search"}])
    assert sent(codex, "messages", 10)["tools"][0]["max_uses"] == 10
    assert "max_uses" not in sent(codex, "messages", 0)["tools"][0]  # 0: the hold covers none, no limit
    # A client's lower limit wins; a higher one is lowered.
    assert (
        sent(responses_body(tools=[{"type": "web_search"}], max_tool_calls=3), "messages", 10)["tools"][0][
            "max_uses"
        ]
        == 3
    )
    claude = messages_body(tools=[{"type": "web_search_20250305", "name": "web_search", "max_uses": 50}])
    assert sent(claude, "responses", 10)["max_tool_calls"] == 10
    # The shared request keeps the client's own limit for the next attempt and the echo.
    client = ClientRequest(CODECS["messages"], claude, "m")
    build_body(client, b"", "responses", web_searches=10, **common)
    assert client.request().web_search is not None and client.request().web_search.max_uses == 50  # type: ignore[union-attr]


def test_bedrock_runs_no_server_tools_so_a_web_search_is_dropped_there() -> None:
    common: Any = {"upstream_model": "up", "max_tokens": 10, "stream": False, "legacy_limit": False}
    client = ClientRequest(CODECS["responses"], responses_body(tools=[{"type": "web_search"}]), "m")
    bedrock = build_body(client, b"", "messages", provider_kind="bedrock", **common)
    assert bedrock.dropped == ("web_search",) and "tools" not in orjson.loads(bedrock.body)
    vertex = build_body(client, b"", "messages", provider_kind="vertex", **common)
    assert vertex.dropped == () and orjson.loads(vertex.body)["tools"][0]["type"] == "web_search_20250305"
    forced = ClientRequest(
        CODECS["responses"],
        responses_body(tools=[{"type": "web_search"}], tool_choice={"type": "web_search_preview"}),
        "m",
    )
    with pytest.raises(errors.InvalidRequest, match="web_search_preview"):
        build_body(forced, b"", "messages", provider_kind="bedrock", **common)
