"""Incremental Server-Sent Events framing: parse byte chunks into events, and frame events.

Chunk boundaries from the network fall anywhere (inside a line, inside a UTF-8 sequence, between
``\\r`` and ``\\n``); the parser buffers until a blank line ends an event. Only ``event:`` and
``data:`` fields matter here; comments (``: ping``) and ``id:``/``retry:`` are skipped.
"""

from __future__ import annotations

from dataclasses import dataclass

from orjson import dumps


@dataclass(slots=True)
class SSEEvent:
    event: str | None
    data: bytes
    #: The bytes of the event as received (line endings normalised to LF), blank line included.
    raw: bytes


class SSEParser:
    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        buffer = self._buffer + chunk if self._buffer else chunk
        if b"\r" in buffer:
            buffer = buffer.replace(b"\r\n", b"\n")
            # A lone trailing \r may be the first half of \r\n split across chunks.
            keep_cr = buffer.endswith(b"\r")
            if keep_cr:
                buffer = buffer[:-1]
            buffer = buffer.replace(b"\r", b"\n")
            if keep_cr:
                buffer += b"\r"
        events: list[SSEEvent] = []
        start = 0
        while True:
            end = buffer.find(b"\n\n", start)
            if end < 0:
                break
            raw = buffer[start : end + 2]
            start = end + 2
            event = _parse_block(raw)
            if event is not None:
                events.append(event)
        self._buffer = buffer[start:]
        return events

    def finish(self) -> list[SSEEvent]:
        """Flush an event the stream ended without a blank line after (tolerated by clients)."""
        rest, self._buffer = self._buffer.rstrip(b"\r"), b""
        if rest.strip():
            event = _parse_block(rest + b"\n\n")
            if event is not None:
                return [event]
        return []

    @property
    def pending(self) -> bytes:
        return self._buffer


def _parse_block(raw: bytes) -> SSEEvent | None:
    name: str | None = None
    data_lines: list[bytes] = []
    for line in raw.split(b"\n"):
        if not line or line.startswith(b":"):
            continue
        field, _, value = line.partition(b":")
        if value.startswith(b" "):
            value = value[1:]
        if field == b"data":
            data_lines.append(value)
        elif field == b"event":
            name = value.decode("utf-8", "replace")
    if name is None and not data_lines:
        return None
    return SSEEvent(name, b"\n".join(data_lines), raw)


def frame(data: bytes, event: str | None = None) -> bytes:
    """One SSE event: ``event:`` line when named, one ``data:`` line (``data`` holds no newline)."""
    if event is None:
        return b"data: " + data + b"\n\n"
    return b"event: " + event.encode() + b"\ndata: " + data + b"\n\n"


class EventBuffer:
    """Cuts a relayed byte stream at event boundaries, byte for byte (CRLF kept as sent).

    ``take`` returns the whole events available so far and holds back a partial trailing one, so
    whoever inspects or rewrites the output never sees half an event.
    """

    __slots__ = ("held",)

    def __init__(self) -> None:
        #: The partial event held back (empty: the next chunk starts an event).
        self.held = b""

    def take(self, chunk: bytes) -> bytes:
        buffer = self.held + chunk if self.held else chunk
        end = buffer.rfind(b"\n\n") + 2
        if b"\r" in buffer:
            crlf = buffer.rfind(b"\r\n\r\n")
            end = max(end, crlf + 4 if crlf >= 0 else 0, buffer.rfind(b"\r\r") + 2)
        if end < 2:
            self.held = buffer
            return b""
        self.held = buffer[end:]
        return buffer[:end] if end < len(buffer) else buffer

    def rest(self) -> bytes:
        """What is held at the end of the stream (an event sent without its blank line)."""
        rest, self.held = self.held, b""
        return rest


def model_rewrites(
    upstream_model: str, client_model: str, field: str = "model"
) -> tuple[tuple[bytes, bytes], ...]:
    """Byte replacements that show the client's model id where the upstream wrote its own in
    ``field`` (JSON written compactly or with a space after the colon)."""
    if upstream_model == client_model:
        return ()
    old, new = dumps(upstream_model), dumps(client_model)
    key = dumps(field) + b":"
    return ((key + old, key + new), (key + b" " + old, key + b" " + new))
