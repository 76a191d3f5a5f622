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


def key_page_sql(
    account_id: int | None,
    limit: int,
    after: tuple[float, str] | None,
    search: str,
    p: Params,
    owner: str | None = None,
    hits: str | None = None,
    window: int | None = None,
) -> str:
    """``hits``: a query whose one column ``hit_id`` holds the ids of every key that can match
    ``search`` (a trigram index's candidates); the page then reads those keys by id and sorts
    them instead of scanning the key list in order. ``window``: the search looks only at the
    next ``window`` keys in key order (a page it fills is the true page; one it does not fill
    says nothing about the keys after the window)."""
    # The hits come first in the SQL text: SQLite's placeholders are positional.
    source = (
        "api_keys" if hits is None else f"({hits}) AS hit CROSS JOIN api_keys ON api_keys.id = hit.hit_id"
    )
    terms: list[str] = []
    if account_id is not None:
        terms.append(f"account_id = {p(account_id)}")
    if owner is not None:
        terms.append(owned_keys(owner, p, "id"))
    if after is not None:
        created, tie = p(after[0]), p(after[0])
        terms.append(f"(created_at > {created} OR (created_at = {tie} AND id > {p(after[1])}))")
    if window is not None:
        # The keys in order first, the search over them after: placeholders in text order.
        inner = f"WHERE {' AND '.join(terms)} " if terms else ""
        source = f"(SELECT * FROM api_keys {inner}ORDER BY created_at, id LIMIT {p(window)}) AS api_keys"
        terms = []
    if search:
        pattern = like_pattern(search)
        terms.append(
            f"(LOWER(name) LIKE {p(pattern)} ESCAPE '\\' OR LOWER(id) LIKE {p(pattern)} ESCAPE '\\' "
            f"OR LOWER(prefix) LIKE {p(pattern)} ESCAPE '\\')"
        )
    where = f"WHERE {' AND '.join(terms)} " if terms else ""
    return f"SELECT {rows.KEY_COLUMNS} FROM {source} {where}ORDER BY created_at, id LIMIT {p(limit)}"
