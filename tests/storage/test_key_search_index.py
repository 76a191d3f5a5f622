"""The keys search's indexes on each engine (migrations sqlite 0019 / postgresql 0024): SQLite's
search pages correctly both when the FTS5 index reads its candidates and when a search matches
more keys than it reads (``key_search.INDEXED_MATCHES``: the keyset scan); PostgreSQL plans a
selective search on the ``pg_trgm`` indexes, and where the extension cannot be created the
migration completes without them and the search answers the same."""

from __future__ import annotations

import secrets
import sqlite3
from pathlib import Path

import asyncpg

from modelgate.storage import key_search
from modelgate.storage.key_pages import key_page_sql
from modelgate.storage.reports import Params, dollar, qmark
from tests.storage.engines import fresh_database
from tests.storage.test_contract_key_search import searched
from tests.whole_store import PostgresStore, SqliteStore

NOW = 1_780_000_000.0


def key_rows(account_id: int, names: list[str]) -> list[tuple[object, ...]]:
    """Keys written straight into the table (as the bench seeds them), creation times in a few
    clusters so that ties are broken by id; returned in no particular order."""
    return [
        (f"key_{secrets.token_hex(8)}", account_id, name, "Pro", 60, secrets.token_bytes(32), "sk-cs4-AbCd",
         "wxyz", NOW + (n * 7919) % 13, n + 1)
        for n, name in enumerate(names)
    ]  # fmt: skip


INSERT = (
    "INSERT INTO api_keys (id, account_id, name, grp, rpm, digest, prefix, last4, created_at, version) "
    "VALUES ({})"
)


async def test_sqlite_search_past_the_index_cap_pages_in_key_order(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "keys.db")
    await store.migrate()
    try:
        account = await store.create_account("bulk", 0, NOW)
        other = await store.create_account("other", 0, NOW)
        dense = key_search.INDEXED_MATCHES + 40
        names = [f"Bulk {n}" for n in range(dense)] + [f"rare {n}" for n in range(30)]
        rows = key_rows(account.id, names) + key_rows(other.id, ["bulk of the other account"])
        with sqlite3.connect(tmp_path / "keys.db") as db:  # the triggers index them on insert
            db.executemany(INSERT.format(", ".join("?" * 10)), rows)
        order = sorted(rows, key=lambda r: (float(str(r[8])), str(r[0])))
        mine = [r for r in order if r[1] == account.id]
        for search, limit in (("bulk", 1000), ("BULK 1", 700), ("rare", 7), ("are 2", 3), ("bulk 10023", 5)):
            expected = [str(r[0]) for r in mine if search.lower() in str(r[2]).lower()]
            assert expected and await searched(store, account.id, search, limit) == expected, search
        with sqlite3.connect(tmp_path / "keys.db") as db:  # a page after a cursor seeks the index to it
            p = Params(qmark)
            sql = key_page_sql(account.id, 100, (NOW + 5, "key_x"), "", p)
            plan = str(db.execute("EXPLAIN QUERY PLAN " + sql, p.values).fetchall())
            assert "api_keys_account_created (account_id=? AND (created_at,id)>(?,?))" in plan, plan
        everyone = [str(r[0]) for r in order if "bulk" in str(r[2]).lower()]
        assert len(everyone) == dense + 1
        assert await searched(store, None, "bulk", 1000) == everyone
    finally:
        await store.close()


async def test_sqlite_search_of_many_keys_that_come_late_in_key_order(tmp_path: Path) -> None:
    """More matches than the index reads, all of them after more keys than the search looks
    through in key order (``key_search.SCAN_WINDOW``): the page is found from every candidate."""
    store = SqliteStore(tmp_path / "keys.db")
    await store.migrate()
    try:
        account = await store.create_account("late", 0, NOW)
        early = [f"early {n}" for n in range(key_search.SCAN_WINDOW + 500)]
        late = [f"Late Bot {n}" for n in range(key_search.INDEXED_MATCHES + 20)]
        rows = key_rows(account.id, early)
        rows += [(*row[:8], float(str(row[8])) + 100, row[9]) for row in key_rows(account.id, late)]
        with sqlite3.connect(tmp_path / "keys.db") as db:
            db.executemany(INSERT.format(", ".join("?" * 10)), rows)
        order = sorted(rows, key=lambda r: (float(str(r[8])), str(r[0])))
        expected = [str(r[0]) for r in order if "late bot" in str(r[2]).lower()]
        first = await store.key_page(account.id, limit=50, search="late bot")
        assert [k.id for k in first] == expected[:50]
        assert await searched(store, account.id, "LATE BOT", 2500) == expected
    finally:
        await store.close()


async def test_postgresql_plans_a_selective_search_on_the_trigram_indexes() -> None:
    async with fresh_database() as url:
        store = PostgresStore(url)
        await store.migrate()
        try:
            account = await store.create_account("bulk", 0, NOW)
            conn = await asyncpg.connect(url)
            try:
                # Enough keys that reading them all costs more than the index (the planner's own
                # choice, from the indexes' statistics).
                await conn.execute(
                    "INSERT INTO api_keys (id, account_id, name, grp, rpm, digest, prefix, last4, created_at, "
                    "version) SELECT 'key_t' || i, $1, 'bulk ' || i, 'Pro', 60, decode(md5(i::text), 'hex'), "
                    "'sk-cs4-AbCd', 'wxyz', $2 + i % 13, i FROM generate_series(1, 200000) AS i",
                    account.id,
                    NOW,
                )
                await conn.execute("ANALYZE api_keys")
                indexes = await conn.fetch(
                    "SELECT indexname FROM pg_indexes WHERE indexname LIKE 'api_keys_search%'"
                )
                assert sorted(r[0] for r in indexes) == [
                    "api_keys_search_id",
                    "api_keys_search_name",
                    "api_keys_search_prefix",
                ]
                p = Params(dollar)
                sql = key_page_sql(account.id, 100, None, "bulk 43210", p)
                plan = "\n".join(r[0] for r in await conn.fetch("EXPLAIN " + sql, *p.values))
                assert "api_keys_search_name" in plan, plan
                # A page after a cursor seeks the (created_at, id) index to it.
                p = Params(dollar)
                sql = key_page_sql(account.id, 100, (NOW + 5, "key_t150000"), "", p)
                plan = "\n".join(r[0] for r in await conn.fetch("EXPLAIN " + sql, *p.values))
                assert "Index Cond: ((account_id = " in plan and "ROW(created_at, id) > ROW(" in plan, plan
            finally:
                await conn.close()
            found = await store.key_page(account.id, limit=10, search="BULK 43210")
            assert [k.name for k in found] == ["bulk 43210"]
        finally:
            await store.close()


async def test_postgresql_without_pg_trgm_migrates_and_searches_the_same() -> None:
    """A role that may not create extensions (no CREATE on the database): 0024 completes without
    the indexes and the search reads the key list, with the same answers."""
    role = f"mg_plain_{secrets.token_hex(4)}"
    async with fresh_database() as url:
        admin = await asyncpg.connect(url)
        try:
            await admin.execute(f"CREATE ROLE {role} LOGIN")
            await admin.execute(f"GRANT ALL ON SCHEMA public TO {role}")
            await admin.execute(f"REVOKE CREATE ON DATABASE {url.rsplit('/', 1)[1]} FROM PUBLIC")
            await admin.execute("DROP EXTENSION IF EXISTS pg_trgm")
            store = PostgresStore(url.replace("://postgres@", f"://{role}@"))
            await store.migrate()
            try:
                missing = await admin.fetch("SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm'")
                indexes = await admin.fetch(
                    "SELECT 1 FROM pg_indexes WHERE indexname LIKE 'api_keys_search%'"
                )
                assert missing == [] and indexes == []
                account = await store.create_account("plain", 0, NOW)
                rows = key_rows(account.id, [f"Plain {n}" for n in range(40)])
                await admin.executemany(INSERT.format(", ".join(f"${n}" for n in range(1, 11))), rows)
                order = sorted(rows, key=lambda r: (float(str(r[8])), str(r[0])))
                for search in ("plain 1", "PLAIN", "n 3"):
                    expected = [str(r[0]) for r in order if search.lower() in str(r[2]).lower()]
                    assert await searched(store, account.id, search, 4) == expected, search
            finally:
                await store.close()
        finally:
            await admin.close()
            drop = await asyncpg.connect(url.rsplit("/", 1)[0] + "/postgres")
            try:
                await drop.execute(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}" WITH (FORCE)')
                await drop.execute(f"DROP ROLE IF EXISTS {role}")
            finally:
                await drop.close()


async def test_sqlite_upgrade_indexes_the_keys_already_there(tmp_path: Path) -> None:
    """A database from before migration 0019 (its table, triggers and record removed here) gets
    its existing keys indexed when it is migrated, and keys written after are indexed too."""
    path = tmp_path / "old.db"
    store = SqliteStore(path)
    await store.migrate()
    account = await store.create_account("old", 0, NOW)
    await store.close()
    with sqlite3.connect(path) as db:
        for trigger in ("insert", "update", "delete"):
            db.execute(f"DROP TRIGGER api_keys_search_{trigger}")
        db.execute("DROP TABLE api_keys_search")
        db.execute("DELETE FROM schema_migrations WHERE version = '0019_key_search'")
        db.executemany(INSERT.format(", ".join("?" * 10)), key_rows(account.id, ["Legacy one", "legacy two"]))
    store = SqliteStore(path)
    await store.migrate()
    try:
        found = await store.key_page(account.id, limit=10, search="LEGACY")
        assert [k.name for k in found] == ["Legacy one", "legacy two"]  # created at NOW and NOW + 2
        with sqlite3.connect(path) as db:
            (indexed,) = db.execute(
                "SELECT count(*) FROM api_keys_search WHERE api_keys_search MATCH '\"legacy\"'"
            ).fetchone()
        assert indexed == 2
    finally:
        await store.close()
