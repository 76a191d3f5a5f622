"""Chat Completions wire helpers shared by the request, response, stream and tap modules: usage
objects, finish reasons and error objects (docs/reference/wire-formats.md §2.4-§2.6)."""

from __future__ import annotations

from typing import Any

import orjson

from modelgate import ir
from modelgate.formats import openai_errors
from modelgate.formats.jsonutil import count_of

FINISH_REASONS: dict[ir.StopReason, str] = {
    ir.StopReason.END_TURN: "stop",
    ir.StopReason.STOP_SEQUENCE: "stop",
    ir.StopReason.PAUSE_TURN: "stop",
    ir.StopReason.MAX_TOKENS: "length",
    ir.StopReason.CONTEXT_WINDOW: "length",
    ir.StopReason.TOOL_USE: "tool_calls",
    ir.StopReason.REFUSAL: "content_filter",
}

_STOP_BY_FINISH = {
    "stop": ir.StopReason.END_TURN,
    "length": ir.StopReason.MAX_TOKENS,
    "tool_calls": ir.StopReason.TOOL_USE,
    "function_call": ir.StopReason.TOOL_USE,
    "content_filter": ir.StopReason.REFUSAL,
}

#: OpenAI error ``code`` or ``type`` -> internal kind, for in-band upstream errors. Upstream quota
#: or auth trouble is the gateway's problem, not the client's, so it stays ``upstream_error``.
_KIND_BY_CODE = {
    "invalid_request_error": "invalid_request",
    "context_length_exceeded": "invalid_request",
    "rate_limit_exceeded": "rate_limit",
    "rate_limit_error": "rate_limit",
    "overloaded": "overloaded",
    "overloaded_error": "overloaded",
    "service_unavailable": "unavailable",
    "timeout": "timeout",
}


def stop_reason_of(finish_reason: Any, has_tool_calls: bool = False) -> ir.StopReason:
    """A Chat ``finish_reason``; ``stop`` with tool calls (some compatible servers) reads as tool use."""
    stop = (
        _STOP_BY_FINISH.get(finish_reason, ir.StopReason.END_TURN) if isinstance(finish_reason, str) else None
    )
    if has_tool_calls and stop in (None, ir.StopReason.END_TURN):
        return ir.StopReason.TOOL_USE
    return stop or ir.StopReason.END_TURN


def decode_usage(raw: Any) -> ir.Usage:
    """Chat usage -> IR: cached prompt tokens are cache reads, the rest plain input."""
    if not isinstance(raw, dict):
        return ir.Usage()
    prompt = count_of(raw.get("prompt_tokens"))
    details = raw.get("prompt_tokens_details")
    cached = min(count_of(details.get("cached_tokens")), prompt) if isinstance(details, dict) else 0
    out_details = raw.get("completion_tokens_details")
    reasoning = count_of(out_details.get("reasoning_tokens")) if isinstance(out_details, dict) else 0
    return ir.Usage(
        input_tokens=prompt - cached,
        output_tokens=count_of(raw.get("completion_tokens")),
        cache_read_input_tokens=cached,
        reasoning_tokens=reasoning,
    )


def usage_json(usage: ir.Usage) -> dict[str, Any]:
    prompt = usage.total_input
    return {
        "prompt_tokens": prompt,
        "completion_tokens": usage.output_tokens,
        "total_tokens": prompt + usage.output_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cache_read_input_tokens},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }


def error_object(
    kind: str, message: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    return {
        "message": message,
        "type": openai_errors.error_type(kind),
        "param": param,
        "code": code or openai_errors.error_code(kind),
    }


def stream_error_from(error: Any) -> ir.StreamError:
    if not isinstance(error, dict):
        return ir.StreamError("upstream_error", str(error) if error else "upstream stream error")
    kind = _KIND_BY_CODE.get(
        str(error.get("code")), _KIND_BY_CODE.get(str(error.get("type")), "upstream_error")
    )
    return ir.StreamError(kind, str(error.get("message") or "upstream stream error"))


def error_frame(kind: str, message: str, param: str | None = None, code: str | None = None) -> bytes:
    # The openai SDK raises APIError on any chunk with a truthy "error" key.
    return b"data: " + orjson.dumps({"error": error_object(kind, message, param, code)}) + b"\n\n"
