"""Per-key requests per minute across the workers of one instance (no Redis): one exact window.

The unit tests connect ticket takers the way workers do (a socket pair each to one
``TicketService``);
the gateway tests drive ``modelgate serve --workers 2`` with a shared clock moved by the test."""

from __future__ import annotations

import asyncio
import math
import random
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx

from modelgate.cli.context import Options, with_management
from modelgate.limits.key_limits import KeyLimits
from modelgate.limits.shared_tickets import SharedTickets, TicketService
from modelgate.limits.tickets import BucketStore, Refused, Ticket
from modelgate.management import Management
from tests.billing.helpers import body_for, headers_for
from tests.hardening.process import run
from tests.polling import POLL_TIMEOUT
from tests.workers.harness import WorkersGateway, pinned_clients

NOW = 1_790_000_000.123456


@asynccontextmanager
async def workers_of(service: TicketService, count: int) -> AsyncIterator[list[SharedTickets]]:
    limiters = []
    for _ in range(count):
        ours, theirs = socket.socketpair()
        await service.serve(ours)
        limiter = SharedTickets(theirs)
        await limiter.connect()
        limiters.append(limiter)
    try:
        yield limiters
    finally:
        for limiter in limiters:
            await limiter.aclose()


async def test_shared_window_decides_exactly_like_one_process() -> None:
    """Random traffic (bursts, ties, gaps, a lowered limit, refunds) from two workers: the same
    decisions, remaining counts and retry-after as one in-process set of buckets."""
    local = BucketStore()
    rng = random.Random(5)
    now = NOW
    async with workers_of(TicketService(), 2) as limiters:
        for step in range(2_000):
            now += rng.choice([0.0, 0.0, 0.001, 0.25, 1.7, 13.0, 59.999, 60.0])
            key = rng.choice(["key_a", "key_b", "key_c"])
            limit = 4 if key == "key_a" and step > 1_000 else rng.choice([5, 5, 8])
            claims = KeyLimits(rpm=limit).claims(f"k:{key}", 0, 0)
            expected = local.admit(claims, now, f"e{step}")
            got = await limiters[step % 2].take(claims, now, f"g{step}")
            if isinstance(expected, Refused):
                assert isinstance(got, Refused)
                assert got.wait == expected.wait and got.retry_after == expected.retry_after
                continue
            assert isinstance(got, Ticket) and got.standing == expected.standing
            if rng.random() < 0.1:  # a later step refused it: the unit goes back
                local.refund(expected)
                limiters[(step + 1) % 2].refund(got)
                await asyncio.sleep(0)  # the refund's line leaves before the next request
        assert all(limiter.connected for limiter in limiters)


async def test_two_workers_admit_exactly_the_limit_together() -> None:
    claims = KeyLimits(rpm=120).claims("k:key", 0, 0)
    async with workers_of(TicketService(), 2) as limiters:
        taken = await asyncio.gather(*(limiters[i % 2].take(claims, NOW, f"t{i}") for i in range(300)))
        assert sum(isinstance(t, Ticket) for t in taken) == 120
        assert all(t.retry_after == 60 for t in taken if isinstance(t, Refused))
        later = await asyncio.gather(*(limiters[i % 2].take(claims, NOW + 60, f"u{i}") for i in range(300)))
        assert sum(isinstance(t, Ticket) for t in later) == 120


async def test_a_worker_whose_link_is_gone_limits_on_its_own() -> None:
    claims = KeyLimits(rpm=2).claims("k:key", 0, 0)
    service = TicketService()
    async with workers_of(service, 1) as (limiter,):
        assert isinstance(await limiter.take(claims, NOW, "a"), Ticket)
        await limiter.aclose()  # what a worker sees when its parent dies
        limiter.lost()
        taken = [await limiter.take(claims, NOW + 1, f"b{i}") for i in range(3)]
        assert [isinstance(t, Ticket) for t in taken] == [True, True, False]


async def wait_for_key(client: httpx.AsyncClient, headers: dict[str, str]) -> None:
    deadline = time.monotonic() + POLL_TIMEOUT
    while (answer := await client.get("/v1/key", headers=headers)).status_code != 200:
        assert answer.status_code == 401 and time.monotonic() < deadline, answer.text
        await asyncio.sleep(0.05)


def test_120_per_minute_offered_1200_per_minute_across_two_workers(tmp_path: Path) -> None:
    """Two simulated minutes at 10x the limit through both workers: no rolling 60 s window
    holds more than 120 admissions, both workers admitted and refused, and every retry-after is
    exact."""
    limit, tick, per_worker, ticks = 120, 0.5, 5, 240
    with WorkersGateway(tmp_path, clocked=True, server={"keep_alive_seconds": 120}) as gateway:
        gateway.seed(groups=("Basic",))
        gateway.start()
        assert gateway.clock is not None
        clock = gateway.clock

        async def limited(m: Management) -> str:
            return (await m.create_key(await m.account("load"), "Basic", rpm=limit)).secret

        secret = with_management(Options(gateway.config, gateway.data_dir), limited)
        url, body, headers = (
            "/v1/messages",
            body_for("messages", "haiku", "hi", 5),
            headers_for("messages", secret),
        )
        start = clock.time()
        admitted: list[tuple[float, int]] = []
        refused: list[tuple[float, int, int]] = []
        statuses: set[int] = set()

        async def drive() -> None:
            clients = await pinned_clients(gateway, per_worker)
            try:
                # The key was made in the database: each worker learns it from its own key view's
                # refresh. Wait until every pinned connection's worker accepts it (GET /v1/key
                # takes no rate-limit unit), so the first tick meets no 401 however slow that is.
                for _, client in clients:
                    await wait_for_key(client, headers)
                for k in range(ticks):
                    now = start + k * tick
                    clock.set(now)
                    batch = await asyncio.gather(
                        *(c.post(url, json=body, headers=headers) for _, c in clients)
                    )
                    for (worker, _), response in zip(clients, batch, strict=True):
                        statuses.add(response.status_code)
                        if response.status_code == 200:
                            admitted.append((now, worker))
                        elif response.status_code == 429:
                            refused.append((now, worker, int(response.headers["retry-after"])))
            finally:
                for _, client in clients:
                    await client.aclose()

        run(drive())
        assert statuses <= {200, 429}, statuses
        times = sorted(t for t, _ in admitted)
        assert len(times) == 2 * limit  # the limit, used in full in each of the two minutes
        for t in times:
            assert sum(1 for a in times if t - 60 < a <= t) <= limit
        for t, _, retry_after in refused:
            window = [a for a in times if t - 60 < a <= t]
            assert len(window) == limit
            assert retry_after == max(1, math.ceil(min(window) + 60 - t))
        assert {w for _, w in admitted} == {0, 1} and {w for _, w, _ in refused} == {0, 1}
