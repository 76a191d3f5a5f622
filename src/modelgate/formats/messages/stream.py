"""Messages streams: IR events -> SSE for the client, upstream SSE -> IR events (translation).

Grammar (docs/reference/wire-formats.md §1.6): ``message_start``, then per block ``content_block_start``/``_delta*``/
``_stop``, ``message_delta``, ``message_stop``; ``ping`` and ``error`` may appear anywhere and every
event carries an ``event:`` line (clients need it).
"""

from __future__ import annotations

from typing import Any

import orjson

from modelgate import ir
from modelgate.formats.jsonutil import Json
from modelgate.formats.messages import hosted
from modelgate.formats.messages.wire import (
    copy_usage,
    decode_usage,
    error_object,
    stop_reason_of,
    stream_error_from,
    usage_json,
)
from modelgate.formats.sse import SSEEvent, SSEParser, frame

# ---------------------------------------------------------------------------------------------
# IR events -> Messages SSE (for the client)
# ---------------------------------------------------------------------------------------------

_DELTA_HEAD = b'event: content_block_delta\ndata: {"type":"content_block_delta","index":'
_EMPTY_BLOCKS: dict[str, dict[str, Any]] = {
    "text": {"type": "text", "text": ""},
    "thinking": {"type": "thinking", "thinking": "", "signature": ""},
}


def _delta(index: int, kind: bytes, value: str) -> bytes:
    return _DELTA_HEAD + str(index).encode() + b',"delta":{"type":"' + kind + orjson.dumps(value) + b"}}\n\n"


def _block_stop(index: int) -> bytes:
    return frame(b'{"type":"content_block_stop","index":' + str(index).encode() + b"}", "content_block_stop")


class StreamEncoder:
    """IR events -> Messages SSE bytes. Indexes are the IR block indexes (positions, from 0).

    A ``Finish`` closes a block left open; after ``Finish`` or ``StreamError`` nothing more is sent.
    """

    __slots__ = ("_done", "_open")
    #: Chat and Messages answers cannot be fetched again: nothing to keep.
    completed: Json | None = None

    def __init__(self) -> None:
        self._open: int | None = None
        self._done = False

    def encode(self, event: ir.Event) -> bytes:
        if self._done:
            return b""
        if isinstance(event, ir.TextDelta):
            return _delta(event.index, b'text_delta","text":', event.text)
        if isinstance(event, ir.ToolArgsDelta):
            return _delta(event.index, b'input_json_delta","partial_json":', event.partial_json)
        if isinstance(event, ir.ThinkingDelta):
            return _delta(event.index, b'thinking_delta","thinking":', event.thinking)
        if isinstance(event, ir.SignatureDelta):
            return _delta(event.index, b'signature_delta","signature":', event.signature)
        if isinstance(event, ir.CitationDelta):
            return b""  # a Messages citation needs the upstream's encrypted index: not carried
        if isinstance(event, ir.BlockStart):
            prefix = _block_stop(self._open) if self._open is not None else b""
            self._open = event.index
            if event.kind == "tool_use":
                block: dict[str, Any] = {
                    "type": "tool_use",
                    "id": event.tool_id,
                    "name": event.tool_name,
                    "input": {},
                }
            elif event.kind == "redacted_thinking":
                block = {"type": "redacted_thinking", "data": event.data or ""}
            elif event.kind == "web_search":
                block = {
                    "type": "server_tool_use",
                    "id": event.tool_id,
                    "name": ir.WEB_SEARCH_NAME,
                    "input": {},
                }
            elif event.kind == "web_search_result":
                block = hosted.result_block(event.tool_id or "", event.result or ir.WebSearchResult())
            else:
                block = _EMPTY_BLOCKS[event.kind]
            data = {"type": "content_block_start", "index": event.index, "content_block": block}
            return prefix + frame(orjson.dumps(data), "content_block_start")
        if isinstance(event, ir.BlockStop):
            self._open = None
            return _block_stop(event.index)
        if isinstance(event, ir.Start):
            message: dict[str, Any] = {
                "id": event.id,
                "type": "message",
                "role": "assistant",
                "model": event.model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": usage_json(event.usage),
            }
            return frame(orjson.dumps({"type": "message_start", "message": message}), "message_start")
        if isinstance(event, ir.Finish):
            self._done = True
            prefix = _block_stop(self._open) if self._open is not None else b""
            data = {
                "type": "message_delta",
                "delta": {"stop_reason": event.stop_reason.value, "stop_sequence": event.stop_sequence},
                "usage": usage_json(event.usage),
            }
            return (
                prefix
                + frame(orjson.dumps(data), "message_delta")
                + frame(b'{"type":"message_stop"}', "message_stop")
            )
        self._done = True
        payload = {"type": "error", "error": error_object(event.kind, event.message)}
        return frame(orjson.dumps(payload), "error")

    def ping(self) -> bytes:
        return b'event: ping\ndata: {"type":"ping"}\n\n'


# ---------------------------------------------------------------------------------------------
# Upstream Messages SSE -> IR events (translation path)
# ---------------------------------------------------------------------------------------------

_BLOCK_KINDS = ("text", "tool_use", "thinking", "redacted_thinking")


class StreamDecoder:
    """Upstream Messages SSE bytes -> IR events.

    Block indexes are renumbered: blocks the IR cannot carry (server-tool blocks other than a
    web search and its result, future types) are skipped with their deltas, so IR indexes stay
    dense. Usage from ``message_start`` is
    merged with each (cumulative) ``message_delta`` usage.
    """

    __slots__ = ("_done", "_index", "_next", "_parser", "_saw_delta", "_stop", "_stop_sequence", "_usage")

    def __init__(self) -> None:
        self._parser = SSEParser()
        self._usage = ir.Usage()
        self._stop: ir.StopReason | None = None
        self._stop_sequence: str | None = None
        #: Upstream index -> IR index, for blocks open right now.
        self._index: dict[int, int] = {}
        self._next = 0
        self._saw_delta = False
        self._done = False

    def feed(self, chunk: bytes) -> list[ir.Event]:
        out: list[ir.Event] = []
        if self._done:
            return out
        for sse in self._parser.feed(chunk):
            self._handle(sse, out)
            if self._done:
                break
        return out

    def finish(self) -> list[ir.Event]:
        out: list[ir.Event] = []
        if self._done:
            return out
        for sse in self._parser.finish():
            self._handle(sse, out)
        if not self._done:
            if self._saw_delta:
                # message_delta carries the stop reason; a missing message_stop loses nothing.
                self._finish(out)
            else:
                self._done = True
                out.append(ir.StreamError("upstream_error", "upstream stream ended early"))
        return out

    def _finish(self, out: list[ir.Event]) -> None:
        out.extend(ir.BlockStop(i) for i in self._index.values())
        self._index.clear()
        self._done = True
        stop = self._stop or ir.StopReason.END_TURN
        out.append(ir.Finish(stop, copy_usage(self._usage), self._stop_sequence))

    def _handle(self, sse: SSEEvent, out: list[ir.Event]) -> None:
        if not sse.data:
            return
        try:
            data = orjson.loads(sse.data)
        except orjson.JSONDecodeError:
            self._done = True
            out.append(ir.StreamError("upstream_error", "upstream sent malformed JSON in its stream"))
            return
        if not isinstance(data, dict):
            return
        kind = data.get("type", sse.event)
        if kind == "content_block_delta":
            index = self._index.get(data.get("index", -1))
            delta = data.get("delta")
            if index is None or not isinstance(delta, dict):
                return
            dtype = delta.get("type")
            if dtype == "text_delta":
                out.append(ir.TextDelta(index, str(delta.get("text", ""))))
            elif dtype == "input_json_delta":
                out.append(ir.ToolArgsDelta(index, str(delta.get("partial_json", ""))))
            elif dtype == "thinking_delta":
                out.append(ir.ThinkingDelta(index, str(delta.get("thinking", ""))))
            elif dtype == "signature_delta":
                out.append(ir.SignatureDelta(index, str(delta.get("signature", ""))))
            elif dtype == "citations_delta" and (cited := hosted.citation(delta.get("citation"))):
                out.append(ir.CitationDelta(index, cited))
        elif kind == "content_block_start":
            self._block_start(data, out)
        elif kind == "content_block_stop":
            index = self._index.pop(data.get("index", -1), None)
            if index is not None:
                out.append(ir.BlockStop(index))
        elif kind == "message_start":
            message = data.get("message")
            message = message if isinstance(message, dict) else {}
            decode_usage(message.get("usage"), self._usage)
            out.append(
                ir.Start(str(message.get("id", "")), str(message.get("model", "")), copy_usage(self._usage))
            )
        elif kind == "message_delta":
            self._saw_delta = True
            delta = data.get("delta")
            if isinstance(delta, dict):
                if delta.get("stop_reason") is not None:
                    self._stop = stop_reason_of(delta["stop_reason"])
                sequence = delta.get("stop_sequence")
                self._stop_sequence = sequence if isinstance(sequence, str) else None
            decode_usage(data.get("usage"), self._usage)
        elif kind == "message_stop":
            self._finish(out)
        elif kind == "error":
            self._done = True
            out.append(stream_error_from(data.get("error")))

    def _block_start(self, data: dict[str, Any], out: list[ir.Event]) -> None:
        block = data.get("content_block")
        upstream_index = data.get("index")
        if not isinstance(block, dict) or not isinstance(upstream_index, int):
            return
        kind = block.get("type")
        search = kind == "server_tool_use" and block.get("name") == ir.WEB_SEARCH_NAME
        if kind not in _BLOCK_KINDS and not search and kind != "web_search_tool_result":
            return
        # Only one block is open at a time in the IR; close a block the upstream left open.
        out.extend(ir.BlockStop(i) for i in self._index.values())
        self._index.clear()
        index = self._next
        self._next += 1
        self._index[upstream_index] = index
        if kind == "tool_use" or search:
            name = str(block.get("name", ""))
            out.append(
                ir.BlockStart(index, "web_search" if search else "tool_use", str(block.get("id", "")), name)
            )
            if block.get("input"):
                out.append(ir.ToolArgsDelta(index, orjson.dumps(block["input"]).decode()))
        elif kind == "web_search_tool_result":
            result = hosted.decode_result(block)
            out.append(
                ir.BlockStart(index, "web_search_result", str(block.get("tool_use_id", "")), result=result)
            )
        elif kind == "redacted_thinking":
            out.append(ir.BlockStart(index, "redacted_thinking", data=str(block.get("data", ""))))
        elif kind == "thinking":
            out.append(ir.BlockStart(index, "thinking"))
            if block.get("thinking"):
                out.append(ir.ThinkingDelta(index, str(block["thinking"])))
        else:
            out.append(ir.BlockStart(index, "text"))
            if block.get("text"):
                out.append(ir.TextDelta(index, str(block["text"])))
