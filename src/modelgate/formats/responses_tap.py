"""Same-dialect passthrough of Responses streams (``StreamTap``): the upstream's bytes are relayed
with only the model id rewritten, and what billing needs (usage, stop reason, in-band errors,
an output-token estimate) is read on the way without decoding every event."""

from __future__ import annotations

import re

import orjson

from modelgate import ir
from modelgate.billing.estimate import escaped_tokens
from modelgate.formats import sse
from modelgate.formats.responses_stream import (
    TERMINAL_TYPES,
    as_object,
    error_kind,
    is_whole_event,
    stop_reason_from,
    usage_from_wire,
)

#: The JSON string of a delta event's ``delta`` (escapes kept); only delta events are matched.
_DELTA_RE = re.compile(
    rb"event: response\.(?:output_text|function_call_arguments)\.delta\n"
    rb'[^\n]*?"delta": ?"((?:[^"\\]|\\.)*)"'
)
_SEQ_RE = re.compile(rb'"sequence_number": ?(\d+)')
_RESPONSE_ID_RE = re.compile(rb'"response": ?\{"id": ?"([^"\\]+)"')
# ``"error":null`` sits in every response object, so match the error *event* only.
_TERMINAL_MARKS = (
    b"response.completed",
    b"response.incomplete",
    b"response.failed",
    b"event: error",
    b'"type":"error"',
    b'"type": "error"',
)


class StreamTap:
    """Relay upstream Responses SSE bytes unchanged except for the model id.

    Only whole events are forwarded (a partial trailing event is held), so a rewrite or a
    terminal-event check never sees half an event. JSON is parsed only for events whose bytes
    mention a terminal type; delta lengths are read with one regex pass per chunk.
    ``strip_usage_chunk`` is accepted for parity with the Chat tap: Responses usage lives in the
    terminal event, which is always forwarded.
    """

    def __init__(self, upstream_model: str, client_model: str, strip_usage_chunk: bool = False) -> None:
        self._pending = b""
        self._rewrites = sse.model_rewrites(upstream_model, client_model)
        self.usage: ir.Usage | None = None
        self.stop_reason: ir.StopReason | None = None
        self.finished = False
        self.error: ir.StreamError | None = None
        #: Output tokens relayed so far, estimated per delta (billing.estimate); exact for the simulator.
        self.output_tokens = 0
        #: The sequence number an in-band failure frame appended by the gateway should use.
        self.next_sequence_number = 0
        #: The upstream's response id (from ``response.created``), for that failure frame.
        self.response_id: str | None = None

    def feed(self, chunk: bytes) -> bytes:
        buffer = self._pending + chunk if self._pending else chunk
        if b"\r" in buffer:
            buffer = buffer.replace(b"\r\n", b"\n")
        end = buffer.rfind(b"\n\n")
        if end < 0:
            self._pending = buffer
            return b""
        complete, self._pending = buffer[: end + 2], buffer[end + 2 :]
        return self._process(complete)

    def finish(self) -> bytes:
        """Flush a final event the upstream sent without its blank line. A *cut* event (the
        connection dropped mid-JSON) is dropped instead: forwarded, it would make the client's
        parser fail before the gateway's in-band failure frame could explain what happened."""
        rest, self._pending = self._pending.rstrip(b"\n"), b""
        out = b""
        if rest.strip() and is_whole_event(rest):
            out = self._process(rest + b"\n\n")
        if not self.finished and self.error is None:
            self.error = ir.StreamError("upstream_error", "upstream stream ended early")
        return out

    def _process(self, complete: bytes) -> bytes:
        for old, new in self._rewrites:
            complete = complete.replace(old, new)
        for match in _DELTA_RE.finditer(complete):
            escaped = match.group(1)
            self.output_tokens += escaped_tokens(escaped)
        if self.response_id is None:
            found = _RESPONSE_ID_RE.search(complete)
            if found is not None:
                self.response_id = found.group(1).decode()
        seq_at = complete.rfind(b'"sequence_number":')
        if seq_at >= 0:
            seq = _SEQ_RE.match(complete, seq_at)
            if seq is not None:
                self.next_sequence_number = int(seq.group(1)) + 1
        if any(mark in complete for mark in _TERMINAL_MARKS):
            self._scan_terminal(complete)
        return complete

    def _scan_terminal(self, complete: bytes) -> None:
        for raw in complete.split(b"\n\n"):
            if not any(mark in raw for mark in _TERMINAL_MARKS):
                continue
            event = sse.SSEParser().feed(raw + b"\n\n")
            if not event:
                continue
            try:
                data = orjson.loads(event[0].data)
            except orjson.JSONDecodeError:
                continue
            kind = data.get("type") if isinstance(data, dict) else None
            if kind in TERMINAL_TYPES:
                response = as_object(data.get("response"))
                self.finished = True
                self.usage = usage_from_wire(response.get("usage"))
                if kind == "response.failed":
                    self.error = ir.StreamError(*error_kind(response.get("error")))
                else:
                    has_call = any(
                        isinstance(i, dict) and i.get("type") == "function_call"
                        for i in response.get("output") or ()
                    )
                    details = response.get("incomplete_details")
                    self.stop_reason = stop_reason_from(response.get("status"), details, has_call)
            elif kind == "error":
                self.finished = True
                nested = data.get("error")
                self.error = ir.StreamError(*error_kind(nested if isinstance(nested, dict) else data))
