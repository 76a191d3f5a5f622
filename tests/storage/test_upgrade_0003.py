"""A database at migration 0002 upgrades to 0003 with its admin tokens still valid (no expiry, not
revoked, shown without a prefix) and its usage records found by the new usage log queries."""

from __future__ import annotations

import sqlite3
from importlib import resources
from pathlib import Path

import asyncpg

from modelgate.storage.base import Store
from modelgate.storage.reports import UsageFilter
from tests.storage.engines import fresh_database
from tests.whole_store import PostgresStore, SqliteStore

OLD = ("0001_initial", "0002_lean_ledger")
ROWS = [
    "INSERT INTO accounts (name, balance_uc, reserved_uc, created_at) VALUES ('a', 10000, 0, 0)",
    "INSERT INTO admin_tokens (id, digest, account_id, created_at) VALUES ('tok_old', {digest}, 1, 5)",
    "INSERT INTO usage_records (request_id, key_id, account_id, endpoint, model, month, status, "
    "created_at, finished_at) VALUES ('req_old', 'key_1', 1, 'chat', 'aria-haiku-4.5', '2026-05', 'ok', "
    "1780000000, 1780000001)",
]


def _sql(engine: str, name: str) -> str:
    return resources.files("modelgate").joinpath(f"storage/migrations/{engine}/{name}.sql").read_text("utf-8")


async def _check(store: Store) -> None:
    await store.migrate()
    token = await store.find_admin_token(b"\x01\x02")
    assert token is not None and token.id == "tok_old" and token.usable_at(10**10)
    assert (token.prefix, token.name, token.expires_at, token.last_used_at) == ("", "", None, None)
    page = await store.usage_page(UsageFilter(account_id=1), limit=10)
    assert [r.request_id for r in page.records] == ["req_old"]
    assert await store.touch_admin_token("tok_old", 100, 60)
    await store.close()


async def test_sqlite_database_at_0002_upgrades(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    old = sqlite3.connect(path, isolation_level=None)
    old.execute("CREATE TABLE schema_migrations (version TEXT PRIMARY KEY, applied_at REAL)")
    for name in OLD:
        old.executescript(_sql("sqlite", name))
        old.execute("INSERT INTO schema_migrations VALUES (?, 0)", (name,))
    for statement in ROWS:
        old.execute(statement.format(digest="x'0102'"))
    old.close()
    await _check(SqliteStore(path))


async def test_postgresql_database_at_0002_upgrades() -> None:
    async with fresh_database() as url:
        old = await asyncpg.connect(url)
        try:
            await old.execute(
                "CREATE TABLE schema_migrations (version TEXT PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)"
            )
            for name in OLD:
                await old.execute(_sql("postgresql", name))
                await old.execute("INSERT INTO schema_migrations VALUES ($1, 0)", name)
            for statement in ROWS:
                await old.execute(statement.format(digest="'\\x0102'::bytea"))
        finally:
            await old.close()
        await _check(PostgresStore(url))
