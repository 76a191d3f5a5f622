"""Whole Messages responses and error bodies."""

from __future__ import annotations

from typing import Any

import orjson

from modelgate import errors, ir
from modelgate.formats.messages import hosted
from modelgate.formats.messages.wire import decode_usage, error_object, stop_reason_of, usage_json
from modelgate.formats.sse import frame


def _encode_output(part: ir.OutputPart) -> list[dict[str, Any]]:
    if isinstance(part, ir.TextPart):
        return [{"type": "text", "text": part.text}]
    if isinstance(part, ir.ToolUsePart):
        return [{"type": "tool_use", "id": part.id, "name": part.name, "input": part.input}]
    if isinstance(part, ir.ThinkingPart):
        return [{"type": "thinking", "thinking": part.thinking, "signature": part.signature or ""}]
    if isinstance(part, ir.WebSearchCallPart):
        blocks = [hosted.server_tool_use_block(part)]
        if part.result is not None:
            blocks.append(hosted.result_block(part.id, part.result))
        return blocks
    return [{"type": "redacted_thinking", "data": part.data}]


def encode_response(resp: ir.Response) -> dict[str, Any]:
    usage = usage_json(resp.usage)
    one_hour = min(resp.usage.cache_write_1h_input_tokens, resp.usage.cache_creation_input_tokens)
    usage["cache_creation"] = {
        "ephemeral_5m_input_tokens": resp.usage.cache_creation_input_tokens - one_hour,
        "ephemeral_1h_input_tokens": one_hour,
    }
    searches = resp.usage.web_search_requests
    usage["server_tool_use"] = (
        {"web_search_requests": searches, "web_fetch_requests": 0} if searches else None
    )
    usage["service_tier"] = "standard"
    return {
        "id": resp.id,
        "type": "message",
        "role": "assistant",
        "model": resp.model,
        "content": [block for p in resp.content for block in _encode_output(p)],
        "stop_reason": resp.stop_reason.value,
        "stop_sequence": resp.stop_sequence,
        "usage": usage,
    }


def decode_response(body: dict[str, Any]) -> ir.Response:
    """A whole Messages response from an upstream -> IR; unusable bodies are upstream failures."""
    content = body.get("content")
    if not isinstance(content, list):
        raise errors.UpstreamFailed("upstream response has no content list")
    parts: list[ir.OutputPart] = []
    searches: dict[str, ir.WebSearchCallPart] = {}
    for block in content:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "server_tool_use" and block.get("name") == ir.WEB_SEARCH_NAME:
            search = ir.WebSearchCallPart(str(block.get("id", "")), hosted.search_query(block.get("input")))
            searches[search.id] = search
            parts.append(search)
        elif kind == "web_search_tool_result":
            called = searches.get(str(block.get("tool_use_id", "")))
            if called is not None:
                called.result = hosted.decode_result(block)
        elif kind == "text" and isinstance(block.get("text"), str):
            parts.append(ir.TextPart(block["text"], citations=hosted.citations(block)))
        elif kind == "tool_use":
            tool_input = block.get("input")
            parts.append(
                ir.ToolUsePart(
                    str(block.get("id", "")),
                    str(block.get("name", "")),
                    tool_input if isinstance(tool_input, dict) else {},
                )
            )
        elif kind == "thinking":
            parts.append(ir.ThinkingPart(str(block.get("thinking") or ""), block.get("signature") or None))
        elif kind == "redacted_thinking":
            parts.append(ir.RedactedThinkingPart(str(block.get("data") or "")))
    stop_sequence = body.get("stop_sequence")
    return ir.Response(
        id=str(body.get("id", "")),
        model=str(body.get("model", "")),
        content=parts,
        stop_reason=stop_reason_of(body.get("stop_reason")),
        usage=decode_usage(body.get("usage")),
        stop_sequence=stop_sequence if isinstance(stop_sequence, str) else None,
    )


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------


def render_error(err: errors.GatewayError, request_id: str) -> bytes:
    return orjson.dumps(
        {"type": "error", "error": error_object(err.kind, err.message, err.code), "request_id": request_id}
    )


def stream_error_frame(err: errors.GatewayError) -> bytes:
    return frame(
        orjson.dumps({"type": "error", "error": error_object(err.kind, err.message, err.code)}), "error"
    )
