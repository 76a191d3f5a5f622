"""The SQLite ledger: its transactions (the semantics are in ``storage.base``) and
``SqliteLedger``, the repository that runs them.

Each function runs inside a write transaction the caller opened with ``BEGIN IMMEDIATE`` (group
commit, ``storage.group_commit``), so its reads and updates are serialised against every other
writer of the database, other processes included.
"""

from __future__ import annotations

import sqlite3

from modelgate.storage import rows
from modelgate.storage.base import (
    LedgerObserver,
    Refusal,
    Reservation,
    ReserveRequest,
    Settlement,
    UsageRecord,
    decide_charge,
    decide_hold,
)
from modelgate.storage.sqlite_database import SqliteRepository


def reserve(db: sqlite3.Connection, r: ReserveRequest) -> Reservation | Refusal:
    # One read of everything the decision needs, under the write lock taken by BEGIN
    # IMMEDIATE: nothing can change between this read and the updates below.
    row = db.execute(
        "SELECT a.balance_uc - a.reserved_uc, k.monthly_cap_uc, "
        "COALESCE(s.spent_uc, 0) + COALESCE(s.reserved_uc, 0) "
        "FROM accounts a JOIN api_keys k ON k.id = ? "
        "LEFT JOIN key_month_spend s ON s.key_id = k.id AND s.month = ? WHERE a.id = ?",
        (r.key_id, r.month, r.account_id),
    ).fetchone()
    if row is None:
        return Refusal("balance", 0)
    decision = decide_hold(r, int(row[0]), row[1], int(row[2]))
    if isinstance(decision, Refusal):
        return decision
    granted = decision.granted_uc
    db.execute(
        "INSERT INTO reservations (request_id, key_id, account_id, month, amount_uc, created_at, "
        "expires_at, endpoint, model) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            r.request_id,
            r.key_id,
            r.account_id,
            r.month,
            granted,
            r.now,
            r.expires_at,
            r.endpoint,
            r.model,
        ),
    )
    db.execute("UPDATE accounts SET reserved_uc = reserved_uc + ? WHERE id = ?", (granted, r.account_id))
    db.execute(
        "INSERT INTO key_month_spend (key_id, month, reserved_uc) VALUES (?, ?, ?) "
        "ON CONFLICT (key_id, month) DO UPDATE SET reserved_uc = reserved_uc + excluded.reserved_uc",
        (r.key_id, r.month, granted),
    )
    return decision


def finish(db: sqlite3.Connection, usage: UsageRecord, *, charge: bool) -> Settlement:
    # Claiming deletes the pending reservation (under the write lock): of a racing settle, a
    # replayed settle and a sweeper in another process, exactly one finds it.
    claimed = db.execute(
        "DELETE FROM reservations WHERE request_id = ? "
        "RETURNING amount_uc, month, key_id, account_id, endpoint, model, created_at",
        (usage.request_id,),
    ).fetchall()
    if not claimed:
        return Settlement(False, 0, *remaining(db, usage.account_id, usage.key_id, usage.month))
    amount, month, key_id, account_id, endpoint, model, created_at = claimed[0]
    # A true upper bound was reserved, so the real cost fits; should an upstream ever report
    # more, only what is free is charged beyond the hold (a cap or balance is never overshot).
    charged = shortfall = 0
    if charge:
        cost = usage.charged_uc
        free = remaining(db, account_id, key_id, month) if cost > amount else (0, None)
        charged, shortfall = decide_charge(cost, amount, *free)
    # The reservation is the authority on whose money and which month this is: a request
    # that starts before midnight UTC and ends after it counts in the month it started.
    usage.charged_uc = charged
    usage.shortfall_uc = shortfall
    usage.month = month
    usage.key_id = key_id
    usage.account_id = account_id
    usage.endpoint, usage.model, usage.created_at = endpoint, model, created_at
    balance = db.execute(
        "UPDATE accounts SET reserved_uc = reserved_uc - ?, balance_uc = balance_uc - ? WHERE id = ? "
        "RETURNING balance_uc - reserved_uc",
        (amount, charged, account_id),
    ).fetchall()
    used = db.execute(
        "UPDATE key_month_spend SET reserved_uc = reserved_uc - ?, spent_uc = spent_uc + ? "
        "WHERE key_id = ? AND month = ? RETURNING spent_uc + reserved_uc",
        (amount, charged, key_id, month),
    ).fetchall()
    cap = db.execute("SELECT monthly_cap_uc FROM api_keys WHERE id = ?", (key_id,)).fetchone()
    db.execute(
        f"INSERT INTO usage_records ({rows.USAGE_COLUMNS}) VALUES ({', '.join('?' * 17)})",
        (
            usage.request_id,
            key_id,
            account_id,
            usage.endpoint,
            usage.model,
            month,
            usage.status,
            usage.created_at,
            usage.finished_at,
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_creation_tokens,
            usage.cache_read_tokens,
            charged,
            shortfall,
            usage.cache_write_1h_tokens,
            usage.web_search_requests,
        ),
    )
    cap_left = None
    if cap is not None and cap[0] is not None:
        cap_left = max(0, cap[0] - (used[0][0] if used else 0))
    return Settlement(True, charged, balance[0][0] if balance else 0, cap_left)


def remaining(db: sqlite3.Connection, account_id: int, key_id: str, month: str) -> tuple[int, int | None]:
    balance = db.execute(
        "SELECT balance_uc - reserved_uc FROM accounts WHERE id = ?", (account_id,)
    ).fetchone()
    cap = db.execute("SELECT monthly_cap_uc FROM api_keys WHERE id = ?", (key_id,)).fetchone()
    spend = db.execute(
        "SELECT spent_uc + reserved_uc FROM key_month_spend WHERE key_id = ? AND month = ?",
        (key_id, month),
    ).fetchone()
    cap_left = None
    if cap is not None and cap[0] is not None:
        cap_left = max(0, cap[0] - (spend[0] if spend else 0))
    return (balance[0] if balance else 0), cap_left


class SqliteLedger(SqliteRepository):
    """``LedgerStore`` on SQLite: each step one of the functions above, in the loop turn's shared
    transaction (``storage.group_commit``)."""

    async def reserve(self, request: ReserveRequest) -> Reservation | Refusal:
        self.database.file_probe.check_room()
        return await self.database.group_commit.run(lambda db: reserve(db, request))

    async def settle(self, usage: UsageRecord) -> Settlement:
        return await self.database.group_commit.run(lambda db: finish(db, usage, charge=True), usage)

    async def release(self, usage: UsageRecord) -> Settlement:
        return await self.database.group_commit.run(lambda db: finish(db, usage, charge=False), usage)

    async def expired_reservations(self, now: float, limit: int = 100) -> list[tuple[str, str, int, str]]:
        found = await self._run(
            lambda: (
                self._db()
                .execute(
                    "SELECT request_id, key_id, account_id, month FROM reservations "
                    "WHERE expires_at < ? ORDER BY expires_at LIMIT ?",
                    (now, limit),
                )
                .fetchall()
            )
        )
        return [(r[0], r[1], r[2], r[3]) for r in found]

    async def pending_reservation_page(self, after: str, limit: int) -> list[tuple[str, str, int, str]]:
        found = await self._run(
            lambda: (
                self._db()
                .execute(
                    "SELECT request_id, key_id, account_id, month FROM reservations "
                    "WHERE request_id > ? ORDER BY request_id LIMIT ?",
                    (after, limit),
                )
                .fetchall()
            )
        )
        return [(r[0], r[1], r[2], r[3]) for r in found]

    async def month_spend(self, key_id: str, month: str) -> tuple[int, int]:
        row = await self._run(
            lambda: (
                self._db()
                .execute(
                    "SELECT spent_uc, reserved_uc FROM key_month_spend WHERE key_id = ? AND month = ?",
                    (key_id, month),
                )
                .fetchone()
            )
        )
        return (int(row[0]), int(row[1])) if row else (0, 0)

    async def pending_reservations(self) -> int:
        row = await self._run(lambda: self._db().execute("SELECT COUNT(*) FROM reservations").fetchone())
        return int(row[0])

    async def reservation_stats(self) -> tuple[int, float | None]:
        sql = "SELECT COUNT(*), MIN(created_at) FROM reservations"
        row = await self._run(lambda: self._db().execute(sql).fetchone())
        return int(row[0]), None if row[1] is None else float(row[1])

    def observe_ledger(self, observer: LedgerObserver | None) -> None:
        self.database.group_commit.observer = observer
