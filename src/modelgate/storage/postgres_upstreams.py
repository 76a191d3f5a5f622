"""Runtime upstream entries on PostgreSQL (``storage.upstream_entries``)."""

from __future__ import annotations

from typing import Any

from modelgate.storage.postgres_database import PostgresRepository
from modelgate.storage.upstream_entries import (
    EntryKind,
    StoredEntry,
    StoredPrice,
    UpstreamSnapshot,
)

_BUMP = "UPDATE upstream_generation SET generation = generation + 1 WHERE id = 1 RETURNING generation"


async def _bump(conn: Any) -> int:
    return int(await conn.fetchval(_BUMP))


class PostgresUpstreams(PostgresRepository):
    async def generation(self) -> int:
        async with self._conn() as conn:
            value = await conn.fetchval("SELECT generation FROM upstream_generation WHERE id = 1")
        return int(value or 0)

    async def snapshot(self) -> UpstreamSnapshot:
        async with self._conn() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
            generation = int(await conn.fetchval("SELECT generation FROM upstream_generation WHERE id = 1"))
            entries = tuple(
                StoredEntry(r["kind"], r["name"], r["body"], r["sealed"], r["updated_at"])
                for r in await conn.fetch(
                    "SELECT kind, name, body, sealed, updated_at FROM upstream_entries ORDER BY kind, name"
                )
            )
            prices = tuple(
                StoredPrice(r["model_id"], r["effective_from"], r["body"], r["created_at"])
                for r in await conn.fetch(
                    "SELECT model_id, effective_from, body, created_at FROM model_prices "
                    "ORDER BY model_id, effective_from"
                )
            )
        return UpstreamSnapshot(generation, entries, prices)

    async def put_entry(self, entry: StoredEntry) -> int:
        async with self._tx() as conn:
            await conn.execute(
                "INSERT INTO upstream_entries (kind, name, body, sealed, updated_at) VALUES ($1, $2, $3, $4, $5) "
                "ON CONFLICT (kind, name) DO UPDATE SET body = excluded.body, sealed = excluded.sealed, "
                "updated_at = excluded.updated_at",
                entry.kind,
                entry.name,
                entry.body,
                entry.sealed,
                entry.updated_at,
            )
            return await _bump(conn)

    async def delete_entry(self, kind: EntryKind, name: str) -> int | None:
        async with self._tx() as conn:
            gone = await conn.fetchval(
                "DELETE FROM upstream_entries WHERE kind = $1 AND name = $2 RETURNING 1", kind, name
            )
            return await _bump(conn) if gone else None

    async def put_price(self, price: StoredPrice) -> int:
        async with self._tx() as conn:
            await conn.execute(
                "INSERT INTO model_prices (model_id, effective_from, body, created_at) VALUES ($1, $2, $3, $4) "
                "ON CONFLICT (model_id, effective_from) DO UPDATE SET body = excluded.body, "
                "created_at = excluded.created_at",
                price.model_id,
                price.effective_from,
                price.body,
                price.created_at,
            )
            return await _bump(conn)

    async def delete_price(self, model_id: str, effective_from: float) -> int | None:
        async with self._tx() as conn:
            gone = await conn.fetchval(
                "DELETE FROM model_prices WHERE model_id = $1 AND effective_from = $2 RETURNING 1",
                model_id,
                effective_from,
            )
            return await _bump(conn) if gone else None
