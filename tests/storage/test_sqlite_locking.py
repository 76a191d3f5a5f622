"""SQLite runs operations inline on the event loop, and on its worker thread only while another
writer (the CLI, say) holds the database: the loop never blocks on a lock."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

from modelgate.storage.base import NewKey, Reservation, ReserveRequest
from modelgate.storage.sqlite import SqliteStore


async def test_operations_wait_off_the_loop_while_another_writer_holds_the_lock(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "db.sqlite")
    await store.migrate()
    account = await store.create_account("a", 1_000_000, time.time())
    await store.create_key(
        NewKey("key_1", account.id, "", "Basic", 60, None, None, b"d" * 32, "sk-cs4-abcd", "wxyz"),
        time.time(),
    )
    other = sqlite3.connect(tmp_path / "db.sqlite", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # e.g. a CLI command in the middle of a write
    request = ReserveRequest("req_1", "key_1", account.id, "2026-11", 500, 100, time.time(), time.time() + 60)
    reservation = asyncio.ensure_future(store.reserve(request))
    ticks = 0
    for _ in range(20):  # the loop keeps running while the reservation waits for the lock
        await asyncio.sleep(0.01)
        ticks += 1
    assert not reservation.done() and ticks == 20
    other.execute("COMMIT")
    outcome = await asyncio.wait_for(reservation, 5)
    assert isinstance(outcome, Reservation) and outcome.granted_uc == 500
    assert await store.pending_reservations() == 1
    other.close()
    await store.close()
