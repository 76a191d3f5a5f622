"""``kill -9`` of a gateway on PostgreSQL under load, round after round: money still adds up, and
the usage rollups (kept by the ledger's one statement per batch) still equal the records: a batch
cut off mid-statement leaves neither records without their sums nor sums without their records."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from tests.hardening.process import GatewayProcess, assert_ledger_invariant, run
from tests.hardening.test_shutdown import whole_one
from tests.storage.engines import create_database, drop_database
from tests.storage.rollup_scan import postgres_rollups_and_scan

ROUNDS = 6


async def ledger(conn: Any, account_id: int) -> dict[str, int]:
    balance, reserved = await conn.fetchrow(
        "SELECT balance_uc, reserved_uc FROM accounts WHERE id = $1", account_id
    )
    topups = await conn.fetchval(
        "SELECT COALESCE(SUM(amount_uc), 0) FROM topups WHERE account_id = $1", account_id
    )
    charged, records = await conn.fetchrow(
        "SELECT COALESCE(SUM(charged_uc), 0), COUNT(*) FROM usage_records WHERE account_id = $1", account_id
    )
    held = await conn.fetchval(
        "SELECT COALESCE(SUM(amount_uc), 0) FROM reservations WHERE account_id = $1", account_id
    )
    return {
        "balance": balance,
        "reserved": reserved,
        "topups": int(topups),
        "charged": int(charged),
        "records": records,
        "held": int(held),
    }


async def check(url: str, account_id: int) -> int:
    conn = await asyncpg.connect(url)
    try:
        found = await ledger(conn, account_id)
        assert_ledger_invariant(found)
        for kept, scanned in await postgres_rollups_and_scan(conn):
            assert kept == scanned
        return found["records"]
    finally:
        await conn.close()


def test_kill_9_under_load_on_postgresql_keeps_the_ledger_and_the_rollups(tmp_path: Path) -> None:
    url = run(create_database("mgkill"))
    try:
        gateway = GatewayProcess(
            tmp_path,
            top=f'database_url = "{url}"',
            simulator={"tokens_per_second": 200.0, "reply_words": 60},
        )
        with gateway:
            seeded = gateway.seed()
            for _ in range(ROUNDS):
                gateway.start()

                async def load() -> None:
                    limits = httpx.Limits(max_connections=100)
                    async with httpx.AsyncClient(
                        base_url=gateway.base_url, limits=limits, timeout=30
                    ) as client:
                        tasks = [
                            asyncio.create_task(
                                whole_one(
                                    client, ("messages", "chat", "responses")[i % 3], seeded.keys, i % 40
                                )
                            )
                            for i in range(60)
                        ]
                        # Killed once a few have been answered (settled), with the rest in flight.
                        pending: set[asyncio.Task[Any]] = set(tasks)
                        while len(pending) > len(tasks) - 8:
                            _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                        gateway.kill()
                        await asyncio.gather(*tasks, return_exceptions=True)

                run(load())
                records = run(check(url, seeded.account_id))
            assert records > 0  # requests were settled before the kills, so sums were written
    finally:
        run(drop_database(url))
