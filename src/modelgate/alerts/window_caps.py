"""``cap.threshold`` for the spend windows beside a key's month (``storage.spend_windows``): a
key's ``5h``, ``day`` and ``week`` caps and an account's ``5h``, ``day``, ``week`` and ``month``.

The monitor asks for a check after a settle of a key whose key or account has a window cap (a dict
lookup on the request path; the checks are spaced per key, ``alerts.checks``) and after a hold
refused by a window. The check reads each capped window's spend and claims one alert per subject,
window, period, limit and level (80 % and 100 % by default: ``alerts.cap_levels``), so every
instance sends it once. A period is the window's UTC day, ISO week or month; for the rolling
``5h``, the 5-hour block (from the epoch) the check falls in.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from modelgate.alerts.config import Event
from modelgate.storage.base import LedgerStore
from modelgate.storage.spend_windows import (
    FIVE_HOURS,
    WINDOWS,
    Window,
    account_subject,
    key_subject,
    period_start,
)

#: (event, subject, window, figures) -> sent: ``AlertMonitor._claim_and_send``.
Claim = Callable[[Event, str, str, dict[str, Any]], Awaitable[bool]]
#: Refusal reasons of the windows (``storage.records.Refusal``).
REFUSED_WINDOW: dict[str, Window] = {
    "cap_5h": "5h",
    "cap_day": "day",
    "cap_week": "week",
    "monthly_cap": "month",
}


def period_label(window: Window, at: float) -> str:
    """The period an alert of ``window`` at ``at`` is deduplicated in."""
    if window == "5h":
        block = int(at // FIVE_HOURS) * FIVE_HOURS
        return datetime.fromtimestamp(block, UTC).strftime("%Y-%m-%dT%H:%MZ")
    start = datetime.fromtimestamp(period_start(window, at), UTC)
    if window == "day":
        return start.strftime("%Y-%m-%d")
    if window == "week":
        year, week, _ = start.isocalendar()
        return f"{year}-W{week:02d}"
    return start.strftime("%Y-%m")


async def check_windows(
    ledger: LedgerStore,
    claim: Claim,
    key_id: str,
    account_id: int,
    key_caps: Sequence[int | None],
    account_caps: Sequence[int | None],
    levels: Sequence[int],
    now: float,
    refused: Window | None = None,
) -> None:
    """Claim the alerts of every capped window at a level its spend (spent, holds excluded) has
    reached; ``refused``: a hold was refused by that window, so the subject with the least left
    in it is at 100 % (``refused: true``), even while part of its cap is only held."""
    capped: list[tuple[str, Window, int]] = [
        (key_subject(key_id), w, c) for w, c in zip(WINDOWS[:3], key_caps, strict=False) if c
    ]
    capped += [(account_subject(account_id), w, c) for w, c in zip(WINDOWS, account_caps, strict=True) if c]
    uses = [(s, w, c, await ledger.window_use(s, w, now)) for s, w, c in capped]
    binding = None
    if refused is not None:
        lefts = [(c - u.spent_uc - u.held_uc, s) for s, w, c, u in uses if w == refused]
        binding = min(lefts)[1] if lefts else None
    for subject, window, cap, use in uses:
        period = period_label(window, now)
        for level in levels:
            reached = use.spent_uc * 100 >= cap * level
            forced = level == 100 and window == refused and subject == binding
            if not (reached or forced):
                continue
            await claim(
                "cap.threshold",
                subject.replace("k:", "key:", 1).replace("a:", "account:", 1),
                f"{window}:{period}:limit:{cap}:level:{level}",
                {
                    "key_id": key_id,
                    "account_id": account_id,
                    "scope": "key" if subject.startswith("k:") else "account",
                    "window": window,
                    "period": period,
                    "level": level,
                    "limit_uc": cap,
                    "spent_uc": use.spent_uc,
                    "held_uc": use.held_uc,
                    "remaining_uc": max(0, cap - use.spent_uc - use.held_uc),
                    "refused": not reached,
                },
            )
