"""A fake upstream model provider on loopback: real HTTP, byte-exact wire formats, scripted faults.

One server answers all three dialects, chosen by path (reference §1.6, §2.5, §3.6):
``/v1/messages`` (+ ``/count_tokens``) Anthropic, ``/v1/chat/completions`` OpenAI chat,
``/v1/responses`` OpenAI Responses. ``"stream": true`` in the request body selects SSE.

Every request is recorded (method, path, headers, raw body bytes, and when the server noticed
the client disconnect). Each request takes the next step of the script; when the script is
exhausted, ``default`` answers. A step is a ``Reply`` (a successful answer) or a ``Fault``::

    async with FakeUpstream(script=[Fault.status(429, retry_after=1), Reply(text="hi")]) as fake:
        url = fake.base_url                      # "http://127.0.0.1:PORT", no /v1
        ...
        assert fake.requests[0].headers["x-api-key"] == "sk-test"
        assert fake.requests[1].body == sent_bytes   # byte-exact passthrough checks

    # every request fails; or decide per request:
    FakeUpstream(default=Fault.status(500))
    FakeUpstream(script=lambda req: Fault.reset_after(3) if req.json()["stream"] else Reply())

``json_style="spaced"`` makes the fake write its JSON bodies and events the way Python's
``json.dumps`` does by default (``"choices": []``), as some OpenAI-compatible servers do.

``refused_base_url()`` gives a loopback URL where nothing listens (connection refused).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson
from aiohttp import web

from tests.ports import unused_port


@dataclass
class RecordedRequest:
    method: str
    path: str
    query: str
    headers: dict[str, str]  # lower-case names
    body: bytes
    received_at: float  # time.monotonic()
    #: time.monotonic() when the server noticed the client went away before the reply ended.
    disconnected_at: float | None = None
    #: The reply (or fault) ran to its end.
    finished: bool = False

    def json(self) -> Any:
        return orjson.loads(self.body)

    @property
    def dialect(self) -> str:
        return _dialect(self.path)


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]
    id: str = "toolu_01FakeToolCall0001"


@dataclass(frozen=True)
class Reply:
    """A successful answer: text (split into ``chunks`` deltas when streaming), optional tool call."""

    text: str = "Hello from the fake upstream."
    input_tokens: int = 12
    output_tokens: int = 7
    cache_read_tokens: int = 0
    #: Messages: all cache writes (``cache_creation_input_tokens``) and the 1-hour part of them.
    cache_write_tokens: int = 0
    cache_write_1h_tokens: int = 0
    #: Server web searches: Messages ``server_tool_use.web_search_requests``; Responses
    #: ``web_search_call`` output items.
    web_search_requests: int = 0
    #: Messages ``usage.iterations`` entries (a compacting request's passes), verbatim.
    iterations: tuple[dict[str, Any], ...] = ()
    chunks: int = 3
    tool: ToolCall | None = None
    #: Seconds between SSE events (a slow stream, for disconnect tests).
    event_delay: float = 0.0
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def tool_call(cls, name: str, arguments: dict[str, Any], *, text: str = "", **kw: Any) -> Reply:
        return cls(text=text, tool=ToolCall(name, arguments), **kw)


@dataclass(frozen=True)
class Fault:
    """A scripted failure. Build with the class methods."""

    kind: str
    code: int = 500
    after: int = 0
    seconds: float = 0.0
    retry_after: float | None = None
    retry_after_ms: int | None = None
    message: str | None = None
    error_type: str | None = None
    then: Reply | None = None
    #: ``held``: the answer waits until the test sets this (on the fake's loop).
    gate: asyncio.Event | None = None

    @classmethod
    def status(
        cls,
        status: int,
        *,
        retry_after: float | None = None,
        retry_after_ms: int | None = None,
        message: str | None = None,
        error_type: str | None = None,
    ) -> Fault:
        """An HTTP error with the dialect's error body (Anthropic or OpenAI shape)."""
        return cls(
            "status",
            status,
            retry_after=retry_after,
            retry_after_ms=retry_after_ms,
            message=message,
            error_type=error_type,
        )

    @classmethod
    def overloaded(cls) -> Fault:
        """Anthropic 529 ``overloaded_error`` (OpenAI dialects: 503 with code ``overloaded``)."""
        return cls("overloaded", 529)

    @classmethod
    def slow_first_byte(cls, seconds: float, then: Reply | None = None) -> Fault:
        return cls("slow", seconds=seconds, then=then or Reply())

    @classmethod
    def held(cls, gate: asyncio.Event, then: Reply | None = None) -> Fault:
        """Accept the request, send nothing until ``gate`` is set, then answer with ``then``."""
        return cls("held", gate=gate, then=then or Reply())

    @classmethod
    def hang(cls) -> Fault:
        """Accept the request and never send headers."""
        return cls("slow", seconds=3600.0, then=Reply())

    @classmethod
    def drop(cls) -> Fault:
        """Close the connection without any response."""
        return cls("drop")

    @classmethod
    def reset_after(cls, events: int, then: Reply | None = None) -> Fault:
        """Stream ``events`` SSE events, then abort the TCP connection."""
        return cls("reset", after=events, then=then or Reply(chunks=max(3, events)))

    @classmethod
    def stall_after(cls, events: int, seconds: float = 3600.0, then: Reply | None = None) -> Fault:
        """Stream ``events`` SSE events, then go silent for ``seconds`` (then finish)."""
        return cls("stall", after=events, seconds=seconds, then=then or Reply(chunks=max(3, events)))

    @classmethod
    def malformed_json(cls) -> Fault:
        """200 ``application/json`` whose body is truncated JSON."""
        return cls("malformed_json", 200)

    @classmethod
    def malformed_sse(cls, after: int = 1) -> Fault:
        """Stream ``after`` good events, then a ``data:`` line that is not JSON, then end."""
        return cls("malformed_sse", after=after, then=Reply())

    @classmethod
    def echo_key(cls, status: int = 401) -> Fault:
        """An error whose message quotes the credential the request carried and our address."""
        return cls("echo_key", status)


Step = Reply | Fault
Script = Sequence[Step] | Callable[[RecordedRequest], Step]


def refused_base_url() -> str:
    """A loopback URL with nothing listening (tests/ports.py: a port no server of this run takes)."""
    return f"http://127.0.0.1:{unused_port()}"


#: How an upstream writes its JSON: ``compact`` (no spaces, as the official APIs and orjson do) or
#: ``spaced`` (Python's ``json.dumps`` defaults, ``", "`` and ``": "``, as some OpenAI-compatible
#: servers do).
JsonStyle = Literal["compact", "spaced"]


class FakeUpstream:
    def __init__(
        self,
        script: Script = (),
        *,
        default: Step | None = None,
        dialect: str | None = None,
        json_style: JsonStyle = "compact",
    ):
        self._script: deque[Step] | None = None
        self._decide: Callable[[RecordedRequest], Step] | None = None
        if callable(script):
            self._decide = script
        else:
            self._script = deque(script)
        self.default: Step = default if default is not None else Reply()
        #: Restrict to one dialect (requests for others get 404); None serves all.
        self.dialect = dialect
        self.json_style = json_style
        self.requests: list[RecordedRequest] = []
        #: Requests being answered now (a stream until its last event is written), and the most
        #: there ever were at once: what a concurrency limit in front of this upstream let through.
        self.in_flight = 0
        self.max_in_flight = 0
        self._runner: web.AppRunner | None = None
        self._ids = itertools.count(1)
        self.base_url = ""

    def push(self, *steps: Step) -> None:
        assert self._script is not None, "push needs a list script"
        self._script.extend(steps)

    async def __aenter__(self) -> FakeUpstream:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # handler_cancellation: a client disconnect cancels the handler, which is how we see it.
        self._runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=0.1, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.base_url = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def count(self) -> int:
        return len(self.requests)

    async def wait_ended(self, index: int = -1, timeout: float = 60.0) -> RecordedRequest:
        """Wait until request ``index`` ended, either way: its reply ran to the end (``finished``)
        or its client went away first (``disconnected_at``). Tests assert which one happened;
        ``timeout`` only bounds a hang, it is no speed assertion."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            rec = self.requests[index]
            if rec.finished or rec.disconnected_at is not None:
                return rec
            await asyncio.sleep(0.01)
        raise AssertionError(f"request {index} neither finished nor saw a disconnect within {timeout}s")

    def _next_step(self, rec: RecordedRequest) -> Step:
        if self._decide is not None:
            return self._decide(rec)
        assert self._script is not None
        return self._script.popleft() if self._script else self.default

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        rec = RecordedRequest(
            request.method,
            request.path,
            request.query_string,
            {k.lower(): v for k, v in request.headers.items()},
            body,
            time.monotonic(),
        )
        self.requests.append(rec)
        dialect = _dialect(request.path)
        if dialect == "unknown" or (self.dialect and dialect.split("/")[0] != self.dialect):
            return _json(404, _error_body(dialect, 404, "not_found_error", f"no route {request.path}"))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            resp = await self._answer(request, rec, dialect, self._next_step(rec))
        except (asyncio.CancelledError, ConnectionError):
            rec.disconnected_at = time.monotonic()
            raise
        finally:
            self.in_flight -= 1
        rec.finished = True
        return resp

    async def _answer(
        self, request: web.Request, rec: RecordedRequest, dialect: str, step: Step
    ) -> web.StreamResponse:
        if isinstance(step, Reply):
            return await self._reply(request, rec, dialect, step)
        kind = step.kind
        if kind == "slow":
            await asyncio.sleep(step.seconds)
            assert step.then is not None
            return await self._reply(request, rec, dialect, step.then)
        if kind == "held":
            assert step.gate is not None and step.then is not None
            await step.gate.wait()
            return await self._reply(request, rec, dialect, step.then)
        if kind == "drop":
            assert request.transport is not None
            request.transport.abort()
            return web.Response(status=500)
        if kind == "malformed_json":
            return web.Response(
                status=200, body=b'{"id":"msg_01Trunc","type":"mess', content_type="application/json"
            )
        if kind in ("reset", "stall", "malformed_sse"):
            assert step.then is not None
            return await self._reply(request, rec, dialect, step.then, fault=step)
        headers: dict[str, str] = {}
        if step.retry_after is not None:
            headers["retry-after"] = f"{step.retry_after:g}"
        if step.retry_after_ms is not None:
            headers["retry-after-ms"] = str(step.retry_after_ms)
        code = step.code
        if kind == "overloaded":
            if dialect.startswith("messages"):
                return _json(529, _error_body(dialect, 529, "overloaded_error", "Overloaded"), headers)
            body = {
                "error": {
                    "message": "The server is overloaded, please try again later.",
                    "type": "server_error",
                    "param": None,
                    "code": "overloaded",
                }
            }
            return _json(503, body, headers)
        if kind == "echo_key":
            key = rec.headers.get("x-api-key") or rec.headers.get("authorization", "").removeprefix("Bearer ")
            message = (
                f"Incorrect API key provided: {key}. Upstream {self.base_url} ({request.host}) refused it."
            )
            return _json(code, _error_body(dialect, code, step.error_type, message), headers)
        message = step.message or _DEFAULT_MESSAGES.get(code, f"fake upstream error {code}")
        return _json(code, _error_body(dialect, code, step.error_type, message), headers)

    async def _reply(
        self,
        request: web.Request,
        rec: RecordedRequest,
        dialect: str,
        reply: Reply,
        fault: Fault | None = None,
    ) -> web.StreamResponse:
        try:
            req = orjson.loads(rec.body) if rec.body else {}
        except orjson.JSONDecodeError:
            return _json(400, _error_body(dialect, 400, None, "request body is not valid JSON"))
        n = next(self._ids)
        model = req.get("model", "fake-model") if isinstance(req, dict) else "fake-model"
        headers = {
            "request-id": f"req_fake{n:06d}",
            "x-request-id": f"req_fake{n:06d}",
            **dict(reply.headers),
        }
        if dialect == "messages/count_tokens":
            return _json(200, {"input_tokens": reply.input_tokens}, headers)
        if not (isinstance(req, dict) and req.get("stream")):
            return self._restyled(_json(200, _whole(dialect, reply, model, n), headers))
        resp = web.StreamResponse(
            status=200, headers={**headers, "content-type": "text/event-stream", "cache-control": "no-cache"}
        )
        await resp.prepare(request)
        include_usage = bool((req.get("stream_options") or {}).get("include_usage"))
        for i, event in enumerate(_events(dialect, reply, model, n, include_usage)):
            if fault is not None and i == fault.after:
                if fault.kind == "reset":
                    assert request.transport is not None
                    request.transport.abort()
                    rec.disconnected_at = None
                    return resp
                if fault.kind == "stall":
                    await asyncio.sleep(fault.seconds)
                if fault.kind == "malformed_sse":
                    await resp.write(b'data: {"type": "content_block_delta", "index": 0, "delta": {\n\n')
                    await resp.write_eof()
                    return resp
            if reply.event_delay and i:
                await asyncio.sleep(reply.event_delay)
            await resp.write(self._restyled_event(event))
        await resp.write_eof()
        return resp

    def _restyled(self, response: web.Response) -> web.Response:
        if self.json_style == "spaced" and isinstance(response.body, bytes):
            response.body = json.dumps(orjson.loads(response.body)).encode()
        return response

    def _restyled_event(self, event: bytes) -> bytes:
        """The SSE event with its JSON data written in this upstream's style."""
        if self.json_style == "compact":
            return event
        lines = event.split(b"\n")
        for i, line in enumerate(lines):
            if line.startswith(b"data: {"):
                lines[i] = b"data: " + json.dumps(orjson.loads(line[6:])).encode()
        return b"\n".join(lines)


_DEFAULT_MESSAGES = {
    400: "messages: field required",
    404: "model: not found",
    413: "Request exceeds the maximum allowed size",
    422: "Unprocessable request",
    429: "Rate limit exceeded, please slow down",
    500: "Internal server error",
    502: "Bad gateway",
    503: "Service unavailable",
    504: "Upstream timed out",
}
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}
_OPENAI_TYPES = {
    401: ("invalid_request_error", "invalid_api_key"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("rate_limit_error", "rate_limit_exceeded"),
}


def _dialect(path: str) -> str:
    return {
        "/v1/messages": "messages",
        "/v1/messages/count_tokens": "messages/count_tokens",
        "/v1/chat/completions": "chat",
        "/v1/responses": "responses",
    }.get(path, "unknown")


def _json(status: int, body: Any, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        status=status, body=orjson.dumps(body), content_type="application/json", headers=headers or {}
    )


def _error_body(dialect: str, status: int, error_type: str | None, message: str) -> dict[str, Any]:
    if dialect.startswith("messages"):
        etype = error_type or _ANTHROPIC_TYPES.get(
            status, "api_error" if status >= 500 else "invalid_request_error"
        )
        return {"type": "error", "error": {"type": etype, "message": message}, "request_id": "req_fakeerror"}
    otype, code = _OPENAI_TYPES.get(
        status, ("server_error" if status >= 500 else "invalid_request_error", None)
    )
    return {"error": {"message": message, "type": error_type or otype, "param": None, "code": code}}


def _pieces(text: str, n: int) -> list[str]:
    if not text:
        return []
    size = max(1, -(-len(text) // max(1, n)))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _sse(data: dict[str, Any], event: str | None = None) -> bytes:
    payload = orjson.dumps(data)
    if event is None:
        return b"data: " + payload + b"\n\n"
    return b"event: " + event.encode() + b"\ndata: " + payload + b"\n\n"


# --- Wire bodies ------------------------------------------------------------------------------


def _usage_anthropic(r: Reply) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "input_tokens": r.input_tokens,
        "output_tokens": r.output_tokens,
        "cache_creation_input_tokens": r.cache_write_tokens,
        "cache_read_input_tokens": r.cache_read_tokens,
        "cache_creation": {
            "ephemeral_5m_input_tokens": r.cache_write_tokens - r.cache_write_1h_tokens,
            "ephemeral_1h_input_tokens": r.cache_write_1h_tokens,
        },
        "server_tool_use": _server_tool_use(r),
        "service_tier": "standard",
    }
    if r.iterations:
        usage["iterations"] = list(r.iterations)
    return usage


def _server_tool_use(r: Reply) -> dict[str, Any] | None:
    if not r.web_search_requests:
        return None
    return {"web_search_requests": r.web_search_requests, "web_fetch_requests": 0}


def _final_delta_usage(r: Reply) -> dict[str, Any]:
    """A ``message_delta``'s usage: output only, or, when the reply has server tool use or
    iterations, every cumulative figure as the API sends it (no ``cache_creation`` split there)."""
    if not (r.iterations or r.web_search_requests):
        return {"output_tokens": r.output_tokens}
    usage = {k: v for k, v in _usage_anthropic(r).items() if k not in ("cache_creation", "service_tier")}
    return usage


def _usage_chat(r: Reply) -> dict[str, Any]:
    prompt = r.input_tokens + r.cache_read_tokens
    return {
        "prompt_tokens": prompt,
        "completion_tokens": r.output_tokens,
        "total_tokens": prompt + r.output_tokens,
        "prompt_tokens_details": {"cached_tokens": r.cache_read_tokens},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }


def _usage_responses(r: Reply) -> dict[str, Any]:
    prompt = r.input_tokens + r.cache_read_tokens
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": r.cache_read_tokens},
        "output_tokens": r.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + r.output_tokens,
    }


def _call_id(r: Reply) -> str:
    assert r.tool is not None
    return r.tool.id if r.tool.id.startswith("call_") else "call_" + r.tool.id.removeprefix("toolu_")


def _whole(dialect: str, r: Reply, model: str, n: int) -> dict[str, Any]:
    args = orjson.dumps(r.tool.arguments).decode() if r.tool else ""
    if dialect == "messages":
        content: list[dict[str, Any]] = [{"type": "text", "text": r.text}] if r.text else []
        if r.tool:
            content.append(
                {"type": "tool_use", "id": r.tool.id, "name": r.tool.name, "input": r.tool.arguments}
            )
        return {
            "id": f"msg_fake{n:06d}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": "tool_use" if r.tool else "end_turn",
            "stop_sequence": None,
            "usage": _usage_anthropic(r),
        }
    if dialect == "chat":
        message: dict[str, Any] = {"role": "assistant", "content": r.text or None, "refusal": None}
        if r.tool:
            message["tool_calls"] = [
                {"id": _call_id(r), "type": "function", "function": {"name": r.tool.name, "arguments": args}}
            ]
        return {
            "id": f"chatcmpl-fake{n:06d}",
            "object": "chat.completion",
            "created": 1700000000,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": "tool_calls" if r.tool else "stop",
                }
            ],
            "usage": _usage_chat(r),
            "system_fingerprint": None,
            "service_tier": "default",
        }
    return _response_obj(r, model, n, "completed", _response_output(r, n))


def _response_output(r: Reply, n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {
            "type": "web_search_call",
            "id": f"ws_fake{n:06d}{i:02d}",
            "status": "completed",
            "action": {"type": "search", "query": f"query {i}"},
        }
        for i in range(r.web_search_requests)
    ]
    if r.text:
        out.append(
            {
                "type": "message",
                "id": f"msg_fake{n:06d}",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": r.text, "annotations": [], "logprobs": []}],
            }
        )
    if r.tool:
        out.append(
            {
                "type": "function_call",
                "id": f"fc_fake{n:06d}",
                "call_id": _call_id(r),
                "name": r.tool.name,
                "arguments": orjson.dumps(r.tool.arguments).decode(),
                "status": "completed",
            }
        )
    return out


def _response_obj(r: Reply, model: str, n: int, status: str, output: list[dict[str, Any]]) -> dict[str, Any]:
    done = status == "completed"
    return {
        "id": f"resp_fake{n:06d}",
        "object": "response",
        "created_at": 1700000000,
        "status": status,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "max_output_tokens": None,
        "model": model,
        "output": output,
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "store": True,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": _usage_responses(r) if done else None,
        "user": None,
        "metadata": {},
    }


def _events(dialect: str, r: Reply, model: str, n: int, include_usage: bool) -> list[bytes]:
    if dialect == "messages":
        return _events_messages(r, model, n)
    if dialect == "chat":
        return _events_chat(r, model, n, include_usage)
    return _events_responses(r, model, n)


def _events_messages(r: Reply, model: str, n: int) -> list[bytes]:
    start_usage = {**_usage_anthropic(r), "output_tokens": 1, "server_tool_use": None}
    start_usage.pop("iterations", None)
    message: dict[str, Any] = {
        "id": f"msg_fake{n:06d}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": start_usage,
    }
    ev: list[tuple[str, dict[str, Any]]] = [("message_start", {"type": "message_start", "message": message})]
    index = 0
    if r.text:
        ev.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            )
        )
        ev.append(("ping", {"type": "ping"}))
        for piece in _pieces(r.text, r.chunks):
            ev.append(
                (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": 0,
                        "delta": {"type": "text_delta", "text": piece},
                    },
                )
            )
        ev.append(("content_block_stop", {"type": "content_block_stop", "index": 0}))
        index = 1
    if r.tool:
        ev.append(
            (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "tool_use", "id": r.tool.id, "name": r.tool.name, "input": {}},
                },
            )
        )
        for piece in _pieces(orjson.dumps(r.tool.arguments).decode(), 2):
            ev.append(
                (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": piece},
                    },
                )
            )
        ev.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    ev.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use" if r.tool else "end_turn", "stop_sequence": None},
                "usage": _final_delta_usage(r),
            },
        )
    )
    ev.append(("message_stop", {"type": "message_stop"}))
    return [_sse(data, name) for name, data in ev]


def _events_chat(r: Reply, model: str, n: int, include_usage: bool) -> list[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        c: dict[str, Any] = {
            "id": f"chatcmpl-fake{n:06d}",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": model,
            "system_fingerprint": None,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if include_usage:
            c["usage"] = None
        return c

    out = [chunk({"role": "assistant", "content": "", "refusal": None})]
    out += [chunk({"content": piece}) for piece in _pieces(r.text, r.chunks)]
    if r.tool:
        out.append(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": _call_id(r),
                            "type": "function",
                            "function": {"name": r.tool.name, "arguments": ""},
                        }
                    ]
                }
            )
        )
        for piece in _pieces(orjson.dumps(r.tool.arguments).decode(), 2):
            out.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}))
    out.append(chunk({}, "tool_calls" if r.tool else "stop"))
    if include_usage:
        final = chunk({})
        final["choices"] = []
        final["usage"] = _usage_chat(r)
        out.append(final)
    return [_sse(c) for c in out] + [b"data: [DONE]\n\n"]


def _events_responses(r: Reply, model: str, n: int) -> list[bytes]:
    ev: list[dict[str, Any]] = []
    ev.append({"type": "response.created", "response": _response_obj(r, model, n, "in_progress", [])})
    ev.append({"type": "response.in_progress", "response": _response_obj(r, model, n, "in_progress", [])})
    items = _response_output(r, n)
    for idx, item in enumerate(items):
        if item["type"] == "message":
            item_id = item["id"]
            ev.append(
                {
                    "type": "response.output_item.added",
                    "output_index": idx,
                    "item": {**item, "status": "in_progress", "content": []},
                }
            )
            ev.append(
                {
                    "type": "response.content_part.added",
                    "item_id": item_id,
                    "output_index": idx,
                    "content_index": 0,
                    "part": {"type": "output_text", "text": "", "annotations": []},
                }
            )
            for piece in _pieces(r.text, r.chunks):
                ev.append(
                    {
                        "type": "response.output_text.delta",
                        "item_id": item_id,
                        "output_index": idx,
                        "content_index": 0,
                        "delta": piece,
                        "logprobs": [],
                    }
                )
            ev.append(
                {
                    "type": "response.output_text.done",
                    "item_id": item_id,
                    "output_index": idx,
                    "content_index": 0,
                    "text": r.text,
                    "logprobs": [],
                }
            )
            ev.append(
                {
                    "type": "response.content_part.done",
                    "item_id": item_id,
                    "output_index": idx,
                    "content_index": 0,
                    "part": {"type": "output_text", "text": r.text, "annotations": []},
                }
            )
        elif item["type"] == "web_search_call":
            ev.append(
                {
                    "type": "response.output_item.added",
                    "output_index": idx,
                    "item": {"type": "web_search_call", "id": item["id"], "status": "in_progress"},
                }
            )
            ev.append(
                {"type": "response.web_search_call.completed", "output_index": idx, "item_id": item["id"]}
            )
        else:
            ev.append(
                {
                    "type": "response.output_item.added",
                    "output_index": idx,
                    "item": {**item, "arguments": "", "status": "in_progress"},
                }
            )
            for piece in _pieces(item["arguments"], 2):
                ev.append(
                    {
                        "type": "response.function_call_arguments.delta",
                        "item_id": item["id"],
                        "output_index": idx,
                        "delta": piece,
                    }
                )
            ev.append(
                {
                    "type": "response.function_call_arguments.done",
                    "item_id": item["id"],
                    "output_index": idx,
                    "name": item["name"],
                    "arguments": item["arguments"],
                }
            )
        ev.append({"type": "response.output_item.done", "output_index": idx, "item": item})
    ev.append({"type": "response.completed", "response": _response_obj(r, model, n, "completed", items)})
    return [_sse({**e, "sequence_number": i}, e["type"]) for i, e in enumerate(ev)]
