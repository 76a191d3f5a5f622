"""One page of the key list, keyset-paged on ``(created_at, id)`` (indexes ``api_keys_created`` and
``api_keys_account_created``, migrations sqlite 0013 / postgresql 0018), with an optional search:
the same SQL on both engines, so a page costs the same at any depth and stays stable while keys
are created (new keys sort after every cursor of an older key). ``owner`` keeps the keys one
person created (a member's own: ``key_owners``), so a member's page, cursor and has-more are
decided by the database over their keys alone.

The search is always decided by the ``LIKE`` condition below, whatever index found the
candidates (``storage.key_search``): an index only narrows which rows are read, so every engine
and every plan return the same keys in the same order."""

from __future__ import annotations

from modelgate.storage import rows
from modelgate.storage.reports import Params, owned_keys


def like_pattern(search: str) -> str:
    """``%search%`` with LIKE's own wildcards taken literally (escape character ``\\``)."""
    escaped = search.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _scope(
    account_id: int | None, after: tuple[float, str] | None, p: Params, owner: str | None
) -> list[str]:
    """The conditions of the keys a page may hold, before any search: account, owner, cursor."""
    terms: list[str] = []
    if account_id is not None:
        terms.append(f"account_id = {p(account_id)}")
    if owner is not None:
        terms.append(owned_keys(owner, p, "id"))
    if after is not None:
        # A row value, not "created_at > x OR (created_at = x AND id > y)": both engines seek the
        # (created_at, id) index to a row value, while the OR made them read every key before the
        # cursor (150 ms on SQLite, 600 ms on PostgreSQL 900,000 keys deep).
        terms.append(f"(created_at, id) > ({p(after[0])}, {p(after[1])})")
    return terms


def key_page_sql(
    account_id: int | None,
    limit: int,
    after: tuple[float, str] | None,
    search: str,
    p: Params,
    owner: str | None = None,
    hits: str | None = None,
    until: tuple[float, str] | None = None,
) -> str:
    """``hits``: a query whose one column ``hit_id`` holds the ids of every key that can match
    ``search`` (a trigram index's candidates); the page then reads those keys by id and sorts
    them instead of scanning the key list in order. ``until``: the last key (in key order) the
    page may hold (``key_window_end_sql``): a page it fills is the true page; one it does not
    fill says nothing about the keys after it."""
    # The hits come first in the SQL text: SQLite's placeholders are positional.
    source = (
        "api_keys" if hits is None else f"({hits}) AS hit CROSS JOIN api_keys ON api_keys.id = hit.hit_id"
    )
    terms = _scope(account_id, after, p, owner)
    if until is not None:
        terms.append(f"(created_at, id) <= ({p(until[0])}, {p(until[1])})")
    if search:
        pattern = like_pattern(search)
        terms.append(
            f"(LOWER(name) LIKE {p(pattern)} ESCAPE '\\' OR LOWER(id) LIKE {p(pattern)} ESCAPE '\\' "
            f"OR LOWER(prefix) LIKE {p(pattern)} ESCAPE '\\')"
        )
    where = f"WHERE {' AND '.join(terms)} " if terms else ""
    return f"SELECT {rows.KEY_COLUMNS} FROM {source} {where}ORDER BY created_at, id LIMIT {p(limit)}"


def key_window_end_sql(
    account_id: int | None, after: tuple[float, str] | None, p: Params, owner: str | None, window: int
) -> str:
    """``(created_at, id)`` of the ``window``-th key a page could start with, read from the
    ``(created_at, id)`` indexes alone; no row when fewer keys are left."""
    terms = _scope(account_id, after, p, owner)
    where = f"WHERE {' AND '.join(terms)} " if terms else ""
    return (
        f"SELECT created_at, id FROM api_keys {where}ORDER BY created_at, id LIMIT 1 OFFSET {p(window - 1)}"
    )
