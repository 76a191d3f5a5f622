"""Chat Completions streams: IR events -> chunks for the client, upstream chunks -> IR events.

Chat SSE is data-only: ``data: <chunk>`` events ending with ``data: [DONE]`` (docs/reference/wire-formats.md §2.5);
the translation state machine follows §4.3.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from modelgate import ir
from modelgate.formats.chat.wire import (
    FINISH_REASONS,
    decode_usage,
    error_frame,
    stop_reason_of,
    stream_error_from,
    usage_json,
)
from modelgate.formats.jsonutil import Json
from modelgate.formats.sse import SSEEvent, SSEParser

# ---------------------------------------------------------------------------------------------
# IR events -> Chat chunks (for the client)
# ---------------------------------------------------------------------------------------------

_DONE = b"data: [DONE]\n\n"


class StreamEncoder:
    """IR events -> Chat SSE. Every chunk shares ``id``/``created``/``model`` (from ``Start``).

    Thinking is dropped; ``k`` in ``tool_calls[].index`` counts tool blocks only. A ``StreamError``
    becomes an ``{"error":…}`` chunk and nothing follows it, not even ``[DONE]``: the openai SDK
    raises ``APIError`` on that chunk, and a missing ``[DONE]`` tells other clients the answer is cut.
    """

    __slots__ = ("_done", "_head", "_include_usage", "_tail", "_tool_k", "_tools")
    #: Chat and Messages answers cannot be fetched again: nothing to keep.
    completed: Json | None = None

    def __init__(self, include_usage: bool = False) -> None:
        self._include_usage = include_usage
        self._head = b""
        # With include_usage the real API sends "usage":null on every chunk but the last.
        self._tail = b'],"usage":null}\n\n' if include_usage else b"]}\n\n"
        self._tools = 0
        #: The tool-call index of the open tool block, or None while a non-tool block is open.
        self._tool_k: int | None = None
        self._done = False

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return self._head + orjson.dumps(choice) + self._tail

    def encode(self, event: ir.Event) -> bytes:
        if self._done:
            return b""
        if isinstance(event, ir.TextDelta):
            return self._chunk({"content": event.text}) if event.text else b""
        if isinstance(event, ir.ToolArgsDelta):
            if self._tool_k is None or not event.partial_json:
                return b""
            return self._chunk(
                {"tool_calls": [{"index": self._tool_k, "function": {"arguments": event.partial_json}}]}
            )
        if isinstance(event, ir.BlockStart):
            if event.kind != "tool_use":
                self._tool_k = None
                return b""
            self._tool_k = k = self._tools
            self._tools += 1
            call = {
                "index": k,
                "id": event.tool_id,
                "type": "function",
                "function": {"name": event.tool_name, "arguments": ""},
            }
            return self._chunk({"tool_calls": [call]})
        if isinstance(event, ir.BlockStop):
            self._tool_k = None
            return b""
        if isinstance(event, ir.Start):
            head = {
                "id": event.id,
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": event.model,
            }
            self._head = orjson.dumps({**head, "system_fingerprint": None})[:-1] + b',"choices":['
            self._head = b"data: " + self._head
            return self._chunk({"role": "assistant", "content": ""})
        if isinstance(event, ir.Finish):
            self._done = True
            out = self._chunk({}, FINISH_REASONS[event.stop_reason])
            if self._include_usage:
                out += self._head + b'],"usage":' + orjson.dumps(usage_json(event.usage)) + b"}\n\n"
            return out + _DONE
        if isinstance(event, ir.StreamError):
            self._done = True
            return error_frame(event.kind, event.message)
        return b""  # thinking and signature deltas have no Chat equivalent

    def ping(self) -> bytes:
        return b": ping\n\n"


# ---------------------------------------------------------------------------------------------
# Upstream Chat chunks -> IR events (translation path, docs/reference/wire-formats.md §4.3)
# ---------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Call:
    id: str
    name: str
    #: Argument fragments received while another block was open (interleaved parallel calls).
    pending: list[str] = field(default_factory=list)
    #: IR block index once the call's block has started.
    index: int | None = None
    closed: bool = False


class StreamDecoder:
    """Upstream Chat SSE -> IR events.

    Only one IR block is open at a time. A tool call that starts while no tool block is open
    streams live; calls that start while another call's block is open are buffered (the open
    call may still receive fragments: some upstreams interleave parallel calls) and flushed as
    whole blocks, in order of first appearance, when that block closes (text, reasoning, finish).
    ``finish_reason`` is held until the usage chunk or ``[DONE]`` so ``Finish`` carries real usage.
    """

    __slots__ = (
        "_calls",
        "_done",
        "_finish_reason",
        "_next",
        "_open",
        "_open_kind",
        "_parser",
        "_started",
        "_usage",
    )

    def __init__(self) -> None:
        self._parser = SSEParser()
        self._started = False
        self._next = 0
        self._open: int | None = None
        self._open_kind: str | None = None
        self._calls: dict[int, _Call] = {}
        self._finish_reason: str | None = None
        self._usage: ir.Usage | None = None
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
            if self._finish_reason is not None:
                self._emit_finish(out)  # a finish_reason without [DONE] is still a complete answer
            else:
                self._done = True
                out.append(ir.StreamError("upstream_error", "upstream stream ended early"))
        return out

    def _handle(self, sse: SSEEvent, out: list[ir.Event]) -> None:
        data = sse.data
        if not data:
            return
        if data == b"[DONE]":
            self._emit_finish(out)
            return
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            self._fail(out, ir.StreamError("upstream_error", "upstream sent malformed JSON in its stream"))
            return
        if not isinstance(chunk, dict):
            return
        if chunk.get("error"):
            self._fail(out, stream_error_from(chunk["error"]))
            return
        if not self._started:
            self._started = True
            out.append(ir.Start(str(chunk.get("id", "")), str(chunk.get("model", "")), ir.Usage()))
        if chunk.get("usage"):
            self._usage = decode_usage(chunk["usage"])
        choices = chunk.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            self._choice(choices[0], out)
        elif self._finish_reason is not None and self._usage is not None:
            self._emit_finish(out)  # the include_usage chunk: nothing else is coming but [DONE]

    def _choice(self, choice: dict[str, Any], out: list[ir.Event]) -> None:
        delta = choice.get("delta")
        if isinstance(delta, dict):
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                self._open_block("thinking", out)
                out.append(ir.ThinkingDelta(self._index(), reasoning))
            for key in ("content", "refusal"):
                text = delta.get(key)
                if isinstance(text, str) and text:
                    self._open_block("text", out)
                    out.append(ir.TextDelta(self._index(), text))
            tool_calls = delta.get("tool_calls")
            if isinstance(tool_calls, list):
                for position, call in enumerate(tool_calls):
                    if isinstance(call, dict):
                        self._tool_fragment(call, position, out)
        finish_reason = choice.get("finish_reason")
        if isinstance(finish_reason, str) and self._finish_reason is None:
            self._finish_reason = finish_reason
            self._close(out)
            self._flush_calls(out)

    def _index(self) -> int:
        assert self._open is not None
        return self._open

    def _open_block(self, kind: str, out: list[ir.Event]) -> None:
        if self._open_kind == kind:
            return
        self._close(out)
        self._flush_calls(out)
        self._open = self._next
        self._next += 1
        self._open_kind = kind
        out.append(ir.BlockStart(self._open, "text" if kind == "text" else "thinking"))

    def _close(self, out: list[ir.Event]) -> None:
        if self._open is None:
            return
        out.append(ir.BlockStop(self._open))
        if self._open_kind == "tool_use":
            for call in self._calls.values():
                if call.index == self._open:
                    call.closed = True
        self._open = None
        self._open_kind = None

    def _start_call(self, call: _Call, out: list[ir.Event]) -> None:
        call.index = self._open = self._next
        self._next += 1
        self._open_kind = "tool_use"
        out.append(ir.BlockStart(call.index, "tool_use", call.id, call.name))
        if call.pending:
            out.append(ir.ToolArgsDelta(call.index, "".join(call.pending)))
            call.pending.clear()

    def _flush_calls(self, out: list[ir.Event]) -> None:
        """Emit every buffered call as a whole block (only while no block is open)."""
        for call in self._calls.values():
            if call.index is None:
                self._start_call(call, out)
                self._close(out)

    def _tool_fragment(self, raw: dict[str, Any], position: int, out: list[ir.Event]) -> None:
        k = raw.get("index", position)
        fn = raw.get("function")
        fn = fn if isinstance(fn, dict) else {}
        args = fn.get("arguments")
        args = args if isinstance(args, str) else ""
        call = self._calls.get(k) if isinstance(k, int) else None
        if call is None:
            call = _Call(str(raw.get("id") or f"call_{k}"), str(fn.get("name") or ""))
            self._calls[k if isinstance(k, int) else -1 - len(self._calls)] = call
            if self._open_kind != "tool_use":
                self._close(out)
                self._start_call(call, out)
            # else: another call's block is open and may still get fragments; this one waits.
        elif not call.name and fn.get("name"):
            call.name = str(fn["name"])
        if not args:
            return
        if call.index is not None and call.index == self._open:
            out.append(ir.ToolArgsDelta(call.index, args))
        elif not call.closed:
            call.pending.append(args)
        # A fragment for a call whose block already closed cannot be delivered: the upstream sent
        # text or reasoning between two fragments of one call. It is dropped.

    def _fail(self, out: list[ir.Event], error: ir.StreamError) -> None:
        self._done = True
        out.append(error)

    def _emit_finish(self, out: list[ir.Event]) -> None:
        if not self._started:
            self._fail(out, ir.StreamError("upstream_error", "upstream stream ended before any chunk"))
            return
        self._close(out)
        self._flush_calls(out)
        self._done = True
        stop = stop_reason_of(self._finish_reason, has_tool_calls=bool(self._calls))
        out.append(ir.Finish(stop, self._usage or ir.Usage()))
