"""Money stays exact across the workers of one instance on the embedded SQLite database: a cap
race and a shared-balance race through ``modelgate serve --workers 2``, operators topping up from
a third process meanwhile, and ``kill -9`` of one worker under load."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from modelgate.cli.context import Options, with_management
from modelgate.clock import month_of
from modelgate.gateway import headers as hdr
from modelgate.management import Management
from tests.billing.helpers import PATHS, body_for, headers_for
from tests.hardening.process import assert_ledger_invariant, run
from tests.hardening.test_shutdown import all_admitted
from tests.polling import wait_until
from tests.storage.rollup_scan import sqlite_rollups_and_scan
from tests.workers.harness import WorkersGateway, pinned_clients

REQUESTS = 300
PER_WORKER = 50  # 100 requests in flight, half on each worker
CAP_UC = 20_000  # about three worst-case holds of a 1,000-token request
OPENING_UC = 60_000
TOP_UP_UC = 10_000
FORMATS = ("messages", "chat", "messages")


def sample_balance(db_path: Path, account_id: int, stop: threading.Event, out: list[tuple[int, int]]) -> None:
    """(balance, reserved) of the account, read every few milliseconds by a separate reader."""
    db = sqlite3.connect(db_path)
    try:
        while not stop.is_set():
            row = db.execute(
                "SELECT balance_uc, reserved_uc FROM accounts WHERE id = ?", (account_id,)
            ).fetchone()
            out.append((row[0], row[1]))
            time.sleep(0.005)
    finally:
        db.close()


def test_cap_and_shared_balance_races_across_two_workers(tmp_path: Path) -> None:
    with WorkersGateway(tmp_path, simulator={"latency_ms": 5}, server={"keep_alive_seconds": 60}) as gateway:
        options = Options(gateway.config, gateway.data_dir)

        async def accounts(m: Management) -> tuple[int, str, str, list[str]]:
            account = await m.create_account("racers", OPENING_UC)
            capped = await m.create_key(account, "Basic", rpm=100_000, monthly_cap_uc=CAP_UC)
            free = [(await m.create_key(account, g, rpm=100_000)).secret for g in ("Pro", "Basic")]
            return account.id, capped.record.id, capped.secret, free

        account_id, capped_id, capped, free = with_management(options, accounts)
        secrets = [capped, *free]
        gateway.start()

        async def top_up(m: Management) -> None:
            await m.add_credits(await m.account(account_id), TOP_UP_UC, "race")

        async def race() -> list[tuple[int, httpx.Response]]:
            clients = await pinned_clients(gateway, PER_WORKER)

            async def one(i: int) -> tuple[int, httpx.Response]:
                worker, client = clients[i % len(clients)]
                fmt = FORMATS[i % len(FORMATS)]
                body = body_for(fmt, "haiku", "Hello there gateway", 1000)
                return worker, await client.post(
                    PATHS[fmt], json=body, headers=headers_for(fmt, secrets[i % 3])
                )

            async def top_ups() -> None:
                for _ in range(3):  # operators top up from another process while the race runs
                    await asyncio.sleep(0.05)
                    await asyncio.to_thread(with_management, options, top_up)

            try:
                waves = [
                    asyncio.gather(*(one(i) for i in range(w, REQUESTS, len(clients))))
                    for w in range(len(clients))
                ]
                results, _ = await asyncio.gather(asyncio.gather(*waves), top_ups())
            finally:
                for _, client in clients:
                    await client.aclose()
            return [r for wave in results for r in wave]

        stop, samples = threading.Event(), list[tuple[int, int]]()
        sampler = threading.Thread(
            target=sample_balance, args=(gateway.data_dir / "modelgate.db", account_id, stop, samples)
        )
        sampler.start()
        try:
            responses = run(race())
        finally:
            stop.set()
            sampler.join()

        statuses = {r.status_code for _, r in responses}
        assert statuses <= {200, 402}, statuses
        ok = [(w, r) for w, r in responses if r.status_code == 200]
        refusals = {
            r.json()["error"].get("code") or r.json()["error"]["details"]["error_code"]
            for _, r in responses
            if r.status_code == 402
        }
        assert refusals == {"monthly_cap_reached", "insufficient_balance"}, refusals
        assert {w for w, _ in ok} == {0, 1}  # both workers charged the one balance

        # One record per request: the refusals' (0 µc) are written just after their answers.
        def settled() -> dict[str, int]:
            found = gateway.ledger(account_id)
            return found if found["records"] == len(responses) else {}

        ledger = wait_until(settled, "a usage record for every request")
        assert_ledger_invariant(ledger)
        assert ledger["pending"] == 0 and ledger["reserved"] == 0
        assert ledger["topups"] == OPENING_UC + 3 * TOP_UP_UC
        assert ledger["balance"] >= 0 and samples and all(b >= r >= 0 for b, r in samples)
        with gateway.db() as db:
            spent, held = db.execute(
                "SELECT spent_uc, reserved_uc FROM key_month_spend WHERE key_id = ? AND month = ?",
                (capped_id, month_of(time.time())),
            ).fetchone()
            capped_charged = db.execute(
                "SELECT COALESCE(SUM(charged_uc), 0) FROM usage_records WHERE key_id = ?", (capped_id,)
            ).fetchone()[0]
            ids = db.execute("SELECT COUNT(DISTINCT request_id) FROM usage_records").fetchone()[0]
        # Overshoot of the cap: exactly zero; nothing left held; one record per request.
        assert held == 0 and spent <= CAP_UC and capped_charged == spent, (spent, CAP_UC)
        assert ids == len(responses)
        # What clients were told they were charged is what the ledger holds.
        assert sum(int(r.headers[hdr.CHARGED]) for _, r in ok) == ledger["charged"]


async def all_held(
    gateway: WorkersGateway, account_id: int, count: int, finishing: list[asyncio.Task[Any]]
) -> None:
    """Wait until each of ``count`` requests holds its money in the ledger (or was answered): an
    admitted request reserves a moment later, and the kill must come while every one is held."""
    deadline = time.monotonic() + 60
    while True:
        answered = sum(task.done() for task in finishing)
        held = gateway.ledger(account_id)["pending"]
        if held + answered >= count:
            return
        assert time.monotonic() < deadline, f"{held} held and {answered} answered of {count}"
        await asyncio.sleep(0.02)


def test_kill_9_of_one_worker_under_load_restarts_it_and_keeps_the_ledger(tmp_path: Path) -> None:
    # 40 tokens at 20 a second: each request is still generating when the worker is killed, however
    # long the machine takes to get all 30 admitted.
    simulator = {"tokens_per_second": 20.0, "reply_words": 60}
    with WorkersGateway(tmp_path, simulator=simulator, server={"keep_alive_seconds": 60}) as gateway:
        seeded = gateway.seed()
        operator = gateway.operator_headers()
        gateway.start()
        pids = gateway.wait_for_workers()

        async def load(kill: int | None) -> list[Any]:
            clients = await pinned_clients(gateway, 15)

            async def one(i: int) -> Any:
                _, client = clients[i % len(clients)]
                fmt = ("messages", "chat", "responses")[i % 3]
                model = "haiku" if fmt == "messages" else "nova-5.5"
                key = seeded.keys["Basic" if fmt == "messages" else "Nova"]
                return await client.post(
                    PATHS[fmt], json=body_for(fmt, model, "a story", 40), headers=headers_for(fmt, key)
                )

            try:
                tasks = [asyncio.create_task(one(i)) for i in range(len(clients))]
                if kill is not None:
                    await all_admitted(gateway, operator, len(tasks), tasks)  # every request is in flight
                    await all_held(gateway, seeded.account_id, len(tasks), tasks)  # and holds its money
                    gateway.kill_worker(kill)
                return list(await asyncio.gather(*tasks, return_exceptions=True))
            finally:
                for _, client in clients:
                    await client.aclose()

        answers = run(load(kill=pids[0]))
        survivors = [a for a in answers if isinstance(a, httpx.Response)]
        # The other worker's 15 requests finished; the killed worker's clients lost theirs.
        outcomes = [a.status_code if isinstance(a, httpx.Response) else type(a).__name__ for a in answers]
        assert sum(1 for a in survivors if a.status_code == 200) >= 15, outcomes
        assert_ledger_invariant(gateway.ledger(seeded.account_id))
        # The usage rollups (kept per group commit by both workers) equal the records.
        with contextlib.closing(gateway.db()) as db:
            for kept, scanned in sqlite_rollups_and_scan(db):
                assert kept == scanned and kept

        # The parent restarted worker 0 (a new process); the instance serves on both again.
        deadline = time.monotonic() + 30
        while (seen := gateway.wait_for_workers()).get(0) == pids[0]:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert seen[1] == pids[1] and seen[0] != pids[0]
        answers = run(load(kill=None))
        assert all(isinstance(a, httpx.Response) and a.status_code == 200 for a in answers)
        ledger = gateway.ledger(seeded.account_id)
        assert_ledger_invariant(ledger)
        # Only the killed worker's requests stay held (until the sweeper's TTL).
        assert 0 < ledger["pending"] <= 15
        assert "worker 0" in gateway.log.read_text() and "restarting it" in gateway.log.read_text()
