"""Money is exact across instances: three gateways, one PostgreSQL, hundreds of requests in flight."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import httpx

from modelgate.clock import month_of
from modelgate.gateway import headers as hdr
from tests.multi.conftest import NOW, Cluster, post_chat, run
from tests.storage.rollup_scan import postgres_rollups_and_scan
from tests.whole_store import whole_store

REQUESTS = 300
IN_FLIGHT = 100
CAP_UC = 12_000  # about two worst-case holds of a 1,000-token request: the cap binds early in every run
OPENING_UC = 60_000
TOP_UP_UC = 10_000


async def _race(cluster: Cluster, secrets: list[str], account_id: int) -> dict[str, Any]:
    samples: list[tuple[int, int]] = []
    done = asyncio.Event()

    async def sample_balance() -> None:
        conn = await asyncpg.connect(cluster.database_url)
        try:
            while not done.is_set():
                row = await conn.fetchrow(
                    "SELECT balance_uc, reserved_uc FROM accounts WHERE id = $1", account_id
                )
                samples.append((row[0], row[1]))
                await asyncio.sleep(0.005)
        finally:
            await conn.close()

    gate = asyncio.Semaphore(IN_FLIGHT)
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=IN_FLIGHT * 2)) as client:

        async def one(i: int) -> httpx.Response:
            async with gate:
                # Round robin over the instances, and on each over the keys: every instance's
                # group-committed batch holds requests of the capped key and of the free ones.
                server = cluster[i % 3]
                return await post_chat(client, server, secrets[(i // 3) % len(secrets)], max_tokens=1000)

        async def top_ups() -> None:
            for i in range(3):  # operators top up on every instance while the race runs
                await asyncio.sleep(0.05)
                server = cluster[i]
                account = await asyncio.wrap_future(
                    asyncio.run_coroutine_threadsafe(server.management.account(account_id), server.loop)
                )
                await asyncio.wrap_future(
                    asyncio.run_coroutine_threadsafe(
                        server.management.add_credits(account, TOP_UP_UC, "race"), server.loop
                    )
                )

        sampler = asyncio.create_task(sample_balance())
        responses, _ = await asyncio.gather(asyncio.gather(*(one(i) for i in range(REQUESTS))), top_ups())
        done.set()
        await sampler
    return {"responses": responses, "samples": samples}


def test_cap_and_shared_balance_races_across_three_instances(make_cluster: Any) -> None:
    with make_cluster(simulator={"latency_ms": 5}) as cluster:
        account = cluster.account("racers", OPENING_UC)
        capped_id, capped = cluster.key(account, "Basic", rpm=100_000, monthly_cap_uc=CAP_UC)
        _, free_a = cluster.key(account, "Pro", rpm=100_000)
        _, free_b = cluster.key(account, "Basic", rpm=100_000)

        outcome = run(_race(cluster, [capped, free_a, free_b], account.id))
        responses: list[httpx.Response] = outcome["responses"]

        statuses = {r.status_code for r in responses}
        assert statuses <= {200, 402}, statuses  # no 5xx, nothing else
        ok = [r for r in responses if r.status_code == 200]
        refusals = {r.json()["error"]["code"] for r in responses if r.status_code == 402}
        assert ok and refusals == {"monthly_cap_reached", "insufficient_balance"}

        month = month_of(NOW)

        def on(index: int, method: str, *args: Any, **kwargs: Any) -> Any:
            """Ask instance ``index``'s own store (each store lives on its instance's loop)."""
            server = cluster[index]
            return server.call(getattr(whole_store(server.services), method)(*args, **kwargs))

        for index in range(3):  # the refusals' records, written after their answers
            cluster[index].call(cluster[index].services.settlements.drain())
        current = on(2, "get_account", account.id)
        every = on(1, "usage_records", month, account_id=account.id, limit=10_000)
        # Refusals (402) are in the usage log at 0 µc; the served requests are the rest.
        assert all(u.charged_uc == 0 for u in every if u.status == "refused_402")
        usage = [u for u in every if u.status != "refused_402"]
        spent, held = on(0, "month_spend", capped_id, month)
        # Overshoot of the cap: exactly zero; nothing left held; every request settled once.
        assert held == 0 and spent <= CAP_UC, (spent, CAP_UC)
        assert current.reserved_uc == 0 and on(1, "pending_reservations") == 0
        assert len(usage) == len(ok) and len({u.request_id for u in usage}) == len(ok)
        # Balance = top-ups - Σ usage, exactly, and it never went negative while racing.
        topups = on(2, "topups_total", account.id)
        assert topups == OPENING_UC + 3 * TOP_UP_UC
        assert current.balance_uc == topups - sum(u.charged_uc for u in usage)
        assert current.balance_uc >= 0
        assert outcome["samples"] and all(b >= r >= 0 for b, r in outcome["samples"])
        # What clients were told they were charged is what the ledger holds.
        assert sum(int(r.headers[hdr.CHARGED]) for r in ok) == sum(u.charged_uc for u in usage)
        assert sum(u.charged_uc for u in usage if u.key_id == capped_id) == spent
        # The usage rollups the three instances kept per ledger batch equal the records.
        assert all(kept == scanned and kept for kept, scanned in run(_rollups(cluster.database_url)))


async def _rollups(url: str) -> list[tuple[list[Any], list[Any]]]:
    conn = await asyncpg.connect(url)
    try:
        return await postgres_rollups_and_scan(conn)
    finally:
        await conn.close()
