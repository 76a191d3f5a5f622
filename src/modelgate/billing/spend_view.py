"""What a key's spend windows show to people (``GET /v1/key``, the admin API's key windows and
the dashboard's bars): per window its cap, spent, held, remaining and when it resets.

Money as everywhere: exact ``*_uc`` micro-credits beside a credits string. A window other than a
key's month is counted only while a cap is set on it, so without one its figures are null.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from modelgate.clock import month_of
from modelgate.management import format_credits
from modelgate.storage.base import Account, KeyRecord, LedgerStore
from modelgate.storage.spend_windows import (
    KEY_WINDOWS,
    WINDOWS,
    Window,
    account_subject,
    key_subject,
    period_end,
    period_start,
)


def when(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def money(name: str, micro: int | None) -> dict[str, Any]:
    return {f"{name}_uc": micro, name: None if micro is None else format_credits(micro)}


async def window_view(
    ledger: LedgerStore, subject: str, window: Window, cap: int | None, now: float
) -> dict[str, Any]:
    """One window of a subject at ``now``: for ``5h`` ``resets_at`` is when its oldest spend
    leaves the window; for the calendar windows, the period's end."""
    if cap is None:
        empty = {**money("spent", None), **money("held", None), **money("remaining", None)}
        return {"period": window, **money("limit", None), **empty, "resets_at": None}
    use = await ledger.window_use(subject, window, now)
    resets = use.resets_at if window == "5h" else float(period_end(window, period_start(window, now)))
    return {
        "period": window,
        **money("limit", cap),
        **money("spent", use.spent_uc),
        **money("held", use.held_uc),
        **money("remaining", max(0, cap - use.spent_uc - use.held_uc)),
        "resets_at": when(resets),
    }


def month_window(key: KeyRecord, spent: int, held: int, now: float) -> dict[str, Any]:
    """A key's month (kept in ``key_month_spend`` and counted with or without a cap): its cap
    (null: none), spend, holds, what is left, and its reset."""
    cap = key.monthly_cap_uc
    return {
        "period": month_of(now),
        **money("limit", cap),
        **money("spent", spent),
        **money("held", held),
        **money("remaining", None if cap is None else max(0, cap - spent - held)),
        "resets_at": when(float(period_end("month", period_start("month", now)))),
    }


async def key_windows(ledger: LedgerStore, key: KeyRecord, now: float) -> dict[str, Any]:
    """The key's ``5h``, ``day`` and ``week`` windows (its month is shown by its callers)."""
    subject = key_subject(key.id)
    shown: dict[str, Any] = {}
    for window, cap in zip(KEY_WINDOWS, key.window_caps, strict=False):
        shown[window] = await window_view(ledger, subject, window, cap, now)
    return shown


async def account_windows(ledger: LedgerStore, account: Account, now: float) -> dict[str, Any]:
    """The account's windows that have a cap (all its keys together)."""
    subject = account_subject(account.id)
    shown: dict[str, Any] = {}
    for window, cap in zip(WINDOWS, account.window_caps, strict=True):
        if cap is not None:
            shown[window] = await window_view(ledger, subject, window, cap, now)
    return shown
