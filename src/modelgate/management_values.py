"""Management input, checked: credits, lifetimes, expiry dates, address lists, limits and spend
caps by window. Each check raises ``ManagementError`` with a message naming the field."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation

from modelgate.addresses import AddressError, parse_networks
from modelgate.catalogue import credits_to_micro
from modelgate.storage.base import GROUPS, MAX_UC, Group
from modelgate.storage.spend_windows import KEY_WINDOWS, Window

FAMILY = {"Basic": "aria", "Pro": "aria", "Nova": "nova"}
#: An admin token's optional lifetime: at least a minute, at most ten years.
MIN_TOKEN_LIFETIME = 60
MAX_TOKEN_LIFETIME = 3650 * 86400
_DURATION = re.compile(r"([0-9]{1,10})([smhd]?)")
#: RFC 3339 date-time with an offset: ``2027-01-31T12:00:00Z``, ``2027-01-31T12:00:00.5+02:00``.
_RFC3339 = re.compile(
    r"([0-9]{4}-[0-9]{2}-[0-9]{2})[Tt ]([0-9]{2}:[0-9]{2}:[0-9]{2})(\.[0-9]{1,9})?([Zz]|[+-][0-9]{2}:[0-9]{2})"
)
#: The latest expiry a key may have (the end of year 9998, so a day later is still a date).
MAX_EXPIRES_AT = datetime(9999, 1, 1, tzinfo=UTC).timestamp()
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def groups_of_family(family: str) -> list[Group]:
    """The key groups that may use models of ``family``."""
    return [group for group in GROUPS if FAMILY[group] == family]


class ManagementError(ValueError):
    """Bad input to a management operation; the message names the field."""


class NotFoundError(ManagementError):
    """No such account or key (or not visible to the caller)."""


class ConflictError(ManagementError):
    """The operation clashes with the current state (a taken name, a revoked key)."""


#: Credits as typed by people: ASCII digits, optionally a point and up to six decimals.
_CREDITS = re.compile(r"[0-9]+(?:\.[0-9]{1,6})?")


def parse_credits(value: str | float | int | Decimal, field: str) -> int:
    """Credits (ASCII digits, up to 6 decimals) as micro-credits, within ``MAX_UC``."""
    text = str(value).strip()
    if not _CREDITS.fullmatch(text):
        raise ManagementError(
            f"{field}: {text[:40]!r} is not an amount of credits (digits, up to 6 decimals)"
        )
    try:
        micro = credits_to_micro(Decimal(text), what=field)
    except (InvalidOperation, ValueError) as exc:
        raise ManagementError(
            f"{field}: {text[:40]!r} is not an amount of credits (up to 6 decimals)"
        ) from exc
    return bounded_micro(micro, field)


def bounded_micro(micro: int, field: str) -> int:
    """``micro`` if it is an amount the ledger can hold (0 to ``MAX_UC``), else a ManagementError."""
    if micro < 0:
        raise ManagementError(f"{field}: must not be negative")
    if micro > MAX_UC:
        raise ManagementError(f"{field}: at most {MAX_UC} micro-credits ({format_credits(MAX_UC)} credits)")
    return micro


def format_credits(micro: int | None) -> str:
    if micro is None:
        return "-"
    return (
        f"{Decimal(micro) / 1_000_000:.6f}".rstrip("0").rstrip(".")
        if micro % 1_000_000
        else str(micro // 1_000_000)
    )


def parse_lifetime(text: str, now: float) -> float:
    """Seconds until an expiry given as a duration (``90d``, ``12h``, ``30m``, ``3600s``, ``3600``)
    or as a UTC date or date-time (``2027-01-31``, ``2027-01-31T12:00:00Z``)."""
    value = text.strip()
    match = _DURATION.fullmatch(value)
    if match:
        seconds: float = int(match[1]) * _UNIT_SECONDS[match[2] or "s"]
    else:
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ManagementError(
                f"expires: {text!r} is neither a duration (90d, 12h, 30m, 3600s) nor a date (2027-01-31)"
            ) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        seconds = moment.timestamp() - now
    if not MIN_TOKEN_LIFETIME <= seconds <= MAX_TOKEN_LIFETIME:
        raise ManagementError(
            f"expires: between {MIN_TOKEN_LIFETIME:g} seconds and {MAX_TOKEN_LIFETIME // 86400} days from now"
        )
    return float(seconds)


#: The largest token or concurrency limit (fits every engine's INTEGER column).
MAX_LIMIT = 2**31 - 1


def check_limit(value: int | None, name: str) -> None:
    """A token or concurrency limit one can set: an integer in 1 ..= ``MAX_LIMIT``."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise ManagementError(f"{name}: must be an integer")
    if not 1 <= value <= MAX_LIMIT:
        raise ManagementError(f"{name}: must be between 1 and {MAX_LIMIT}")


def checked_expiry(expires_at: float | None) -> float | None:
    if expires_at is not None and not 0 <= expires_at < MAX_EXPIRES_AT:
        raise ManagementError("expires_at: a date-time from 1970 to 9998")
    return expires_at


def networks(texts: list[str] | None) -> tuple[str, ...]:
    try:
        return parse_networks(texts or ())
    except AddressError as exc:
        raise ManagementError(f"allowed_ips: {exc}") from None


def parse_expiry(text: str) -> float:
    """A key's ``expires_at`` as RFC 3339 gives it (a date-time with ``Z`` or an offset), as a
    timestamp. A past instant is accepted: the key is then refused as expired from now on."""
    value = text.strip() if isinstance(text, str) else ""
    match = _RFC3339.fullmatch(value)
    if match is None:
        raise ManagementError(
            f"expires_at: {value[:40]!r} is not an RFC 3339 date-time with an offset, e.g. 2027-01-31T00:00:00Z"
        )
    day, clock, fraction, offset = match.groups()
    fraction = (fraction or "")[:7]  # Python reads at most microseconds
    zone = "+00:00" if offset in ("Z", "z") else offset
    try:
        timestamp = datetime.fromisoformat(f"{day}T{clock}{fraction}{zone}").timestamp()
    except (ValueError, OverflowError):
        raise ManagementError(f"expires_at: {value[:40]!r} is not a valid date-time") from None
    if not 0 <= timestamp < MAX_EXPIRES_AT:
        raise ManagementError("expires_at: a date-time from 1970 to 9998")
    return timestamp


def checked_caps(
    caps: Mapping[Window, int] | None, windows: tuple[Window, ...], *, clearable: bool
) -> dict[Window, int]:
    """Spend caps by window as given, each checked: µc in 0 ..= ``MAX_UC``, or ``-1`` (remove)."""
    checked: dict[Window, int] = {}
    for window, cap in (caps or {}).items():
        if window not in windows:
            raise ManagementError(f"caps: the window must be one of {', '.join(windows)}")
        if not (clearable and cap == -1):
            bounded_micro(cap, f"caps.{window}")
        checked[window] = cap
    return checked


def key_caps(caps: Mapping[Window, int] | None, *, clearable: bool) -> dict[str, int | None]:
    """``NewKey`` / ``KeyControls`` fields of a key's window caps (its month is ``monthly_cap_uc``)."""
    checked = checked_caps(caps, KEY_WINDOWS, clearable=clearable)
    return {
        "cap_5h_uc": checked.get("5h"),
        "cap_day_uc": checked.get("day"),
        "cap_week_uc": checked.get("week"),
    }
