"""A stored Responses answer is written after it is sent (``storage.deferred_responses``,
``responses.keep_after_answer = "on"``), on a real gateway process on PostgreSQL: with the write held up in the database the answer still arrives, a
``GET`` of it on the same process waits for the write and then finds it, and a ``kill -9`` after
the answer but before its write reached the database leaves the response unkept (a 404 after the
restart), as docs/wire-formats.md says. Money is never at stake: the settle committed before the answer."""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
import httpx
from tests.hardening.process import GatewayProcess, run
from tests.hardening.test_shutdown import headers
from tests.storage.engines import create_database, drop_database
from tests.storage.test_deferred_responses import writes_held


async def waiting_for_a_lock(url: str) -> None:
    """Until a session of the database waits for a lock (a stored answer's write, at the database)."""
    conn = await asyncpg.connect(url)
    try:
        for _ in range(500):
            waiting = await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            if waiting:
                return
            await asyncio.sleep(0.01)
        raise AssertionError("no write reached the database")
    finally:
        await conn.close()


async def answered(client: httpx.AsyncClient, keys: dict[str, str], text: str) -> str:
    body = {"model": "nova-5.5", "input": text, "max_output_tokens": 16}
    reply = await client.post("/v1/responses", json=body, headers=headers("responses", keys))
    assert reply.status_code == 200 and "x-modelgate-stored" not in reply.headers
    response_id = reply.json()["id"]
    assert isinstance(response_id, str)
    return response_id


def test_an_answer_is_sent_before_its_write_and_read_back_after_it(tmp_path: Path) -> None:
    url = run(create_database("mgkept"))
    try:
        # On PostgreSQL "auto" writes before answering (other instances may be asked next): "on"
        # is the choice of a deployment whose clients stay on one instance.
        gateway = GatewayProcess(
            tmp_path,
            top=f'database_url = "{url}"',
            simulator={"reply_words": 8},
            responses={"keep_after_answer": "on"},
        )
        with gateway:
            seeded = gateway.seed()
            gateway.start()

            async def held_then_read() -> str:
                async with httpx.AsyncClient(base_url=gateway.base_url, timeout=30) as client:
                    await answered(client, seeded.keys, "first: the account's count is now known")
                    async with writes_held(url, seeded.account_id):
                        kept = await answered(client, seeded.keys, "answered while its write waits")
                        reading = asyncio.ensure_future(
                            client.get(f"/v1/responses/{kept}", headers=headers("responses", seeded.keys))
                        )
                        await asyncio.sleep(0.3)
                        assert not reading.done()  # it waits for the write, which waits for the lock
                    found = await reading
                    assert found.status_code == 200 and found.json()["id"] == kept
                    return kept

            kept = run(held_then_read())

            async def killed_while_held() -> tuple[str, str]:
                async with (
                    httpx.AsyncClient(base_url=gateway.base_url, timeout=30) as client,
                    writes_held(url, seeded.account_id),
                ):
                    # Its write is at the database, waiting for the lock: PostgreSQL finishes a
                    # statement it was sent whatever becomes of the client.
                    sent = await answered(client, seeded.keys, "answered, its write sent")
                    await waiting_for_a_lock(url)
                    # Its write waits behind that batch in the process: it dies with the process.
                    lost = await answered(client, seeded.keys, "answered, then the process dies")
                    gateway.kill()
                return sent, lost

            sent, lost = run(killed_while_held())
            gateway.start()

            async def after_restart() -> list[int]:
                async with httpx.AsyncClient(base_url=gateway.base_url, timeout=30) as client:
                    auth = headers("responses", seeded.keys)
                    return [
                        (await client.get(f"/v1/responses/{ident}", headers=auth)).status_code
                        for ident in (lost, sent, kept)
                    ]

            assert run(after_restart()) == [404, 200, 200]
    finally:
        run(drop_database(url))
