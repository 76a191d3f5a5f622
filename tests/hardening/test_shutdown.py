"""Deploys drain (issue #11): SIGTERM lets requests in flight finish for the grace, then ends the
rest in their format; a second signal ends them at once; ``kill -9`` under load never breaks the
ledger. A real ``modelgate serve`` process each time."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.hardening.process import GatewayProcess, assert_ledger_invariant, run
from tests.storage.rollup_scan import sqlite_rollups_and_scan

GRACE = 3
#: The simulator emits 20 tokens a second: a 400-word answer takes about 20 s.
SLOW = {"tokens_per_second": 20.0, "reply_words": 400}


def ask(fmt: str, *, stream: bool, max_tokens: int) -> tuple[str, dict[str, Any]]:
    text = [{"role": "user", "content": "tell me a long story"}]
    if fmt == "messages":
        return "/v1/messages", {
            "model": "aria-haiku-4.5",
            "max_tokens": max_tokens,
            "stream": stream,
            "messages": text,
        }
    if fmt == "chat":
        return "/v1/chat/completions", {
            "model": "nova-5.5",
            "max_tokens": max_tokens,
            "stream": stream,
            "messages": text,
        }
    return "/v1/responses", {
        "model": "nova-5.5",
        "max_output_tokens": max_tokens,
        "stream": stream,
        "input": "a long story",
    }


def headers(fmt: str, keys: dict[str, str]) -> dict[str, str]:
    if fmt == "messages":
        return {"x-api-key": keys["Basic"], "anthropic-version": "2023-06-01"}
    return {"authorization": f"Bearer {keys['Nova']}"}


def stream_ending(fmt: str, body: bytes) -> str:
    """``final`` (the format's last event), ``in_band_error`` or ``cut`` (neither: a silent cut)."""
    if fmt == "messages":
        if body.rstrip().endswith(b'data: {"type":"message_stop"}'):
            return "final"
        return "in_band_error" if b"event: error" in body.rsplit(b"\n\n", 2)[-2] else "cut"
    if fmt == "chat":
        if body.rstrip().endswith(b"data: [DONE]"):
            return "final"
        last = body.rstrip().rsplit(b"\n\n", 1)[-1]
        return "in_band_error" if last.startswith(b"data: ") and b'"error"' in last else "cut"
    last = body.rstrip().rsplit(b"\n\n", 1)[-1]
    if last.startswith(b"event: response.completed") or last.startswith(b"event: response.incomplete"):
        return "final"
    return "in_band_error" if last.startswith(b"event: response.failed") else "cut"


async def stream_one(
    client: httpx.AsyncClient, fmt: str, keys: dict[str, str], started: asyncio.Queue[str]
) -> tuple[str, str]:
    path, body = ask(fmt, stream=True, max_tokens=400)
    received = b""
    async with client.stream("POST", path, json=body, headers=headers(fmt, keys)) as response:
        assert response.status_code == 200
        first = True
        async for chunk in response.aiter_bytes():
            received += chunk
            if first:
                first = False
                started.put_nowait(fmt)
    return fmt, stream_ending(fmt, received)


async def whole_one(
    client: httpx.AsyncClient, fmt: str, keys: dict[str, str], max_tokens: int
) -> tuple[str, int, Any]:
    path, body = ask(fmt, stream=False, max_tokens=max_tokens)
    response = await client.post(path, json=body, headers=headers(fmt, keys))
    return fmt, response.status_code, response.json()


async def all_admitted(
    gateway: GatewayProcess, operator: dict[str, str], count: int, finishing: list[asyncio.Task[Any]]
) -> None:
    """Wait until the gateway has admitted ``count`` requests: those in flight (``/health``
    details) plus those of ``finishing`` already answered. The answered ones are counted before
    asking, so none is counted twice (an answered request left the in-flight count first)."""
    async with httpx.AsyncClient(base_url=gateway.base_url, headers=operator, timeout=30) as probe:
        deadline = time.monotonic() + 60
        while True:
            answered = sum(task.done() for task in finishing)
            in_flight = (await probe.get("/health")).json()["in_flight"]
            if in_flight + answered >= count:
                return
            assert time.monotonic() < deadline, f"{in_flight} in flight and {answered} answered of {count}"
            await asyncio.sleep(0.02)


def test_sigterm_drains_streams_and_whole_requests(tmp_path: Path) -> None:
    gateway = GatewayProcess(tmp_path, server={"shutdown_grace_seconds": GRACE}, simulator=SLOW)
    with gateway:
        seeded = gateway.seed()
        operator = gateway.operator_headers()
        gateway.start()

        async def scenario() -> tuple[list[Any], list[Any], float]:
            limits = httpx.Limits(max_connections=400, max_keepalive_connections=0)
            async with httpx.AsyncClient(base_url=gateway.base_url, limits=limits, timeout=60) as client:
                started: asyncio.Queue[str] = asyncio.Queue()
                formats = ("messages", "chat", "responses")
                streams = [
                    asyncio.create_task(stream_one(client, formats[i % 3], seeded.keys, started))
                    for i in range(100)
                ]
                for _ in range(100):  # every stream is under way before the signal
                    await asyncio.wait_for(started.get(), timeout=60)
                # 40 whole requests that cannot finish within the grace, 20 that can.
                slow = [
                    asyncio.create_task(whole_one(client, formats[i % 3], seeded.keys, 400))
                    for i in range(40)
                ]
                fast = [
                    asyncio.create_task(whole_one(client, formats[i % 3], seeded.keys, 30)) for i in range(20)
                ]
                # The signal comes once the gateway has admitted all 160 (a request arriving after
                # it would be refused, not drained), however long their connections take.
                await all_admitted(gateway, operator, 160, fast)
                gateway.signal(signal.SIGTERM)
                signalled = time.monotonic()
                stream_results = await asyncio.gather(*streams)
                whole_results = await asyncio.gather(*slow, *fast)
                exit_code = await asyncio.to_thread(gateway.wait, GRACE + 20)
                assert exit_code in (0, -signal.SIGTERM)
                return stream_results, whole_results, time.monotonic() - signalled

        streams, wholes, took = run(scenario())
        endings = [ending for _, ending in streams]
        assert "cut" not in endings and endings.count("in_band_error") == 100, endings
        statuses = sorted(status for _, status, _ in wholes)
        assert set(statuses) <= {200, 503}
        assert statuses.count(200) == 20 and statuses.count(503) == 40, statuses
        for fmt, status, body in wholes:
            if status == 503:
                message = body["error"]["message"]
                assert "shutting down" in message
                assert (body.get("type") == "error") == (fmt == "messages")
        ledger = gateway.ledger(seeded.account_id)
        assert ledger["pending"] == 0 and ledger["records"] == 160
        assert_ledger_invariant(ledger)
        statuses_by_kind = gateway.statuses()
        assert statuses_by_kind == {"shutdown": 140, "ok": 20}, statuses_by_kind
        print(f"exit {took:.2f} s after SIGTERM (grace {GRACE} s)")


def test_a_second_signal_cuts_at_once_and_still_settles(tmp_path: Path) -> None:
    gateway = GatewayProcess(tmp_path, server={"shutdown_grace_seconds": 60}, simulator=SLOW)
    with gateway:
        seeded = gateway.seed()
        gateway.start()

        async def scenario() -> list[Any]:
            limits = httpx.Limits(max_connections=50, max_keepalive_connections=0)
            async with httpx.AsyncClient(base_url=gateway.base_url, limits=limits, timeout=60) as client:
                started: asyncio.Queue[str] = asyncio.Queue()
                streams = [
                    asyncio.create_task(stream_one(client, "chat", seeded.keys, started)) for _ in range(20)
                ]
                for _ in range(20):
                    await asyncio.wait_for(started.get(), timeout=60)
                gateway.signal(signal.SIGTERM)
                await asyncio.sleep(0.5)
                gateway.signal(signal.SIGTERM)
                results = await asyncio.gather(*streams)
                # Far less than the 60 s grace: the second signal did not wait for it.
                await asyncio.to_thread(gateway.wait, 20)
                return results

        results = run(scenario())
        assert {ending for _, ending in results} == {"in_band_error"}
        ledger = gateway.ledger(seeded.account_id)
        assert ledger["pending"] == 0 and ledger["records"] == 20
        assert_ledger_invariant(ledger)


@pytest.mark.parametrize("rounds", [20])
def test_kill_9_under_load_never_breaks_the_ledger(tmp_path: Path, rounds: int) -> None:
    gateway = GatewayProcess(tmp_path, simulator={"tokens_per_second": 200.0, "reply_words": 60})
    with gateway:
        seeded = gateway.seed()
        for _ in range(rounds):
            gateway.start()

            async def load() -> None:
                limits = httpx.Limits(max_connections=100)
                async with httpx.AsyncClient(base_url=gateway.base_url, limits=limits, timeout=30) as client:
                    tasks = [
                        asyncio.create_task(
                            whole_one(client, ("messages", "chat", "responses")[i % 3], seeded.keys, 40)
                        )
                        for i in range(30)
                    ]
                    await asyncio.sleep(0.15)
                    gateway.kill()
                    await asyncio.gather(*tasks, return_exceptions=True)

            run(load())
            # Holds of the killed requests stay until the sweeper's TTL; money still adds up, and
            # the usage rollups (kept per group commit) still equal the records.
            assert_ledger_invariant(gateway.ledger(seeded.account_id))
            assert_rollups_exact(gateway)
        # A restart serves again, and the invariant still holds after it.
        gateway.start()
        response = httpx.post(
            f"{gateway.base_url}/v1/messages",
            content=orjson.dumps(ask("messages", stream=False, max_tokens=5)[1]),
            headers={**headers("messages", seeded.keys), "content-type": "application/json"},
            timeout=30,
        )
        assert response.status_code == 200
        gateway.kill()
        assert_ledger_invariant(gateway.ledger(seeded.account_id))
        assert gateway.ledger(seeded.account_id)["records"] > 0
        assert_rollups_exact(gateway)


def assert_rollups_exact(gateway: GatewayProcess) -> None:
    with contextlib.closing(gateway.db()) as db:
        for kept, scanned in sqlite_rollups_and_scan(db):
            assert kept == scanned
