"""Hosted tools across dialects, through the real gateway and fake upstreams on loopback.

Codex offers the hosted ``web_search`` tool with every request: on an Anthropic-dialect upstream
it becomes Anthropic's web search server tool and the searches come back as ``web_search_call``
items (whole and streamed, judged by the openai SDK's stream helper); on a Chat-only upstream it
is dropped and named in ``x-modelgate-dropped-tools`` and the request log. A ``tool_choice``
forcing a tool the upstream cannot run is a 400. The reverse holds for Messages clients: a web
search server tool goes to an OpenAI upstream's Responses API, and its ``web_search_call`` items
come back as ``server_tool_use`` + ``web_search_tool_result`` blocks (judged by the anthropic SDK).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest

from tests.conformance.conftest import UPSTREAM_KEY, Wired, issue_key, usage_records
from tests.conformance.upstreams import Recorded, Scripted, start_fake
from tests.fakes.searches import ANTHROPIC_SEARCH, anthropic_search_stream, sse_event
from tests.fakes.upstream import FakeUpstream, Reply
from tests.gateway.clients import SdkClients
from tests.gateway_server import GatewayServer, running_gateway
from tests.loop_thread import LoopThread

FUNCTION_TOOL = {
    "type": "function",
    "name": "exec_command",
    "description": "Run a command",
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
    "strict": False,
}


def codex_body(model: str, **extra: Any) -> dict[str, Any]:
    """What Codex 0.171 sends (reference §7): a developer item, function tools and the hosted
    web search, ``prompt_cache_key``, ``include``, ``reasoning``, ``store: false``."""
    return {
        "model": model,
        "instructions": "You are Codex.",
        "input": [
            {
                "type": "message",
                "role": "developer",
                "content": [{"type": "input_text", "text": "Be careful."}],
            },
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "List files."}]},
        ],
        "tools": [FUNCTION_TOOL, {"type": "web_search", "external_web_access": False}],
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "reasoning": {"effort": "high", "summary": "auto"},
        "store": False,
        "stream": False,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "thread-1",
        "client_metadata": {"originator": "codex_exec"},
        **extra,
    }


def post_responses(wired: Wired, secret: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        f"{wired.gateway.base_url}/v1/responses",
        json=body,
        headers={"authorization": f"Bearer {secret}"},
        timeout=30,
    )


def request_log(caplog: pytest.LogCaptureFixture, request_id: str) -> dict[str, Any]:
    """The request log line's fields of one request."""
    for record in caplog.records:
        fields = getattr(record, "fields", None)
        if record.name == "modelgate.requests" and fields and fields["request_id"] == request_id:
            return dict(fields)
    raise AssertionError(f"no request log line for {request_id}")


# --- Responses client (Codex) -> Chat-only upstream: dropped and named -------------------------


def test_codex_on_a_chat_upstream_drops_web_search_and_names_it(
    wired: Wired, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="modelgate.requests")
    secret, key_id = issue_key(wired.gateway, "Nova")
    tools = [FUNCTION_TOOL, {"type": "web_search"}, {"type": "file_search", "vector_store_ids": ["vs_1"]}]
    response = post_responses(wired, secret, codex_body("nova-5.6-sol", tools=tools))
    assert response.status_code == 200, response.text
    assert response.headers["x-modelgate-dropped-tools"] == "file_search,web_search"
    sent = wired.fake.requests[-1]
    assert sent.path == "/v1/chat/completions"
    body = sent.json()
    # Only the function tool reaches the upstream; nothing hosted, nothing Codex-specific.
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "exec_command",
                "description": "Run a command",
                "parameters": FUNCTION_TOOL["parameters"],
            },
        }
    ]
    assert body["reasoning_effort"] == "high"
    assert not {"prompt_cache_key", "include", "store", "client_metadata"} & set(body)
    log = request_log(caplog, response.headers["x-request-id"])
    assert log["dropped_tools"] == "file_search,web_search" and log["status"] == 200
    (record,) = usage_records(wired.gateway, key_id)
    assert record.status == "ok"


def test_a_stream_names_what_it_dropped_in_its_headers(wired: Wired, sdk: SdkClients) -> None:
    secret, _ = issue_key(wired.gateway, "Nova")
    client = sdk.openai(wired.gateway.base_url, secret)
    tools: Any = [FUNCTION_TOOL, {"type": "web_search"}]
    with client.responses.with_streaming_response.create(
        model="nova-5.6-sol", input="hi", tools=tools, stream=True
    ) as raw:
        assert raw.headers["x-modelgate-dropped-tools"] == "web_search"
        assert b"response.completed" in raw.read()
    assert wired.fake.requests[-1].json()["stream"] is True


def test_no_dropped_tools_header_when_nothing_was_dropped(
    wired: Wired, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="modelgate.requests")
    secret, _ = issue_key(wired.gateway, "Nova")
    response = post_responses(wired, secret, codex_body("nova-5.6-sol", tools=[FUNCTION_TOOL]))
    assert response.status_code == 200 and "x-modelgate-dropped-tools" not in response.headers
    assert request_log(caplog, response.headers["x-request-id"])["dropped_tools"] is None


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize(
    "choice", [{"type": "web_search_preview"}, {"type": "file_search"}], ids=["web_search", "file_search"]
)
def test_a_tool_choice_forcing_an_unavailable_hosted_tool_is_a_400(
    wired: Wired, stream: bool, choice: dict[str, Any]
) -> None:
    secret, key_id = issue_key(wired.gateway, "Nova")
    body = codex_body("nova-5.6-sol", stream=stream, tool_choice=choice)
    response = post_responses(wired, secret, body)
    assert response.status_code == 400 and response.headers["content-type"] == "application/json"
    error = response.json()["error"]  # the Responses error shape
    assert set(response.json()) == {"error"} and error["type"] == "invalid_request_error"
    assert error["param"] == "tool_choice" and choice["type"] in error["message"]
    assert wired.fake.count == 0
    (record,) = usage_records(wired.gateway, key_id)
    assert record.status == "refused" and record.charged_uc == 0
    account = wired.gateway.call(wired.gateway.services.accounts.get_account(record.account_id))
    assert account is not None and (account.balance_uc, account.reserved_uc) == (100_000_000, 0)


def test_hosted_tools_pass_through_untouched_to_a_responses_upstream(wired: Wired, sdk: SdkClients) -> None:
    secret, _ = issue_key(wired.gateway, "Nova")
    tools: Any = [
        {"type": "web_search", "external_web_access": False},
        {"type": "file_search", "vector_store_ids": ["vs_1"]},
    ]
    raw = sdk.openai(wired.gateway.base_url, secret).responses.with_raw_response.create(
        model="nova-5.5", input="news?", tools=tools, tool_choice={"type": "file_search"}
    )
    assert "x-modelgate-dropped-tools" not in raw.headers
    sent = wired.fake.requests[-1]
    assert sent.path == "/v1/responses" and sent.json()["tools"] == tools


# --- Responses client (Codex) -> Anthropic-dialect upstream: the server tool ------------------


def test_codex_on_an_anthropic_upstream_gets_the_web_search_server_tool(wired: Wired) -> None:
    secret, _ = issue_key(wired.gateway, "Nova")
    tools = [
        FUNCTION_TOOL,
        {
            "type": "web_search",
            "filters": {"allowed_domains": ["docs.python.org"]},
            "user_location": {"type": "approximate", "city": "Oslo", "country": "NO"},
            "search_context_size": "low",
        },
    ]
    response = post_responses(wired, secret, codex_body("nova-5.6-terra", tools=tools, max_output_tokens=900))
    assert response.status_code == 200, response.text
    assert "x-modelgate-dropped-tools" not in response.headers
    sent = wired.fake.requests[-1]
    assert sent.path == "/v1/messages"
    assert sent.json() == {
        "model": "claude-sonnet-4-6",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "List files."}]}],
        "max_tokens": 900,
        "system": [{"type": "text", "text": "You are Codex."}, {"type": "text", "text": "Be careful."}],
        "tools": [
            {
                "name": "exec_command",
                "description": "Run a command",
                "input_schema": FUNCTION_TOOL["parameters"],
            },
            {
                "type": "web_search_20250305",
                "name": "web_search",
                # At most the searches the hold covers (billing.max_web_searches_per_request).
                "max_uses": 10,
                "allowed_domains": ["docs.python.org"],
                "user_location": {"type": "approximate", "city": "Oslo", "country": "NO"},
            },
        ],
        "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
        "output_config": {"effort": "high"},
    }
    forced = post_responses(
        wired, secret, codex_body("nova-5.6-terra", tool_choice={"type": "web_search_preview"})
    )
    assert forced.status_code == 200, forced.text
    assert wired.fake.requests[-1].json()["tool_choice"] == {
        "type": "tool",
        "name": "web_search",
        "disable_parallel_tool_use": True,
    }


def _assert_search_output(output: list[Any], *, streamed: bool = False) -> None:
    """The search item between the two answers; the cited text carries a url_citation over
    exactly the text that cited it (a stream gives each text block its own message item)."""
    messages = ["message", "message"] if streamed else ["message"]
    assert [item.type for item in output] == ["message", "web_search_call", *messages]
    search = output[1]
    assert search.id == "srvtoolu_01" and search.status == "completed"
    assert search.action.type == "search" and search.action.query == "modelgate"
    assert [s.url for s in search.action.sources] == ["https://example.com/a", "https://example.com/b"]
    text = "".join(part.text for item in output[2:] for part in item.content)
    assert text == "It is a gateway. Sources agree."
    cited = output[-1].content[0]
    (annotation,) = cited.annotations
    assert annotation.type == "url_citation" and (annotation.url, annotation.title) == (
        "https://example.com/a",
        "A",
    )
    assert cited.text[annotation.start_index : annotation.end_index] == " Sources agree."


def test_anthropic_searches_come_back_as_web_search_call_items_whole(wired: Wired, sdk: SdkClients) -> None:
    secret, key_id = issue_key(wired.gateway, "Nova")
    wired.replay.answers.append(Recorded(orjson.dumps(ANTHROPIC_SEARCH), "application/json"))
    response = sdk.openai(wired.gateway.base_url, secret).responses.create(
        model="nova-6-sol", input="What is modelgate?", tools=[{"type": "web_search"}]
    )
    assert response.status == "completed" and response.model == "nova-6-sol"
    _assert_search_output(response.output)
    assert orjson.loads(wired.replay.bodies[-1])["tools"] == [
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 10}
    ]
    (record,) = usage_records(wired.gateway, key_id)
    assert record.web_search_requests == 1  # the upstream's count, billed whatever the client's format


def test_anthropic_searches_stream_as_web_search_call_events(wired: Wired, sdk: SdkClients) -> None:
    secret, _ = issue_key(wired.gateway, "Nova")
    wired.replay.answers.append(Recorded(anthropic_search_stream()))
    client = sdk.openai(wired.gateway.base_url, secret)
    with client.responses.stream(
        model="nova-6-sol", input="What is modelgate?", tools=[{"type": "web_search"}]
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    search = [k for k in kinds if "web_search_call" in k]
    assert search == [
        "response.web_search_call.in_progress",
        "response.web_search_call.searching",
        "response.web_search_call.completed",
    ]
    # The call's item is added before its events and done after them, between the two messages.
    added = [e.item.type for e in events if e.type == "response.output_item.added"]
    done = [e.item.type for e in events if e.type == "response.output_item.done"]
    assert added == done == ["message", "web_search_call", "message", "message"]
    assert kinds.index("response.web_search_call.completed") < kinds.index(
        "response.output_text.done", kinds.index("response.web_search_call.completed")
    )
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert kinds.count("response.output_text.annotation.added") == 1
    _assert_search_output(final.output, streamed=True)


# --- Messages client -> OpenAI upstream: the search goes to Responses --------------------------

RESPONSES_SEARCH: dict[str, Any] = {
    "id": "resp_replay",
    "object": "response",
    "created_at": 1700000000,
    "status": "completed",
    "model": "gpt-replay",
    "output": [
        {
            "id": "ws_1",
            "type": "web_search_call",
            "status": "completed",
            "action": {
                "type": "search",
                "query": "modelgate",
                "sources": [{"type": "url", "url": "https://example.com/a"}],
            },
        },
        {
            "id": "msg_1",
            "type": "message",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "It is a gateway.", "annotations": []}],
        },
    ],
    "usage": {"input_tokens": 40, "output_tokens": 10, "total_tokens": 50},
}

MESSAGES_SEARCH_TOOL = {
    "type": "web_search_20250305",
    "name": "web_search",
    "max_uses": 3,
    "allowed_domains": ["example.com"],
    "user_location": {"type": "approximate", "city": "Oslo"},
}


def test_a_messages_web_search_goes_to_the_responses_api_and_comes_back_as_blocks(
    wired: Wired, sdk: SdkClients
) -> None:
    secret, key_id = issue_key(wired.gateway, "Pro")
    wired.replay.answers.append(Recorded(orjson.dumps(RESPONSES_SEARCH), "application/json"))
    message = sdk.anthropic(wired.gateway.base_url, secret).messages.create(
        model="aria-opus-4.6",
        max_tokens=500,
        messages=[{"role": "user", "content": "What is modelgate?"}],
        tools=[MESSAGES_SEARCH_TOOL],  # type: ignore[list-item]
    )
    sent = orjson.loads(wired.replay.bodies[-1])
    assert sent["tools"] == [
        {
            "type": "web_search",
            "filters": {"allowed_domains": ["example.com"]},
            "user_location": {"type": "approximate", "city": "Oslo"},
        }
    ]
    assert sent["max_tool_calls"] == 3
    assert [b.type for b in message.content] == ["server_tool_use", "web_search_tool_result", "text"]
    call, result = message.content[0], message.content[1]
    assert isinstance(call, anthropic.types.ServerToolUseBlock) and call.input == {"query": "modelgate"}
    assert isinstance(result, anthropic.types.WebSearchToolResultBlock) and result.tool_use_id == call.id
    assert isinstance(result.content, list) and result.content[0].url == "https://example.com/a"
    (record,) = usage_records(wired.gateway, key_id)
    assert record.web_search_requests == 1  # one web_search_call item


def test_a_messages_web_search_streams_back_as_blocks(wired: Wired, sdk: SdkClients) -> None:
    secret, _ = issue_key(wired.gateway, "Pro")
    item = RESPONSES_SEARCH["output"][0]
    text = RESPONSES_SEARCH["output"][1]
    events: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": {**RESPONSES_SEARCH, "status": "in_progress", "output": []}}),
        (
            "response.output_item.added",
            {"output_index": 0, "item": {"id": "ws_1", "type": "web_search_call", "status": "in_progress"}},
        ),
        ("response.web_search_call.in_progress", {"output_index": 0, "item_id": "ws_1"}),
        ("response.web_search_call.searching", {"output_index": 0, "item_id": "ws_1"}),
        ("response.web_search_call.completed", {"output_index": 0, "item_id": "ws_1"}),
        ("response.output_item.done", {"output_index": 0, "item": item}),
        (
            "response.output_item.added",
            {"output_index": 1, "item": {**text, "status": "in_progress", "content": []}},
        ),
        (
            "response.output_text.delta",
            {"output_index": 1, "item_id": "msg_1", "content_index": 0, "delta": "It is a gateway."},
        ),
        ("response.output_item.done", {"output_index": 1, "item": text}),
        ("response.completed", {"response": RESPONSES_SEARCH}),
    ]
    body = b"".join(
        sse_event(kind, {"type": kind, "sequence_number": n, **data}) for n, (kind, data) in enumerate(events)
    )
    wired.replay.answers.append(Recorded(body))
    client = sdk.anthropic(wired.gateway.base_url, secret)
    with client.messages.stream(
        model="aria-opus-4.6",
        max_tokens=500,
        messages=[{"role": "user", "content": "What is modelgate?"}],
        tools=[MESSAGES_SEARCH_TOOL],  # type: ignore[list-item]
    ) as stream:
        final = stream.get_final_message()
    assert [b.type for b in final.content] == ["server_tool_use", "web_search_tool_result", "text"]
    call = final.content[0]
    assert isinstance(call, anthropic.types.ServerToolUseBlock) and call.input == {"query": "modelgate"}
    assert final.content[2].type == "text" and final.content[2].text == "It is a gateway."


def test_a_provider_set_to_refuse_hosted_tools_refuses_them(wired: Wired, sdk: SdkClients) -> None:
    secret, _ = issue_key(wired.gateway, "Pro")
    client = sdk.anthropic(wired.gateway.base_url, secret)
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(
            model="aria-sonnet-5",
            max_tokens=100,
            messages=[{"role": "user", "content": "news?"}],
            tools=[MESSAGES_SEARCH_TOOL],  # type: ignore[list-item]
        )
    error = caught.value.body["error"]  # type: ignore[index]
    assert error["type"] == "invalid_request_error" and "web_search_20250305" in error["message"]
    assert wired.fake.count == 0
    # Without the hosted tool the same model answers.
    client.messages.create(
        model="aria-sonnet-5", max_tokens=100, messages=[{"role": "user", "content": "hi"}]
    )
    assert wired.fake.requests[-1].path == "/v1/chat/completions"


def test_openai_sdk_rejects_nothing_in_a_translated_search_response(wired: Wired) -> None:
    """The whole Responses body validates against the SDK's own Response type."""
    secret, _ = issue_key(wired.gateway, "Nova")
    wired.replay.answers.append(Recorded(orjson.dumps(ANTHROPIC_SEARCH), "application/json"))
    response = post_responses(
        wired, secret, {"model": "nova-6-sol", "input": "q", "tools": [{"type": "web_search"}]}
    )
    assert response.status_code == 200
    parsed = openai.types.responses.Response.model_validate(response.json())
    _assert_search_output(parsed.output)


# --- Large bodies: built in a worker process, the same rules -----------------------------------


@pytest.fixture(scope="module")
def offloading(
    tmp_path_factory: pytest.TempPathFactory, loop_thread: LoopThread
) -> Iterator[tuple[GatewayServer, FakeUpstream]]:
    """A gateway that builds every body over 1 KiB in its worker process (``offload_body_bytes``)."""
    fake = start_fake(loop_thread, Scripted(default=Reply()))
    providers = [
        {"name": "simulator", "kind": "simulator"},
        {"name": "anthropic", "kind": "anthropic", "base_url": fake.base_url, "api_key_env": "FAKE_KEY"},
        {"name": "openai", "kind": "openai", "base_url": fake.base_url, "api_key_env": "FAKE_KEY"},
        {"name": "compat", "kind": "openai-compatible", "base_url": fake.base_url},
    ]
    deployments = {
        "nova-5.6-terra": [{"provider": "anthropic", "upstream_model": "claude-x"}],
        "nova-5.6-sol": [{"provider": "compat", "upstream_model": "qwen"}],
        "aria-fable-5-1": [{"provider": "openai", "upstream_model": "gpt-x"}],
    }
    with running_gateway(
        tmp_path_factory.mktemp("offload") / "data",
        env={"FAKE_KEY": UPSTREAM_KEY},
        providers=providers,
        deployments=deployments,
        routing={"max_attempts": 1},
        server={"offload_body_bytes": 1024},
    ) as server:
        yield server, fake


def test_large_bodies_follow_the_same_hosted_tool_rules(
    offloading: tuple[GatewayServer, FakeUpstream],
) -> None:
    gateway, fake = offloading
    padding = "x" * 4000  # well over offload_body_bytes
    nova = gateway.key(gateway.account(f"acct-{time.monotonic_ns()}", 100), "Nova", rpm=10_000).secret
    aria = gateway.key(gateway.account(f"acct-{time.monotonic_ns()}", 100), "Pro", rpm=10_000).secret
    headers = {"authorization": f"Bearer {nova}"}
    url = f"{gateway.base_url}/v1/responses"
    chat = httpx.post(url, json=codex_body("nova-5.6-sol", instructions=padding), headers=headers, timeout=30)
    assert chat.status_code == 200 and chat.headers["x-modelgate-dropped-tools"] == "web_search"
    assert "tools" in fake.requests[-1].json() and len(fake.requests[-1].json()["tools"]) == 1
    anthropic_route = httpx.post(
        url, json=codex_body("nova-5.6-terra", instructions=padding), headers=headers, timeout=30
    )
    assert anthropic_route.status_code == 200 and "x-modelgate-dropped-tools" not in anthropic_route.headers
    assert fake.requests[-1].json()["tools"][1] == {
        "type": "web_search_20250305",
        "name": "web_search",
        "max_uses": 10,
    }
    forced = codex_body("nova-5.6-sol", instructions=padding, tool_choice={"type": "web_search_preview"})
    refused = httpx.post(url, json=forced, headers=headers, timeout=30)
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "tool_choice"
    # A Messages client offering a web search reaches the OpenAI upstream's Responses API.
    messages = httpx.post(
        f"{gateway.base_url}/v1/messages",
        json={
            "model": "aria-fable-5-1",
            "max_tokens": 50,
            "system": padding,
            "messages": [{"role": "user", "content": "news?"}],
            "tools": [MESSAGES_SEARCH_TOOL],
        },
        headers={"x-api-key": aria, "anthropic-version": "2023-06-01"},
        timeout=30,
    )
    assert messages.status_code == 200, messages.text
    assert fake.requests[-1].path == "/v1/responses"
    assert fake.requests[-1].json()["tools"][0]["type"] == "web_search"
