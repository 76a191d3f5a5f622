"""Whole Chat Completions responses and error bodies."""

from __future__ import annotations

import time
from typing import Any

import orjson

from modelgate import errors, ir
from modelgate.formats.chat.request import content_text
from modelgate.formats.chat.wire import (
    FINISH_REASONS,
    decode_usage,
    error_frame,
    error_object,
    stop_reason_of,
    usage_json,
)


def encode_response(resp: ir.Response) -> dict[str, Any]:
    texts = [p.text for p in resp.content if isinstance(p, ir.TextPart)]
    message: dict[str, Any] = {
        "role": "assistant",
        "content": "".join(texts) if texts else None,
        "refusal": None,
    }
    calls = [
        {
            "id": p.id,
            "type": "function",
            "function": {"name": p.name, "arguments": orjson.dumps(p.input).decode()},
        }
        for p in resp.content
        if isinstance(p, ir.ToolUsePart)
    ]
    if calls:
        message["tool_calls"] = calls
    return {
        "id": resp.id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": resp.model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": FINISH_REASONS[resp.stop_reason],
            }
        ],
        "usage": usage_json(resp.usage),
        "system_fingerprint": None,
    }


def decode_response(body: dict[str, Any]) -> ir.Response:
    """A whole Chat response from an upstream -> IR; unusable bodies are upstream failures."""
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise errors.UpstreamFailed("upstream response has no choices")
    message = choices[0].get("message")
    message = message if isinstance(message, dict) else {}
    parts: list[ir.OutputPart] = []
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        parts.append(ir.ThinkingPart(reasoning))
    text = (
        content_text(message.get("content"), "content")
        if not isinstance(message.get("content"), dict)
        else ""
    )
    if text:
        parts.append(ir.TextPart(text))
    if isinstance(message.get("refusal"), str) and message["refusal"]:
        parts.append(ir.TextPart(message["refusal"]))
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else []:
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(call, dict) and isinstance(fn, dict):
            parts.append(
                ir.ToolUsePart(
                    str(call.get("id") or ""), str(fn.get("name") or ""), ir.tool_input(fn.get("arguments"))
                )
            )
    has_calls = any(isinstance(p, ir.ToolUsePart) for p in parts)
    return ir.Response(
        id=str(body.get("id", "")),
        model=str(body.get("model", "")),
        content=parts,
        stop_reason=stop_reason_of(choices[0].get("finish_reason"), has_tool_calls=has_calls),
        usage=decode_usage(body.get("usage")),
    )


def render_error(err: errors.GatewayError, request_id: str) -> bytes:
    """OpenAI error body; ``request_id`` travels in the ``x-request-id`` header, not the body."""
    return orjson.dumps({"error": error_object(err.kind, err.message, err.param, err.code)})


def stream_error_frame(err: errors.GatewayError) -> bytes:
    return error_frame(err.kind, err.message, err.param, err.code)
