"""Whole Responses objects and error bodies (docs/reference/wire-formats.md §3.5, §3.7)."""

from __future__ import annotations

import time
from typing import Any

import orjson

from modelgate import errors, ir
from modelgate.formats import ids, openai_errors
from modelgate.formats.jsonutil import Json
from modelgate.formats.responses import hosted
from modelgate.formats.responses.request import NAMESPACE_SEPARATOR
from modelgate.formats.responses.wire import (
    Namespaces,
    failed_error,
    failure_events,
    function_call_item,
    message_item,
    new_reasoning_item_id,
    reasoning_item,
    request_echo,
    response_object,
    response_usage,
    status_for,
    stop_reason_from,
    url_citation,
)


def encode_response(
    resp: ir.Response,
    request: ir.Request | None = None,
    *,
    namespaces: Namespaces | None = None,
    created_at: int | None = None,
) -> dict[str, Any]:
    """The full §3.5 object. Adjacent text parts share one ``message`` item; thinking becomes a
    ``reasoning`` item with the text as its summary; redacted thinking is dropped. ``model`` is
    ``request.model`` (the client-facing id) when a request is given, else ``resp.model``."""
    output: list[Json] = []
    text: list[str] = []
    #: Citations of the message being built, over the text parts that carry them.
    annotations: list[Json] = []
    length = 0

    def flush_text() -> None:
        nonlocal length
        if text:
            output.append(
                message_item(ids.new_output_message_id(), "".join(text), annotations=list(annotations))
            )
            text.clear()
            annotations.clear()
            length = 0

    for part in resp.content:
        if isinstance(part, ir.TextPart):
            text.append(part.text)
            end = length + len(part.text)
            annotations.extend(url_citation(c, length, end) for c in part.citations)
            length = end
            continue
        flush_text()
        if isinstance(part, ir.ToolUsePart):
            args = orjson.dumps(part.input).decode()
            item_id = ids.new_function_call_item_id()
            output.append(function_call_item(item_id, part.id, part.name, args, "completed", namespaces))
        elif isinstance(part, ir.ThinkingPart) and part.thinking:
            output.append(reasoning_item(new_reasoning_item_id(), part.thinking))
        elif isinstance(part, ir.WebSearchCallPart):
            output.append(hosted.web_search_call_item(part))
    flush_text()
    status, details = status_for(resp.stop_reason)
    return response_object(
        response_id=resp.id,
        model=request.model if request is not None else resp.model,
        created_at=int(time.time()) if created_at is None else created_at,
        status=status,
        output=output,
        echo=request_echo(request),
        usage=resp.usage,
        incomplete_details=details,
    )


def decode_response(body: dict[str, Any]) -> ir.Response:
    """An upstream Responses object -> IR. A ``failed`` response raises ``UpstreamFailed``."""
    if body.get("status") == "failed":
        error = body["error"] if isinstance(body.get("error"), dict) else {}
        raise errors.UpstreamFailed(str(error.get("message") or "upstream response failed"))
    content: list[ir.OutputPart] = []
    has_call = False
    for item in body.get("output") or ():
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "message":
            for part in item.get("content") or ():
                if isinstance(part, dict) and part.get("type") in ("output_text", "refusal"):
                    content.append(ir.TextPart(str(part.get("text") or part.get("refusal") or "")))
        elif kind == "function_call":
            has_call = True
            name = str(item.get("name") or "")
            if isinstance(item.get("namespace"), str) and item["namespace"]:
                name = item["namespace"] + NAMESPACE_SEPARATOR + name
            call_id = str(item.get("call_id") or ids.new_call_id())
            content.append(ir.ToolUsePart(call_id, name, ir.tool_input(item.get("arguments"))))
        elif kind == "web_search_call":
            content.append(hosted.decode_web_search_call(item))
        elif kind == "reasoning":
            summary = "".join(
                str(s.get("text") or "") for s in item.get("summary") or () if isinstance(s, dict)
            )
            if summary:
                content.append(ir.ThinkingPart(summary))
    stop = stop_reason_from(body.get("status"), body.get("incomplete_details"), has_call)
    return ir.Response(
        id=str(body.get("id") or ""),
        model=str(body.get("model") or ""),
        content=content,
        stop_reason=stop,
        usage=response_usage(body),
    )


def render_error(err: errors.GatewayError, request_id: str) -> bytes:
    """The OpenAI error body. ``request_id`` travels in the ``x-request-id`` header, not here."""
    error = {
        "message": err.message,
        "type": openai_errors.error_type(err.kind),
        "param": err.param,
        "code": err.code or err.spec.code,
    }
    return orjson.dumps({"error": error})


def stream_error_frame(
    err: errors.GatewayError,
    sequence_number: int = 0,
    *,
    response_id: str | None = None,
    model: str = "",
    request: ir.Request | None = None,
) -> bytes:
    """In-band failure for a stream that already began: ``error`` (``sequence_number``) then
    ``response.failed`` (``sequence_number + 1``) — the same pair ``StreamEncoder`` emits for
    ``StreamError``. Pass the next sequence number of the stream (``StreamTap.next_sequence_number``)
    and its response id so SDK accumulators accept the frame."""
    response = response_object(
        response_id=response_id or ids.new_response_id(),
        model=model or (request.model if request is not None else ""),
        created_at=int(time.time()),
        status="failed",
        output=[],
        echo=request_echo(request),
        error=failed_error(err.kind, err.message, err.code),
    )
    return failure_events(sequence_number, err.kind, err.message, response, err.code)
