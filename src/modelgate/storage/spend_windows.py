"""Spend windows: the periods a spend cap counts in, and the rows the ledger keeps for them.

A cap is set per window on a key or on an account (an account's applies to all its keys
together): ``5h`` (rolling five hours), ``day`` (the UTC day), ``week`` (the UTC ISO week, from
Monday 00:00), and ``month`` (the UTC month). A key's monthly cap stays in ``key_month_spend``
exactly as before; every other cap counts in ``spend_windows`` rows (subject, window, start):
the spent and held micro-credits of one period of one subject.

A spend counts in the period its hold was made in, and stays there when it is settled or
released (like the month: a request that starts before midnight UTC counts in the day it
started). The rolling window is kept in buckets of ``BUCKET_SECONDS``: a hold made at ``t``
checks every bucket that starts at or after the bucket containing ``t - 5 h``, so it sees every
hold made within the five hours before it, and the spend of any five hours never exceeds the cap.
It is conservative at the old edge: a spend leaves the window up to one bucket (5 minutes) after
its five hours are over.

Nothing here reads a database: the engines call these to name the rows, in their one atomic
reserve step (``storage.sqlite_ledger``, migration ``0019`` on PostgreSQL, which mirrors them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

import orjson

from modelgate.storage.records import RefusalReason

Window = Literal["5h", "day", "week", "month"]
#: Every window, in the order caps are checked and shown (the shortest first).
WINDOWS: tuple[Window, ...] = ("5h", "day", "week", "month")
#: The windows of a key's caps kept here (its month is ``api_keys.monthly_cap_uc``).
KEY_WINDOWS: tuple[Window, ...] = ("5h", "day", "week")
#: The refusal reason (``storage.records.Refusal``) of each window's cap.
REASONS: dict[Window, RefusalReason] = {
    "5h": "cap_5h",
    "day": "cap_day",
    "week": "cap_week",
    "month": "monthly_cap",
}
FIVE_HOURS = 5 * 3600
#: The rolling window's bucket: a spend leaves the window at most this late.
BUCKET_SECONDS = 300
DAY = 86400


def key_subject(key_id: str) -> str:
    return f"k:{key_id}"


def account_subject(account_id: int) -> str:
    return f"a:{account_id}"


def period_start(window: Window, at: float) -> int:
    """The start (epoch seconds) of the row a hold made at ``at`` counts in."""
    t = int(at // 1)
    if window == "5h":
        return t - t % BUCKET_SECONDS
    day = t - t % DAY
    if window == "day":
        return day
    if window == "week":
        # 1970-01-01 was a Thursday: day number + 3 counts from a Monday.
        return day - ((day // DAY + 3) % 7) * DAY
    moment = datetime.fromtimestamp(t, UTC)
    return int(datetime(moment.year, moment.month, 1, tzinfo=UTC).timestamp())


def first_counted(window: Window, at: float) -> int:
    """The earliest row start that counts against a cap at ``at`` (rows from here to
    ``period_start(window, at)``; one row except for ``5h``)."""
    if window == "5h":
        return period_start("5h", at - FIVE_HOURS)
    return period_start(window, at)


def period_end(window: Window, start: int) -> int:
    """When the row starting at ``start`` stops counting: for ``5h`` the bucket's end plus five
    hours, otherwise the next period's start."""
    if window == "5h":
        return start + BUCKET_SECONDS + FIVE_HOURS
    if window == "day":
        return start + DAY
    if window == "week":
        return start + 7 * DAY
    moment = datetime.fromtimestamp(start, UTC)
    return int(datetime(moment.year + moment.month // 12, moment.month % 12 + 1, 1, tzinfo=UTC).timestamp())


@dataclass(frozen=True, slots=True)
class WindowCap:
    """One cap in force for a hold: whose (``subject``), which window, how much (µc)."""

    subject: str
    window: Window
    cap_uc: int

    @property
    def reason(self) -> RefusalReason:
        return REASONS[self.window]


def caps_in_force(
    key_id: str,
    account_id: int,
    key_caps: Sequence[int | None],
    account_caps: Sequence[int | None],
) -> list[WindowCap]:
    """The window caps a hold is checked against, in checking order: the key's ``5h``, ``day``,
    ``week`` (``key_caps``; its month is the ledger's own), then the account's ``5h``, ``day``,
    ``week``, ``month`` (``account_caps``). Empty (the common case) when none is set."""
    found: list[WindowCap] = []
    for window, cap in zip(WINDOWS[:3], key_caps, strict=True):
        if cap is not None:
            found.append(WindowCap(key_subject(key_id), window, int(cap)))
    for window, cap in zip(WINDOWS, account_caps, strict=True):
        if cap is not None:
            found.append(WindowCap(account_subject(account_id), window, int(cap)))
    return found


def encode_rows(rows: Sequence[tuple[str, str, int]]) -> str | None:
    """The rows a hold was counted in, as the reservation keeps them (None: no window)."""
    return orjson.dumps([list(r) for r in rows]).decode() if rows else None


def decode_rows(text: str | None) -> list[tuple[str, str, int]]:
    if not text:
        return []
    return [(str(s), str(w), int(start)) for s, w, start in orjson.loads(text)]


@dataclass(frozen=True, slots=True)
class WindowUse:
    """One window of one subject as counted at an instant: spent and held in it (µc), and when
    it next frees anything (None: nothing counted)."""

    window: Window
    spent_uc: int
    held_uc: int
    resets_at: float | None

    @classmethod
    def of(cls, window: Window, at: float, spent: int, held: int, oldest: int | None) -> WindowUse:
        """From the rows' sums; ``oldest``: the earliest counted row start with anything in it
        (the rolling window frees that bucket first; a calendar window all at its end)."""
        if oldest is None:
            resets = None
        elif window == "5h":
            resets = float(period_end("5h", int(oldest)))
        else:
            resets = float(period_end(window, period_start(window, at)))
        return cls(window, spent, held, resets)
