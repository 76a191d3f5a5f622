"""Bedrock's streaming answer (``application/vnd.amazon.eventstream``) as Messages SSE bytes.

Each event-stream message is framed and checksummed by AWS; botocore's ``EventStreamBuffer``
cuts and verifies them and its ``EventStreamJSONParser``, driven by the Bedrock Runtime service
model, reads them: a ``chunk`` event carries (base64) one Messages stream event as JSON, which
is relayed as the SSE event the Anthropic API would have sent; an exception message
(``throttlingException``, ``modelStreamErrorException``, ...) ends the stream.

An exception as the stream's first message has reached no client yet: ``BedrockStream.open``
turns it into an error reply with the status the router's retry rules expect. Later, it becomes
the Messages in-band ``error`` event (relayed as is to Messages clients, translated for others).
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from botocore.eventstream import EventStreamBuffer, ParserError
from botocore.loaders import create_loader
from botocore.model import ServiceModel, Shape
from botocore.parsers import EventStreamJSONParser

from modelgate.upstream.base import BufferedReply, StreamBroken, UpstreamReply

#: In-stream exception -> (HTTP status before the first byte, Messages ``error.type`` after it).
#: Statuses follow the router's rules: 429/500/502/503 are retried or failed over, 408 is a
#: timeout (not retried), 400 is the request's fault.
STREAM_EXCEPTIONS: Mapping[str, tuple[int, str]] = {
    "throttlingException": (429, "rate_limit_error"),
    "serviceUnavailableException": (503, "overloaded_error"),
    "internalServerException": (500, "api_error"),
    "modelStreamErrorException": (502, "api_error"),
    "modelTimeoutException": (408, "timeout_error"),
    "validationException": (400, "invalid_request_error"),
}
_UNKNOWN_EXCEPTION = (502, "api_error")

#: The event type at the start of a chunk's JSON, so most events are relayed without parsing.
_TYPE = re.compile(rb'\{\s*"type"\s*:\s*"([A-Za-z_]+)"')


def response_stream_shape() -> Shape:
    """The ``ResponseStream`` shape of botocore's Bedrock Runtime model (loaded per provider)."""
    model = ServiceModel(create_loader().load_service_model("bedrock-runtime", "service-2"))
    return model.shape_for("ResponseStream")


@dataclass(frozen=True, slots=True)
class StreamException:
    code: str
    message: str

    def status(self) -> int:
        return STREAM_EXCEPTIONS.get(self.code, _UNKNOWN_EXCEPTION)[0]

    def error_body(self) -> bytes:
        """A whole error body the router and the pool can judge (``parse_error_body`` shape)."""
        return orjson.dumps({"error": {"type": self.code, "message": self.message}})

    def sse(self) -> bytes:
        kind = STREAM_EXCEPTIONS.get(self.code, _UNKNOWN_EXCEPTION)[1]
        data = {"type": "error", "error": {"type": kind, "message": f"{self.code}: {self.message}"}}
        return b"event: error\ndata: " + orjson.dumps(data) + b"\n\n"


class EventStreamDecoder:
    """Bytes of an event stream in, SSE events (bytes) or a ``StreamException`` out."""

    __slots__ = ("_buffer", "_model", "_parser", "_shape")

    def __init__(self, shape: Shape, model: str) -> None:
        self._buffer = EventStreamBuffer()
        self._parser = EventStreamJSONParser()
        self._shape = shape
        self._model = model

    def feed(self, data: bytes) -> list[bytes | StreamException]:
        self._buffer.add_data(data)
        out: list[bytes | StreamException] = []
        try:
            for message in self._buffer:
                response = message.to_response_dict()
                parsed: dict[str, Any] = self._parser.parse(response, self._shape)
                if response["status_code"] != 200:
                    error = parsed.get("Error", {})
                    out.append(StreamException(str(error.get("Code", "")), str(error.get("Message", ""))))
                    return out  # nothing follows an exception
                chunk = parsed.get("chunk")
                if isinstance(chunk, dict) and isinstance(chunk.get("bytes"), bytes):
                    event = self._sse(chunk["bytes"])
                    if event:
                        out.append(event)
        except (ParserError, ValueError) as exc:
            raise StreamBroken(
                f"upstream bedrock sent a malformed event-stream message ({type(exc).__name__})"
            ) from None
        return out

    def _sse(self, data: bytes) -> bytes:
        match = _TYPE.match(data)
        if match is not None and match.group(1) != b"message_start" and b"\n" not in data:
            return b"event: " + match.group(1) + b"\ndata: " + data + b"\n\n"
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise StreamBroken("upstream bedrock sent a stream event that is not JSON") from None
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            return b""  # not a Messages event: nothing a Messages client could use
        kind: str = event["type"]
        message = event.get("message")
        if kind == "message_start" and isinstance(message, dict):
            message["model"] = self._model
        return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


class BedrockStream:
    """``UpstreamReply`` of a Bedrock stream, relaying Messages SSE bytes. ``open`` reads up to
    the first event so an exception there becomes an error reply (retried by the router)."""

    __slots__ = ("_chunks", "_decoder", "_pending", "_reply", "headers", "status")

    def __init__(self, reply: UpstreamReply, decoder: EventStreamDecoder) -> None:
        self._reply = reply
        self._decoder = decoder
        self._chunks = reply.iter_chunks()
        self._pending: list[bytes | StreamException] = []
        self.status = reply.status
        self.headers: Mapping[str, str] = {**reply.headers, "content-type": "text/event-stream"}

    @classmethod
    async def open(cls, reply: UpstreamReply, decoder: EventStreamDecoder) -> UpstreamReply:
        stream = cls(reply, decoder)
        try:
            async for chunk in stream._chunks:
                stream._pending = decoder.feed(chunk)
                if stream._pending:
                    break
        except BaseException:
            await stream.close()
            raise
        first = stream._pending[0] if stream._pending else None
        if isinstance(first, bytes):
            return stream
        await stream.close()
        if first is None:
            body = orjson.dumps({"error": {"message": "upstream bedrock ended its stream before any event"}})
            return BufferedReply(502, reply.headers, body)
        return BufferedReply(first.status(), reply.headers, first.error_body())

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.iter_chunks()])

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        items, self._pending = self._pending, []
        while True:
            out = b"".join(i if isinstance(i, bytes) else i.sse() for i in items)
            if out:
                yield out
            if any(isinstance(i, StreamException) for i in items):
                return
            try:
                chunk = await anext(self._chunks)
            except StopAsyncIteration:
                return
            items = self._decoder.feed(chunk)

    async def close(self) -> None:
        try:
            if isinstance(self._chunks, AsyncGenerator):
                await self._chunks.aclose()  # ends the transport's read loop and its watchdog
        finally:
            await self._reply.close()
