"""Responses wire objects shared by the whole-response codec, the stream encoder, the stream
decoder and the tap (docs/reference/wire-formats.md §3.5, §3.6, §4.6), so a streamed ``response.completed`` and a
non-streaming body cannot drift apart."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import orjson

from modelgate import ir
from modelgate.formats import openai_errors, sse
from modelgate.formats.jsonutil import Json, count_of
from modelgate.formats.responses.hosted import WEB_SEARCH_TYPES, web_search_tool

#: Flattened tool name -> (namespace, original name), for Codex ``namespace`` tools.
Namespaces = Mapping[str, tuple[str, str]]
TERMINAL_TYPES = ("response.completed", "response.incomplete", "response.failed")


def new_reasoning_item_id() -> str:
    """``rs_…`` (ids.py has no reasoning-item minter yet)."""
    return "rs_" + os.urandom(24).hex()


def usage_to_wire(usage: ir.Usage) -> Json:
    # Responses input_tokens include cache reads and writes; cached_tokens are the reads.
    total_in = usage.total_input
    return {
        "input_tokens": total_in,
        # cache_write_tokens is required by openai SDK >= 3.5x types.
        "input_tokens_details": {
            "cached_tokens": usage.cache_read_input_tokens,
            "cache_write_tokens": usage.cache_creation_input_tokens,
        },
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": total_in + usage.output_tokens,
    }


def usage_from_wire(raw: Any) -> ir.Usage:
    if not isinstance(raw, dict):
        return ir.Usage()
    details = raw.get("input_tokens_details") or {}
    out_details = raw.get("output_tokens_details") or {}
    cached = count_of(details.get("cached_tokens"))
    written = count_of(details.get("cache_write_tokens"))
    return ir.Usage(
        input_tokens=max(count_of(raw.get("input_tokens")) - cached - written, 0),
        output_tokens=count_of(raw.get("output_tokens")),
        cache_creation_input_tokens=written,
        cache_read_input_tokens=cached,
        reasoning_tokens=count_of(out_details.get("reasoning_tokens")),
    )


def response_usage(response: Any) -> ir.Usage:
    """The usage of a whole (or terminal) Responses object: its ``usage``, and one web search
    request per ``web_search_call`` output item (OpenAI bills each call; the usage object does
    not count them)."""
    response = response if isinstance(response, dict) else {}
    usage = usage_from_wire(response.get("usage"))
    output = response.get("output")
    if isinstance(output, list):
        usage.web_search_requests = sum(
            1 for item in output if isinstance(item, dict) and item.get("type") == "web_search_call"
        )
    return usage


def status_for(stop: ir.StopReason) -> tuple[str, Json | None]:
    """§4.7: ``(status, incomplete_details)`` for a stop reason."""
    if stop in (ir.StopReason.MAX_TOKENS, ir.StopReason.CONTEXT_WINDOW):
        return "incomplete", {"reason": "max_output_tokens"}
    if stop is ir.StopReason.REFUSAL:
        return "incomplete", {"reason": "content_filter"}
    return "completed", None


def stop_reason_from(status: Any, incomplete_details: Any, has_function_call: bool) -> ir.StopReason:
    if status == "incomplete":
        reason = incomplete_details.get("reason") if isinstance(incomplete_details, dict) else None
        return ir.StopReason.REFUSAL if reason == "content_filter" else ir.StopReason.MAX_TOKENS
    return ir.StopReason.TOOL_USE if has_function_call else ir.StopReason.END_TURN


def message_item(
    item_id: str, text: str | None, status: str = "completed", annotations: list[Json] | None = None
) -> Json:
    content = [] if text is None else [_output_text(text, annotations or [])]
    return {"id": item_id, "type": "message", "status": status, "role": "assistant", "content": content}


def _output_text(text: str, annotations: list[Json]) -> Json:
    return {"type": "output_text", "text": text, "annotations": annotations, "logprobs": []}


def url_citation(citation: ir.Citation, start: int, end: int) -> Json:
    """A ``url_citation`` annotation over ``text[start:end]`` of an ``output_text``."""
    return {
        "type": "url_citation",
        "start_index": start,
        "end_index": end,
        "url": citation.url,
        "title": citation.title,
    }


def function_call_item(
    item_id: str, call_id: str, name: str, arguments: str, status: str, namespaces: Namespaces | None
) -> Json:
    item: Json = {"id": item_id, "type": "function_call", "status": status, "arguments": arguments}
    mapped = namespaces.get(name) if namespaces else None
    if mapped is not None:
        # Codex namespace tools were flattened to ``<namespace>__<name>`` on the way in.
        item["namespace"], name = mapped
    item["call_id"] = call_id
    item["name"] = name
    return item


def reasoning_item(item_id: str, summary: str | None) -> Json:
    parts = [] if summary is None else [{"type": "summary_text", "text": summary}]
    return {"id": item_id, "type": "reasoning", "summary": parts}


def request_echo(request: ir.Request | None) -> Json:
    """The request-derived keys of a response object (§3.5 always-present keys included)."""
    if request is None:
        return {
            "instructions": None,
            "max_output_tokens": None,
            "parallel_tool_calls": True,
            "reasoning": {"effort": None, "summary": None},
            "temperature": None,
            "text": {"format": {"type": "text"}},
            "tool_choice": "auto",
            "tools": [],
            "top_p": None,
            "user": None,
        }
    choice = request.tool_choice or ir.ToolChoice()
    return {
        "instructions": "\n\n".join(request.system) if request.system else None,
        "max_output_tokens": request.max_tokens,
        "parallel_tool_calls": not choice.disable_parallel,
        "reasoning": {"effort": request.reasoning_effort, "summary": None},
        "temperature": request.temperature,
        "text": {"format": text_format(request.response_format)},
        "tool_choice": tool_choice_to_wire(choice),
        "tools": [tool_to_wire(tool) for tool in request.tools] + _hosted_echo(request),
        "top_p": request.top_p,
        "user": request.user,
    }


def _hosted_echo(request: ir.Request) -> list[Json]:
    """The client's web search tool, under the type it sent (other hosted tools are not kept)."""
    search = request.web_search
    if search is None or search.client_type not in WEB_SEARCH_TYPES:
        return []
    return [{**web_search_tool(search), "type": search.client_type}]


def tool_to_wire(tool: ir.Tool) -> Json:
    return {
        "type": "function",
        "name": tool.name,
        "description": tool.description,
        "parameters": tool.input_schema,
        "strict": False,
    }


def tool_choice_to_wire(choice: ir.ToolChoice) -> str | Json:
    if choice.hosted is not None:
        return {"type": choice.hosted}  # as the client forced it (the echo)
    if choice.type == "tool" and choice.name:
        return {"type": "function", "name": choice.name}
    return {"any": "required", "none": "none"}.get(choice.type, "auto")


def text_format(response_format: Json | None) -> Json:
    if response_format is None:
        return {"type": "text"}
    if response_format.get("type") == "json_schema":
        return {
            "type": "json_schema",
            "name": response_format.get("name") or "response",
            "schema": response_format.get("schema") or {},
            "strict": bool(response_format.get("strict", False)),
        }
    return {"type": "json_object"}


def response_object(
    *,
    response_id: str,
    model: str,
    created_at: int,
    status: str,
    output: list[Json],
    echo: Json,
    usage: ir.Usage | None = None,
    incomplete_details: Json | None = None,
    error: Json | None = None,
) -> Json:
    """A full §3.5 ``response`` object; key order is fixed so golden bytes are stable."""
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "error": error,
        "incomplete_details": incomplete_details,
        "instructions": echo["instructions"],
        "max_output_tokens": echo["max_output_tokens"],
        "model": model,
        "output": output,
        "parallel_tool_calls": echo["parallel_tool_calls"],
        "previous_response_id": None,
        "reasoning": echo["reasoning"],
        "store": False,
        "temperature": echo["temperature"],
        "text": echo["text"],
        "tool_choice": echo["tool_choice"],
        "tools": echo["tools"],
        "top_p": echo["top_p"],
        "truncation": "disabled",
        "usage": None if usage is None else usage_to_wire(usage),
        "user": echo["user"],
        "metadata": {},
    }


def failed_error(kind: str, message: str, code: str | None = None) -> Json:
    """``response.error`` for ``response.failed``.

    The SDK types ``ResponseError.code`` as a closed enum, so only ``rate_limit_exceeded`` and
    ``server_error`` are used; the gateway's own error type goes in the optional ``type``.
    """
    wire_code = "rate_limit_exceeded" if kind == "rate_limit" else "server_error"
    own = code or openai_errors.error_code(kind) or openai_errors.error_type(kind)
    return {"code": wire_code, "message": message, "type": own}


def failure_events(seq: int, kind: str, message: str, response: Json, code: str | None = None) -> bytes:
    """``error`` (seq) then ``response.failed`` (seq + 1).

    The ``error`` event carries the SDK's flat fields *and* a nested ``error`` object: the openai
    SDK raises ``APIError(message)`` on any event whose data has a truthy ``error`` key, so
    ``responses.stream()`` users get a clear exception. Codex ignores ``error`` events and
    surfaces the ``response.failed`` message, which follows (docs/reference/wire-formats.md §3.6).
    """
    wire_code = code or openai_errors.error_code(kind) or openai_errors.error_type(kind)
    error = {"type": openai_errors.error_type(kind), "code": wire_code, "message": message, "param": None}
    head = {"type": "error", "sequence_number": seq, "code": wire_code, "message": message, "param": None}
    head["error"] = error
    failed = {"type": "response.failed", "sequence_number": seq + 1, "response": response}
    return sse.frame(orjson.dumps(head), "error") + sse.frame(orjson.dumps(failed), "response.failed")


_UPSTREAM_CODE_KINDS = {
    "rate_limit_exceeded": "rate_limit",
    "insufficient_quota": "upstream_error",
    "context_length_exceeded": "invalid_request",
    "invalid_prompt": "invalid_request",
    "timeout": "timeout",
    "overloaded": "overloaded",
    "service_unavailable": "unavailable",
}


def error_kind(error: Any) -> tuple[str, str]:
    if not isinstance(error, dict):
        return "upstream_error", "upstream response failed"
    code = error.get("code") or error.get("type")
    message = error.get("message")
    kind = _UPSTREAM_CODE_KINDS.get(code, "upstream_error") if isinstance(code, str) else "upstream_error"
    return kind, message if isinstance(message, str) and message else "upstream response failed"
