"""The SQLite ledger: its transactions (the semantics are in ``storage.base``) and
``SqliteLedger``, the repository that runs them.

Each function runs inside a write transaction the caller opened with ``BEGIN IMMEDIATE`` (group
commit, ``storage.group_commit``), so its reads and updates are serialised against every other
writer of the database, other processes included.
"""

from __future__ import annotations

import sqlite3

from modelgate.storage import rows, spend_windows
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

#: The seven spend caps of ``reserve``'s row beyond the key's month (the key's 5h, day and week;
#: the account's 5h, day, week and month) when none is set.
_NO_WINDOW_CAPS = (None,) * 7


def reserve(db: sqlite3.Connection, r: ReserveRequest) -> Reservation | Refusal:
    # One read of everything the decision needs, under the write lock taken by BEGIN
    # IMMEDIATE: nothing can change between this read and the updates below.
    row = db.execute(
        "SELECT a.balance_uc - a.reserved_uc, k.monthly_cap_uc, "
        "COALESCE(s.spent_uc, 0) + COALESCE(s.reserved_uc, 0), k.cap_5h_uc, k.cap_day_uc, k.cap_week_uc, "
        "a.cap_5h_uc, a.cap_day_uc, a.cap_week_uc, a.monthly_cap_uc "
        "FROM accounts a JOIN api_keys k ON k.id = ? "
        "LEFT JOIN key_month_spend s ON s.key_id = k.id AND s.month = ? WHERE a.id = ?",
        (r.key_id, r.month, r.account_id),
    ).fetchone()
    if row is None:
        return Refusal("balance", 0)
    # Every window cap in force is decided in this same step: none checked on its own. A key and
    # account with no window cap (the common case) make no further statement here.
    capped = row[3:10] != _NO_WINDOW_CAPS
    caps = spend_windows.caps_in_force(r.key_id, r.account_id, row[3:6], row[6:10]) if capped else []
    windows = [(c.reason, c.cap_uc, _window_used(db, c, r.now)) for c in caps]
    decision = decide_hold(r, int(row[0]), row[1], int(row[2]), windows)
    if isinstance(decision, Refusal):
        return decision
    granted = decision.granted_uc
    counted = [(c.subject, c.window, spend_windows.period_start(c.window, r.now)) for c in caps]
    for subject, window, start in counted:
        db.execute(
            "INSERT INTO spend_windows (subject, win, start, reserved_uc) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (subject, win, start) DO UPDATE SET reserved_uc = reserved_uc + excluded.reserved_uc",
            (subject, window, start, granted),
        )
        if window == "5h":  # buckets past the window that no hold still counts in
            db.execute(
                "DELETE FROM spend_windows WHERE subject = ? AND win = '5h' AND start < ? AND reserved_uc = 0",
                (subject, spend_windows.first_counted("5h", r.now)),
            )
    db.execute(
        "INSERT INTO reservations (request_id, key_id, account_id, month, amount_uc, created_at, "
        "expires_at, endpoint, model, windows) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
            spend_windows.encode_rows(counted),
        ),
    )
    db.execute("UPDATE accounts SET reserved_uc = reserved_uc + ? WHERE id = ?", (granted, r.account_id))
    db.execute(
        "INSERT INTO key_month_spend (key_id, month, reserved_uc) VALUES (?, ?, ?) "
        "ON CONFLICT (key_id, month) DO UPDATE SET reserved_uc = reserved_uc + excluded.reserved_uc",
        (r.key_id, r.month, granted),
    )
    return decision


def finish(db: sqlite3.Connection, usage: UsageRecord, *, cost_uc: int | None) -> Settlement:
    """Settle ``usage``'s hold: charge ``cost_uc`` (None: a release, nothing charged). The
    fields of ``usage`` it sets come from the database and ``cost_uc`` alone, so running it again
    after a rollback (``group_commit``) gives the same result."""
    # Claiming deletes the pending reservation (under the write lock): of a racing settle, a
    # replayed settle and a sweeper in another process, exactly one finds it.
    claimed = db.execute(
        "DELETE FROM reservations WHERE request_id = ? "
        "RETURNING amount_uc, month, key_id, account_id, endpoint, model, created_at, windows",
        (usage.request_id,),
    ).fetchall()
    if not claimed:
        return Settlement(False, 0, *remaining(db, usage.account_id, usage.key_id, usage.month))
    amount, month, key_id, account_id, endpoint, model, created_at, counted = claimed[0]
    windows = spend_windows.decode_rows(counted)
    # A true upper bound was reserved, so the real cost fits; should an upstream ever report
    # more, only what is free is charged beyond the hold (a cap or balance is never overshot).
    # Under a window cap nothing is charged beyond the hold: the rest is the shortfall.
    charged = shortfall = 0
    if cost_uc is not None:
        cost = cost_uc
        free = remaining(db, account_id, key_id, month) if cost > amount else (0, None)
        charged, shortfall = decide_charge(cost, amount, free[0], 0 if windows else free[1])
    # Settled in the periods the hold was counted in (released exactly once: the claim above).
    for subject, window, start in windows:
        db.execute(
            "UPDATE spend_windows SET reserved_uc = reserved_uc - ?, spent_uc = spent_uc + ? "
            "WHERE subject = ? AND win = ? AND start = ?",
            (amount, charged, subject, window, start),
        )
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
    # The key's monthly cap comes with its month's figures (one statement, not two).
    used = db.execute(
        "UPDATE key_month_spend SET reserved_uc = reserved_uc - ?, spent_uc = spent_uc + ? "
        "WHERE key_id = ? AND month = ? RETURNING spent_uc + reserved_uc, "
        "(SELECT monthly_cap_uc FROM api_keys WHERE id = key_month_spend.key_id)",
        (amount, charged, key_id, month),
    ).fetchall()
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
    if used:
        spent, cap = used[0]
    else:  # no month row (never so after a reserve): the cap alone
        key = db.execute("SELECT monthly_cap_uc FROM api_keys WHERE id = ?", (key_id,)).fetchone()
        spent, cap = 0, (key[0] if key else None)
    cap_left = None if cap is None else max(0, cap - spent)
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


def _window_used(db: sqlite3.Connection, cap: spend_windows.WindowCap, at: float) -> int:
    """Spent + held in ``cap``'s window as counted at ``at`` (one row, or the 5 h's buckets)."""
    last = spend_windows.period_start(cap.window, at)
    first = spend_windows.first_counted(cap.window, at)
    row = db.execute(
        "SELECT COALESCE(SUM(spent_uc + reserved_uc), 0) FROM spend_windows "
        "WHERE subject = ? AND win = ? AND start BETWEEN ? AND ?",
        (cap.subject, cap.window, first, last),
    ).fetchone()
    return int(row[0])


def window_use(
    db: sqlite3.Connection, subject: str, window: spend_windows.Window, at: float
) -> spend_windows.WindowUse:
    """What ``GET /v1/key`` and the alerts show of one window at ``at``."""
    last = spend_windows.period_start(window, at)
    first = spend_windows.first_counted(window, at)
    row = db.execute(
        "SELECT COALESCE(SUM(spent_uc), 0), COALESCE(SUM(reserved_uc), 0), "
        "MIN(CASE WHEN spent_uc + reserved_uc > 0 THEN start END) FROM spend_windows "
        "WHERE subject = ? AND win = ? AND start BETWEEN ? AND ?",
        (subject, window, first, last),
    ).fetchone()
    return spend_windows.WindowUse.of(window, at, int(row[0]), int(row[1]), row[2])


class SqliteLedger(SqliteRepository):
    """``LedgerStore`` on SQLite: each step one of the functions above, in the loop turn's shared
    transaction (``storage.group_commit``)."""

    async def reserve(self, request: ReserveRequest) -> Reservation | Refusal:
        self.database.file_probe.check_room()
        return await self.database.group_commit.run(lambda db: reserve(db, request))

    async def settle(self, usage: UsageRecord) -> Settlement:
        cost = usage.charged_uc  # the record's charged_uc becomes what was charged
        return await self.database.group_commit.run(lambda db: finish(db, usage, cost_uc=cost), usage)

    async def release(self, usage: UsageRecord) -> Settlement:
        return await self.database.group_commit.run(lambda db: finish(db, usage, cost_uc=None), usage)

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

    async def window_use(
        self, subject: str, window: spend_windows.Window, now: float
    ) -> spend_windows.WindowUse:
        return await self._run(lambda: window_use(self._db(), subject, window, now))

    def observe_ledger(self, observer: LedgerObserver | None) -> None:
        self.database.group_commit.observer = observer
