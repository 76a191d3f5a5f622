"""SQLite ledger writes of one event-loop turn share one transaction (storage.group_commit), and
sharing never changes an outcome: each operation still succeeds or fails alone. Writes run
inline on the event loop, and on the store's worker thread only while another writer (the CLI,
say) holds the database: the loop never blocks on a lock."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import pytest

from modelgate.storage.base import Conflict, NewKey, Reservation, ReserveRequest, Settlement, UsageRecord
from tests.whole_store import SqliteStore

MONTH = "2026-11"


async def _store(tmp_path: Path) -> tuple[SqliteStore, int]:
    store = SqliteStore(tmp_path / "db.sqlite")
    await store.migrate()
    account = await store.create_account("a", 1_000_000, time.time())
    await store.create_key(
        NewKey("key_1", account.id, "", "Basic", 60, None, None, b"d" * 32, "sk-cs4-abcd", "wxyz"),
        time.time(),
    )
    return store, account.id


def _hold(account_id: int, request_id: str, amount: int = 1_000) -> ReserveRequest:
    now = time.time()
    return ReserveRequest(request_id, "key_1", account_id, MONTH, amount, 1, now, now + 60)


def _usage(account_id: int, request_id: str, charged: int) -> UsageRecord:
    now = time.time()
    return UsageRecord(
        request_id, "key_1", account_id, "chat", "m", MONTH, "ok", now, now, 1, 1, 0, 0, charged
    )


async def test_concurrent_writes_commit_once_and_a_failing_one_fails_alone(tmp_path: Path) -> None:
    store, account_id = await _store(tmp_path)
    await store.reserve(_hold(account_id, "req_first"))
    statements: list[str] = []
    store.database.db().set_trace_callback(statements.append)
    outcomes = await asyncio.gather(
        *(store.reserve(_hold(account_id, f"req_{i}")) for i in range(20)),
        store.reserve(_hold(account_id, "req_first")),  # a duplicate request id
        store.settle(_usage(account_id, "req_first", 300)),
        return_exceptions=True,
    )
    store.database.db().set_trace_callback(None)
    # Run without savepoints first, the duplicate rolls that back, then once more with one
    # savepoint per operation: one commit in all.
    ends = [s for s in statements if s in ("BEGIN IMMEDIATE", "COMMIT", "ROLLBACK")]
    assert ends == ["BEGIN IMMEDIATE", "ROLLBACK", "BEGIN IMMEDIATE", "COMMIT"]
    assert statements.count("SAVEPOINT ledger_op") == 22
    assert all(isinstance(o, Reservation) and o.granted_uc == 1_000 for o in outcomes[:20])
    assert isinstance(outcomes[20], Conflict)
    settled = outcomes[21]
    assert isinstance(settled, Settlement) and settled.applied and settled.charged_uc == 300
    # The rolled-back duplicate left nothing: 20 holds pending, one settled for 300.
    account = await store.get_account(account_id)
    assert account is not None and account.reserved_uc == 20_000 and account.balance_uc == 1_000_000 - 300
    assert await store.pending_reservations() == 20
    assert await store.month_spend("key_1", MONTH) == (300, 20_000)
    await store.close()


async def test_a_batch_without_a_failure_runs_without_savepoints(tmp_path: Path) -> None:
    store, account_id = await _store(tmp_path)
    statements: list[str] = []
    store.database.db().set_trace_callback(statements.append)
    outcomes = await asyncio.gather(*(store.reserve(_hold(account_id, f"req_{i}")) for i in range(5)))
    store.database.db().set_trace_callback(None)
    assert all(isinstance(o, Reservation) for o in outcomes)
    assert not [s for s in statements if "SAVEPOINT" in s or "RELEASE" in s or s == "ROLLBACK"]
    assert [s for s in statements if s in ("BEGIN IMMEDIATE", "COMMIT")] == ["BEGIN IMMEDIATE", "COMMIT"]
    await store.close()


async def _settle_beyond_the_cap(tmp_path: Path, *, with_duplicate: bool) -> tuple[Settlement, int]:
    """A settle costing more than its hold and what its key's monthly cap has free (charged the
    hold and what is free, the rest a shortfall), alone or in a batch that a duplicate hold of
    another key rolls back after the settle ran."""
    store = SqliteStore(tmp_path / "db.sqlite")
    await store.migrate()
    account = await store.create_account("a", 1_000_000, time.time())
    for key, cap in (("key_1", 4_000), ("key_2", None)):
        digest = key.encode() * 8
        new = NewKey(key, account.id, "", "Basic", 60, None, cap, digest, "sk-cs4-abcd", "wxyz")
        await store.create_key(new, time.time())
    await store.reserve(_hold(account.id, "req_big", 3_000))
    other = ReserveRequest("req_other", "key_2", account.id, MONTH, 1_000, 1, time.time(), time.time() + 60)
    await store.reserve(other)
    duplicate = [store.reserve(other)] if with_duplicate else []
    settled, *refused = await asyncio.gather(
        store.settle(_usage(account.id, "req_big", 9_000)), *duplicate, return_exceptions=True
    )
    assert all(isinstance(o, Conflict) for o in refused), refused
    records = await store.usage_records(MONTH, account_id=account.id)
    await store.close()
    assert isinstance(settled, Settlement) and len(records) == 1
    return settled, records[0].shortfall_uc


async def test_a_settle_run_again_after_a_rollback_charges_what_it_would_alone(tmp_path: Path) -> None:
    alone = await _settle_beyond_the_cap(tmp_path / "alone", with_duplicate=False)
    batched = await _settle_beyond_the_cap(tmp_path / "batched", with_duplicate=True)
    # A 4,000 cap: 3,000 held + 1,000 free charged, 5,000 short.
    assert alone[0].charged_uc == 4_000 and alone[1] == 5_000
    assert batched == alone


async def test_a_write_cancelled_before_its_commit_is_never_applied(tmp_path: Path) -> None:
    store, account_id = await _store(tmp_path)
    kept = asyncio.ensure_future(store.reserve(_hold(account_id, "req_kept")))
    dropped = asyncio.ensure_future(store.reserve(_hold(account_id, "req_dropped")))
    await asyncio.sleep(0)  # both are queued for the next turn's commit
    dropped.cancel()
    with pytest.raises(asyncio.CancelledError):
        await dropped
    assert isinstance(await kept, Reservation)
    assert await store.pending_reservations() == 1
    account = await store.get_account(account_id)
    assert account is not None and account.reserved_uc == 1_000
    await store.close()


async def test_a_replayed_settle_in_the_same_commit_applies_once(tmp_path: Path) -> None:
    store, account_id = await _store(tmp_path)
    await store.reserve(_hold(account_id, "req_1"))
    first, replay, release = await asyncio.gather(
        store.settle(_usage(account_id, "req_1", 400)),
        store.settle(_usage(account_id, "req_1", 400)),
        store.release(_usage(account_id, "req_1", 0)),
    )
    assert (first.applied, replay.applied, release.applied) == (True, False, False)
    account = await store.get_account(account_id)
    assert account is not None and account.balance_uc == 1_000_000 - 400 and account.reserved_uc == 0
    summary = await store.usage_summary(MONTH, account_id=account_id)
    assert summary.requests == 1 and summary.charged_uc == 400
    await store.close()


async def test_writes_wait_off_the_loop_while_another_writer_holds_the_lock(tmp_path: Path) -> None:
    store, account_id = await _store(tmp_path)
    other = sqlite3.connect(tmp_path / "db.sqlite", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # e.g. a CLI command in the middle of a write
    reservation = asyncio.ensure_future(store.reserve(_hold(account_id, "req_1", 500)))
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


class BatchSizes:
    """A ledger observer that keeps the size of every batch (the ledger write metrics' view)."""

    def __init__(self) -> None:
        self.sizes: list[int] = []

    def ledger_committed(self, seconds: float, operations: int, waited: float = 0.0) -> None:
        self.sizes.append(operations)


async def test_a_batch_meeting_a_short_lock_retries_on_the_loop_and_gathers_what_comes_meanwhile(
    tmp_path: Path,
) -> None:
    """Another process (a second worker) holding the write lock for a moment: the batch is tried
    again on the loop, never on the worker thread, and the writes submitted while it waits commit
    with it in one transaction."""
    store, account_id = await _store(tmp_path)
    batches = BatchSizes()
    store.observe_ledger(batches)
    other = sqlite3.connect(tmp_path / "db.sqlite", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    first = asyncio.ensure_future(store.reserve(_hold(account_id, "req_0", 100)))
    await asyncio.sleep(0.005)  # the first batch has met the lock and waits on the loop
    later = [asyncio.ensure_future(store.reserve(_hold(account_id, f"req_{n}", 100))) for n in range(1, 6)]
    await asyncio.sleep(0.005)
    other.execute("COMMIT")
    outcomes = await asyncio.wait_for(asyncio.gather(first, *later), 5)
    assert all(isinstance(o, Reservation) and o.granted_uc == 100 for o in outcomes)
    # One transaction: the waiting batch and the five that came meanwhile (the attempts refused the
    # lock are no transactions and are not counted in the ledger metrics).
    assert batches.sizes == [6]
    assert store.database.worker_ident is None  # the worker thread never ran a write
    assert await store.pending_reservations() == 6
    other.close()
    await store.close()
