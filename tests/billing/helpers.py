"""Raw HTTP calls to a test gateway for the billing tests: one request per wire format, whole or
streamed, returning what a client saw (status, headers, body or the SSE events it read)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from modelgate.clock import month_of
from modelgate.storage.base import UsageRecord
from tests.gateway_server import GatewayServer
from tests.polling import POLL_TIMEOUT

PATHS = {"messages": "/v1/messages", "chat": "/v1/chat/completions", "responses": "/v1/responses"}


def headers_for(fmt: str, secret: str) -> dict[str, str]:
    if fmt == "messages":
        return {"x-api-key": secret, "anthropic-version": "2023-06-01"}
    return {"authorization": f"Bearer {secret}"}


def body_for(fmt: str, model: str, text: str, max_tokens: int, stream: bool = False) -> dict[str, Any]:
    if fmt == "responses":
        return {"model": model, "input": text, "max_output_tokens": max_tokens, "stream": stream}
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": text}],
        "stream": stream,
    }
    return body


@dataclass
class Seen:
    status: int
    headers: httpx.Headers
    body: Any = None
    #: SSE events read (name or data type, parsed data) for streams.
    events: list[tuple[str, Any]] = field(default_factory=list)

    @property
    def request_id(self) -> str:
        return self.headers["request-id"]


def _parse_sse(raw: bytes) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for block in raw.replace(b"\r\n", b"\n").split(b"\n\n"):
        data = b"".join(line[5:].strip() for line in block.split(b"\n") if line.startswith(b"data:"))
        if not data:
            continue
        if data == b"[DONE]":
            out.append(("[DONE]", None))
            continue
        parsed = orjson.loads(data)
        out.append((str(parsed.get("type") or parsed.get("object") or ""), parsed))
    return out


async def send(
    client: httpx.AsyncClient,
    fmt: str,
    secret: str,
    model: str,
    *,
    text: str = "Hello there gateway",
    max_tokens: int = 64,
    stream: bool = False,
) -> Seen:
    """One request; a stream is read to its end."""
    body = body_for(fmt, model, text, max_tokens, stream)
    if not stream:
        r = await client.post(PATHS[fmt], json=body, headers=headers_for(fmt, secret))
        return Seen(r.status_code, r.headers, r.json())
    async with client.stream("POST", PATHS[fmt], json=body, headers=headers_for(fmt, secret)) as r:
        raw = await r.aread()
    if r.status_code != 200:
        return Seen(r.status_code, r.headers, orjson.loads(raw))
    return Seen(r.status_code, r.headers, None, _parse_sse(raw))


def delivered_output_tokens(fmt: str, events: list[tuple[str, Any]]) -> int:
    """Output deltas a client received (the simulator sends exactly one token per delta)."""
    count = 0
    for kind, data in events:
        if fmt == "messages" and kind == "content_block_delta":
            count += 1
        elif fmt == "chat" and kind == "chat.completion.chunk":
            choices = data.get("choices") or []
            if choices and (choices[0].get("delta") or {}).get("content"):
                count += 1
        elif fmt == "responses" and kind == "response.output_text.delta":
            count += 1
    return count


def records_of(gateway: GatewayServer, key_id: str, limit: int = 100_000) -> list[UsageRecord]:
    return gateway.call(
        gateway.services.usage.usage_records(
            month_of(gateway.services.clock.time()), key_id=key_id, limit=limit
        )
    )


def wait_for_record(
    gateway: GatewayServer, request_id: str, key_id: str, timeout: float = POLL_TIMEOUT
) -> list[UsageRecord]:
    """The usage records of one request, once at least one exists (streams settle after the body)."""
    deadline = time.monotonic() + timeout
    while True:
        found = [r for r in records_of(gateway, key_id) if r.request_id == request_id]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


def error_shape_ok(fmt: str, body: Any, code: str) -> bool:
    """A 402 body in the endpoint's wire format, naming which limit refused it."""
    if fmt == "messages":
        return (
            body.get("type") == "error"
            and body["error"]["type"] == "billing_error"
            and isinstance(body["error"]["message"], str)
            and body["error"].get("details") == {"error_code": code}
            and isinstance(body.get("request_id"), str)
        )
    error = body.get("error") or {}
    return error.get("type") == "insufficient_quota" and error.get("code") == code and "message" in error
