from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from modelgate.storage.base import Store
from tests.storage.engines import fresh_database
from tests.whole_store import PostgresStore, SqliteStore

#: Makes another Store on the same database, as a second gateway instance would.
StoreFactory = Callable[[], Awaitable[Store]]


@pytest.fixture(params=["sqlite", "postgresql"])
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StoreFactory]:
    """A factory of migrated stores sharing one fresh database of the parametrized engine."""
    opened: list[Store] = []
    if request.param == "sqlite":

        async def make_sqlite() -> Store:
            store = SqliteStore(tmp_path / "contract.db")
            opened.append(store)
            await store.migrate()
            return store

        yield make_sqlite
    else:
        async with fresh_database() as url:

            async def make_postgres() -> Store:
                store = PostgresStore(url)
                opened.append(store)
                await store.migrate()
                return store

            try:
                yield make_postgres
            finally:
                for store in opened:
                    await store.close()
                opened.clear()
    for store in opened:
        await store.close()


@pytest.fixture
async def store(engine: StoreFactory) -> Store:
    return await engine()
