"""Group commit for stored Responses answers on PostgreSQL: what one instance keeps together
shares one statement.

Every completed Responses answer that asks to be stored (the default) is kept before it is
returned (``gateway.state.keep``). The answers submitted in one turn of the event loop go to the
database as ONE call of ``modelgate_save_responses`` (migration 0009, its conversation lock
replaced by 0010): one statement, one transaction, one commit and one round trip for all of them,
each account's byte count written once.
While a batch is at the database the next one gathers, as for the ledger (``postgres_batches``).

Nothing is weakened: the function applies the rules of ``modelgate_save_response`` (0007) to each
answer in submission order, under the conversation and account locks, so the account limit is
exact and each answer is kept or not exactly as if saved alone. A batch the database refuses as a
whole for one answer (a duplicate id, an account that is gone) or aborts to break a deadlock
(a concurrent sweep locking two accounts in the other order) is sent again one answer at a time
(``modelgate_save_response``, 0007, as is a batch of one), so only the culprit's caller gets the
error.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from modelgate.storage.base import Conflict
from modelgate.storage.postgres_batches import DATABASE_ERRORS, Batches, resolve
from modelgate.storage.responses import NewResponse, StoredItem, appended_bytes, object_bytes

_SAVE_ONE = (
    "SELECT modelgate_save_response($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, "
    "$13::text[], $14::text[], $15::bytea[])"
)
_CALL = (
    "SELECT modelgate_save_responses($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], "
    "$6::text[], $7::bytea[], $8::bigint[], $9::bigint[], $10::float8[], $11::float8[], $12, "
    "$13::int[], $14::text[], $15::text[], $16::bytea[])"
)


@dataclass(slots=True)
class _Save:
    response: NewResponse
    limit: int
    done: asyncio.Future[bool] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


def response_row(r: NewResponse) -> tuple[tuple[Any, ...], list[StoredItem]]:
    """One answer's eleven leading arguments of ``modelgate_save_response`` (0007) and
    ``modelgate_save_responses`` (0009/0010, one array each), and its items in order."""
    items = [*r.input_items, *r.output_items]
    row = (
        r.id,
        r.account_id,
        r.key_id,
        r.previous_id,
        r.conversation_id,
        r.holder,
        r.body,
        object_bytes(r.body, items),
        appended_bytes(r),
        r.created_at,
        r.expires_at,
    )
    return row, items


def arguments(batch: list[_Save]) -> tuple[Any, ...]:
    """The function's arguments: one array per field, items flattened with their answer's index."""
    columns: list[list[Any]] = [[] for _ in range(11)]
    owners: list[int] = []
    item_ids: list[str] = []
    sections: list[str] = []
    item_bodies: list[bytes] = []
    for index, save in enumerate(batch, start=1):
        row, items = response_row(save.response)
        for column, value in zip(columns, row, strict=True):
            column.append(value)
        for item in items:
            owners.append(index)
            item_ids.append(item.id)
            sections.append(item.section)
            item_bodies.append(item.body)
    # One limit per batch: every caller passes the instance's responses.max_account_bytes.
    return (*columns, batch[0].limit, owners, item_ids, sections, item_bodies)


class ResponseSaves(Batches[_Save]):
    #: Answers in one batch at most (a larger queue leaves in several).
    max_batch = 64

    async def save(self, response: NewResponse, max_account_bytes: int) -> bool:
        kept: bool = await self._submit(_Save(response, max_account_bytes))
        return kept

    def _take(self, queue: list[_Save]) -> tuple[list[_Save], list[_Save]]:
        # Only answers under the same limit share a batch (one instance: always the same).
        if not queue:
            return [], []
        limit = queue[0].limit
        batch = [s for s in queue if s.limit == limit][: self.max_batch]
        chosen = {id(s) for s in batch}
        return batch, [s for s in queue if id(s) not in chosen]

    async def _run(self, batch: list[_Save]) -> None:
        if len(batch) == 1:
            await self._send_alone(batch[0])
            return
        try:
            kept = await self._call(batch)
        except (asyncpg.IntegrityConstraintViolationError, asyncpg.DeadlockDetectedError):
            for save in batch:  # find the answer the database refused; the others are kept
                await self._send_alone(save)
            return
        for save, was_kept in zip(batch, kept, strict=True):
            resolve(save, bool(was_kept))

    async def _send_alone(self, save: _Save) -> None:
        try:
            kept = await self._save_one(save.response, save.limit)
        except asyncpg.IntegrityConstraintViolationError as exc:
            resolve(save, Conflict(str(exc)))
        except DATABASE_ERRORS as exc:
            resolve(save, self._failure(exc))
        else:
            resolve(save, kept)

    async def _save_one(self, response: NewResponse, max_account_bytes: int) -> bool:
        # One statement (migration 0007): the conversation check and lock, the charge against the
        # account's limit and every insert run in one round trip and one commit.
        row, items = response_row(response)
        conn = await self._connection()
        saved = await conn.fetchval(
            _SAVE_ONE,
            *row,
            max_account_bytes,
            [item.id for item in items],
            [item.section for item in items],
            [item.body for item in items],
        )
        return bool(saved)

    async def _call(self, batch: list[_Save]) -> list[bool]:
        conn = await self._connection()
        kept: list[bool] = await conn.fetchval(_CALL, *arguments(batch))
        return kept
