"""A key's requests in flight and tokens per minute across the workers of one instance (no Redis):
the supervisor holds the one set of buckets. Unit tests connect ticket takers the way workers do
(a socket pair each to one ``TicketService``); the gateway test drives ``modelgate serve --workers
2`` in front of a fake upstream that measures how many requests it answers at once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from modelgate.cli.context import Options, with_management
from modelgate.limits.key_limits import KeyLimits, Resource
from modelgate.limits.shared_tickets import TicketService
from modelgate.limits.tickets import Refused, Ticket
from modelgate.management import Management
from tests.billing.helpers import body_for, headers_for
from tests.fakes.upstream import FakeUpstream, Fault
from tests.loop_thread import LoopThread
from tests.workers.harness import WorkersGateway, pinned_clients
from tests.workers.test_rate_limits import workers_of

NOW = 1_790_000_000.5
LIMITS = KeyLimits(tpm=1000, max_concurrency=4)


async def test_two_workers_share_one_set_of_buckets() -> None:
    async with workers_of(TicketService(), 2) as workers:
        taken = await asyncio.gather(
            *(workers[i % 2].take(LIMITS.claims("k:key", 100, 100), NOW, f"t{i}") for i in range(20))
        )
        # (worker that took it, ticket): a ticket ends through the worker that took it.
        tickets = [(i % 2, t) for i, t in enumerate(taken) if isinstance(t, Ticket)]
        assert len(tickets) == 4  # the concurrency limit, for both workers together
        refused = [t for t in taken if not isinstance(t, Ticket)]
        assert all(isinstance(t, Refused) and t.resource is Resource.CONCURRENCY for t in refused)
        # Settled to 50 tokens each: 200 of 1000 counted; the slots are free again.
        for worker, ticket in tickets:
            workers[worker].settle(ticket, 50)
            workers[worker].settle(ticket, 50)  # a second end changes nothing
        more = [
            await workers[i % 2].take(LIMITS.claims("k:key", 200, 200), NOW + 1, f"u{i}") for i in range(4)
        ]
        assert [isinstance(t, Ticket) and t.tokens for t in more] == [200, 200, 200, 200]
        # 1000 tokens counted in this minute now: the next claim waits until the first ones leave.
        full = await workers[0].take(LIMITS.claims("k:key", 1, 1), NOW + 2, "v")
        assert isinstance(full, Refused) and full.resource is Resource.TPM
        for i, taken_now in enumerate(more):
            assert isinstance(taken_now, Ticket)
            workers[i % 2].refund(taken_now)
        again = await workers[1].take(LIMITS.claims("k:key", 900, 1), NOW + 2, "w")
        assert isinstance(again, Ticket) and again.tokens == 800  # 200 settled before stay counted


async def test_a_dead_workers_tickets_are_released() -> None:
    service = TicketService()
    async with workers_of(service, 2) as (first, second):
        held = [await first.take(LIMITS.claims("k:key", 10, 10), NOW, f"t{i}") for i in range(4)]
        assert all(isinstance(t, Ticket) for t in held)
        assert isinstance(await second.take(LIMITS.claims("k:key", 10, 10), NOW, "x"), Refused)
        await first.aclose()  # the worker died: its link closes
        for _ in range(100):
            if service.buckets.in_flight("k:key") == 0:
                break
            await asyncio.sleep(0.01)
        assert service.buckets.in_flight("k:key") == 0
        assert isinstance(await second.take(LIMITS.claims("k:key", 10, 10), NOW, "y"), Ticket)


def test_in_flight_across_two_workers_never_passes_max_concurrency(tmp_path: Path) -> None:
    loop = LoopThread("workers-limits-upstream")
    try:
        fake = loop.start(FakeUpstream(default=Fault.slow_first_byte(0.2)))
        extra = (
            '[[providers]]\nname = "simulator"\nkind = "simulator"\n\n'
            f'[[providers]]\nname = "fake"\nkind = "openai-compatible"\nbase_url = "{fake.base_url}/v1"\n\n'
            '[[deployments."aria-haiku-4.5"]]\nprovider = "fake"\nupstream_model = "fake-haiku"\n'
        )
        with WorkersGateway(tmp_path, extra, server={"keep_alive_seconds": 120}) as gateway:
            gateway.seed(groups=("Basic",))

            async def limited(m: Management) -> str:
                key = await m.create_key(await m.account("load"), "Pro", rpm=1_000_000, max_concurrency=5)
                return key.secret

            secret = with_management(Options(gateway.config, gateway.data_dir), limited)
            gateway.start()
            clients, answers = asyncio.run(_burst(gateway, secret))
            statuses = [r.status_code for r in answers]
            assert set(statuses) == {200, 429}, statuses
            assert all(
                r.headers["x-modelgate-limit"] == "concurrency" for r in answers if r.status_code == 429
            )
            assert 1 <= fake.max_in_flight <= 5
            assert {w for w, r in zip(clients, answers, strict=True) if r.status_code == 429} == {0, 1}
            # All slots came back: five at once are served.
            again = asyncio.run(_at_once(gateway, secret, 5))
            assert [r.status_code for r in again] == [200] * 5
            assert fake.max_in_flight <= 5
    finally:
        loop.close()


async def _burst(gateway: WorkersGateway, secret: str) -> tuple[list[int], list[httpx.Response]]:
    """40 requests on each worker at once: messages and chat, half streamed."""
    clients = await pinned_clients(gateway, 40)
    await asyncio.sleep(0.5)  # every worker's key view has the new key
    try:
        jobs = []
        for i, (_, client) in enumerate(clients):
            fmt = ("messages", "chat")[i % 2]
            body = body_for(fmt, "aria-haiku-4.5", "hello", 10, stream=i % 4 >= 2)
            path = "/v1/messages" if fmt == "messages" else "/v1/chat/completions"
            jobs.append(client.post(path, json=body, headers=headers_for(fmt, secret)))
        answers = list(await asyncio.gather(*jobs))
    finally:
        for _, client in clients:
            await client.aclose()
    return [w for w, _ in clients], answers


async def _at_once(gateway: WorkersGateway, secret: str, n: int) -> list[httpx.Response]:
    body = body_for("chat", "aria-haiku-4.5", "again", 5)
    async with httpx.AsyncClient(base_url=gateway.base_url, timeout=30) as client:
        return list(
            await asyncio.gather(
                *(
                    client.post("/v1/chat/completions", json=body, headers=headers_for("chat", secret))
                    for _ in range(n)
                )
            )
        )
