"""Upstream Responses SSE -> IR events (translation path, docs/reference/wire-formats.md §4.6)."""

from __future__ import annotations

from typing import Any

import orjson

from modelgate import ir
from modelgate.formats import ids, sse
from modelgate.formats.jsonutil import Json, as_object
from modelgate.formats.responses import hosted
from modelgate.formats.responses.wire import (
    TERMINAL_TYPES,
    error_kind,
    response_usage,
    stop_reason_from,
    usage_from_wire,
)


class StreamDecoder:
    """Upstream Responses SSE -> IR events.

    Message items open a text block at ``output_item.added``; reasoning items open a thinking
    block only at their first summary delta (most reasoning items carry no summary). Output items
    are sequential on this wire, so a new item closes the open block. A ``web_search_call`` item
    opens a ``web_search`` block when added; when done, its query and a ``web_search_result``
    block follow. Other hosted-tool events are ignored. Malformed JSON ends the stream with a ``StreamError``, never an exception.
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
                self._item_done(as_object(data.get("item")), out)
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
            out.append(ir.Finish(stop, response_usage(response)))
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
        elif item.get("type") == "web_search_call":
            block = ir.BlockStart(self._blocks, "web_search", str(item.get("id") or ""), ir.WEB_SEARCH_NAME)
            self._open_block(index, block, out)
        elif item.get("type") == "function_call":
            self._saw_function_call = True
            call_id = str(item.get("call_id") or ids.new_call_id())
            block = ir.BlockStart(self._blocks, "tool_use", call_id, str(item.get("name") or ""))
            self._open_block(index, block, out)
            if item.get("arguments"):
                out.append(ir.ToolArgsDelta(block.index, str(item["arguments"])))
        else:
            self._close(out)

    def _item_done(self, item: Json, out: list[ir.Event]) -> None:
        if item.get("type") != "web_search_call" or self._open is None:
            self._close(out)
            return
        search = hosted.decode_web_search_call(item)
        out.append(ir.ToolArgsDelta(self._open[1], orjson.dumps({"query": search.query}).decode()))
        self._close(out)
        out.append(ir.BlockStart(self._blocks, "web_search_result", search.id, result=search.result))
        out.append(ir.BlockStop(self._blocks))
        self._blocks += 1

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


def is_whole_event(raw: bytes) -> bool:
    events = sse.SSEParser().feed(raw + b"\n\n")
    if not events:
        return False
    try:
        orjson.loads(events[0].data)
    except orjson.JSONDecodeError:
        return False
    return True
