"""``POST /admin/api/providers/{name}/test``: one small request per dialect the provider speaks,
through the running provider object (its credentials, headers and connection pool), outside the
router: a test neither cools a deployment down nor counts in the metrics.

The answer says whether every dialect answered 2xx, the last status, the slowest latency and the
first error. Error texts go through the provider's own redaction (its keys, base URL and host)
and the generic secret filter, so no credential can appear in them.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson

from modelgate import errors
from modelgate.upstream.base import Dialect, Provider, Redacts
from modelgate.upstream.error_mapping import parse_error_body, sanitise

#: Seconds one test request may take, head and body.
TEST_TIMEOUT = 30.0
_PROMPT = "Reply with the single word OK."
#: The dialects a test speaks, in order (a provider speaking others is tested on these only).
_DIALECTS: tuple[Dialect, ...] = ("messages", "chat", "responses")
_MAX_BODY = 64 * 1024


def _body(dialect: Dialect, model: str, provider: Provider) -> bytes:
    if dialect == "messages":
        data: dict[str, Any] = {
            "model": model,
            "max_tokens": 16,
            "messages": [{"role": "user", "content": _PROMPT}],
        }
    elif dialect == "chat":
        limit = "max_tokens" if provider.legacy_chat_limit else "max_completion_tokens"
        data = {"model": model, limit: 16, "messages": [{"role": "user", "content": _PROMPT}]}
    else:
        data = {"model": model, "input": _PROMPT, "max_output_tokens": 16, "store": False}
    return orjson.dumps(data)


async def _one(provider: Provider, dialect: Dialect, model: str) -> dict[str, Any]:
    redact = provider.redact if isinstance(provider, Redacts) else (lambda text: text)
    started = time.monotonic()
    status: int | None = None
    error: str | None = None
    try:
        async with asyncio.timeout(TEST_TIMEOUT):
            reply = await provider.send(
                dialect, _body(dialect, model, provider), stream=False, client_headers={}
            )
            try:
                status = reply.status
                raw = await reply.read()
            finally:
                await reply.close()
        if not 200 <= status < 300:
            detail = parse_error_body(raw[:_MAX_BODY], redact)
            error = detail.message or f"HTTP {status}"
    except errors.GatewayError as exc:
        error = sanitise(exc.message, redact)
    except TimeoutError:
        error = f"no answer within {TEST_TIMEOUT:g} s"
    latency = round(1000 * (time.monotonic() - started), 1)
    return {"dialect": dialect, "ok": error is None, "status": status, "latency_ms": latency, "error": error}


async def try_provider(provider: Provider, model: str) -> dict[str, Any]:
    results = [await _one(provider, d, model) for d in _DIALECTS if d in provider.dialects]
    if not results:
        return {"ok": False, "status": None, "latency_ms": 0.0, "error": "no dialect to test", "model": model}
    failed = next((r for r in results if not r["ok"]), None)
    last = failed or results[-1]
    return {
        "ok": failed is None,
        "status": last["status"],
        "latency_ms": max(r["latency_ms"] for r in results),
        "error": failed["error"] if failed else None,
        "model": model,
        "dialects": results,
    }
