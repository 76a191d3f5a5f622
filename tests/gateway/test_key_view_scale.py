"""The key view with many keys (issue #34): 20,000 keys written by another writer are taken up by
the running gateway's own polls, and afterwards a key created or revoked is honoured while
requests keep arriving (how soon is a speed: ``make bench --keys`` measures it against issue #34's
1 s budget); a catch-up of thousands of keys yields to the event loop between
slices instead of holding it."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import httpx

from modelgate.auth import SLICE_KEYS, KeyView
from modelgate.keys import Digester
from tests.gateway_server import running_gateway
from tests.polling import wait_until
from tests.whole_store import SqliteStore

MANY = 20_000


def write_keys(db: Path, account_id: int, n: int, first: int = 0) -> None:
    """``n`` keys straight into the database, as another process (or the CLI) would add them
    (numbered from ``first``, so a second call adds other keys)."""
    with sqlite3.connect(db, timeout=30) as conn:
        (version,) = conn.execute("SELECT COALESCE(MAX(version), 0) FROM api_keys").fetchone()
        conn.executemany(
            "INSERT INTO api_keys (id, account_id, name, grp, rpm, digest, prefix, last4, created_at, version) "
            "VALUES (?, ?, ?, 'Basic', 60, randomblob(32), 'sk-cs4-many', '0000', 0, ?)",
            (
                (f"key_many{i:08d}", account_id, f"many {i}", version + 1 + i - first)
                for i in range(first, first + n)
            ),
        )


def chat(client: httpx.Client, secret: str) -> int:
    answer = client.post(
        "/v1/chat/completions",
        headers={"authorization": f"Bearer {secret}"},
        json={"model": "aria-haiku-4.5", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8},
    )
    return answer.status_code


def chat_once(base_url: str, secret: str) -> int:
    with httpx.Client(base_url=base_url, timeout=10) as client:
        return chat(client, secret)


def test_keys_created_and_revoked_are_honoured_with_many_keys(tmp_path: Path) -> None:
    with running_gateway(tmp_path, keys={"refresh_interval": 0.25}) as gateway:
        account = gateway.account("many-keys", 1_000)
        busy = gateway.key(account, "Basic", name="busy", rpm=1_000_000)
        doomed = gateway.key(account, "Basic", name="doomed")
        write_keys(tmp_path / "modelgate.db", account.id, MANY)
        wait_until(lambda: len(gateway.services.keys) >= MANY + 2, "the key view loading 20,000 keys")

        stop = threading.Event()
        served: list[int] = []

        def load() -> None:
            with httpx.Client(base_url=gateway.base_url, timeout=10) as client:
                while not stop.is_set():
                    served.append(chat(client, busy.secret))

        loaders = [threading.Thread(target=load) for _ in range(2)]
        for thread in loaders:
            thread.start()
        try:
            with httpx.Client(base_url=gateway.base_url, timeout=10) as client:
                # Written through the store only: the view learns of it by its own poll.
                fresh = gateway.call(gateway.management.create_key(account, "Basic", name="fresh"))
                wait_until(
                    lambda: chat(client, fresh.secret) == 200, "the new key being accepted", interval=0.02
                )
                gateway.call(
                    gateway.services.key_records.revoke_key(doomed.record.id, gateway.services.clock.time())
                )
                wait_until(
                    lambda: chat(client, doomed.secret) == 401, "the revoked key being refused", interval=0.02
                )
        finally:
            stop.set()
            for thread in loaders:
                thread.join()
        assert served and set(served) == {200}
        assert (
            chat_once(gateway.base_url, fresh.secret) == 200
            and chat_once(gateway.base_url, doomed.secret) == 401
        )


async def test_a_catch_up_of_many_keys_yields_to_the_loop_between_slices(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "view.db")
    await store.migrate()
    try:
        account = await store.create_account("view", 0, 0.0)
        write_keys(tmp_path / "view.db", account.id, MANY)
        view = KeyView(store, Digester(b"s" * 32))
        ticks = 0
        done = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await asyncio.sleep(0)

        other = asyncio.create_task(ticker())
        await view.refresh()
        done.set()
        await other
        assert len(view) == MANY and view.version == MANY
        # Other work ran at least once per slice applied (and while each page was read).
        assert ticks >= MANY // SLICE_KEYS
    finally:
        await store.close()
