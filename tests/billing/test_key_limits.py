"""A key's tokens per minute and requests in flight (``limits.key_limits``), through a real
gateway: the in-flight count a fake upstream measured never passes ``max_concurrency`` under a
burst of mixed, half-streamed requests, a client gone mid-request frees its slot, and no rolling
60 s window of the usage log holds more tokens than ``tpm`` (time injected)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.billing.helpers import PATHS, Seen, body_for, headers_for, records_of, send, wait_for_record
from tests.fakes.upstream import FakeUpstream, Fault
from tests.gateway_server import GatewayServer, ManualClock, running_gateway
from tests.loop_thread import LoopThread
from tests.polling import wait_until

START = datetime(2026, 5, 4, 9, tzinfo=UTC).timestamp()
MODEL = "aria-haiku-4.5"


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    loop = LoopThread("key-limits-upstream")
    try:
        # Every answer waits a little before its first byte, so requests overlap.
        yield loop.start(FakeUpstream(default=Fault.slow_first_byte(0.15)))
    finally:
        loop.close()


@pytest.fixture(scope="module")
def gateway(upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    providers = [
        {"name": "simulator", "kind": "simulator"},
        {"name": "fake", "kind": "openai-compatible", "base_url": upstream.base_url + "/v1"},
    ]
    deployments = {MODEL: [{"provider": "fake", "upstream_model": "fake-haiku"}]}
    with running_gateway(
        tmp_path_factory.mktemp("limits") / "data", providers=providers, deployments=deployments
    ) as server:
        yield server


def _assert_limit_refusal(fmt: str, seen: Seen, limit: str) -> None:
    assert seen.status == 429, seen.body
    assert seen.headers["x-modelgate-limit"] == limit
    assert seen.headers["retry-after"].isdigit() and int(seen.headers["retry-after"]) >= 1
    assert seen.headers["ratelimit"] == f"{limit};r=0;t={seen.headers['retry-after']}"
    if fmt == "messages":  # each endpoint's own error shape
        assert seen.body["type"] == "error" and seen.body["error"]["type"] == "rate_limit_error"
    else:
        assert seen.body["error"]["code"] == "rate_limit_exceeded"


def test_in_flight_never_passes_max_concurrency(gateway: GatewayServer, upstream: FakeUpstream) -> None:
    account = gateway.account("burst", credits=1000)
    issued = gateway.key(account, "Pro", rpm=100_000, max_concurrency=7)
    upstream.max_in_flight = 0
    fmts = ("messages", "chat")

    async def burst() -> list[tuple[str, Seen]]:
        limits = httpx.Limits(max_connections=400)
        async with httpx.AsyncClient(base_url=gateway.base_url, timeout=60, limits=limits) as client:
            jobs = [
                send(client, fmts[i % 2], issued.secret, MODEL, max_tokens=20, stream=i % 4 >= 2)
                for i in range(240)
            ]
            seen = await asyncio.gather(*jobs)
        return [(fmts[i % 2], s) for i, s in enumerate(seen)]

    answers = asyncio.run(burst())
    served = [s for _, s in answers if s.status == 200]
    refused = [(f, s) for f, s in answers if s.status != 200]
    assert len(served) >= 7 and refused
    for fmt, seen in refused:
        _assert_limit_refusal(fmt, seen, "concurrency")
    assert 1 <= upstream.max_in_flight <= 7
    # Every slot came back: seven requests at once are served again.
    again = asyncio.run(_at_once(gateway, issued.secret, 7))
    assert [s.status for s in again] == [200] * 7
    assert upstream.max_in_flight <= 7
    # Refused requests were charged nothing.
    gateway.call(gateway.services.settlements.drain())
    records = records_of(gateway, issued.record.id)
    assert all(r.charged_uc == 0 for r in records if r.status != "ok")
    assert len([r for r in records if r.status == "ok"]) == len(served) + 7


async def _at_once(gateway: GatewayServer, secret: str, n: int) -> list[Seen]:
    async with httpx.AsyncClient(base_url=gateway.base_url, timeout=60) as client:
        return list(
            await asyncio.gather(
                *(send(client, "chat", secret, MODEL, max_tokens=5, stream=i % 2 == 0) for i in range(n))
            )
        )


def test_a_client_gone_mid_request_frees_its_slot(gateway: GatewayServer, upstream: FakeUpstream) -> None:
    issued = gateway.key(gateway.account("leaver", credits=100), "Pro", rpm=100_000, max_concurrency=1)
    before = upstream.count

    async def leave() -> None:
        body = body_for("chat", MODEL, "hello", 10, stream=True)
        async with httpx.AsyncClient(base_url=gateway.base_url, timeout=60) as client:
            request = asyncio.ensure_future(
                client.post(PATHS["chat"], json=body, headers=headers_for("chat", issued.secret))
            )
            while upstream.count == before:  # the gateway is waiting for the upstream
                await asyncio.sleep(0.01)
            # The one slot is taken: a second request is refused.
            second = await send(client, "messages", issued.secret, MODEL, max_tokens=5)
            _assert_limit_refusal("messages", second, "concurrency")
            request.cancel()  # the client hangs up

    asyncio.run(leave())
    wait_until(
        lambda: any(r.status == "client_disconnected" for r in records_of(gateway, issued.record.id)),
        "the disconnected request's hold released",
    )
    seen = asyncio.run(_at_once(gateway, issued.secret, 1))
    assert seen[0].status == 200


def test_tokens_per_rolling_minute_never_pass_tpm(tmp_path: Path) -> None:
    clock = ManualClock(START)
    with running_gateway(tmp_path / "data", clock=clock) as gateway:
        issued = gateway.key(gateway.account("tokens", credits=1000), "Pro", rpm=100_000, tpm=2500)
        refused: list[tuple[float, str, Seen]] = []

        async def load() -> None:
            async with httpx.AsyncClient(base_url=gateway.base_url, timeout=60) as client:
                for tick in range(90):  # 4 requests every 2 s for three simulated minutes
                    now = START + tick * 2
                    clock.set(now)
                    fmts = ("messages", "chat", "messages", "chat")
                    batch = await asyncio.gather(
                        *(
                            send(client, f, issued.secret, "aria-sonnet-4.6", max_tokens=60, stream=i >= 2)
                            for i, f in enumerate(fmts)
                        )
                    )
                    for f, seen in zip(fmts, batch, strict=True):
                        if seen.status != 200:
                            refused.append((now, f, seen))

        asyncio.run(load())
        gateway.call(gateway.services.settlements.drain())
        ok = [r for r in records_of(gateway, issued.record.id) if r.status == "ok"]
        used = [(r.created_at, _tokens(r)) for r in ok]
        for t, _ in used:
            assert sum(n for at, n in used if t - 60 < at <= t) <= 2500
        assert refused and len(ok) >= 20
        for _, fmt, seen in refused:
            _assert_limit_refusal(fmt, seen, "tpm")
            assert seen.headers["ratelimit-policy"] == "rpm;q=100000;w=60, tpm;q=2500;w=60"
        # A client that waits its retry-after is served (the window has room by then).
        at, fmt, seen = refused[-1]
        clock.set(max(at, START + 89 * 2) + int(seen.headers["retry-after"]))
        later = httpx.post(
            f"{gateway.base_url}{PATHS[fmt]}",
            json=body_for(fmt, "aria-sonnet-4.6", "Hello there gateway", 60),
            headers=headers_for(fmt, issued.secret),
        )
        assert later.status_code == 200, later.text


def _tokens(record: Any) -> int:
    return int(
        record.input_tokens + record.output_tokens + record.cache_creation_tokens + record.cache_read_tokens
    )


def test_max_tokens_is_clamped_to_the_tokens_left_this_minute(tmp_path: Path) -> None:
    clock = ManualClock(START)
    with running_gateway(tmp_path / "data", clock=clock) as gateway:
        issued = gateway.key(gateway.account("clamp", credits=1000), "Pro", rpm=100_000, tpm=400)
        response = httpx.post(
            f"{gateway.base_url}/v1/messages",
            json=body_for("messages", "aria-sonnet-4.6", "Hi", 5000),
            headers=headers_for("messages", issued.secret),
        )
        assert response.status_code == 200, response.text
        asked, _, rest = response.headers["x-modelgate-max-tokens-clamped"].partition("->")
        granted = int(rest.partition(";")[0])
        assert asked == "5000" and 0 < granted < 400 and rest.endswith("reason=tpm")
        record = wait_for_record(gateway, response.headers["request-id"], issued.record.id)[0]
        assert record.output_tokens <= granted
