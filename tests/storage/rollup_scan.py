"""The usage rollups compared with a scan of the usage records, row by row and column by column
(every measure, the key-month rollups too): what the ledger's batches keep must equal what a
rebuild would compute."""

from __future__ import annotations

import sqlite3
from typing import Any

SQLITE_DAY = "strftime('%Y-%m-%d', created_at, 'unixepoch')"
POSTGRES_DAY = "to_char(to_timestamp(created_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD')"
_MEASURES = (
    "requests, input_tokens, output_tokens, cache_creation_tokens, cache_read_tokens, "
    "cache_write_1h_tokens, web_search_requests, charged_uc"
)
_SUMS = (
    "COUNT(*), SUM(input_tokens), SUM(output_tokens), SUM(cache_creation_tokens), SUM(cache_read_tokens), "
    "SUM(cache_write_1h_tokens), SUM(web_search_requests), SUM(charged_uc)"
)


def pairs(day: str) -> list[tuple[str, str]]:
    """(the rollup table read, the same rows scanned from the records), each in one order."""
    return [
        (
            f"SELECT key_id, day, model, endpoint, status, account_id, month, {_MEASURES} FROM usage_rollups "
            "ORDER BY 1, 2, 3, 4, 5",
            f"SELECT key_id, {day}, model, endpoint, status, MIN(account_id), MIN(month), {_SUMS} "
            "FROM usage_records GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5",
        ),
        (
            f"SELECT account_id, day, model, endpoint, status, month, {_MEASURES} FROM usage_account_rollups "
            "ORDER BY 1, 2, 3, 4, 5",
            f"SELECT account_id, {day}, model, endpoint, status, MIN(month), {_SUMS} "
            "FROM usage_records GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5",
        ),
        (
            "SELECT key_id, month, account_id, requests, tokens, charged_uc FROM usage_key_month_rollups "
            "ORDER BY 1, 2",
            "SELECT key_id, month, MIN(account_id), COUNT(*), "
            "SUM(input_tokens + output_tokens + cache_creation_tokens + cache_read_tokens), SUM(charged_uc) "
            "FROM usage_records GROUP BY 1, 2 ORDER BY 1, 2",
        ),
    ]


def _rows(found: list[Any]) -> list[tuple[Any, ...]]:
    return [tuple(int(v) if isinstance(v, int) else v for v in row) for row in found]


def sqlite_rollups_and_scan(db: sqlite3.Connection) -> list[tuple[list[Any], list[Any]]]:
    """Each rollup table's rows beside the scan's (equal when the rollups are exact)."""
    return [
        (_rows(db.execute(kept).fetchall()), _rows(db.execute(scan).fetchall()))
        for kept, scan in pairs(SQLITE_DAY)
    ]


async def postgres_rollups_and_scan(conn: Any) -> list[tuple[list[Any], list[Any]]]:
    out = []
    for kept, scan in pairs(POSTGRES_DAY):
        out.append((_rows(await conn.fetch(kept)), _rows(await conn.fetch(scan))))
    return out
