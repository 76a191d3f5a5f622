"""``ResponseStore`` on PostgreSQL (a repository over ``PostgresDatabase``).

Writes that change an account's stored bytes run in one transaction and update its
``state_usage`` row with a conditional ``UPDATE … WHERE bytes + $n <= $limit``: the row lock
serialises concurrent writers of one account, so the limit is never overshot across instances.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Literal

from modelgate.storage.base import StorageError
from modelgate.storage.item_pages import ItemList, cursor_query, page_plan, page_query, postgres_mark
from modelgate.storage.postgres_database import PostgresDatabase, PostgresRepository
from modelgate.storage.postgres_saves import ResponseSaves
from modelgate.storage.responses import (
    OBJECT_COLUMNS,
    FoundItem,
    ItemPage,
    NewResponse,
    PageRequest,
    StoredConversation,
    StoredItem,
    StoredResponse,
    UnknownCursor,
    object_bytes,
    page_of,
    stored_response,
)


class PostgresResponses(PostgresRepository):
    def __init__(self, database: PostgresDatabase) -> None:
        super().__init__(database)
        #: Stored answers, group-committed (owned by the database, which closes them before the pool).
        self._saves: ResponseSaves = database.saves

    # helpers (inside a transaction) -------------------------------------------------------

    @staticmethod
    async def _charge(conn: Any, account_id: int, amount: int, limit: int) -> bool:
        await conn.execute(
            "INSERT INTO state_usage (account_id, bytes) VALUES ($1, 0) ON CONFLICT DO NOTHING", account_id
        )
        status = await conn.execute(
            "UPDATE state_usage SET bytes = bytes + $2 WHERE account_id = $1 AND bytes + $2 <= $3",
            account_id,
            amount,
            limit,
        )
        return bool(status == "UPDATE 1")

    @staticmethod
    async def _refund(conn: Any, account_id: int, amount: int) -> None:
        await conn.execute(
            "UPDATE state_usage SET bytes = GREATEST(0, bytes - $2) WHERE account_id = $1", account_id, amount
        )

    @staticmethod
    async def _insert_items(
        conn: Any, owner_id: str, account_id: int, start: int, items: Sequence[StoredItem]
    ) -> None:
        if items:
            await conn.executemany(
                "INSERT INTO stored_items (owner_id, position, account_id, item_id, section, body) "
                "VALUES ($1, $2, $3, $4, $5, $6)",
                [
                    (owner_id, start + i, account_id, item.id, item.section, item.body)
                    for i, item in enumerate(items)
                ],
            )

    @staticmethod
    async def _live(
        conn: Any, kind: str, account_id: int, object_id: str, now: float, *, lock: bool = False
    ) -> Any:
        return await conn.fetchrow(
            f"SELECT {OBJECT_COLUMNS}, bytes FROM stored_objects "
            "WHERE id = $1 AND account_id = $2 AND kind = $3 AND expires_at > $4"
            + (" FOR UPDATE" if lock else ""),
            object_id,
            account_id,
            kind,
            now,
        )

    @staticmethod
    async def _page(conn: Any, items: ItemList, page: PageRequest) -> ItemPage:
        after: tuple[int, int] | None = None
        if page.after is not None:
            for segment, owner, input_only in items.segments(page.ascending):
                sql, params = cursor_query(
                    items, owner, input_only, page.after, page.ascending, postgres_mark
                )
                found = await conn.fetchrow(sql, *params)
                if found is not None:
                    after = (segment, int(found[0]))
                    break
            else:
                raise UnknownCursor(page.after)
        rows: list[Any] = []
        for owner, input_only, past in page_plan(items, after, page.ascending):
            wanted = page.limit + 1 - len(rows)
            sql, params = page_query(owner, input_only, past, wanted, page.ascending, postgres_mark)
            rows.extend(await conn.fetch(sql, *params))
            if len(rows) > page.limit:
                break
        return page_of([StoredItem(r[0], bytes(r[1]), r[2]) for r in rows], page.limit)

    @staticmethod
    async def _items(conn: Any, owner_id: str) -> list[StoredItem]:
        rows = await conn.fetch(
            "SELECT item_id, body, section FROM stored_items WHERE owner_id = $1 ORDER BY position", owner_id
        )
        return [StoredItem(r[0], bytes(r[1]), r[2]) for r in rows]

    @classmethod
    async def _response(cls, conn: Any, row: Any) -> StoredResponse:
        items = await cls._items(conn, row[0])
        return stored_response(row, items)

    @classmethod
    async def _delete_object(cls, conn: Any, kind: str, account_id: int, object_id: str) -> bool:
        size = await conn.fetchval(
            "DELETE FROM stored_objects WHERE id = $1 AND account_id = $2 AND kind = $3 RETURNING bytes",
            object_id,
            account_id,
            kind,
        )
        if size is None:
            return False
        await cls._refund(conn, account_id, int(size))
        return True

    @classmethod
    async def _append(
        cls, conn: Any, conversation_id: str, account_id: int, items: Sequence[StoredItem], expires: float
    ) -> None:
        start = await conn.fetchval(
            "SELECT COALESCE(MAX(position), -1) + 1 FROM stored_items WHERE owner_id = $1", conversation_id
        )
        await cls._insert_items(conn, conversation_id, account_id, int(start), items)
        await conn.execute(
            "UPDATE stored_objects SET bytes = bytes + $2, expires_at = GREATEST(expires_at, $3) WHERE id = $1",
            conversation_id,
            object_bytes(b"", items),
            expires,
        )

    # responses ----------------------------------------------------------------------------

    async def save_response(self, response: NewResponse, max_account_bytes: int) -> bool:
        # Group-committed with the other answers of this loop turn (storage.postgres_saves).
        return await self._saves.save(response, max_account_bytes)

    async def save_responses(
        self, responses: Sequence[NewResponse], max_account_bytes: int
    ) -> list[bool | Exception]:
        # Submitted in one loop turn, so they leave in the same batch (storage.postgres_saves).
        outcomes = await asyncio.gather(
            *(self._saves.save(r, max_account_bytes) for r in responses), return_exceptions=True
        )
        return [o if isinstance(o, bool | Exception) else StorageError(str(o)) for o in outcomes]

    async def get_response(self, account_id: int, response_id: str, now: float) -> StoredResponse | None:
        async with self._conn() as conn:
            row = await self._live(conn, "response", account_id, response_id, now)
            return await self._response(conn, row) if row else None

    async def response_chain(
        self, account_id: int, response_id: str, now: float, max_depth: int
    ) -> list[StoredResponse] | None:
        chain: list[StoredResponse] = []
        async with self._conn() as conn:
            next_id: str | None = response_id
            while next_id is not None and len(chain) < max_depth:
                row = await self._live(conn, "response", account_id, next_id, now)
                if row is None:
                    break
                chain.append(await self._response(conn, row))
                next_id = row[3]
        return chain[::-1] if chain else None

    async def response_input_items_page(
        self, account_id: int, response_id: str, now: float, max_depth: int, page: PageRequest
    ) -> ItemPage | None:
        owners: list[str] = []
        async with self._conn() as conn:
            next_id: str | None = response_id
            while next_id is not None and len(owners) < max_depth:
                row = await self._live(conn, "response", account_id, next_id, now)
                if row is None:
                    break
                owners.append(row[0])
                next_id = row[3]
            if not owners:
                return None
            return await self._page(conn, ItemList(account_id, owners[::-1], last_input_only=True), page)

    async def delete_response(self, account_id: int, response_id: str) -> bool:
        async with self._tx() as conn:
            return await self._delete_object(conn, "response", account_id, response_id)

    async def find_item(self, account_id: int, item_id: str, now: float) -> FoundItem | None:
        async with self._conn() as conn:
            row = await conn.fetchrow(
                "SELECT i.item_id, i.body, i.section, o.id, o.holder FROM stored_items i "
                "JOIN stored_objects o ON o.id = i.owner_id "
                "WHERE i.account_id = $1 AND i.item_id = $2 AND o.account_id = $1 AND o.expires_at > $3 "
                "ORDER BY o.created_at DESC, i.position DESC LIMIT 1",
                account_id,
                item_id,
                now,
            )
        if row is None:
            return None
        return FoundItem(StoredItem(row[0], bytes(row[1]), row[2]), row[3], row[4])

    # conversations ------------------------------------------------------------------------

    async def create_conversation(
        self,
        conversation: StoredConversation,
        items: Sequence[StoredItem],
        expires_at: float,
        max_account_bytes: int,
    ) -> bool:
        c = conversation
        size = object_bytes(c.metadata, items)
        async with self._tx() as conn:
            if not await self._charge(conn, c.account_id, size, max_account_bytes):
                return False
            await conn.execute(
                "INSERT INTO stored_objects (id, account_id, kind, body, bytes, created_at, expires_at) "
                "VALUES ($1, $2, 'conversation', $3, $4, $5, $6)",
                c.id,
                c.account_id,
                c.metadata,
                size,
                c.created_at,
                expires_at,
            )
            await self._insert_items(conn, c.id, c.account_id, 0, items)
            return True

    @staticmethod
    def _conversation(row: Any) -> StoredConversation:
        return StoredConversation(row[0], int(row[1]), bytes(row[2]), float(row[6]))

    async def get_conversation(
        self, account_id: int, conversation_id: str, now: float
    ) -> StoredConversation | None:
        async with self._conn() as conn:
            row = await self._live(conn, "conversation", account_id, conversation_id, now)
        return self._conversation(row) if row else None

    async def update_conversation(
        self, account_id: int, conversation_id: str, metadata: bytes, now: float, max_account_bytes: int
    ) -> StoredConversation | Literal[False] | None:
        async with self._tx() as conn:
            row = await self._live(conn, "conversation", account_id, conversation_id, now, lock=True)
            if row is None:
                return None
            grown = len(metadata) - len(bytes(row[2]))
            if grown > 0:
                if not await self._charge(conn, account_id, grown, max_account_bytes):
                    return False
            else:
                await self._refund(conn, account_id, -grown)
            await conn.execute(
                "UPDATE stored_objects SET body = $2, bytes = bytes + $3 WHERE id = $1",
                conversation_id,
                metadata,
                grown,
            )
            return StoredConversation(conversation_id, account_id, metadata, float(row[6]))

    async def delete_conversation(self, account_id: int, conversation_id: str) -> bool:
        async with self._tx() as conn:
            return await self._delete_object(conn, "conversation", account_id, conversation_id)

    async def add_conversation_items(
        self,
        account_id: int,
        conversation_id: str,
        items: Sequence[StoredItem],
        now: float,
        expires_at: float,
        max_account_bytes: int,
    ) -> bool | None:
        async with self._tx() as conn:
            if await self._live(conn, "conversation", account_id, conversation_id, now, lock=True) is None:
                return None
            if not await self._charge(conn, account_id, object_bytes(b"", items), max_account_bytes):
                return False
            await self._append(conn, conversation_id, account_id, items, expires_at)
            return True

    async def conversation_items(
        self, account_id: int, conversation_id: str, now: float
    ) -> list[StoredItem] | None:
        async with self._conn() as conn:
            if await self._live(conn, "conversation", account_id, conversation_id, now) is None:
                return None
            return await self._items(conn, conversation_id)

    async def conversation_items_page(
        self, account_id: int, conversation_id: str, now: float, page: PageRequest
    ) -> ItemPage | None:
        async with self._conn() as conn:
            if await self._live(conn, "conversation", account_id, conversation_id, now) is None:
                return None
            return await self._page(conn, ItemList(account_id, [conversation_id]), page)

    async def conversation_item(
        self, account_id: int, conversation_id: str, item_id: str, now: float
    ) -> StoredItem | None:
        async with self._conn() as conn:
            if await self._live(conn, "conversation", account_id, conversation_id, now) is None:
                return None
            row = await conn.fetchrow(
                "SELECT item_id, body, section FROM stored_items WHERE owner_id = $1 AND item_id = $2 "
                "ORDER BY position DESC LIMIT 1",
                conversation_id,
                item_id,
            )
        return StoredItem(row[0], bytes(row[1]), row[2]) if row else None

    async def delete_conversation_item(self, account_id: int, conversation_id: str, item_id: str) -> bool:
        async with self._tx() as conn:
            rows = await conn.fetch(
                "DELETE FROM stored_items WHERE owner_id = $1 AND account_id = $2 AND item_id = $3 "
                "AND owner_id IN (SELECT id FROM stored_objects WHERE kind = 'conversation') "
                "RETURNING length(body)",
                conversation_id,
                account_id,
                item_id,
            )
            if not rows:
                return False
            size = sum(int(r[0]) for r in rows)
            await conn.execute(
                "UPDATE stored_objects SET bytes = GREATEST(0, bytes - $2) WHERE id = $1",
                conversation_id,
                size,
            )
            await self._refund(conn, account_id, size)
            return True

    # retention ----------------------------------------------------------------------------

    async def sweep_state(self, now: float, limit: int) -> int:
        async with self._tx() as conn:
            rows = await conn.fetch(
                "DELETE FROM stored_objects WHERE id IN (SELECT id FROM stored_objects "
                "WHERE expires_at <= $1 ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED) "
                "RETURNING account_id, bytes",
                now,
                limit,
            )
            for row in rows:
                await self._refund(conn, int(row[0]), int(row[1]))
            return len(rows)

    async def forget_account_state(self, account_id: int) -> int:
        async with self._tx() as conn:
            status = await conn.execute("DELETE FROM stored_objects WHERE account_id = $1", account_id)
            await conn.execute("UPDATE state_usage SET bytes = 0 WHERE account_id = $1", account_id)
        return int(status.split()[-1])

    async def state_bytes(self, account_id: int) -> int:
        async with self._conn() as conn:
            value = await conn.fetchval("SELECT bytes FROM state_usage WHERE account_id = $1", account_id)
        return int(value or 0)
