"""A database created before migration 0002 keeps its money and its pending holds when upgraded."""

from __future__ import annotations

import sqlite3
import time
from importlib import resources
from pathlib import Path

from modelgate.storage.base import UsageRecord
from tests.whole_store import SqliteStore


async def test_upgrade_keeps_pending_holds_and_month_spend(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    old = sqlite3.connect(path, isolation_level=None)
    first = resources.files("modelgate").joinpath("storage/migrations/sqlite/0001_initial.sql")
    old.executescript(first.read_text("utf-8"))
    old.executescript(
        "CREATE TABLE schema_migrations (version TEXT PRIMARY KEY, applied_at REAL);"
        "INSERT INTO schema_migrations VALUES ('0001_initial', 0);"
        "INSERT INTO accounts (name, balance_uc, reserved_uc, created_at) VALUES ('a', 10000, 700, 0);"
        "INSERT INTO api_keys (id, account_id, grp, rpm, digest, prefix, last4, created_at, version) "
        "VALUES ('key_1', 1, 'Pro', 60, x'01', 'sk-cs4-ab', 'wxyz', 0, 1);"
        "INSERT INTO key_month_spend VALUES ('key_1', '2026-11', 250, 700);"
        "INSERT INTO reservations VALUES ('req_pending', 'key_1', 1, '2026-11', 700, 'pending', 0, 1e12);"
        "INSERT INTO reservations VALUES ('req_done', 'key_1', 1, '2026-11', 900, 'settled', 0, 1e12);"
    )
    old.close()
    store = SqliteStore(path)
    await store.migrate()
    assert await store.pending_reservations() == 1
    assert await store.month_spend("key_1", "2026-11") == (250, 700)
    now = time.time()
    usage = UsageRecord("req_pending", "key_1", 1, "chat", "m", "2026-11", "ok", now, now, 1, 1, 0, 0, 500)
    settled = await store.settle(usage)
    assert settled.applied and settled.charged_uc == 500 and settled.balance_uc == 9_500
    assert await store.month_spend("key_1", "2026-11") == (750, 0)
    assert await store.pending_reservations() == 0
    await store.close()
