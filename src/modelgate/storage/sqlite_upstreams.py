"""Runtime upstream entries on SQLite (``storage.upstream_entries``)."""

from __future__ import annotations

import sqlite3

from modelgate.storage.sqlite_database import SqliteRepository
from modelgate.storage.upstream_entries import (
    EntryKind,
    StoredEntry,
    StoredPrice,
    UpstreamSnapshot,
)

_BUMP = "UPDATE upstream_generation SET generation = generation + 1 WHERE id = 1 RETURNING generation"


def _bump(db: sqlite3.Connection) -> int:
    return int(db.execute(_BUMP).fetchone()[0])


class SqliteUpstreams(SqliteRepository):
    async def generation(self) -> int:
        def op() -> int:
            row = self._db().execute("SELECT generation FROM upstream_generation WHERE id = 1").fetchone()
            return int(row[0]) if row else 0

        return await self._run(op)

    async def snapshot(self) -> UpstreamSnapshot:
        def op() -> UpstreamSnapshot:
            db = self._db()
            # One read transaction: the generation and the rows it counts are consistent.
            db.execute("BEGIN")
            try:
                generation = int(db.execute("SELECT generation FROM upstream_generation").fetchone()[0])
                entries = tuple(
                    StoredEntry(kind, name, body, bytes(sealed) if sealed is not None else None, at)
                    for kind, name, body, sealed, at in db.execute(
                        "SELECT kind, name, body, sealed, updated_at FROM upstream_entries ORDER BY kind, name"
                    )
                )
                prices = tuple(
                    StoredPrice(model, start, body, at)
                    for model, start, body, at in db.execute(
                        "SELECT model_id, effective_from, body, created_at FROM model_prices "
                        "ORDER BY model_id, effective_from"
                    )
                )
            finally:
                db.execute("COMMIT")
            return UpstreamSnapshot(generation, entries, prices)

        return await self._run(op)

    async def put_entry(self, entry: StoredEntry) -> int:
        def op() -> int:
            with self._write() as db:
                db.execute(
                    "INSERT INTO upstream_entries (kind, name, body, sealed, updated_at) VALUES (?, ?, ?, ?, ?) "
                    "ON CONFLICT (kind, name) DO UPDATE SET body = excluded.body, sealed = excluded.sealed, "
                    "updated_at = excluded.updated_at",
                    (entry.kind, entry.name, entry.body, entry.sealed, entry.updated_at),
                )
                return _bump(db)

        return await self._run(op)

    async def delete_entry(self, kind: EntryKind, name: str) -> int | None:
        def op() -> int | None:
            with self._write() as db:
                gone = db.execute("DELETE FROM upstream_entries WHERE kind = ? AND name = ?", (kind, name))
                return _bump(db) if gone.rowcount else None

        return await self._run(op)

    async def put_price(self, price: StoredPrice) -> int:
        def op() -> int:
            with self._write() as db:
                db.execute(
                    "INSERT INTO model_prices (model_id, effective_from, body, created_at) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT (model_id, effective_from) DO UPDATE SET body = excluded.body, "
                    "created_at = excluded.created_at",
                    (price.model_id, price.effective_from, price.body, price.created_at),
                )
                return _bump(db)

        return await self._run(op)

    async def delete_price(self, model_id: str, effective_from: float) -> int | None:
        def op() -> int | None:
            with self._write() as db:
                gone = db.execute(
                    "DELETE FROM model_prices WHERE model_id = ? AND effective_from = ?",
                    (model_id, effective_from),
                )
                return _bump(db) if gone.rowcount else None

        return await self._run(op)
