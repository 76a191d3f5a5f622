"""Spend windows stay exact across the workers of one instance (``modelgate serve --workers 2``
on the embedded SQLite database): requests on both workers against a key's day cap and its
account's rolling 5 hours never spend past either, and nothing stays held."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import httpx

from modelgate.cli.context import Options, with_management
from modelgate.management import Management
from tests.billing.helpers import PATHS, body_for, headers_for
from tests.hardening.process import run
from tests.polling import wait_until
from tests.workers.harness import WorkersGateway, pinned_clients

REQUESTS = 240
PER_WORKER = 40
DAY_CAP_UC = 20_000
ACCOUNT_5H_UC = 30_000
FORMATS = ("messages", "chat")


def test_windows_hold_across_two_workers(tmp_path: Path) -> None:
    with WorkersGateway(tmp_path, simulator={"latency_ms": 5}, server={"keep_alive_seconds": 60}) as gateway:
        options = Options(gateway.config, gateway.data_dir)

        async def setup(m: Management) -> tuple[int, str, list[str]]:
            account = await m.create_account("windowed", 10_000_000)
            await m.set_account_caps(account, {"5h": ACCOUNT_5H_UC})
            daily = await m.create_key(account, "Basic", rpm=100_000, caps={"day": DAY_CAP_UC})
            other = await m.create_key(account, "Basic", rpm=100_000)
            return account.id, daily.record.id, [daily.secret, other.secret]

        account_id, daily_id, secrets = with_management(options, setup)
        gateway.start()

        async def race() -> list[tuple[int, httpx.Response]]:
            clients = await pinned_clients(gateway, PER_WORKER)

            async def one(i: int) -> tuple[int, httpx.Response]:
                worker, client = clients[i % len(clients)]
                fmt = FORMATS[i % len(FORMATS)]
                body = body_for(fmt, "haiku", "Hello there gateway", 1000)
                return worker, await client.post(
                    PATHS[fmt], json=body, headers=headers_for(fmt, secrets[i % 2])
                )

            try:
                return list(await asyncio.gather(*(one(i) for i in range(REQUESTS))))
            finally:
                for _, client in clients:
                    await client.aclose()

        responses = run(race())
        assert {r.status_code for _, r in responses} <= {200, 402}
        codes = {
            r.json()["error"].get("code") or r.json()["error"]["details"]["error_code"]
            for _, r in responses
            if r.status_code == 402
        }
        assert codes and codes <= {"cap_day_reached", "cap_5h_reached"}, codes
        assert {w for w, r in responses if r.status_code == 200} == {0, 1}

        def settled() -> tuple[int, ...] | None:
            db = sqlite3.connect(gateway.data_dir / "modelgate.db")
            try:
                records = db.execute(
                    "SELECT COUNT(*) FROM usage_records WHERE account_id = ?", (account_id,)
                ).fetchone()[0]
                if records < len(responses):
                    return None
                day = db.execute(
                    "SELECT SUM(spent_uc), SUM(reserved_uc) FROM spend_windows WHERE subject = ? AND win = 'day'",
                    (f"k:{daily_id}",),
                ).fetchone()
                hours = db.execute(
                    "SELECT SUM(spent_uc), SUM(reserved_uc) FROM spend_windows WHERE subject = ? AND win = '5h'",
                    (f"a:{account_id}",),
                ).fetchone()
                charged = db.execute(
                    "SELECT SUM(charged_uc) FROM usage_records WHERE account_id = ?", (account_id,)
                ).fetchone()[0]
                pending = db.execute("SELECT COUNT(*) FROM reservations").fetchone()[0]
                return (*day, *hours, charged, pending)
            finally:
                db.close()

        figures = wait_until(settled, "every record")
        assert figures is not None
        day_spent, day_held, hours_spent, hours_held, charged, pending = figures
        assert (day_held, hours_held, pending) == (0, 0, 0)
        assert day_spent <= DAY_CAP_UC and hours_spent <= ACCOUNT_5H_UC
        assert hours_spent == charged  # every charge of the account counted in its 5 hours
