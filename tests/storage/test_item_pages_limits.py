"""A call the driver refuses for its arguments is not taken for a lost connection, and the chain
depth is capped where paging a chain owner by owner stays cheap.

(Pages are read one owner at a time, ``storage.item_pages``, so no query binds a whole chain: the
engines' parameter limits no longer bound a chain's length.)"""

from __future__ import annotations

import asyncio

import asyncpg
import pydantic
import pytest

from modelgate.config import ResponsesConfig
from modelgate.storage.postgres_batches import connection_lost
from tests.storage.engines import fresh_database
from tests.whole_store import PostgresStore


def test_arguments_the_driver_refuses_are_no_lost_connection() -> None:
    async def run() -> None:
        async with fresh_database("itempages") as url:
            store = PostgresStore(url)
            await store.migrate()
            await store.close()
            conn = await asyncpg.connect(url)
            try:
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
