"""``GET /admin/api/keys`` parameters: keyset paging on ``(created_at, id)`` and a search.

``limit`` (default ``DEFAULT_KEYS``, at most ``MAX_KEYS``) keys per page, oldest first; the answer's
``next_cursor`` (null on the last page) goes back as ``after`` for the next page. ``q`` keeps keys
whose name, id or display prefix contains it (any case). A page reads only its own keys and
their activity, so it costs the same with ten keys or a million.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from starlette.requests import Request

from modelgate.admin import query
from modelgate.admin.http import bad_request
from modelgate.storage.base import KeyRecord

DEFAULT_KEYS = 100
MAX_KEYS = 1000
_AFTER = re.compile(r"([0-9]{1,16}(?:\.[0-9]{1,20})?)~([A-Za-z0-9_-]{1,100})")


@dataclass(frozen=True, slots=True)
class KeyPageQuery:
    limit: int
    after: tuple[float, str] | None
    search: str


def key_page_query(request: Request) -> KeyPageQuery:
    limit = query.bounded_int(request, "limit", DEFAULT_KEYS, 1, MAX_KEYS)
    raw = request.query_params.get("after") or ""
    after = None
    if raw:
        match = _AFTER.fullmatch(raw)
        if match is None:
            raise bad_request("after: use the next_cursor of the previous page")
        after = (float(match[1]), match[2])
    search = query.text(request, "q") or ""
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in search):
        # PostgreSQL refuses a NUL in text: refused here alike on every engine.
        raise bad_request("q: no control characters")
    return KeyPageQuery(limit, after, search.strip())


def next_cursor(records: list[KeyRecord], limit: int) -> str | None:
    """The cursor after the last key shown, when one more than ``limit`` was found."""
    if len(records) <= limit:
        return None
    last = records[limit - 1]
    return f"{last.created_at!r}~{last.id}"
