"""Row shapes shared by both engines: column lists and row-to-record conversion.

The engines differ only in how ``allowed_models`` is stored (SQLite: JSON text; PostgreSQL: a
text array), so each passes that column already decoded.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from modelgate.storage.records import Account, AdminToken, KeyRecord, UsageRecord

KEY_COLUMNS = (
    "id, account_id, name, grp, rpm, allowed_models, monthly_cap_uc, state, digest, prefix, last4, "
    "created_at, previous_digest, previous_expires_at, rotated_at, revoked_at, version, tpm, max_concurrency, "
    "expires_at, allowed_ips, cap_5h_uc, cap_day_uc, cap_week_uc"
)
ACCOUNT_COLUMNS = (
    "id, name, balance_uc, reserved_uc, created_at, low_balance_uc, hide_balance, "
    "cap_5h_uc, cap_day_uc, cap_week_uc, monthly_cap_uc, rpm, tpm, max_concurrency"
)
ADMIN_TOKEN_COLUMNS = (
    "id, account_id, created_at, digest, name, prefix, last4, created_by, expires_at, revoked_at, "  # noqa: S105 - column names
    "last_used_at"
)
USAGE_COLUMNS = (
    "request_id, key_id, account_id, endpoint, model, month, status, created_at, finished_at, "
    "input_tokens, output_tokens, cache_creation_tokens, cache_read_tokens, charged_uc, shortfall_uc, "
    "cache_write_1h_tokens, web_search_requests"
)


def _shared(word: Any) -> Any:
    """The one copy of a word many records hold (``sys.intern``), its column type kept."""
    return sys.intern(word)


def key_record(
    row: Sequence[Any],
    allowed_models: tuple[str, ...] | None,
    allowed_ips: tuple[str, ...] | None = None,
) -> KeyRecord:
    """A ``KEY_COLUMNS`` row; ``allowed_models`` (column 5) and ``allowed_ips`` (column 20) as
    the engine decoded them. The group and state, the same few words for every key, are interned:
    a view of a million keys holds each once instead of once per key."""
    return KeyRecord(
        id=row[0],
        account_id=row[1],
        name=row[2],
        group=_shared(row[3]),
        rpm=row[4],
        allowed_models=allowed_models,
        monthly_cap_uc=row[6],
        state=_shared(row[7]),
        digest=bytes(row[8]),
        prefix=row[9],
        last4=row[10],
        created_at=row[11],
        previous_digest=bytes(row[12]) if row[12] is not None else None,
        previous_expires_at=row[13],
        rotated_at=row[14],
        revoked_at=row[15],
        version=row[16],
        tpm=row[17],
        max_concurrency=row[18],
        expires_at=row[19],
        allowed_ips=allowed_ips,
        cap_5h_uc=row[21],
        cap_day_uc=row[22],
        cap_week_uc=row[23],
    )


def account_record(row: Sequence[Any]) -> Account:
    """An ``ACCOUNT_COLUMNS`` row."""
    return Account(
        id=row[0],
        name=row[1],
        balance_uc=row[2],
        reserved_uc=row[3],
        created_at=row[4],
        low_balance_uc=row[5],
        hide_balance=bool(row[6]),
        cap_5h_uc=row[7],
        cap_day_uc=row[8],
        cap_week_uc=row[9],
        monthly_cap_uc=row[10],
        rpm=row[11],
        tpm=row[12],
        max_concurrency=row[13],
    )


def usage_record(row: Sequence[Any]) -> UsageRecord:
    """A ``USAGE_COLUMNS`` row."""
    return UsageRecord(*row)


def admin_token_record(row: Sequence[Any]) -> AdminToken:
    """An ``ADMIN_TOKEN_COLUMNS`` row."""
    return AdminToken(
        id=row[0],
        account_id=row[1],
        created_at=row[2],
        digest=bytes(row[3]),
        name=row[4],
        prefix=row[5],
        last4=row[6],
        created_by=row[7],
        expires_at=row[8],
        revoked_at=row[9],
        last_used_at=row[10],
    )
