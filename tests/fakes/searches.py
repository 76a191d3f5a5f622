"""Recorded upstream answers with a hosted web search: what Anthropic's Messages API sends when
its web search server tool ran (whole and streamed), for fakes that play answers back verbatim."""

from __future__ import annotations

from typing import Any

import orjson

CITATION: dict[str, Any] = {
    "type": "web_search_result_location",
    "url": "https://example.com/a",
    "title": "A",
    "encrypted_index": "idx-a",
    "cited_text": "modelgate is a gateway",
}
ANTHROPIC_SEARCH: dict[str, Any] = {
    "id": "msg_01Search",
    "type": "message",
    "role": "assistant",
    "model": "claude-replay",
    "content": [
        {"type": "text", "text": "Let me search."},
        {
            "type": "server_tool_use",
            "id": "srvtoolu_01",
            "name": "web_search",
            "input": {"query": "modelgate"},
        },
        {
            "type": "web_search_tool_result",
            "tool_use_id": "srvtoolu_01",
            "content": [
                {
                    "type": "web_search_result",
                    "url": "https://example.com/a",
                    "title": "A",
                    "encrypted_content": "enc-a",
                    "page_age": "1 day",
                },
                {
                    "type": "web_search_result",
                    "url": "https://example.com/b",
                    "title": "B",
                    "encrypted_content": "enc-b",
                },
            ],
        },
        {"type": "text", "text": "It is a gateway."},
        {"type": "text", "text": " Sources agree.", "citations": [CITATION]},
    ],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 50, "output_tokens": 20, "server_tool_use": {"web_search_requests": 1}},
}


def sse_event(event: str, data: dict[str, Any]) -> bytes:
    return b"event: " + event.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def _block(index: int, start: dict[str, Any], *deltas: dict[str, Any]) -> bytes:
    """One content block's start, deltas and stop events."""
    out = sse_event(
        "content_block_start", {"type": "content_block_start", "index": index, "content_block": start}
    )
    for delta in deltas:
        out += sse_event(
            "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
        )
    return out + sse_event("content_block_stop", {"type": "content_block_stop", "index": index})


def anthropic_search_stream() -> bytes:
    message = {
        **ANTHROPIC_SEARCH,
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": 50, "output_tokens": 1},
    }
    blocks = ANTHROPIC_SEARCH["content"]
    query = [{"type": "input_json_delta", "partial_json": piece} for piece in ('{"query": "model', 'gate"}')]
    out = sse_event("message_start", {"type": "message_start", "message": message})
    out += _block(0, {"type": "text", "text": ""}, {"type": "text_delta", "text": "Let me search."})
    out += _block(1, {**blocks[1], "input": {}}, *query)
    out += _block(2, blocks[2])
    out += _block(3, {"type": "text", "text": ""}, {"type": "text_delta", "text": "It is a gateway."})
    out += _block(
        4,
        {"type": "text", "text": "", "citations": []},
        {"type": "citations_delta", "citation": CITATION},
        {"type": "text_delta", "text": " Sources agree."},
    )
    finish: dict[str, Any] = {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
        "usage": {"output_tokens": 20},
    }
    out += sse_event("message_delta", finish)
    return out + sse_event("message_stop", {"type": "message_stop"})
