"""Query-string parameters of the admin API, parsed strictly: anything malformed is a 400 naming
the parameter, never a 500 and never a silently widened query.

Numbers and dates are ASCII digits only (``str.isdigit`` also accepts ``²`` and ``٣``), within
ranges every engine can store; free-text filters are bounded in length and alphabet.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta

from starlette.requests import Request

from modelgate.admin.http import bad_request
from modelgate.storage.reports import UsageCursor

_MONTH = re.compile(r"[0-9]{4}-(0[1-9]|1[0-2])")
_DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
#: Model ids, endpoints and statuses: what the gateway writes into usage records.
_LABEL = re.compile(r"[A-Za-z0-9._:/-]{1,100}")
_CURSOR = re.compile(r"([0-9]{1,16}(?:\.[0-9]{1,20})?)~([A-Za-z0-9_-]{1,100})")
#: Dates outside these years are refused (the day after ``to`` must still be a valid date).
FIRST_YEAR, LAST_YEAR = 1970, 9998


def text(request: Request, name: str, max_length: int = 100) -> str | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    if len(raw) > max_length:
        raise bad_request(f"{name}: at most {max_length} characters")
    return raw


def label(request: Request, name: str) -> str | None:
    raw = text(request, name)
    if raw is not None and not _LABEL.fullmatch(raw):
        raise bad_request(f"{name}: letters, digits and . _ : / - only")
    return raw


def month(request: Request, default: str) -> str:
    raw = request.query_params.get("month") or default
    if not _MONTH.fullmatch(raw):
        raise bad_request("month: use YYYY-MM")
    return raw


def bounded_int(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 9 or not low <= int(raw) <= high:
        raise bad_request(f"{name}: an integer from {low} to {high}")
    return int(raw)


def _day(request: Request, name: str) -> date | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    try:
        if not _DAY.fullmatch(raw):
            raise ValueError(raw)
        day = date.fromisoformat(raw)
    except ValueError:
        raise bad_request(f"{name}: use YYYY-MM-DD (a UTC date)") from None
    if not FIRST_YEAR <= day.year <= LAST_YEAR:
        raise bad_request(f"{name}: a year from {FIRST_YEAR} to {LAST_YEAR}")
    return day


def date_range(request: Request) -> tuple[float | None, float | None]:
    """``from`` and ``to`` (inclusive UTC days) as ``[since, until)`` timestamps."""
    first, last = _day(request, "from"), _day(request, "to")
    if first is not None and last is not None and first > last:
        raise bad_request("from: must not be after to")
    since = None if first is None else _midnight(first)
    until = None if last is None else _midnight(last + timedelta(days=1))
    return since, until


def _midnight(day: date) -> float:
    return datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp()


def cursor(request: Request) -> UsageCursor | None:
    raw = request.query_params.get("cursor")
    if raw is None or raw == "":
        return None
    match = _CURSOR.fullmatch(raw)
    if match is None:
        raise bad_request("cursor: use the next_cursor of the previous page")
    return UsageCursor(float(match[1]), match[2])


def cursor_text(value: UsageCursor | None) -> str | None:
    """The inverse of ``cursor``: ``repr`` of a float reads back as exactly the same float."""
    return None if value is None else f"{value.created_at!r}~{value.request_id}"
