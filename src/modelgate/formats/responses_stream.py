"""Responses-format wire objects and the stream encoder and decoder (reference §3.5, §3.6, §4.6);
the passthrough tap is ``responses_tap``.

``responses`` (the public codec module) re-exports the stream classes and builds its
non-streaming bodies from the object builders here, so a streamed ``response.completed`` and a
non-streaming body cannot drift apart. This module never imports ``responses``.

Invariants of every stream written here:
- each event has an ``event:`` line and a JSON ``type`` equal to it, plus a ``sequence_number``
  that starts at 0 and grows by exactly 1 over the stream (SSE comments consume none);
- ``output_index`` counts *emitted* output items, so dropped blocks (redacted or empty thinking)
  leave no gap;
- exactly one terminal event: ``response.completed``, ``response.incomplete`` or ``response.failed``
  (the last preceded by an ``error`` event, see ``failure_events``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

import orjson

from modelgate import ir
from modelgate.errors import ERROR_KINDS
from modelgate.formats import ids, sse

__all__ = ["Namespaces", "StreamDecoder", "StreamEncoder"]

Json = dict[str, Any]
#: Flattened tool name -> (namespace, original name), for Codex ``namespace`` tools.
Namespaces = Mapping[str, tuple[str, str]]

# ---------------------------------------------------------------------------------------------
# Wire objects shared by the stream encoder and the non-streaming codec
# ---------------------------------------------------------------------------------------------


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
    cached = _int(details.get("cached_tokens"))
    written = _int(details.get("cache_write_tokens"))
    return ir.Usage(
        input_tokens=max(_int(raw.get("input_tokens")) - cached - written, 0),
        output_tokens=_int(raw.get("output_tokens")),
        cache_creation_input_tokens=written,
        cache_read_input_tokens=cached,
        reasoning_tokens=_int(out_details.get("reasoning_tokens")),
    )


def _int(value: Any) -> int:
    return value if isinstance(value, int) and value > 0 else 0


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


def message_item(item_id: str, text: str | None, status: str = "completed") -> Json:
    content = [] if text is None else [_output_text(text)]
    return {"id": item_id, "type": "message", "status": status, "role": "assistant", "content": content}


def _output_text(text: str) -> Json:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


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
        "tools": [tool_to_wire(tool) for tool in request.tools],
        "top_p": request.top_p,
        "user": request.user,
    }


def tool_to_wire(tool: ir.Tool) -> Json:
    return {
        "type": "function",
        "name": tool.name,
        "description": tool.description,
        "parameters": tool.input_schema,
        "strict": False,
    }


def tool_choice_to_wire(choice: ir.ToolChoice) -> str | Json:
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
    spec = ERROR_KINDS.get(kind, ERROR_KINDS["api_error"])
    wire_code = "rate_limit_exceeded" if kind == "rate_limit" else "server_error"
    return {"code": wire_code, "message": message, "type": code or spec.openai_code or spec.openai_type}


def failure_events(seq: int, kind: str, message: str, response: Json, code: str | None = None) -> bytes:
    """``error`` (seq) then ``response.failed`` (seq + 1).

    The ``error`` event carries the SDK's flat fields *and* a nested ``error`` object: the openai
    SDK raises ``APIError(message)`` on any event whose data has a truthy ``error`` key, so
    ``responses.stream()`` users get a clear exception. Codex ignores ``error`` events and
    surfaces the ``response.failed`` message, which follows (reference §3.6).
    """
    spec = ERROR_KINDS.get(kind, ERROR_KINDS["api_error"])
    wire_code = code or spec.openai_code or spec.openai_type
    error = {"type": spec.openai_type, "code": wire_code, "message": message, "param": None}
    head = {"type": "error", "sequence_number": seq, "code": wire_code, "message": message, "param": None}
    head["error"] = error
    failed = {"type": "response.failed", "sequence_number": seq + 1, "response": response}
    return sse.frame(orjson.dumps(head), "error") + sse.frame(orjson.dumps(failed), "response.failed")


# ---------------------------------------------------------------------------------------------
# IR events -> Responses SSE for the client
# ---------------------------------------------------------------------------------------------


class _OpenItem:
    __slots__ = ("block", "call_id", "item_id", "kind", "name", "output_index", "parts")

    def __init__(self, block: int, kind: str, item_id: str, output_index: int) -> None:
        self.block = block
        self.kind = kind
        self.item_id = item_id
        #: -1 until the item is emitted (thinking items are emitted on their first text).
        self.output_index = output_index
        self.parts: list[str] = []
        self.call_id = ""
        self.name = ""


class StreamEncoder:
    """IR events -> Responses SSE bytes.

    Thinking blocks become ``reasoning`` items whose summary is the thinking text; the item is
    emitted lazily on the first non-empty thinking delta, so empty and redacted thinking produce
    no item. The response ``model`` is ``request.model`` when a request is given, else
    ``Start.model``. Usage always travels in the terminal response object, as on the real API;
    ``include_usage`` is accepted for signature parity with the other codecs and has no effect.
    """

    def __init__(
        self,
        request: ir.Request | None = None,
        include_usage: bool = False,
        *,
        namespaces: Namespaces | None = None,
        created_at: int | None = None,
    ) -> None:
        self._request = request
        self._echo = request_echo(request)
        self._namespaces = namespaces
        self._created_at = int(time.time()) if created_at is None else created_at
        self._seq = 0
        self._id = ""
        self._model = request.model if request is not None else ""
        self._started = False
        self._done = False
        self._output: list[Json] = []
        self._open: _OpenItem | None = None

    def ping(self) -> bytes:
        return b": ping\n\n"

    def encode(self, event: ir.Event) -> bytes:
        if self._done:
            return b""
        out = b"" if self._started or isinstance(event, ir.Start) else self._start(None, None)
        if isinstance(event, ir.TextDelta | ir.ToolArgsDelta | ir.ThinkingDelta):
            return out + self._delta(event)
        if isinstance(event, ir.Start):
            return self._start(event.id, event.model) if not self._started else b""
        if isinstance(event, ir.BlockStart):
            return out + self._close() + self._block_start(event)
        if isinstance(event, ir.BlockStop):
            return out + (self._close() if self._open and self._open.block == event.index else b"")
        if isinstance(event, ir.Finish):
            return out + self._close() + self._finish(event)
        if isinstance(event, ir.StreamError):
            self._done = True
            response = self._response("failed", None, None, failed_error(event.kind, event.message))
            frames = failure_events(self._seq, event.kind, event.message, response)
            self._seq += 2
            return out + frames
        return out  # SignatureDelta: nothing to say on this wire.

    def _emit(self, kind: str, payload: Json) -> bytes:
        data = {"type": kind, "sequence_number": self._seq, **payload}
        self._seq += 1
        return sse.frame(orjson.dumps(data), kind)

    def _response(
        self, status: str, usage: ir.Usage | None, details: Json | None = None, error: Json | None = None
    ) -> Json:
        return response_object(
            response_id=self._id,
            model=self._model,
            created_at=self._created_at,
            status=status,
            output=list(self._output),
            echo=self._echo,
            usage=usage,
            incomplete_details=details,
            error=error,
        )

    def _start(self, response_id: str | None, model: str | None) -> bytes:
        self._started = True
        # Start.id from another dialect's decoder is e.g. chatcmpl-…; a Responses id is resp_….
        self._id = response_id if response_id and response_id.startswith("resp_") else ids.new_response_id()
        # The client-facing id (request.model) wins over the upstream's: upstream ids never leak.
        self._model = self._model or model or ""
        snapshot = self._response("in_progress", None)
        return self._emit("response.created", {"response": snapshot}) + self._emit(
            "response.in_progress", {"response": snapshot}
        )

    def _block_start(self, event: ir.BlockStart) -> bytes:
        index = len(self._output)
        if event.kind == "text":
            item = _OpenItem(event.index, "text", ids.new_output_message_id(), index)
            self._open = item
            added = self._emit(
                "response.output_item.added",
                {"output_index": index, "item": message_item(item.item_id, None, "in_progress")},
            )
            part = {"item_id": item.item_id, "output_index": index, "content_index": 0}
            return added + self._emit(
                "response.content_part.added",
                {**part, "part": {"type": "output_text", "text": "", "annotations": []}},
            )
        if event.kind == "tool_use":
            item = _OpenItem(event.index, "tool", ids.new_function_call_item_id(), index)
            item.call_id = event.tool_id or ids.new_call_id()
            item.name = event.tool_name or ""
            self._open = item
            wire = function_call_item(
                item.item_id, item.call_id, item.name, "", "in_progress", self._namespaces
            )
            return self._emit("response.output_item.added", {"output_index": index, "item": wire})
        if event.kind == "thinking":
            self._open = _OpenItem(event.index, "thinking", new_reasoning_item_id(), -1)
        return b""  # redacted_thinking: opaque, nothing a Responses client can show.

    def _delta(self, event: ir.TextDelta | ir.ToolArgsDelta | ir.ThinkingDelta) -> bytes:
        item = self._open
        if item is None or item.block != event.index:
            return b""
        if isinstance(event, ir.TextDelta):
            if not event.text:
                return b""
            item.parts.append(event.text)
            return self._emit(
                "response.output_text.delta",
                {
                    "item_id": item.item_id,
                    "output_index": item.output_index,
                    "content_index": 0,
                    "delta": event.text,
                    "logprobs": [],
                },
            )
        if isinstance(event, ir.ToolArgsDelta):
            if not event.partial_json:
                return b""  # Messages upstreams open with an empty input_json_delta
            item.parts.append(event.partial_json)
            return self._emit(
                "response.function_call_arguments.delta",
                {"item_id": item.item_id, "output_index": item.output_index, "delta": event.partial_json},
            )
        if item.kind != "thinking" or not event.thinking:
            return b""
        out = b""
        if item.output_index < 0:
            item.output_index = len(self._output)
            out = self._emit(
                "response.output_item.added",
                {"output_index": item.output_index, "item": reasoning_item(item.item_id, None)},
            )
            out += self._emit(
                "response.reasoning_summary_part.added",
                {**self._summary_ref(item), "part": {"type": "summary_text", "text": ""}},
            )
        item.parts.append(event.thinking)
        return out + self._emit(
            "response.reasoning_summary_text.delta", {**self._summary_ref(item), "delta": event.thinking}
        )

    @staticmethod
    def _summary_ref(item: _OpenItem) -> Json:
        return {"item_id": item.item_id, "output_index": item.output_index, "summary_index": 0}

    def _close(self) -> bytes:
        item, self._open = self._open, None
        if item is None or item.output_index < 0:
            return b""
        text = "".join(item.parts)
        ref = {"item_id": item.item_id, "output_index": item.output_index}
        if item.kind == "text":
            done = message_item(item.item_id, text)
            out = self._emit(
                "response.output_text.done", {**ref, "content_index": 0, "text": text, "logprobs": []}
            )
            out += self._emit(
                "response.content_part.done",
                {**ref, "content_index": 0, "part": {"type": "output_text", "text": text, "annotations": []}},
            )
        elif item.kind == "tool":
            # An empty argument stream means "no arguments" (Messages semantics): send "{}".
            text = text or "{}"
            done = function_call_item(
                item.item_id, item.call_id, item.name, text, "completed", self._namespaces
            )
            out = self._emit(
                "response.function_call_arguments.done", {**ref, "name": done["name"], "arguments": text}
            )
        else:
            done = reasoning_item(item.item_id, text)
            summary = self._summary_ref(item)
            out = self._emit("response.reasoning_summary_text.done", {**summary, "text": text})
            out += self._emit(
                "response.reasoning_summary_part.done",
                {**summary, "part": {"type": "summary_text", "text": text}},
            )
        self._output.append(done)
        return out + self._emit(
            "response.output_item.done", {"output_index": item.output_index, "item": done}
        )

    def _finish(self, event: ir.Finish) -> bytes:
        self._done = True
        status, details = status_for(event.stop_reason)
        kind = "response.completed" if status == "completed" else "response.incomplete"
        return self._emit(kind, {"response": self._response(status, event.usage, details)})


# ---------------------------------------------------------------------------------------------
# Upstream Responses SSE -> IR events
# ---------------------------------------------------------------------------------------------

#: Upstream ``response.error.code`` / ``error.code`` -> gateway error kind.
_UPSTREAM_CODE_KINDS = {
    "rate_limit_exceeded": "rate_limit",
    "insufficient_quota": "upstream_error",
    "context_length_exceeded": "invalid_request",
    "invalid_prompt": "invalid_request",
    "timeout": "timeout",
    "overloaded": "overloaded",
    "service_unavailable": "unavailable",
}
TERMINAL_TYPES = ("response.completed", "response.incomplete", "response.failed")


def error_kind(error: Any) -> tuple[str, str]:
    if not isinstance(error, dict):
        return "upstream_error", "upstream response failed"
    code = error.get("code") or error.get("type")
    message = error.get("message")
    kind = _UPSTREAM_CODE_KINDS.get(code, "upstream_error") if isinstance(code, str) else "upstream_error"
    return kind, message if isinstance(message, str) and message else "upstream response failed"


class StreamDecoder:
    """Upstream Responses SSE -> IR events.

    Message items open a text block at ``output_item.added``; reasoning items open a thinking
    block only at their first summary delta (most reasoning items carry no summary). Output items
    are sequential on this wire, so a new item closes the open block. Hosted-tool events are
    ignored. Malformed JSON ends the stream with a ``StreamError``, never an exception.
    """

    def __init__(self) -> None:
        self._parser = sse.SSEParser()
        self._started = False
        self._done = False
        self._blocks = 0
        #: output_index -> IR block index of the open block, if any.
        self._open: tuple[int, int] | None = None
        self._saw_function_call = False

    def feed(self, chunk: bytes) -> list[ir.Event]:
        out: list[ir.Event] = []
        for event in self._parser.feed(chunk):
            if self._done:
                break
            self._handle(event, out)
        return out

    def finish(self) -> list[ir.Event]:
        out: list[ir.Event] = []
        for event in self._parser.finish():
            # A final event without its blank line counts only if it is whole; a cut one means
            # the connection dropped, reported below as an early end rather than bad JSON.
            if not self._done and is_whole_event(event.raw):
                self._handle(event, out)
        if not self._done:
            self._done = True
            out.append(ir.StreamError("upstream_error", "upstream stream ended early"))
        return out

    def _handle(self, event: sse.SSEEvent, out: list[ir.Event]) -> None:
        try:
            data = orjson.loads(event.data)
        except orjson.JSONDecodeError:
            self._done = True
            out.append(ir.StreamError("upstream_error", "upstream sent malformed JSON in the stream"))
            return
        if not isinstance(data, dict):
            return
        kind = data.get("type") or event.event
        response = as_object(data.get("response"))
        if not self._started:
            self._started = True
            usage = usage_from_wire(response.get("usage"))
            out.append(ir.Start(str(response.get("id") or ""), str(response.get("model") or ""), usage))
        if kind == "response.output_item.added":
            self._item_added(data, out)
        elif kind == "response.output_text.delta":
            self._delta(data, out, "text")
        elif kind == "response.function_call_arguments.delta":
            self._delta(data, out, "tool")
        elif kind == "response.reasoning_summary_text.delta":
            self._thinking_delta(data, out)
        elif kind == "response.output_item.done":
            if self._open is not None and self._open[0] == data.get("output_index"):
                self._close(out)
        elif kind in TERMINAL_TYPES:
            self._done = True
            if kind == "response.failed":
                # Ended early: an open block stays open (IR allows StreamError anywhere), so no
                # encoder reports a half-written item as complete.
                out.append(ir.StreamError(*error_kind(response.get("error"))))
                return
            self._close(out)
            has_call = self._saw_function_call or any(
                isinstance(item, dict) and item.get("type") == "function_call"
                for item in response.get("output") or ()
            )
            stop = stop_reason_from(response.get("status"), response.get("incomplete_details"), has_call)
            out.append(ir.Finish(stop, usage_from_wire(response.get("usage"))))
        elif kind == "error":
            self._done = True
            nested = data.get("error")
            out.append(ir.StreamError(*error_kind(nested if isinstance(nested, dict) else data)))

    def _open_block(self, output_index: Any, block: ir.BlockStart, out: list[ir.Event]) -> None:
        self._close(out)
        self._open = (output_index, block.index)
        self._blocks += 1
        out.append(block)

    def _item_added(self, data: Json, out: list[ir.Event]) -> None:
        item = data.get("item")
        if not isinstance(item, dict):
            return
        index = data.get("output_index")
        if item.get("type") == "message":
            self._open_block(index, ir.BlockStart(self._blocks, "text"), out)
        elif item.get("type") == "function_call":
            self._saw_function_call = True
            call_id = str(item.get("call_id") or ids.new_call_id())
            block = ir.BlockStart(self._blocks, "tool_use", call_id, str(item.get("name") or ""))
            self._open_block(index, block, out)
            if item.get("arguments"):
                out.append(ir.ToolArgsDelta(block.index, str(item["arguments"])))
        else:
            self._close(out)

    def _delta(self, data: Json, out: list[ir.Event], kind: str) -> None:
        delta = data.get("delta")
        if self._open is None or self._open[0] != data.get("output_index") or not isinstance(delta, str):
            return
        block = self._open[1]
        out.append(ir.TextDelta(block, delta) if kind == "text" else ir.ToolArgsDelta(block, delta))

    def _thinking_delta(self, data: Json, out: list[ir.Event]) -> None:
        delta = data.get("delta")
        if not isinstance(delta, str) or not delta:
            return
        index = data.get("output_index")
        if self._open is None or self._open[0] != index:
            self._open_block(index, ir.BlockStart(self._blocks, "thinking"), out)
        assert self._open is not None
        out.append(ir.ThinkingDelta(self._open[1], delta))

    def _close(self, out: list[ir.Event]) -> None:
        if self._open is not None:
            out.append(ir.BlockStop(self._open[1]))
            self._open = None


def as_object(value: Any) -> Json:
    return value if isinstance(value, dict) else {}


def is_whole_event(raw: bytes) -> bool:
    events = sse.SSEParser().feed(raw + b"\n\n")
    if not events:
        return False
    try:
        orjson.loads(events[0].data)
    except orjson.JSONDecodeError:
        return False
    return True
