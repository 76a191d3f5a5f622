"""Contract (both engines): a usage record keeps its 1-hour cache writes and its server web
searches (issue #27), written by settle, single or batched, and read back by every reader; on
PostgreSQL the ledger function also accepts operations of an instance that sends neither."""

from __future__ import annotations

import asyncio

import asyncpg
import orjson

from modelgate.storage.base import Store
from modelgate.storage.reports import UsageFilter
from tests.storage.engines import fresh_database
from tests.storage.test_contract import MONTH, hold, setup_key, usage_of
from tests.whole_store import PostgresStore


async def test_settle_records_one_hour_writes_and_web_searches(store: Store) -> None:
    account, key = await setup_key(store, balance=100_000)
    request = hold(key, 50_000)
    await store.reserve(request)
    usage = usage_of(
        request, 30_100, cache_creation_tokens=900, cache_write_1h_tokens=600, web_search_requests=3
    )
    assert (await store.settle(usage)).charged_uc == 30_100
    [record] = await store.usage_records(MONTH, key_id=key.id)
    assert (record.cache_creation_tokens, record.cache_write_1h_tokens, record.web_search_requests) == (
        900,
        600,
        3,
    )
    assert record == usage
    page = await store.usage_page(UsageFilter(account_id=account.id), limit=10)
    assert [(r.cache_write_1h_tokens, r.web_search_requests) for r in page.records] == [(600, 3)]
    assert (await store.usage_summary(MONTH, account_id=account.id)).web_search_requests == 3


async def test_batched_settlements_keep_each_records_figures(store: Store) -> None:
    """Settled together (one PostgreSQL batch), each record keeps its own figures."""
    _, key = await setup_key(store, balance=1_000_000)
    requests = [hold(key, 10_000) for _ in range(6)]
    for request in requests:
        await store.reserve(request)
    usages = [
        usage_of(r, 100 + i, cache_creation_tokens=10 * i, cache_write_1h_tokens=i, web_search_requests=i)
        for i, r in enumerate(requests)
    ]
    await asyncio.gather(*(store.settle(u) for u in usages))
    records = {r.request_id: r for r in await store.usage_records(MONTH, key_id=key.id)}
    assert {r.request_id: (r.cache_write_1h_tokens, r.web_search_requests) for r in records.values()} == {
        u.request_id: (u.cache_write_1h_tokens, u.web_search_requests) for u in usages
    }
    assert (await store.usage_summary(MONTH, key_id=key.id)).web_search_requests == sum(range(6))


async def test_a_settle_from_an_instance_not_yet_upgraded_records_zero() -> None:
    """An instance still running the previous release sends a settle without the new figures
    while the database is already migrated: it is recorded, with 0 for both."""
    async with fresh_database() as url:
        store = PostgresStore(url)
        try:
            await store.migrate()
            _, key = await setup_key(store, balance=10_000)
            request = hold(key, 1_000)
            await store.reserve(request)
            op = {
                "kind": "s",
                "request_id": request.request_id,
                "key_id": key.id,
                "account_id": key.account_id,
                "month": MONTH,
                "amount": 300,
                "at": request.now + 1,
                "status": "ok",
                "input_tokens": 10,
                "output_tokens": 20,
                "cache_creation_tokens": 0,
                "cache_read_tokens": 0,
            }
            conn = await asyncpg.connect(url)
            try:
                rows = await conn.fetch(
                    "SELECT * FROM modelgate_ledger($1::jsonb, '[]'::jsonb)", orjson.dumps([op]).decode()
                )
            finally:
                await conn.close()
            assert rows[0]["outcome"] == "applied"
            [record] = await store.usage_records(MONTH, key_id=key.id)
            assert (record.charged_uc, record.cache_write_1h_tokens, record.web_search_requests) == (
                300,
                0,
                0,
            )
        finally:
            await store.close()
