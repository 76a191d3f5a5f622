"""PostgreSQL implementation of ``Store``: the shared database of several gateway instances.

Every instance holds an asyncpg pool; every ledger operation is one transaction whose checks and
writes are serialised by row locks, so the invariants of ``storage.base`` hold across instances:

- Reserves, settles and releases are group-committed (``storage.postgres_ledger``): what the
  instance has ready together runs as one call of the ``modelgate_ledger`` function (migration
  0006), which locks the reservations being finished, then the accounts, then the key-months, each
  in sorted order, and applies the rules of ``storage.base`` to the locked rows. Instances
  reserving against the same account queue on its row; no batch can deadlock another. A
  settlement claims its reservation with ``DELETE … RETURNING``: of a settle, a replay and a
  sweeper on another instance exactly one sees the row. The returned row (key, account, month,
  amount, endpoint, model, start) is what gets charged and recorded.
- Key versions come from a sequence. A sequence alone hands out numbers in call order but
  transactions commit in any order: a poller that saw version 7 could miss a version 6 committed
  just after. Key writers therefore hold a transaction-scoped advisory lock from ``nextval`` to
  commit (PostgreSQL makes a commit visible before it releases locks), so versions become visible in
  increasing order and ``keys_changed_since`` never skips one. Key writes are rare (admin actions),
  so serialising them costs nothing on the request path.
- Migrations run under a session advisory lock, so instances starting together apply each file once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from importlib import resources
from typing import Any

import asyncpg

from modelgate.storage import rows
from modelgate.storage.base import (
    DEFAULT_BATCH_WAIT_SECONDS,
    DEFAULT_POOL_SIZE,
    MAX_UC,
    Account,
    AmountTooLarge,
    Conflict,
    ConnectionUse,
    KeyControls,
    KeyRecord,
    LedgerObserver,
    NewKey,
    Refusal,
    Reservation,
    ReserveRequest,
    Settlement,
    StorageError,
    UsageRecord,
    UsageSummary,
)
from modelgate.storage.postgres_batches import DATABASE_ERRORS, connection_lost
from modelgate.storage.postgres_ledger import LedgerBatches
from modelgate.storage.postgres_reports import PostgresReports
from modelgate.storage.postgres_responses import PostgresResponses
from modelgate.storage.postgres_saves import ResponseSaves
from modelgate.storage.postgres_tokens import PostgresAdminTokens

#: Advisory lock ids ("modelgat" in ASCII, then +1): migrations, and key-version ordering.
_LOCK_MIGRATIONS = 0x6D6F_6465_6C67_6174
_LOCK_KEY_VERSIONS = _LOCK_MIGRATIONS + 1
COMMAND_TIMEOUT_SECONDS = 15.0

_KEY_COLUMNS = rows.KEY_COLUMNS
_ACCOUNT_COLUMNS = rows.ACCOUNT_COLUMNS
_USAGE_COLUMNS = rows.USAGE_COLUMNS
_account = rows.account_record
_usage = rows.usage_record


def _key(row: Sequence[Any]) -> KeyRecord:
    return rows.key_record(row, tuple(row[5]) if row[5] is not None else None)


async def _nothing_to_reset(conn: Any) -> None:
    """What a connection back in the pool needs beyond asyncpg's own clean-up (which rolls back an
    open transaction): nothing. The store leaves no session state behind (no LISTEN, SET or
    cursor; advisory locks are transaction-scoped, the migrations' session lock is released in a
    ``finally``), and asyncpg's default reset would cost a round trip on every release."""


class PostgresStore(PostgresAdminTokens, PostgresReports, PostgresResponses):
    def __init__(
        self,
        url: str,
        *,
        pool_max_size: int = DEFAULT_POOL_SIZE,
        batch_wait: float = DEFAULT_BATCH_WAIT_SECONDS,
    ) -> None:
        self.url = url
        self._pool_max_size = pool_max_size
        # The pool is made on first use, on the event loop that uses it (the store is built
        # before the server's loop runs).
        self._pool: Any = None
        self._pool_lock = asyncio.Lock()
        #: Reserves, settles and releases, group-committed (``storage.postgres_ledger``).
        self._ledger = LedgerBatches(self._get_pool, wait=batch_wait)
        #: Stored Responses answers, group-committed (``storage.postgres_saves``).
        self._saves = ResponseSaves(self._get_pool, wait=batch_wait)

    # plumbing -----------------------------------------------------------------------------

    async def _get_pool(self) -> Any:
        if self._pool is None:
            async with self._pool_lock:
                if self._pool is None:
                    self._pool = await asyncpg.create_pool(
                        self.url,
                        min_size=1,
                        max_size=self._pool_max_size,
                        command_timeout=COMMAND_TIMEOUT_SECONDS,
                        reset=_nothing_to_reset,
                    )
        return self._pool

    @asynccontextmanager
    async def _conn(self) -> AsyncIterator[Any]:
        try:
            pool = await self._get_pool()
            async with pool.acquire() as conn:
                yield conn
        except asyncpg.IntegrityConstraintViolationError as exc:
            raise Conflict(str(exc)) from exc
        except DATABASE_ERRORS as exc:
            if self._pool is not None and connection_lost(exc):
                # The server ended its sessions (a restart): the pool's idle ones are stale too.
                await self._pool.expire_connections()
            raise StorageError(f"postgresql: {exc}") from exc

    @asynccontextmanager
    async def _tx(self) -> AsyncIterator[Any]:
        async with self._conn() as conn, conn.transaction():
            yield conn

    async def migrate(self) -> None:
        folder = resources.files("modelgate").joinpath("storage/migrations/postgresql")
        files = sorted((e for e in folder.iterdir() if e.name.endswith(".sql")), key=lambda e: e.name)
        async with self._conn() as conn:
            await conn.execute("SELECT pg_advisory_lock($1)", _LOCK_MIGRATIONS)
            try:
                await conn.execute(
                    "CREATE TABLE IF NOT EXISTS schema_migrations "
                    "(version TEXT PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)"
                )
                done = {r[0] for r in await conn.fetch("SELECT version FROM schema_migrations")}
                for entry in files:
                    version = entry.name.removesuffix(".sql")
                    if version in done:
                        continue
                    async with conn.transaction():
                        await conn.execute(entry.read_text("utf-8"))
                        await conn.execute(
                            "INSERT INTO schema_migrations VALUES ($1, extract(epoch FROM now()))", version
                        )
            finally:
                await conn.execute("SELECT pg_advisory_unlock($1)", _LOCK_MIGRATIONS)

    async def close(self) -> None:
        if self._pool is not None:
            # The batchers hand back the connections they keep; the pool waits for all of them.
            await self._ledger.aclose()
            await self._saves.aclose()
            pool, self._pool = self._pool, None
            await pool.close()

    async def ping(self) -> None:
        async with self._conn() as conn:
            await conn.fetchval("SELECT 1")

    def connections(self) -> ConnectionUse:
        pool = self._pool
        if pool is None:  # nothing asked yet: the pool opens on first use
            return ConnectionUse(in_use=0, idle=0, limit=self._pool_max_size)
        size, idle = pool.get_size(), pool.get_idle_size()
        return ConnectionUse(in_use=size - idle, idle=idle, limit=self._pool_max_size)

    # accounts -----------------------------------------------------------------------------

    async def create_account(self, name: str, balance_uc: int, now: float) -> Account:
        async with self._tx() as conn:
            row = await conn.fetchrow(
                f"INSERT INTO accounts (name, balance_uc, created_at) VALUES ($1, $2, $3) "
                f"RETURNING {_ACCOUNT_COLUMNS}",
                name,
                balance_uc,
                now,
            )
            if balance_uc:
                await conn.execute(
                    "INSERT INTO topups (account_id, amount_uc, note, created_at) VALUES ($1, $2, 'initial', $3)",
                    row[0],
                    balance_uc,
                    now,
                )
            return _account(row)

    async def _account_where(self, condition: str, value: Any) -> Account | None:
        async with self._conn() as conn:
            row = await conn.fetchrow(f"SELECT {_ACCOUNT_COLUMNS} FROM accounts WHERE {condition}", value)
        return _account(row) if row else None

    async def get_account(self, account_id: int) -> Account | None:
        return await self._account_where("id = $1", account_id)

    async def find_account(self, name: str) -> Account | None:
        return await self._account_where("name = $1", name)

    async def list_accounts(self) -> list[Account]:
        async with self._conn() as conn:
            rows = await conn.fetch(f"SELECT {_ACCOUNT_COLUMNS} FROM accounts ORDER BY id")
        return [_account(r) for r in rows]

    async def top_up(self, account_id: int, amount_uc: int, note: str, now: float) -> Account:
        async with self._tx() as conn:
            await conn.execute(
                "INSERT INTO topups (account_id, amount_uc, note, created_at) VALUES ($1, $2, $3, $4)",
                account_id,
                amount_uc,
                note,
                now,
            )
            row = await conn.fetchrow(
                f"UPDATE accounts SET balance_uc = balance_uc + $1 WHERE id = $2 AND balance_uc + $1 <= $3 "
                f"RETURNING {_ACCOUNT_COLUMNS}",
                amount_uc,
                account_id,
                MAX_UC,
            )
            if row is None and await conn.fetchval("SELECT 1 FROM accounts WHERE id = $1", account_id):
                raise AmountTooLarge(f"the balance would exceed the maximum of {MAX_UC} µc")
            return _account(row)

    async def topups_total(self, account_id: int) -> int:
        async with self._conn() as conn:
            total = await conn.fetchval(
                "SELECT COALESCE(SUM(amount_uc), 0) FROM topups WHERE account_id = $1", account_id
            )
        return int(total)

    # keys ---------------------------------------------------------------------------------

    @staticmethod
    async def _next_version(conn: Any) -> int:
        """A new key version; the caller's transaction keeps the ordering lock until it commits."""
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _LOCK_KEY_VERSIONS)
        return int(await conn.fetchval("SELECT nextval('api_key_version')"))

    @staticmethod
    async def _get_key(conn: Any, key_id: str) -> KeyRecord | None:
        row = await conn.fetchrow(f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE id = $1", key_id)
        return _key(row) if row else None

    async def create_key(self, key: NewKey, now: float) -> KeyRecord:
        allowed = list(key.allowed_models) if key.allowed_models is not None else None
        async with self._tx() as conn:
            version = await self._next_version(conn)
            row = await conn.fetchrow(
                "INSERT INTO api_keys (id, account_id, name, grp, rpm, allowed_models, monthly_cap_uc, "
                "digest, prefix, last4, created_at, version) "
                f"VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) RETURNING {_KEY_COLUMNS}",
                key.id,
                key.account_id,
                key.name,
                key.group,
                key.rpm,
                allowed,
                key.monthly_cap_uc,
                key.digest,
                key.prefix,
                key.last4,
                now,
                version,
            )
            return _key(row)

    async def get_key(self, key_id: str) -> KeyRecord | None:
        async with self._conn() as conn:
            return await self._get_key(conn, key_id)

    async def list_keys(self, account_id: int | None = None) -> list[KeyRecord]:
        async with self._conn() as conn:
            if account_id is None:
                rows = await conn.fetch(f"SELECT {_KEY_COLUMNS} FROM api_keys ORDER BY created_at, id")
            else:
                rows = await conn.fetch(
                    f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE account_id = $1 ORDER BY created_at, id",
                    account_id,
                )
        return [_key(r) for r in rows]

    async def update_key(self, key_id: str, controls: KeyControls, now: float) -> KeyRecord | None:
        values: dict[str, Any] = {}
        if controls.name is not None:
            values["name"] = controls.name
        if controls.rpm is not None:
            values["rpm"] = controls.rpm
        if controls.allowed_models is not None:
            values["allowed_models"] = list(controls.allowed_models) if controls.allowed_models else None
        if controls.monthly_cap_uc is not None:
            values["monthly_cap_uc"] = None if controls.monthly_cap_uc < 0 else controls.monthly_cap_uc
        async with self._tx() as conn:
            if await self._get_key(conn, key_id) is None:
                return None
            values["version"] = await self._next_version(conn)
            sets = ", ".join(f"{column} = ${i}" for i, column in enumerate(values, start=2))
            row = await conn.fetchrow(
                f"UPDATE api_keys SET {sets} WHERE id = $1 RETURNING {_KEY_COLUMNS}", key_id, *values.values()
            )
            return _key(row)

    async def rotate_key(
        self, key_id: str, digest: bytes, prefix: str, last4: str, grace_seconds: float, now: float
    ) -> KeyRecord | None:
        async with self._tx() as conn:
            # The version lock serialises key writers, so the row cannot change under us.
            version = await self._next_version(conn)
            current = await self._get_key(conn, key_id)
            if current is None or current.state != "active":
                return None
            # With no grace the old secret is dropped at once; otherwise it is kept as the previous
            # digest until it expires (one previous secret at a time).
            previous, expires = (current.digest, now + grace_seconds) if grace_seconds > 0 else (None, None)
            row = await conn.fetchrow(
                "UPDATE api_keys SET digest = $2, prefix = $3, last4 = $4, previous_digest = $5, "
                f"previous_expires_at = $6, rotated_at = $7, version = $8 WHERE id = $1 RETURNING {_KEY_COLUMNS}",
                key_id,
                digest,
                prefix,
                last4,
                previous,
                expires,
                now,
                version,
            )
            return _key(row)

    async def revoke_key(self, key_id: str, now: float) -> KeyRecord | None:
        async with self._tx() as conn:
            version = await self._next_version(conn)
            current = await self._get_key(conn, key_id)
            if current is None or current.state == "disabled":
                return current
            row = await conn.fetchrow(
                "UPDATE api_keys SET state = 'disabled', revoked_at = $2, version = $3 WHERE id = $1 "
                f"RETURNING {_KEY_COLUMNS}",
                key_id,
                now,
                version,
            )
            return _key(row)

    async def keys_changed_since(self, version: int) -> list[KeyRecord]:
        async with self._conn() as conn:
            rows = await conn.fetch(
                f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE version > $1 ORDER BY version", version
            )
        return [_key(r) for r in rows]

    # ledger -------------------------------------------------------------------------------

    async def reserve(self, request: ReserveRequest) -> Reservation | Refusal:
        return await self._ledger.reserve(request)

    async def settle(self, usage: UsageRecord) -> Settlement:
        return await self._ledger.finish(usage, charge=True)

    async def release(self, usage: UsageRecord) -> Settlement:
        return await self._ledger.finish(usage, charge=False)

    async def expired_reservations(self, now: float, limit: int = 100) -> list[tuple[str, str, int, str]]:
        async with self._conn() as conn:
            rows = await conn.fetch(
                "SELECT request_id, key_id, account_id, month FROM reservations "
                "WHERE expires_at < $1 ORDER BY expires_at LIMIT $2",
                now,
                limit,
            )
        return [(r[0], r[1], r[2], r[3]) for r in rows]

    async def pending_reservation_page(self, after: str, limit: int) -> list[tuple[str, str, int, str]]:
        async with self._conn() as conn:
            rows = await conn.fetch(
                "SELECT request_id, key_id, account_id, month FROM reservations "
                "WHERE request_id > $1 ORDER BY request_id LIMIT $2",
                after,
                limit,
            )
        return [(r[0], r[1], r[2], r[3]) for r in rows]

    async def month_spend(self, key_id: str, month: str) -> tuple[int, int]:
        async with self._conn() as conn:
            row = await conn.fetchrow(
                "SELECT spent_uc, reserved_uc FROM key_month_spend WHERE key_id = $1 AND month = $2",
                key_id,
                month,
            )
        return (int(row[0]), int(row[1])) if row else (0, 0)

    async def pending_reservations(self) -> int:
        async with self._conn() as conn:
            return int(await conn.fetchval("SELECT COUNT(*) FROM reservations"))

    async def reservation_stats(self) -> tuple[int, float | None]:
        async with self._conn() as conn:
            row = await conn.fetchrow("SELECT COUNT(*), MIN(created_at) FROM reservations")
        return int(row[0]), None if row[1] is None else float(row[1])

    def observe_ledger(self, observer: LedgerObserver | None) -> None:
        self._ledger.observer = observer
        self._saves.observer = observer

    # usage --------------------------------------------------------------------------------

    @staticmethod
    def _usage_filter(month: str, account_id: int | None, key_id: str | None) -> tuple[str, list[Any]]:
        where: list[str] = ["month = $1"]
        args: list[Any] = [month]
        if account_id is not None:
            args.append(account_id)
            where.append(f"account_id = ${len(args)}")
        if key_id is not None:
            args.append(key_id)
            where.append(f"key_id = ${len(args)}")
        return " AND ".join(where), args

    async def usage_summary(
        self, month: str, *, account_id: int | None = None, key_id: str | None = None
    ) -> UsageSummary:
        where, args = self._usage_filter(month, account_id, key_id)
        async with self._conn() as conn:
            total = await conn.fetchrow(
                "SELECT COUNT(*), COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0), "
                "COALESCE(SUM(cache_creation_tokens), 0), COALESCE(SUM(cache_read_tokens), 0), "
                "COALESCE(SUM(charged_uc), 0), COALESCE(SUM(web_search_requests), 0) "
                f"FROM usage_records WHERE {where}",
                *args,
            )
            by_model = await conn.fetch(
                f"SELECT model, SUM(charged_uc) FROM usage_records WHERE {where} GROUP BY model ORDER BY model",
                *args,
            )
        requests, input_tokens, output_tokens, cache_creation, cache_read, charged, searches = (
            int(v) for v in total
        )
        return UsageSummary(
            month,
            requests,
            input_tokens,
            output_tokens,
            cache_creation,
            cache_read,
            charged,
            by_model={m: int(c) for m, c in by_model},
            web_search_requests=searches,
        )

    async def usage_records(
        self, month: str, *, account_id: int | None = None, key_id: str | None = None, limit: int = 100
    ) -> list[UsageRecord]:
        where, args = self._usage_filter(month, account_id, key_id)
        async with self._conn() as conn:
            rows = await conn.fetch(
                f"SELECT {_USAGE_COLUMNS} FROM usage_records WHERE {where} "
                f"ORDER BY created_at DESC LIMIT ${len(args) + 1}",
                *args,
                limit,
            )
        return [_usage(r) for r in rows]
