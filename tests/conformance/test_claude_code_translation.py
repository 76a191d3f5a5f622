"""What Claude Code 2.1.332 sends (reference §7), translated for OpenAI upstreams: a ToolSearch
round trip whose ``tool_result`` holds a ``tool_reference`` block, ``defer_loading`` tools with
the ``DeferredToolPlaceholder``, adaptive thinking with ``display: omitted``,
``output_config.effort`` and a ``role: "system"`` message after the user turn. The upstream
bodies are asserted exactly, for a Chat upstream and for an OpenAI upstream's Responses API
(where a request offering a web search goes)."""

from __future__ import annotations

from typing import Any

import httpx

from tests.conformance.conftest import Wired, issue_key

SCHEMA = {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object", "properties": {}}
FETCH_SCHEMA = {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]}
WEB_SEARCH = {"type": "web_search_20250305", "name": "web_search", "max_uses": 8}


def claude_code_body(model: str, *extra_tools: dict[str, Any]) -> dict[str, Any]:
    return {
        "model": model,
        "max_tokens": 1000,
        "thinking": {"type": "adaptive", "display": "omitted"},
        "output_config": {"effort": "xhigh"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "metadata": {"user_id": '{"session_id":"s-1"}'},
        "system": [
            {"type": "text", "text": "You are Claude Code."},
            {"type": "text", "text": "Be concise.", "cache_control": {"type": "ephemeral"}},
        ],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Fetch example.com"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "", "signature": "sig-omitted"},
                    {
                        "type": "tool_use",
                        "id": "toolu_search",
                        "name": "ToolSearch",
                        "input": {"query": "select:WebFetch"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_search",
                        "content": [{"type": "tool_reference", "tool_name": "WebFetch"}],
                        "is_error": False,
                        "cache_control": {"type": "ephemeral"},
                    }
                ],
            },
            {"role": "system", "content": "Plan mode is off."},
        ],
        "tools": [
            {"name": "ToolSearch", "description": "Find deferred tools", "input_schema": SCHEMA},
            {
                "name": "WebFetch",
                "description": "Fetch a URL",
                "input_schema": FETCH_SCHEMA,
                "defer_loading": True,
            },
            {
                "name": "DeferredToolPlaceholder",
                "description": "Reserved placeholder. Never call this.",
                "input_schema": SCHEMA,
                "defer_loading": True,
            },
            *extra_tools,
        ],
    }


def post_messages(wired: Wired, secret: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        f"{wired.gateway.base_url}/v1/messages?beta=true",
        json=body,
        headers={
            "x-api-key": secret,
            "anthropic-version": "2023-06-01",
            "anthropic-beta": "claude-code-20250219,advanced-tool-use-2025-11-20,effort-2025-11-24",
        },
        timeout=30,
    )


def test_claude_code_request_to_a_chat_upstream(wired: Wired) -> None:
    secret, _ = issue_key(wired.gateway, "Pro")
    response = post_messages(wired, secret, claude_code_body("aria-sonnet-4.6"))
    assert response.status_code == 200, response.text
    assert response.json()["content"][0]["text"] == "Hello from the fake upstream."
    sent = wired.fake.requests[-1]
    assert sent.path == "/v1/chat/completions"
    assert sent.json() == {
        "model": "llama-3.3-70b",
        "messages": [
            {"role": "system", "content": "You are Claude Code.\n\nBe concise."},
            {"role": "user", "content": "Fetch example.com"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "toolu_search",
                        "type": "function",
                        "function": {"name": "ToolSearch", "arguments": '{"query":"select:WebFetch"}'},
                    }
                ],
            },
            # The tool search's answer, as text naming the tool it loaded.
            {"role": "tool", "tool_call_id": "toolu_search", "content": "Tool WebFetch is now available."},
            # The system message after the user turn stays at its place.
            {"role": "system", "content": "Plan mode is off."},
        ],
        "max_completion_tokens": 1000,
        # Deferred tools are ordinary function tools here; the placeholder is left out.
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "ToolSearch",
                    "description": "Find deferred tools",
                    "parameters": SCHEMA,
                },
            },
            {
                "type": "function",
                "function": {"name": "WebFetch", "description": "Fetch a URL", "parameters": FETCH_SCHEMA},
            },
        ],
        "user": '{"session_id":"s-1"}',
        "reasoning_effort": "xhigh",
    }
    assert "x-modelgate-dropped-tools" not in response.headers


def test_claude_code_request_to_a_chat_upstream_drops_its_web_search(wired: Wired) -> None:
    secret, _ = issue_key(wired.gateway, "Pro")
    response = post_messages(wired, secret, claude_code_body("aria-sonnet-4.6", WEB_SEARCH))
    assert response.status_code == 200, response.text
    assert response.headers["x-modelgate-dropped-tools"] == "web_search_20250305"
    sent = wired.fake.requests[-1].json()
    assert [t["function"]["name"] for t in sent["tools"]] == ["ToolSearch", "WebFetch"]


def test_claude_code_request_to_a_responses_upstream(wired: Wired) -> None:
    secret, _ = issue_key(wired.gateway, "Pro")
    response = post_messages(wired, secret, claude_code_body("aria-fable-5-1", WEB_SEARCH))
    assert response.status_code == 200, response.text
    assert "x-modelgate-dropped-tools" not in response.headers
    sent = wired.fake.requests[-1]
    assert sent.path == "/v1/responses"
    assert sent.json() == {
        "model": "gpt-5.5-2026",
        "input": [
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "Fetch example.com"}],
            },
            {
                "type": "function_call",
                "call_id": "toolu_search",
                "name": "ToolSearch",
                "arguments": '{"query":"select:WebFetch"}',
            },
            {
                "type": "function_call_output",
                "call_id": "toolu_search",
                "output": "Tool WebFetch is now available.",
            },
            {
                "type": "message",
                "role": "developer",
                "content": [{"type": "input_text", "text": "Plan mode is off."}],
            },
        ],
        "store": False,
        "instructions": "You are Claude Code.\n\nBe concise.",
        "max_output_tokens": 1000,
        "tools": [
            {
                "type": "function",
                "name": "ToolSearch",
                "description": "Find deferred tools",
                "parameters": SCHEMA,
                "strict": False,
            },
            {
                "type": "function",
                "name": "WebFetch",
                "description": "Fetch a URL",
                "parameters": FETCH_SCHEMA,
                "strict": False,
            },
            {"type": "web_search"},
        ],
        "max_tool_calls": 8,
        "safety_identifier": '{"session_id":"s-1"}',
        "reasoning": {"effort": "xhigh"},
    }


def test_thinking_budget_becomes_an_effort_when_no_effort_is_given(wired: Wired) -> None:
    """Claude Code's haiku requests: ``thinking: enabled`` with a budget, no ``output_config``."""
    secret, _ = issue_key(wired.gateway, "Pro")
    body = claude_code_body("aria-sonnet-4.6")
    del body["output_config"]
    body["thinking"] = {"type": "enabled", "budget_tokens": 31999}
    assert post_messages(wired, secret, body).status_code == 200
    assert wired.fake.requests[-1].json()["reasoning_effort"] == "high"
    body["thinking"] = {"type": "adaptive"}
    assert post_messages(wired, secret, body).status_code == 200
    assert "reasoning_effort" not in wired.fake.requests[-1].json()  # the upstream's default


def test_hostile_new_fields_are_400s_in_the_messages_format(wired: Wired) -> None:
    secret, _ = issue_key(wired.gateway, "Pro")
    body = claude_code_body("aria-sonnet-4.6")
    body["messages"][2]["content"][0]["content"] = [{"type": "tool_reference"}]
    response = post_messages(wired, secret, body)
    assert response.status_code == 400 and response.json()["type"] == "error"
    assert "tool_name" in response.json()["error"]["message"]
    body = claude_code_body("aria-sonnet-4.6")
    body["output_config"] = {"effort": 3}
    response = post_messages(wired, secret, body)
    assert response.status_code == 400 and "output_config.effort" in response.json()["error"]["message"]
    assert wired.fake.count == 0
