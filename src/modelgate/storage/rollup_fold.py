"""The usage rollups (``storage.rollups``) kept once per ledger batch, on both engines.

A batch of ledger writes (``storage.group_commit`` on SQLite, ``postgres_ledger`` on PostgreSQL)
may write dozens of usage records, and most of them share their (key, UTC day, model, endpoint,
status) rollup row. Instead of three upserts per record (the triggers of sqlite 0013 and
postgresql 0018, dropped by sqlite 0016 and postgresql 0021), a batch's records are summed per
rollup row and each distinct row is upserted once, in the batch's own transaction: a crash never
leaves records without their sums, nor sums without their records.

- SQLite: ``UsageSums`` collects the records the batch's operations wrote (in Python, after each
  operation's savepoint was released) and ``write`` upserts them before the shared COMMIT.
- PostgreSQL: the ledger's one statement becomes ``ledger_call``: the call of ``modelgate_ledger``
  and the three upserts as data-modifying CTEs of the same statement (so one round trip, one
  transaction), summing the applied settlements joined to their operations by position.

Whatever else writes ``usage_records`` directly (a restore, a bulk load) runs ``modelgate usage
rebuild-rollups`` afterwards (``rollups.rebuild_statements``).
"""

from __future__ import annotations

import sqlite3
from datetime import date
from typing import Any

from modelgate.storage.records import UsageRecord

#: SQLite's Julian-day epoch of 1970-01-01 in milliseconds, and the Gregorian ordinal of that day.
_UNIX_JD_MS = 210_866_760_000_000
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_DAY_MS = 86_400_000

#: The measures of a rollup row, in the order of ``UsageSums``' lists.
_MEASURES = (
    "requests",
    "input_tokens",
    "output_tokens",
    "cache_creation_tokens",
    "cache_read_tokens",
    "cache_write_1h_tokens",
    "web_search_requests",
    "charged_uc",
)


def _added(columns: tuple[str, ...]) -> str:
    return ", ".join(f"{c} = {c} + excluded.{c}" for c in columns)


_KEY_UPSERT = (
    "INSERT INTO usage_rollups (key_id, day, model, endpoint, status, account_id, month, "
    f"{', '.join(_MEASURES)}) VALUES ({', '.join('?' * 15)}) "
    f"ON CONFLICT (key_id, day, model, endpoint, status) DO UPDATE SET {_added(_MEASURES)}"
)
_ACCOUNT_UPSERT = (
    "INSERT INTO usage_account_rollups (account_id, day, model, endpoint, status, month, "
    f"{', '.join(_MEASURES)}) VALUES ({', '.join('?' * 14)}) "
    f"ON CONFLICT (account_id, day, model, endpoint, status) DO UPDATE SET {_added(_MEASURES)}"
)
_KEY_MONTH_UPSERT = (
    "INSERT INTO usage_key_month_rollups (key_id, month, account_id, requests, tokens, charged_uc) "
    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (key_id, month) DO UPDATE SET "
    f"{_added(('requests', 'tokens', 'charged_uc'))}"
)


def sqlite_day(created_at: float) -> str:
    """The UTC day of a timestamp exactly as SQLite's ``strftime('%Y-%m-%d', t, 'unixepoch')``
    computes it (which the rebuild and a scan of the records use): SQLite first rounds the time
    to whole milliseconds, so a record 0.4 ms before midnight belongs to the next day."""
    return _day_of(_sqlite_ms(created_at))


def _sqlite_ms(created_at: float) -> int:
    """Milliseconds since the epoch as SQLite rounds them (``sqlite_day``)."""
    return int(created_at * 1000.0 + _UNIX_JD_MS + 0.5) - _UNIX_JD_MS


def _day_of(ms: int) -> str:
    """The UTC day (``YYYY-MM-DD``) of a time in SQLite's milliseconds since the epoch."""
    return date.fromordinal(_EPOCH_ORDINAL + ms // _DAY_MS).isoformat()


class UsageSums:
    """The rollup rows of one SQLite batch's usage records, summed (``add``), then written with one
    upsert per distinct row (``write``). (Written out field by field: ``add`` runs once per
    settlement on the serving loop, and this costs a third of a generic loop over the measures.)"""

    __slots__ = ("_accounts", "_day", "_day_ms", "_key_months", "_keys")

    def __init__(self) -> None:
        #: (key, day, model, endpoint, status) -> [account_id, month, *measures]
        self._keys: dict[tuple[str, str, str, str, str], list[Any]] = {}
        #: (account, day, model, endpoint, status) -> [month, *measures]
        self._accounts: dict[tuple[int, str, str, str, str], list[Any]] = {}
        #: (key, month) -> [account_id, requests, tokens, charged_uc]
        self._key_months: dict[tuple[str, str], list[int]] = {}
        #: The UTC day (SQLite's, ``sqlite_day``) of the last record, and its first millisecond:
        #: a batch's records almost always share it, so it is computed once.
        self._day = ""
        self._day_ms = -(10**18)  # matches no time

    def add(self, u: UsageRecord) -> None:
        """Count one usage record as written (its fields as stored: the reservation's key,
        account, month, endpoint, model and start, the amount actually charged)."""
        ms = _sqlite_ms(u.created_at)
        if 0 <= ms - self._day_ms < _DAY_MS:
            day = self._day
        else:
            self._day_ms = ms - ms % _DAY_MS
            day = self._day = _day_of(ms)
        i, o, cc, cr = u.input_tokens, u.output_tokens, u.cache_creation_tokens, u.cache_read_tokens
        w, ws, charged = u.cache_write_1h_tokens, u.web_search_requests, u.charged_uc
        key = (u.key_id, day, u.model, u.endpoint, u.status)
        row = self._keys.get(key)
        if row is None:
            self._keys[key] = [u.account_id, u.month, 1, i, o, cc, cr, w, ws, charged]
        else:
            row[2] += 1
            row[3] += i
            row[4] += o
            row[5] += cc
            row[6] += cr
            row[7] += w
            row[8] += ws
            row[9] += charged
        account = (u.account_id, day, u.model, u.endpoint, u.status)
        row = self._accounts.get(account)
        if row is None:
            self._accounts[account] = [u.month, 1, i, o, cc, cr, w, ws, charged]
        else:
            row[1] += 1
            row[2] += i
            row[3] += o
            row[4] += cc
            row[5] += cr
            row[6] += w
            row[7] += ws
            row[8] += charged
        key_month = (u.key_id, u.month)
        sums = self._key_months.get(key_month)
        if sums is None:
            self._key_months[key_month] = [u.account_id, 1, i + o + cc + cr, charged]
        else:
            sums[1] += 1
            sums[2] += i + o + cc + cr
            sums[3] += charged

    def write(self, db: sqlite3.Connection) -> None:
        """Upsert every distinct row once, inside the batch's open transaction on ``db``."""
        if not self._key_months:
            return
        db.executemany(_KEY_UPSERT, [(*k, *v) for k, v in self._keys.items()])
        db.executemany(_ACCOUNT_UPSERT, [(*k, *v) for k, v in self._accounts.items()])
        db.executemany(_KEY_MONTH_UPSERT, [(*k, *v) for k, v in self._key_months.items()])


_PG_ADDED = ", ".join(f"{c} = r.{c} + EXCLUDED.{c}" for c in _MEASURES)
#: An applied settlement's record as the function wrote it: the reservation's side from the
#: function's row ``l``, the status and tokens from its operation ``o``.
_PG_APPLIED = (
    "SELECT l.key_id, l.account_id, l.month, l.model, l.endpoint, o.op->>'status' AS status, "
    "to_char(to_timestamp(l.created_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS day, "
    "(o.op->>'input_tokens')::BIGINT AS input_tokens, (o.op->>'output_tokens')::BIGINT AS output_tokens, "
    "(o.op->>'cache_creation_tokens')::BIGINT AS cache_creation_tokens, "
    "(o.op->>'cache_read_tokens')::BIGINT AS cache_read_tokens, "
    "COALESCE((o.op->>'cache_write_1h_tokens')::BIGINT, 0) AS cache_write_1h_tokens, "
    "COALESCE((o.op->>'web_search_requests')::BIGINT, 0) AS web_search_requests, l.amount_uc AS charged_uc "
    "FROM l JOIN jsonb_array_elements($1::jsonb) WITH ORDINALITY AS o(op, n) ON o.n = l.ordinality "
    "WHERE l.outcome = 'applied'"
)
_PG_SUMS = "COUNT(*), " + ", ".join(f"SUM({c})" for c in _MEASURES[1:])


def ledger_call() -> str:
    """The PostgreSQL ledger batch as one statement: ``modelgate_ledger($1 ops, $2 locks)`` and the
    rollup upserts of the settlements it applied, one per distinct row.

    The function's rows come in the order of its operations (``WITH ORDINALITY`` on both sides
    joins them). The upserts take no lock the batch does not already hold in the right order:
    every rollup row belongs to one account, whose advisory lock the function took first (all
    of them in one global order), so two batches never wait on each other's rows in opposite
    orders. PostgreSQL runs every data-modifying CTE to completion, though the outer query reads
    only the function's rows (in their order, as the caller pairs them with its operations)."""
    measures = ", ".join(_MEASURES)
    return (
        "WITH l AS MATERIALIZED (SELECT * FROM modelgate_ledger($1::jsonb, $2::jsonb) WITH ORDINALITY), "
        f"a AS MATERIALIZED ({_PG_APPLIED}), "
        "k AS (INSERT INTO usage_rollups AS r (key_id, day, model, endpoint, status, account_id, month, "
        f"{measures}) SELECT key_id, day, model, endpoint, status, MIN(account_id), MIN(month), {_PG_SUMS} "
        "FROM a GROUP BY key_id, day, model, endpoint, status "
        f"ON CONFLICT (key_id, day, model, endpoint, status) DO UPDATE SET {_PG_ADDED}), "
        "c AS (INSERT INTO usage_account_rollups AS r (account_id, day, model, endpoint, status, month, "
        f"{measures}) SELECT account_id, day, model, endpoint, status, MIN(month), {_PG_SUMS} "
        "FROM a GROUP BY account_id, day, model, endpoint, status "
        f"ON CONFLICT (account_id, day, model, endpoint, status) DO UPDATE SET {_PG_ADDED}), "
        "m AS (INSERT INTO usage_key_month_rollups AS r (key_id, month, account_id, requests, tokens, "
        "charged_uc) SELECT key_id, month, MIN(account_id), COUNT(*), "
        "SUM(input_tokens + output_tokens + cache_creation_tokens + cache_read_tokens), SUM(charged_uc) "
        "FROM a GROUP BY key_id, month ON CONFLICT (key_id, month) DO UPDATE SET "
        "requests = r.requests + EXCLUDED.requests, tokens = r.tokens + EXCLUDED.tokens, "
        "charged_uc = r.charged_uc + EXCLUDED.charged_uc) "
        "SELECT * FROM l ORDER BY ordinality"
    )
