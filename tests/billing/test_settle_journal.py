"""The settle journal: a settle kept by a process that stopped before it landed is written by the
next process to start on the same data directory, exactly once."""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson

from modelgate.billing.settle_journal import SettleJournal
from modelgate.clock import month_of
from modelgate.storage.base import NewKey, Reservation, ReserveRequest, UsageRecord
from tests.gateway_server import running_gateway
from tests.polling import wait_until
from tests.whole_store import SqliteStore, whole_store

NOW = 1_780_000_000.0
MONTH = month_of(NOW)

#: A process whose database is unreachable keeps a settle (fsynced to its journal), then dies.
_KEEP_AND_DIE = textwrap.dedent(
    """
    import asyncio, os, sys
    from pathlib import Path
    import orjson
    from modelgate.billing.settle_journal import SettleJournal
    from modelgate.storage.base import UsageRecord
    from tests.whole_store import SqliteStore

    async def main() -> None:
        unreachable = SqliteStore(Path("/proc/no-such-place/modelgate.db"))
        journal = SettleJournal(unreachable, Path(sys.argv[1]))
        record = UsageRecord(**orjson.loads(sys.argv[2]))
        try:
            await unreachable.settle(record)
        except Exception:
            await journal.keep(record, charge=True)
        os._exit(0)  # died before any retry could land

    asyncio.run(main())
    """
)


def _prepare(db: Path) -> UsageRecord:
    """A database holding one pending reservation; the usage record its request would settle."""

    async def run() -> UsageRecord:
        store = SqliteStore(db)
        await store.migrate()
        account = await store.create_account("acme", 1_000_000, NOW)
        key = NewKey("key_a", account.id, "", "Basic", 60, None, None, b"d" * 32, "sk-cs4-ab", "abcd")
        await store.create_key(key, NOW)
        request = ReserveRequest("req_kept", "key_a", account.id, MONTH, 500_000, 1, NOW, NOW + 600)
        assert isinstance(await store.reserve(request), Reservation)
        await store.close()
        return UsageRecord(
            request_id="req_kept",
            key_id="key_a",
            account_id=account.id,
            endpoint="messages",
            model="aria-haiku-4.5",
            month=MONTH,
            status="ok",
            created_at=NOW,
            finished_at=NOW + 2,
            input_tokens=100,
            output_tokens=200,
            charged_uc=123_456,
        )

    return asyncio.run(run())


def test_a_settle_kept_by_a_process_that_died_is_written_at_the_next_start(tmp_path: Path) -> None:
    data = tmp_path / "data"
    journal = data / "settle-journal"
    record = _prepare(data / "modelgate.db")
    subprocess.run(
        [sys.executable, "-c", _KEEP_AND_DIE, str(journal), orjson.dumps(dataclasses.asdict(record))],
        check=True,
        timeout=60,
    )
    left = list(journal.iterdir())
    assert len(left) == 1 and b"req_kept" in left[0].read_bytes()

    with running_gateway(data) as gateway:
        kept = gateway.services.ledger.journal
        wait_until(lambda: kept.landed_total == 1 and kept.waiting == 0, "the replayed settle landing")
        store = whole_store(gateway.services)
        records = gateway.call(store.usage_records(MONTH))
        assert [(r.request_id, r.status, r.charged_uc) for r in records] == [("req_kept", "ok", 123_456)]
        assert gateway.call(store.pending_reservations()) == 0
        account = gateway.call(store.get_account(records[0].account_id))
        assert account is not None and (account.balance_uc, account.reserved_uc) == (1_000_000 - 123_456, 0)
        assert not left[0].exists()  # adopted
    # Nothing waits in the journal any more, so starting again replays nothing.
    assert all(path.stat().st_size == 0 for path in journal.iterdir())
    with running_gateway(data) as gateway:
        assert gateway.services.ledger.journal.waiting == 0
        records = gateway.call(gateway.services.usage.usage_records(MONTH))
        assert [r.request_id for r in records] == ["req_kept"]


def test_processes_sharing_a_journal_directory_and_a_pid_keep_their_own_files(tmp_path: Path) -> None:
    """Containers on one data volume often have the same pid: each keeps its own journal file,
    none waits on another's lock or empties another's lines, and a start adopts only the files of
    processes that stopped."""
    directory = tmp_path / "settle-journal"

    def record(request_id: str) -> UsageRecord:
        return UsageRecord(request_id, "key_a", 1, "messages", "aria-haiku-4.5", MONTH, "ok", NOW, NOW + 1)

    async def run() -> tuple[int, int, set[bytes]]:
        unreachable = SqliteStore(Path("/proc/no-such-place/modelgate.db"))
        first, second = SettleJournal(unreachable, directory), SettleJournal(unreachable, directory)
        await asyncio.wait_for(first.keep(record("req_first"), charge=True), 5)
        await asyncio.wait_for(second.keep(record("req_second"), charge=True), 5)
        files = {path.read_bytes() for path in directory.glob("settles-*.jsonl")}
        # Both running: a third process starting adopts nothing.
        assert await SettleJournal(unreachable, directory).replay() == 0
        await first.aclose()  # the first process stops with its settle still waiting
        later = SettleJournal(unreachable, directory)
        adopted = await later.replay()
        assert "req_first" in later and "req_second" not in later
        waiting = second.waiting
        for journal in (second, later):
            await journal.aclose()
        return adopted, waiting, files

    adopted, waiting, files = asyncio.run(run())
    assert adopted == 1 and waiting == 1
    assert len(files) == 2 and all(len(lines.splitlines()) == 1 for lines in files)


def _orphan(directory: Path, request_id: str) -> Path:
    """The journal file of a process that died with the settle of ``request_id`` waiting."""
    directory.mkdir(parents=True, exist_ok=True)
    record = UsageRecord(request_id, "key_a", 1, "messages", "aria-haiku-4.5", MONTH, "ok", NOW, NOW + 1)
    path = directory / f"settles-gone-1-{request_id}.jsonl"
    path.write_bytes(orjson.dumps({"charge": True, "record": dataclasses.asdict(record)}) + b"\n")
    return path


def test_a_journal_file_that_cannot_be_read_is_skipped_not_fatal(tmp_path: Path) -> None:
    directory = tmp_path / "settle-journal"
    (directory / "settles-broken.jsonl").mkdir(parents=True)  # opening it fails (not a file)
    orphan = _orphan(directory, "req_orphan")

    async def run() -> tuple[int, bool]:
        journal = SettleJournal(SqliteStore(Path("/proc/no-such-place/modelgate.db")), directory)
        adopted = await journal.replay()
        kept = "req_orphan" in journal
        await journal.aclose()
        return adopted, kept

    assert asyncio.run(run()) == (1, True)
    assert not orphan.exists() and (directory / "settles-broken.jsonl").is_dir()


#: Replays with no room to write its own journal file (RLIMIT_FSIZE 0: every write fails EFBIG).
_REPLAY_WITHOUT_ROOM = textwrap.dedent(
    """
    import asyncio, resource, signal, sys
    from pathlib import Path
    from modelgate.billing.settle_journal import SettleJournal
    from tests.whole_store import SqliteStore

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    async def main() -> None:
        journal = SettleJournal(SqliteStore(Path("/proc/no-such-place/modelgate.db")), Path(sys.argv[1]))
        await journal.replay()
        assert "req_orphan" in journal
        journal._task.cancel()  # dies at once, as a crash would

    asyncio.run(main())
    """
)


def test_an_orphan_file_stays_until_its_settles_are_in_the_adopting_processs_own_file(tmp_path: Path) -> None:
    directory = tmp_path / "settle-journal"
    orphan = _orphan(directory, "req_orphan")
    subprocess.run([sys.executable, "-c", _REPLAY_WITHOUT_ROOM, str(directory)], check=True, timeout=60)
    # Its own file could not take the settle: the orphan is still there for the next start.
    assert orphan.exists() and b"req_orphan" in orphan.read_bytes()
