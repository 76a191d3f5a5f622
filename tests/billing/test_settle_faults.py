"""A delivered answer is charged exactly once, whatever the database does when it settles.

A real gateway serves streamed and whole answers (the simulator generates them slowly enough that
the fault lands while they are in flight); while they are at the upstream, the database stops
taking writes:

- PostgreSQL: every session of the gateway's database is ended and the database refuses new
  ones (``ALLOW_CONNECTIONS false``, as during a restart), then accepts them again;
- SQLite: the database is full (``max_page_count`` at its current size: SQLite answers
  "database or disk is full", as on a full disk), then has room again.

Every answer is delivered whole (200), the settles the database did not take wait in the settle
journal (``/health`` and the metric show them), and once the database is back each lands: one
``ok`` usage record per delivered answer, charged, no hold left, the ledger exact.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import httpx
import orjson

from modelgate.clock import month_of
from modelgate.storage.sqlite_database import SqliteDatabase
from tests.billing.helpers import PATHS, body_for, headers_for
from tests.gateway_server import GatewayServer, running_gateway
from tests.polling import wait_until
from tests.storage.engines import create_database, database_url, drop_database
from tests.whole_store import whole_store

#: About two seconds per answer: the fault lands while every request is at the upstream.
SIMULATOR = {"tokens_per_second": 20, "reply_words": 40}
REQUESTS = 24


async def _one(client: httpx.AsyncClient, secret: str, n: int) -> tuple[int, str, bool]:
    """(status, request id, whether the answer came whole) of one request (streamed every other)."""
    stream = n % 2 == 0
    body = body_for("messages", "aria-haiku-4.5", f"tell me about rivers {n}", 64, stream=stream)
    headers = headers_for("messages", secret)
    if not stream:
        response = await client.post(PATHS["messages"], json=body, headers=headers)
        whole = response.status_code == 200 and response.json()["stop_reason"] == "end_turn"
        return response.status_code, response.headers.get("request-id", ""), whole
    async with client.stream("POST", PATHS["messages"], json=body, headers=headers) as response:
        raw = b"".join([chunk async for chunk in response.aiter_bytes()])
    events = [orjson.loads(line[5:]) for line in raw.split(b"\n") if line.startswith(b"data:")]
    whole = bool(events) and events[-1].get("type") == "message_stop"
    return response.status_code, response.headers.get("request-id", ""), whole


Step = Callable[[], Awaitable[None]]


def _serve_through_fault(gateway: GatewayServer, cut: Step, restore: Step) -> list[tuple[int, str, bool]]:
    """Send ``REQUESTS`` requests; once all hold a reservation, ``cut`` the database; when all are
    answered, check ``/health`` shows settles waiting, then ``restore`` it."""
    issued = gateway.key(gateway.account("acme", credits=1000), "Pro", rpm=100_000)
    store = whole_store(gateway.services)

    async def run() -> list[tuple[int, str, bool]]:
        async with httpx.AsyncClient(base_url=gateway.base_url, timeout=60) as client:
            sent = [asyncio.ensure_future(_one(client, issued.secret, n)) for n in range(REQUESTS)]
            while gateway.call(store.pending_reservations()) < REQUESTS:
                await asyncio.sleep(0.01)
            await cut()
            answers = await asyncio.gather(*sent)
            # Every answer delivered whole, while its settle could not be written.
            assert [(status, whole) for status, _, whole in answers] == [(200, True)] * REQUESTS
            # /health's public view says so (no token can be checked without the database).
            health = (await client.get("/health")).json()
            assert health["components"]["ledger"] == "degraded"
            assert gateway.services.ledger.journal.waiting > 0
            await restore()
            return answers

    return asyncio.run(run())


@contextmanager
def _postgres_gateway(tmp_path: Path) -> Iterator[tuple[GatewayServer, str]]:
    database_url()  # fail (CI) or skip (locally) with a clear message when PostgreSQL is absent
    url = asyncio.run(create_database("settlefault"))
    try:
        with running_gateway(tmp_path / "data", database_url=url, simulator=SIMULATOR) as gateway:
            yield gateway, url
    finally:
        asyncio.run(drop_database(url))


async def _admin(statement: str, *args: object) -> None:
    admin = await asyncpg.connect(database_url())
    try:
        await admin.execute(statement, *args)
    finally:
        await admin.close()


def test_answers_delivered_while_postgres_refuses_connections_are_charged_once(tmp_path: Path) -> None:
    with _postgres_gateway(tmp_path) as (gateway, url):
        name = urlsplit(url).path.lstrip("/")

        async def cut() -> None:
            await _admin(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
            await _admin("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", name)

        async def restore() -> None:
            await _admin(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')

        answers = _serve_through_fault(gateway, cut, restore)
        _check(gateway, answers)


def test_answers_delivered_while_sqlite_is_full_are_charged_once(tmp_path: Path) -> None:
    with running_gateway(tmp_path / "data", simulator=SIMULATOR) as gateway:
        database = gateway.services.database
        assert isinstance(database, SqliteDatabase)

        def set_room(pages: int | None) -> None:
            # The serving loop's connection is the one the ledger writes on.
            async def on_loop() -> None:
                db: sqlite3.Connection = database.db()
                count = db.execute("PRAGMA page_count").fetchone()[0]
                db.execute(f"PRAGMA max_page_count = {count if pages is None else pages}")

            gateway.call(on_loop())

        async def cut() -> None:
            set_room(None)

        async def restore() -> None:
            set_room(2**30)

        answers = _serve_through_fault(gateway, cut, restore)
        _check(gateway, answers)


def _check(gateway: GatewayServer, answers: list[tuple[int, str, bool]]) -> None:
    assert [(status, whole) for status, _, whole in answers] == [(200, True)] * REQUESTS
    journal = gateway.services.ledger.journal
    assert journal.kept_total > 0, "the fault met no settle"
    wait_until(lambda: journal.waiting == 0, "every kept settle landing", timeout=30)
    store = whole_store(gateway.services)
    ids = {request_id for _, request_id, _ in answers}
    month = month_of(gateway.services.clock.time())
    records = [r for r in gateway.call(store.usage_records(month, limit=1000)) if r.request_id in ids]
    assert sorted(r.request_id for r in records) == sorted(ids)  # one record per answer
    assert {r.status for r in records} == {"ok"} and all(r.charged_uc > 0 for r in records)
    assert gateway.call(store.pending_reservations()) == 0
    account = gateway.call(store.get_account(records[0].account_id))
    assert account is not None and account.reserved_uc == 0
    assert account.balance_uc == 1000 * 1_000_000 - sum(r.charged_uc for r in records)
