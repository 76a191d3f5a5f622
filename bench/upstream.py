"""A fast fake upstream for the benchmark: Messages, Chat Completions and Responses, whole or SSE.

A raw asyncio protocol on uvloop with a minimal HTTP/1.1 parser (keep-alive, ``content-length``
request bodies), so that the upstream costs a few tens of microseconds per request and the
gateway's own cost dominates what the bench measures. Replies are built once per
(dialect, model, stream, usage option, chunk count) and cached as bytes.

The dialect is chosen by path, ``"stream": true`` selects SSE (chunked transfer encoding, one HTTP
chunk per event). Behaviour is set at run time by ``POST /_bench/config`` with a JSON object:

- ``chunks``: text deltas in a streamed reply (default 50);
- ``delay_ms``: pause between text deltas (default 0: the whole stream in one write);
- ``hold_ms``: pause after the first text delta (held streams for the memory measurement).

Run: ``python -m bench.upstream --port 9100`` (the bench pins it to a core with ``taskset``).
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any, cast

import orjson

PATHS = {"/v1/messages": "messages", "/v1/chat/completions": "chat", "/v1/responses": "responses"}
#: Bodies larger than this are answered without parsing them (the large-bodies phase of the
#: bench): the fake upstream's own parse would only slow the load generator on its core.
UNPARSED_BODY = 1024 * 1024
WHOLE_TEXT = " ".join(f"w{i:04d}" for i in range(24))
#: The Responses id in the prebuilt bodies; each answer gets its own id of the same length (as a
#: real upstream's), so a gateway that keeps answers (``store`` defaults to true) stores each one.
RESPONSE_ID = b"resp_bench000001"


class Behaviour:
    def __init__(self) -> None:
        self.chunks = 50
        self.delay = 0.0
        self.hold = 0.0

    def update(self, data: dict[str, Any]) -> None:
        self.chunks = max(1, int(data.get("chunks", self.chunks)))
        self.delay = float(data.get("delay_ms", self.delay * 1000)) / 1000
        self.hold = float(data.get("hold_ms", self.hold * 1000)) / 1000


def piece(i: int) -> str:
    """The i-th streamed text delta; ``w0000`` marks the first token for the load generator."""
    return f"w{i:04d} "


def _sse(data: dict[str, Any], event: str | None = None) -> bytes:
    head = b"event: " + event.encode() + b"\n" if event else b""
    return head + b"data: " + orjson.dumps(data) + b"\n\n"


def _frame(payload: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(payload), payload)


# --- wire bodies -----------------------------------------------------------------------------


def whole_body(dialect: str, model: str) -> bytes:
    words = len(WHOLE_TEXT.split())
    if dialect == "messages":
        return orjson.dumps(
            {
                "id": "msg_bench000001",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [{"type": "text", "text": WHOLE_TEXT}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {
                    "input_tokens": 12,
                    "output_tokens": words,
                    "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 0,
                },
            }
        )
    if dialect == "chat":
        return orjson.dumps(
            {
                "id": "chatcmpl-bench000001",
                "object": "chat.completion",
                "created": 1700000000,
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": WHOLE_TEXT, "refusal": None},
                        "logprobs": None,
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 12, "completion_tokens": words, "total_tokens": 12 + words},
                "system_fingerprint": None,
            }
        )
    return orjson.dumps(_response(model, "completed", [_output_item(WHOLE_TEXT)], words))


def _output_item(text: str, status: str = "completed") -> dict[str, Any]:
    content = [{"type": "output_text", "text": text, "annotations": []}] if status == "completed" else []
    return {
        "type": "message",
        "id": "msg_bench000001",
        "status": status,
        "role": "assistant",
        "content": content,
    }


def _response(model: str, status: str, output: list[dict[str, Any]], words: int) -> dict[str, Any]:
    done = status == "completed"
    return {
        "id": RESPONSE_ID.decode(),
        "object": "response",
        "created_at": 1700000000,
        "status": status,
        "error": None,
        "incomplete_details": None,
        "model": model,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": (
            {
                "input_tokens": 12,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": words,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 12 + words,
            }
            if done
            else None
        ),
    }


def stream_events(dialect: str, model: str, chunks: int, include_usage: bool) -> tuple[list[bytes], int]:
    """SSE events of a streamed reply and the index of the first text delta."""
    pieces = [piece(i) for i in range(chunks)]
    if dialect == "messages":
        usage = {"input_tokens": 12, "output_tokens": 1, "cache_creation_input_tokens": 0}
        message: dict[str, Any] = {
            "id": "msg_bench000001",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {**usage, "cache_read_input_tokens": 0},
        }
        head = [
            _sse({"type": "message_start", "message": message}, "message_start"),
            _sse(
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                "content_block_start",
            ),
        ]
        body = [
            _sse(
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}},
                "content_block_delta",
            )
            for p in pieces
        ]
        tail = [
            _sse({"type": "content_block_stop", "index": 0}, "content_block_stop"),
            _sse(
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                    "usage": {"output_tokens": chunks},
                },
                "message_delta",
            ),
            _sse({"type": "message_stop"}, "message_stop"),
        ]
        return head + body + tail, len(head)
    if dialect == "chat":

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            c: dict[str, Any] = {
                "id": "chatcmpl-bench000001",
                "object": "chat.completion.chunk",
                "created": 1700000000,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
            }
            if include_usage:
                c["usage"] = None
            return c

        head = [_sse(chunk({"role": "assistant", "content": ""}))]
        body = [_sse(chunk({"content": p})) for p in pieces]
        tail = [_sse(chunk({}, "stop"))]
        if include_usage:
            final = chunk({})
            final["choices"] = []
            final["usage"] = {"prompt_tokens": 12, "completion_tokens": chunks, "total_tokens": 12 + chunks}
            tail.append(_sse(final))
        tail.append(b"data: [DONE]\n\n")
        return head + body + tail, len(head)
    text = "".join(pieces)
    ids = {"item_id": "msg_bench000001", "output_index": 0, "content_index": 0}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": _response(model, "in_progress", [], chunks)},
        {"type": "response.in_progress", "response": _response(model, "in_progress", [], chunks)},
        {"type": "response.output_item.added", "output_index": 0, "item": _output_item("", "in_progress")},
        {"type": "response.content_part.added", **ids, "part": {"type": "output_text", "text": ""}},
    ]
    first = len(events)
    events += [{"type": "response.output_text.delta", **ids, "delta": p} for p in pieces]
    events += [
        {"type": "response.output_text.done", **ids, "text": text},
        {"type": "response.content_part.done", **ids, "part": {"type": "output_text", "text": text}},
        {"type": "response.output_item.done", "output_index": 0, "item": _output_item(text)},
        {
            "type": "response.completed",
            "response": _response(model, "completed", [_output_item(text)], chunks),
        },
    ]
    return [_sse({**e, "sequence_number": i}, e["type"]) for i, e in enumerate(events)], first


# --- the server --------------------------------------------------------------------------------

JSON_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)
END = b"0\r\n\r\n"


class Upstream:
    def __init__(self) -> None:
        self.behaviour = Behaviour()
        self._answers = 0
        self._whole: dict[tuple[str, str], bytes] = {}
        self._streams: dict[tuple[str, str, int, bool], tuple[list[bytes], int]] = {}

    def whole(self, dialect: str, model: str) -> bytes:
        key = (dialect, model)
        out = self._whole.get(key)
        if out is None:
            body = whole_body(dialect, model)
            out = self._whole[key] = JSON_HEAD % len(body) + body
        return out

    def fresh_id(self, dialect: str) -> bytes | None:
        """A new Responses id (same length as ``RESPONSE_ID``) for one answer; None for the other
        dialects, whose ids nothing keeps."""
        if dialect != "responses":
            return None
        self._answers += 1
        return b"resp_b%010d" % self._answers

    def stream(self, dialect: str, model: str, include_usage: bool) -> tuple[list[bytes], int]:
        key = (dialect, model, self.behaviour.chunks, include_usage)
        out = self._streams.get(key)
        if out is None:
            events, first = stream_events(dialect, model, self.behaviour.chunks, include_usage)
            out = self._streams[key] = ([_frame(e) for e in events], first)
        return out


def _with_id(data: bytes, answer_id: bytes | None) -> bytes:
    return data if answer_id is None else data.replace(RESPONSE_ID, answer_id)


def _reply(status: str, body: bytes) -> bytes:
    return b"HTTP/1.1 %b\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%b" % (
        status.encode(),
        len(body),
        body,
    )


class Connection(asyncio.Protocol):
    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream
        self.buf = bytearray()  # appended in place: a 31 MiB body arrives in hundreds of pieces
        #: A body larger than ``UNPARSED_BODY`` is dropped as it arrives, never buffered: bytes of
        #: it still to come, and the path and length it was sent with.
        self.dropping = 0
        self.dropped: tuple[str, int] = ("", 0)
        self.transport: asyncio.Transport | None = None
        self.busy = False  # a paced stream is being written; later requests wait in ``buf``
        self.closed = False
        self.pacer: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream protocol is always handed a Transport (asyncio types it as the base class).
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True

    def data_received(self, data: bytes) -> None:
        if self.dropping:
            if len(data) < self.dropping:
                self.dropping -= len(data)
                return
            data, self.dropping = data[self.dropping :], 0
            self._handle(*self.dropped, b"")
        self.buf += data
        if not self.busy:
            self._process()

    def _process(self) -> None:
        assert self.transport is not None
        while not self.busy:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].decode("latin-1").split("\r\n")
            length = 0
            for line in head[1:]:
                name, _, value = line.partition(":")
                name = name.strip().lower()
                if name == "content-length":
                    length = int(value)
                elif name == "transfer-encoding":
                    self.transport.write(_reply("501 Not Implemented", b'{"error":"chunked uploads"}'))
                    self.transport.close()
                    return
            parts = head[0].split(" ")
            path = parts[1].split("?", 1)[0] if len(parts) > 1 else "/"
            if length > UNPARSED_BODY and path != "/_bench/config":
                # Copying ~31 MiB bodies into a buffer and out of it again held this loop for
                # tens of milliseconds, delaying the small requests' answers queued behind them
                # (the large-bodies phase measured that as the gateway's).
                arrived = min(len(self.buf) - end - 4, length)
                del self.buf[: end + 4 + arrived]
                if arrived < length:
                    self.dropping, self.dropped = length - arrived, (path, length)
                    return
                self._handle(path, length, b"")
                continue
            if len(self.buf) < end + 4 + length:
                return
            body = bytes(self.buf[end + 4 : end + 4 + length])
            del self.buf[: end + 4 + length]
            self._handle(path, length, body)

    def _handle(self, path: str, length: int, body: bytes) -> None:
        """Answer a request whose body is ``body`` (empty for a dropped large body of ``length``)."""
        assert self.transport is not None
        if path == "/_bench/config":
            self.upstream.behaviour.update(orjson.loads(body) if body else {})
            self.transport.write(_reply("200 OK", b"{}"))
            return
        if path == "/v1/messages/count_tokens":
            self.transport.write(_reply("200 OK", b'{"input_tokens":%d}' % (length // 4)))
            return
        dialect = PATHS.get(path)
        if dialect is None:
            self.transport.write(_reply("404 Not Found", b'{"error":"no such path"}'))
            return
        answer_id = self.upstream.fresh_id(dialect)
        if length > UNPARSED_BODY:
            self.transport.write(_with_id(self.upstream.whole(dialect, "fake-model"), answer_id))
            return
        try:
            req = orjson.loads(body)
        except orjson.JSONDecodeError:
            self.transport.write(_reply("400 Bad Request", b'{"error":"bad json"}'))
            return
        model = str(req.get("model") or "fake-model")
        if not req.get("stream"):
            self.transport.write(_with_id(self.upstream.whole(dialect, model), answer_id))
            return
        include_usage = bool((req.get("stream_options") or {}).get("include_usage"))
        frames, first = self.upstream.stream(dialect, model, include_usage)
        if answer_id is not None:
            frames = [_with_id(frame, answer_id) for frame in frames]
        behaviour = self.upstream.behaviour
        if not behaviour.delay and not behaviour.hold:
            self.transport.write(b"".join([SSE_HEAD, *frames, END]))
            return
        self.busy = True
        self.pacer = asyncio.ensure_future(self._paced(frames, first, behaviour.delay, behaviour.hold))

    async def _paced(self, frames: list[bytes], first: int, delay: float, hold: float) -> None:
        assert self.transport is not None
        self.transport.write(b"".join([SSE_HEAD, *frames[: first + 1]]))
        if hold:
            await asyncio.sleep(hold)
        for frame in frames[first + 1 :]:
            if self.closed:
                return
            if delay:
                await asyncio.sleep(delay)
            self.transport.write(frame)
        if not self.closed:
            self.transport.write(END)
        self.busy = False
        self._process()


async def serve(host: str, port: int) -> None:
    upstream = Upstream()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Connection(upstream), host, port, backlog=4096)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9100)
    args = parser.parse_args()
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(args.host, args.port))
    else:
        uvloop.run(serve(args.host, args.port))


if __name__ == "__main__":
    main()
