"""Paging the items of a long response chain stays within the engines' parameter limits, and a
call the driver refuses for its arguments is not taken for a lost connection.

The page queries (``storage.item_pages``) run on the real engines with more owners than half of
either engine's parameter limit (SQLite: 32,766 variables; asyncpg: 32,767 arguments): binding
each owner twice broke them there."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import asyncpg
import pydantic
import pytest

from modelgate.config import ResponsesConfig
from modelgate.storage.item_pages import ItemList, cursor_query, page_query, postgres_mark, sqlite_mark
from modelgate.storage.postgres import PostgresStore
from modelgate.storage.postgres_batches import connection_lost
from modelgate.storage.sqlite import SqliteStore
from tests.storage.engines import fresh_database

#: More owners than half of either engine's limit: a chain bound twice per owner overflows it.
OWNERS = ItemList([f"resp_{n:05}" for n in range(16_500)], last_input_only=True)


def test_a_long_chain_pages_on_sqlite(tmp_path: Path) -> None:
    async def migrate() -> None:
        store = SqliteStore(tmp_path / "items.db")
        await store.migrate()
        await store.close()

    asyncio.run(migrate())
    db = sqlite3.connect(tmp_path / "items.db")
    # SQLite's default limit (builds differ: some raise it), so the test holds on every build.
    db.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 32_766)
    try:
        sql, params = page_query(OWNERS, (3, 1), 20, True, sqlite_mark)
        assert db.execute(sql, params).fetchall() == []
        sql, params = cursor_query(OWNERS, "msg_1", False, sqlite_mark)
        assert db.execute(sql, params).fetchall() == []
    finally:
        db.close()


def test_a_long_chain_pages_on_postgres_and_refused_arguments_are_no_lost_connection() -> None:
    async def run() -> None:
        async with fresh_database("itempages") as url:
            store = PostgresStore(url)
            await store.migrate()
            await store.close()
            conn = await asyncpg.connect(url)
            try:
                sql, params = page_query(OWNERS, None, 20, False, postgres_mark)
                assert await conn.fetch(sql, *params) == []
                sql, params = cursor_query(OWNERS, "msg_1", True, postgres_mark)
                assert await conn.fetch(sql, *params) == []
                # Too many arguments: refused by the driver before anything is sent.
                too_many = ", ".join(f"${n}" for n in range(1, 40_001))
                with pytest.raises(asyncpg.InterfaceError) as refused:
                    await conn.fetch(f"SELECT 1 WHERE 'x' IN ({too_many})", *["x"] * 40_000)
                assert not connection_lost(refused.value)
                with pytest.raises(asyncpg.exceptions.DataError) as unencodable:
                    await conn.fetch("SELECT $1::int", "not a number")
                assert not connection_lost(unencodable.value)
                assert await conn.fetchval("SELECT 1") == 1  # the connection was fine all along
            finally:
                await conn.close()

    asyncio.run(run())


def test_the_chain_depth_is_capped_where_a_page_still_fits_the_engines() -> None:
    assert ResponsesConfig(max_chain_depth=10_000).max_chain_depth == 10_000
    with pytest.raises(pydantic.ValidationError, match="max_chain_depth"):
        ResponsesConfig(max_chain_depth=10_001)
