"""The SQL of one page of stored items, for SQLite and PostgreSQL alike.

A list is the items of one or more owners (a conversation; a response's chain, oldest first), each
owner's items in ``position`` order; the last owner of a chain contributes its ``input`` items
only. Items are numbered by ``(segment, position)``, where ``segment`` is the owner's place in the
list, so a cursor is that pair and a page is ``LIMIT limit + 1`` rows past it: the database reads
a page, never the whole list. Only the placeholder syntax differs between engines (``mark``).

Each owner is bound once (numbered placeholders, reused), so a chain of ``n`` responses takes
``n + 4`` parameters at most: ``responses.max_chain_depth`` (at most 10,000) stays
well under the engines' limits (SQLite 32,766 variables, PostgreSQL's protocol 32,767 arguments).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

#: The placeholder of the n-th parameter (1-based): ``?n`` on SQLite, ``$n`` on PostgreSQL; a
#: placeholder may appear several times.
Mark = Callable[[int], str]


def sqlite_mark(n: int) -> str:
    return f"?{n}"


def postgres_mark(n: int) -> str:
    return f"${n}"


@dataclass(frozen=True, slots=True)
class ItemList:
    #: Owner ids in list order.
    owners: Sequence[str]
    #: The last owner contributes its input items only (a response's own input).
    last_input_only: bool = False


class _Params:
    def __init__(self, mark: Mark) -> None:
        self.mark = mark
        self.values: list[Any] = []

    def add(self, value: Any) -> str:
        self.values.append(value)
        return self.mark(len(self.values))


def _numbered(items: ItemList, params: _Params) -> str:
    """Items of the list with their ``seg`` (owner's place) and ``position``."""
    marks = [params.add(owner) for owner in items.owners]
    cases = " ".join(f"WHEN {mark} THEN {i}" for i, mark in enumerate(marks))
    owners = ", ".join(marks)
    only_input = ""
    if items.last_input_only:
        only_input = f" AND (owner_id <> {marks[-1]} OR section = 'input')"
    return (
        f"SELECT item_id, body, section, position, CASE owner_id {cases} END AS seg "
        f"FROM stored_items WHERE owner_id IN ({owners}){only_input}"
    )


def cursor_query(items: ItemList, item_id: str, ascending: bool, mark: Mark) -> tuple[str, list[Any]]:
    """``(seg, position)`` of the first item with ``item_id`` in the page's order (no row: none)."""
    params = _Params(mark)
    inner = _numbered(items, params)
    direction = "ASC" if ascending else "DESC"
    sql = (
        f"SELECT seg, position FROM ({inner}) numbered WHERE item_id = {params.add(item_id)} "
        f"ORDER BY seg {direction}, position {direction} LIMIT 1"
    )
    return sql, params.values


def page_query(
    items: ItemList, after: tuple[int, int] | None, limit: int, ascending: bool, mark: Mark
) -> tuple[str, list[Any]]:
    """``item_id, body, section`` of up to ``limit + 1`` items past ``after``, in the page's order."""
    params = _Params(mark)
    inner = _numbered(items, params)
    direction, beyond = ("ASC", ">") if ascending else ("DESC", "<")
    where = ""
    if after is not None:
        where = f" WHERE (seg, position) {beyond} ({params.add(after[0])}, {params.add(after[1])})"
    sql = (
        f"SELECT item_id, body, section FROM ({inner}) numbered{where} "
        f"ORDER BY seg {direction}, position {direction} LIMIT {params.add(limit + 1)}"
    )
    return sql, params.values
