"""The SQL of one page of stored items, for SQLite and PostgreSQL alike.

A list is the items of one or more owners (a conversation; a response's chain, oldest first), each
owner's items in ``position`` order; the last owner of a chain contributes its ``input`` items
only. Items are numbered by ``(segment, position)``, where ``segment`` is the owner's place in the
list, so a cursor is that pair. A page is read owner by owner in the page's order, each with
``WHERE owner_id = … AND position > … ORDER BY position LIMIT …`` on the primary key
``(owner_id, position)``, until ``limit + 1`` rows are in hand; a cursor is found through the
``(account_id, item_id)`` index. So the database reads a page (and one probe per owner of a chain),
never the whole list: no query sorts or scans an owner's items. Only the placeholder syntax
differs between engines (``mark``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

#: The placeholder of the n-th parameter (1-based): ``?`` on SQLite, ``$n`` on PostgreSQL.
Mark = Callable[[int], str]


def sqlite_mark(_: int) -> str:
    return "?"


def postgres_mark(n: int) -> str:
    return f"${n}"


@dataclass(frozen=True, slots=True)
class ItemList:
    #: The account that owns every item (the cursor's index starts with it).
    account_id: int
    #: Owner ids in list order.
    owners: Sequence[str]
    #: The last owner contributes its input items only (a response's own input).
    last_input_only: bool = False

    def segments(self, ascending: bool) -> list[tuple[int, str, bool]]:
        """``(segment, owner, input items only)`` in the page's order."""
        last = len(self.owners) - 1
        numbered = [(i, owner, self.last_input_only and i == last) for i, owner in enumerate(self.owners)]
        return numbered if ascending else numbered[::-1]


def _section(input_only: bool) -> str:
    return " AND section = 'input'" if input_only else ""


def cursor_query(
    items: ItemList, owner: str, input_only: bool, item_id: str, ascending: bool, mark: Mark
) -> tuple[str, list[Any]]:
    """The ``position`` of the first item with ``item_id`` of one owner, in the page's order."""
    direction = "ASC" if ascending else "DESC"
    sql = (
        f"SELECT position FROM stored_items WHERE account_id = {mark(1)} AND item_id = {mark(2)} "
        f"AND owner_id = {mark(3)}{_section(input_only)} ORDER BY position {direction} LIMIT 1"
    )
    return sql, [items.account_id, item_id, owner]


def page_query(
    owner: str, input_only: bool, after: int | None, limit: int, ascending: bool, mark: Mark
) -> tuple[str, list[Any]]:
    """``item_id, body, section`` of up to ``limit`` items of one owner past position ``after``,
    in the page's order."""
    direction, beyond = ("ASC", ">") if ascending else ("DESC", "<")
    params: list[Any] = [owner]
    past = ""
    if after is not None:
        params.append(after)
        past = f" AND position {beyond} {mark(len(params))}"
    params.append(limit)
    sql = (
        f"SELECT item_id, body, section FROM stored_items WHERE owner_id = {mark(1)}{_section(input_only)}"
        f"{past} ORDER BY position {direction} LIMIT {mark(len(params))}"
    )
    return sql, params


def page_plan(
    items: ItemList, after: tuple[int, int] | None, ascending: bool
) -> list[tuple[str, bool, int | None]]:
    """``(owner, input items only, past position)`` to read in order for a page past ``after``:
    the cursor's owner past its position, then every later owner whole (up to the page's size)."""
    plan: list[tuple[str, bool, int | None]] = []
    for segment, owner, input_only in items.segments(ascending):
        if after is None:
            plan.append((owner, input_only, None))
        elif segment == after[0]:
            plan.append((owner, input_only, after[1]))
        elif (segment > after[0]) == ascending:
            plan.append((owner, input_only, None))
    return plan
