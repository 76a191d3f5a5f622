"""PostgreSQL for the data-size modes (``make bench ARGS="--store postgresql --keys N --usage-records N"``,
docs/bench.md): a database of its own for each of the two gateways in the server ``bench/run.sh``
started, and the large data written by one ``INSERT ... SELECT generate_series`` each, the same
rows as the SQLite seeding (``bench.datasize``) writes.
"""

from __future__ import annotations

import time

import asyncpg

from bench import modes
from modelgate.storage import rollups
from modelgate.storage.postgres_database import _LOCK_KEY_VERSIONS
from modelgate.storage.postgres_usage import _DAY

DAY = 86_400.0
#: Keys the seeded usage records are spread over (``bench.datasize.RECORD_KEYS``).
RECORD_KEYS = 2_000


async def databases() -> tuple[list[str], str]:
    """Two fresh databases (the small gateway's, the large one's) and the Redis both share."""
    admin_url, redis_url = modes.service_urls()
    return [await modes.create_database(admin_url), await modes.create_database(admin_url)], redis_url


async def seed_keys(url: str, n: int) -> float:
    """``n`` active keys of the bench account (``key_seed…``, named ``seeded i``), in one statement.
    Their versions come after every existing one and the version sequence is moved past them,
    under the key writers' lock (``storage.postgres_keys``), so the running gateway's poll takes
    them up and a key created later sorts after them. Returns their creation time (all alike)."""
    now = time.time()
    conn = await asyncpg.connect(url)
    try:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", _LOCK_KEY_VERSIONS)
            base = int(await conn.fetchval("SELECT nextval('api_key_version')"))
            await conn.execute(
                "INSERT INTO api_keys (id, account_id, name, grp, rpm, digest, prefix, last4, created_at, version) "
                "SELECT 'key_seed' || lpad(i::text, 12, '0'), 1, 'seeded ' || i, 'Pro', 1000, "
                "sha256(('seed ' || i)::bytea), 'sk-cs4-seed', '0000', $1, $2 + i "
                "FROM generate_series(0, $3 - 1) AS i",
                now,
                base,
                n,
            )
            await conn.execute("SELECT setval('api_key_version', $1)", base + n)
    finally:
        await conn.close()
    return now


async def seed_usage(url: str, n: int, keys: int) -> None:
    """``n`` usage records over the last 30 days in time order, as ``bench.datasize.seed_usage``
    writes them on SQLite (three models and endpoints, one record in ten of the busy key), with
    the gateway stopped: the table's secondary indexes dropped and built again after, its
    triggers off meanwhile, the rollups rebuilt in one pass (``modelgate usage rebuild-rollups``),
    then ``VACUUM ANALYZE`` as autovacuum would leave a table that old."""
    now = time.time()
    spread = max(1, min(keys, RECORD_KEYS))
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("SET maintenance_work_mem = '512MB'")
        indexes = await conn.fetch(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'usage_records' AND indexname NOT IN "
            "(SELECT conname FROM pg_constraint WHERE conrelid = 'usage_records'::regclass)"
        )
        for name, _ in indexes:
            await conn.execute(f'DROP INDEX "{name}"')
        await conn.execute("ALTER TABLE usage_records DISABLE TRIGGER USER")
        await conn.execute(
            "INSERT INTO usage_records (request_id, key_id, account_id, endpoint, model, month, status, "
            "created_at, finished_at, input_tokens, output_tokens, cache_creation_tokens, cache_read_tokens, "
            "charged_uc) "
            "SELECT 'req_seed' || lpad(i::text, 12, '0'), "
            "'key_seed' || lpad((CASE WHEN i % 10 = 0 THEN 0 ELSE (i * 40503) % $2 END)::text, 12, '0'), 1, "
            "(ARRAY['messages', 'chat', 'responses'])[(i / 3) % 3 + 1], "
            "(ARRAY['aria-haiku-4.5', 'aria-sonnet-4.5', 'aria-opus-4.5'])[i % 3 + 1], "
            "to_char(to_timestamp($3 + i * $4) AT TIME ZONE 'UTC', 'YYYY-MM'), 'ok', "
            "$3 + i * $4, $3 + i * $4 + 1, "
            "100 + (i * 7919) % 4900, (100 + (i * 7919) % 4900) / 4, 0, (100 + (i * 7919) % 4900) / 2, "
            "(100 + (i * 7919) % 4900) * 3 FROM generate_series(0::bigint, $1 - 1) AS i",
            n,
            spread,
            now - 30 * DAY,
            30 * DAY / max(n, 1),
        )
        for _, create in indexes:
            await conn.execute(create)
        async with conn.transaction():
            for statement in rollups.rebuild_statements(_DAY):
                await conn.execute(statement)
        await conn.execute("ALTER TABLE usage_records ENABLE TRIGGER USER")
        await conn.execute("VACUUM ANALYZE")
    finally:
        await conn.close()
