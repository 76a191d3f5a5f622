"""A settle whose database neither takes nor refuses it (a stuck connection), or that is cut by a
shutdown, is journaled on disk, never lost: the answer was delivered, so it is charged once.

The database boundary is the only thing faked: a real SQLite store whose ``settle`` hangs until
the test lets it go (as a PostgreSQL command hangs until its command timeout)."""

from __future__ import annotations

import asyncio
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from modelgate import ir
from modelgate.billing.ledger import Hold, Ledger, Purpose, Settlements, UsageStatus
from modelgate.billing.pricing import cost_uc
from modelgate.billing.settle_journal import SettleJournal
from modelgate.catalogue import build_catalogue
from modelgate.clock import month_of
from modelgate.storage.base import NewKey, Refusal, Settlement, UsageRecord
from tests.gateway_server import ManualClock
from tests.whole_store import SqliteStore

NOW = 1_780_000_000.0
MODEL = build_catalogue().models["aria-haiku-4.5"]
USAGE = ir.Usage(input_tokens=40, output_tokens=25)
ROOT = Path(__file__).resolve().parents[2]


class StuckStore(SqliteStore):
    """The real store, except that ``settle`` waits for ``unstuck`` before reaching the database."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.reached = asyncio.Event()
        self.unstuck = asyncio.Event()

    async def settle(self, record: UsageRecord) -> Settlement:
        self.reached.set()
        await self.unstuck.wait()
        return await super().settle(record)


async def _books(tmp_path: Path, settle_timeout: float) -> tuple[StuckStore, Ledger, Settlements]:
    store = StuckStore(tmp_path / "ledger.db")
    await store.migrate()
    account = await store.create_account("acme", 5_000_000, NOW)
    key = NewKey(
        "key_s", account.id, "k", "Basic", 60, None, None, secrets.token_bytes(32), "sk-cs4-a", "wxyz"
    )
    await store.create_key(key, NOW)
    settlements = Settlements()
    journal = SettleJournal(store, tmp_path / "journal")
    ledger = Ledger(store, settlements, ManualClock(NOW), 600, journal, settle_timeout=settle_timeout)
    return store, ledger, settlements


async def _hold(ledger: Ledger, request_id: str) -> Hold:
    purpose = Purpose(request_id, "key_s", 1, "messages", MODEL, NOW)
    hold = await ledger.reserve(purpose, input_bound=100, max_tokens=200)
    assert not isinstance(hold, Refusal)
    return hold


def _journaled(tmp_path: Path) -> bytes:
    return b"".join(path.read_bytes() for path in (tmp_path / "journal").glob("settles-*.jsonl"))


async def _charged(store: SqliteStore) -> list[tuple[str, str, int]]:
    return [(r.request_id, r.status, r.charged_uc) for r in await store.usage_records(month_of(NOW))]


async def test_a_settle_the_database_does_not_answer_is_journaled_after_the_settle_timeout(
    tmp_path: Path,
) -> None:
    store, ledger, settlements = await _books(tmp_path, settle_timeout=0.2)
    hold = await _hold(ledger, "req_stuck")
    settled = await hold.settle(USAGE, UsageStatus.OK)  # returns: the database never answered
    # On disk before the answer's last byte, the hold still spared, the figures the settle will have.
    assert settled.applied and settled.charged_uc == cost_uc(USAGE, MODEL.price)
    assert ledger.journal.waiting == 1 and ledger.journal.timed_out_total == 1
    assert b"req_stuck" in _journaled(tmp_path) and ledger.holds("req_stuck")
    assert await _charged(store) == []
    store.unstuck.set()  # the database answers again: the retry lands, once
    while ledger.journal.waiting:
        await asyncio.sleep(0.02)
    assert await _charged(store) == [("req_stuck", "ok", cost_uc(USAGE, MODEL.price))]
    assert await store.pending_reservations() == 0
    await settlements.drain()
    await ledger.journal.aclose()
    await store.close()


async def test_a_drain_cut_by_its_deadline_leaves_settles_running_to_the_journal(tmp_path: Path) -> None:
    store, ledger, settlements = await _books(tmp_path, settle_timeout=0.3)
    hold = await _hold(ledger, "req_drained")
    settling = asyncio.ensure_future(hold.settle(USAGE, UsageStatus.OK))
    await store.reached.wait()
    # A forced shutdown gives the drain a deadline (server.runner): cutting the wait must not cut
    # the settles it waits on.
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(settlements.drain(), 0.05)
    settled = await settling
    assert settled.applied and ledger.journal.waiting == 1 and ledger.holds("req_drained")
    assert b"req_drained" in _journaled(tmp_path)
    store.unstuck.set()
    await ledger.journal.aclose()  # tries once more: lands
    assert await _charged(store) == [("req_drained", "ok", cost_uc(USAGE, MODEL.price))]
    await store.close()


async def serve_and_die(tmp_path: Path) -> None:
    """A process whose settle waits on the database when its event loop ends (a forced exit)."""
    store, ledger, _ = await _books(tmp_path, settle_timeout=30)
    hold = await _hold(ledger, "req_cut")
    settling = asyncio.ensure_future(hold.settle(USAGE, UsageStatus.OK))
    await store.reached.wait()
    await store.close()
    assert not settling.done()
    # Returning ends the loop: asyncio cancels the settle still waiting on the database.


def test_a_settle_cancelled_with_the_event_loop_is_journaled_and_replayed(tmp_path: Path) -> None:
    die = "import asyncio, sys, pathlib, tests.billing.test_settle_stuck as t; "
    die += "asyncio.run(t.serve_and_die(pathlib.Path(sys.argv[1])))"
    subprocess.run([sys.executable, "-c", die, str(tmp_path)], check=True, timeout=60, cwd=ROOT)
    assert b"req_cut" in _journaled(tmp_path)

    async def next_start() -> list[tuple[str, str, int]]:
        store = SqliteStore(tmp_path / "ledger.db")
        journal = SettleJournal(store, tmp_path / "journal")
        assert await journal.replay() == 1
        await journal.aclose()
        charged = await _charged(store)
        await store.close()
        return charged

    assert asyncio.run(next_start()) == [("req_cut", "ok", cost_uc(USAGE, MODEL.price))]
