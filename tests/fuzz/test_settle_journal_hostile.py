"""Hostile settle-journal files (the journal is read back at start, from the data directory):
torn, junk or forged lines never stop the start, never raise, and never move money a pending
reservation would not: a line is replayed only when it is a usage record of the right shape, and
a replayed settle is applied only to its own pending reservation, never beyond its hold."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

from modelgate.billing.settle_journal import SettleJournal
from modelgate.storage.base import NewKey, Reservation, ReserveRequest
from tests.fuzz.hostile import ODD_VALUES
from tests.whole_store import SqliteStore

NOW = 1_780_000_000.0
MONTH = "2026-05"
VALID = {
    "request_id": "req_held",
    "key_id": "key_a",
    "account_id": 1,
    "endpoint": "messages",
    "model": "aria-haiku-4.5",
    "month": MONTH,
    "status": "ok",
    "created_at": NOW,
    "finished_at": NOW + 1,
    "charged_uc": 400,
}


def _hostile_lines(rng: random.Random) -> list[bytes]:
    lines: list[bytes] = [b"", b"\x00\xff\xfe", b"{", b"[]", b"null", b'{"landed": 5}', b'{"charge": true}']
    for _ in range(300):
        record: dict[str, Any] = dict(VALID)
        for _ in range(rng.randint(1, 3)):
            name = rng.choice([*VALID, "shortfall_uc", "unknown_field"])
            record[name] = rng.choice(ODD_VALUES)
        if rng.random() < 0.2:
            record["charged_uc"] = rng.choice([-(10**9), -1, 2**60, 10**30])
        entry: Any = {"charge": rng.choice([True, False, "yes", None]), "record": record}
        if rng.random() < 0.1:
            entry = rng.choice(ODD_VALUES)
        line = json.dumps(entry).encode()  # big integers, NaN and lone surrogates included
        lines.append(line[: rng.randint(1, len(line))] if rng.random() < 0.1 else line)
    return lines


def test_hostile_journal_lines_never_stop_a_start_nor_move_money_wrongly(tmp_path: Path) -> None:
    async def run() -> None:
        store = SqliteStore(tmp_path / "db.sqlite")
        await store.migrate()
        account = await store.create_account("acme", 1_000_000, NOW)
        key = NewKey("key_a", account.id, "", "Basic", 60, None, None, b"d" * 32, "sk-cs4-ab", "abcd")
        await store.create_key(key, NOW)
        held = ReserveRequest("req_held", "key_a", account.id, MONTH, 1_000, 1, NOW, NOW + 600)
        assert isinstance(await store.reserve(held), Reservation)
        directory = tmp_path / "journal"
        directory.mkdir()
        for seed in range(5):
            lines = _hostile_lines(random.Random(seed))
            (directory / f"settles-{90000 + seed}.jsonl").write_bytes(b"\n".join(lines) + b"\n")
        journal = SettleJournal(store, directory)
        await journal.replay()
        for _ in range(200):
            if not journal.waiting:
                break
            await asyncio.sleep(0.05)
        await journal.aclose()
        after = await store.get_account(account.id)
        assert after is not None and after.reserved_uc in (0, 1_000)
        records = await store.usage_records(MONTH)
        # At most the one pending reservation was finished, within its hold; nothing else moved.
        assert [r.request_id for r in records] in ([], ["req_held"])
        assert all(0 <= r.charged_uc <= 1_000 for r in records)
        assert after.balance_uc == 1_000_000 - sum(r.charged_uc for r in records)
        assert not [p for p in directory.iterdir() if p.name.startswith("settles-9")]  # adopted
        await store.close()

    asyncio.run(run())
