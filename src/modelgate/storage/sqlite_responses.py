"""``ResponseStore`` on SQLite (a repository over ``SqliteDatabase``).

Stored objects can be megabytes, so almost none of this runs on the event loop: reads run on the
reader thread (``SqliteDatabase.read``; only the account's byte count, one number, is read on the
loop), writes on the store's worker thread, whose connection waits for SQLite's write lock instead
of failing. Each write is one ``BEGIN IMMEDIATE`` transaction, so the per-account byte check and
the write it guards cannot interleave with another writer. The exception: a response of at most
``INLINE_SAVE_BYTES`` (most answers) is kept in the ledger's group commit on the loop
(``storage.group_commit``), in its own savepoint: no thread hop, and with several workers no
sleeping on the other's write lock.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar

from modelgate.storage.base import Conflict, StorageError
from modelgate.storage.item_pages import ItemList, cursor_query, page_plan, page_query, sqlite_mark
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
    appended_bytes,
    object_bytes,
    page_of,
    stored_response,
)
from modelgate.storage.sqlite_database import SqliteRepository

T = TypeVar("T")
#: A response (body and items) this small is kept with the ledger's group commit, on the loop.
INLINE_SAVE_BYTES = 64 * 1024


def _inline(response: NewResponse) -> bool:
    """Whether ``response`` is saved with the group commit (``INLINE_SAVE_BYTES``)."""
    return object_bytes(response.body, [*response.input_items, *response.output_items]) <= INLINE_SAVE_BYTES


class SqliteResponses(SqliteRepository):
    async def _state_write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        def op() -> T:
            with self._write() as db:
                return fn(db)

        try:
            return await self._run_on_worker(op)
        except (sqlite3.Error, OSError) as exc:
            raise StorageError(f"sqlite: {exc}") from exc

    # helpers (run inside a transaction) ---------------------------------------------------

    @staticmethod
    def _charge(db: sqlite3.Connection, account_id: int, amount: int, limit: int) -> bool:
        db.execute("INSERT OR IGNORE INTO state_usage (account_id, bytes) VALUES (?, 0)", (account_id,))
        cursor = db.execute(
            "UPDATE state_usage SET bytes = bytes + ? WHERE account_id = ? AND bytes + ? <= ?",
            (amount, account_id, amount, limit),
        )
        return cursor.rowcount == 1

    @staticmethod
    def _refund(db: sqlite3.Connection, account_id: int, amount: int) -> None:
        db.execute(
            "UPDATE state_usage SET bytes = MAX(0, bytes - ?) WHERE account_id = ?", (amount, account_id)
        )

    @staticmethod
    def _insert_items(
        db: sqlite3.Connection, owner_id: str, account_id: int, start: int, items: Sequence[StoredItem]
    ) -> None:
        db.executemany(
            "INSERT INTO stored_items (owner_id, position, account_id, item_id, section, body) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [
                (owner_id, start + i, account_id, item.id, item.section, item.body)
                for i, item in enumerate(items)
            ],
        )

    @staticmethod
    def _live(db: sqlite3.Connection, kind: str, account_id: int, object_id: str, now: float) -> Any:
        return db.execute(
            f"SELECT {OBJECT_COLUMNS}, bytes FROM stored_objects "
            "WHERE id = ? AND account_id = ? AND kind = ? AND expires_at > ?",
            (object_id, account_id, kind, now),
        ).fetchone()

    @staticmethod
    def _items(db: sqlite3.Connection, owner_id: str) -> list[StoredItem]:
        rows = db.execute(
            "SELECT item_id, body, section FROM stored_items WHERE owner_id = ? ORDER BY position",
            (owner_id,),
        ).fetchall()
        return [StoredItem(r[0], bytes(r[1]), r[2]) for r in rows]

    @classmethod
    def _response(cls, db: sqlite3.Connection, row: Any) -> StoredResponse:
        items = cls._items(db, row[0])
        return stored_response(row, items)

    @staticmethod
    def _delete_object(db: sqlite3.Connection, kind: str, account_id: int, object_id: str) -> bool:
        row = db.execute(
            "DELETE FROM stored_objects WHERE id = ? AND account_id = ? AND kind = ? RETURNING bytes",
            (object_id, account_id, kind),
        ).fetchone()
        if row is None:
            return False
        SqliteResponses._refund(db, account_id, int(row[0]))
        return True

    @staticmethod
    def _page(db: sqlite3.Connection, items: ItemList, page: PageRequest) -> ItemPage:
        after: tuple[int, int] | None = None
        if page.after is not None:
            for segment, owner, input_only in items.segments(page.ascending):
                sql, params = cursor_query(items, owner, input_only, page.after, page.ascending, sqlite_mark)
                found = db.execute(sql, params).fetchone()
                if found is not None:
                    after = (segment, int(found[0]))
                    break
            else:
                raise UnknownCursor(page.after)
        rows: list[Any] = []
        for owner, input_only, past in page_plan(items, after, page.ascending):
            wanted = page.limit + 1 - len(rows)
            sql, params = page_query(owner, input_only, past, wanted, page.ascending, sqlite_mark)
            rows.extend(db.execute(sql, params).fetchall())
            if len(rows) > page.limit:
                break
        return page_of([StoredItem(r[0], bytes(r[1]), r[2]) for r in rows], page.limit)

    # responses ----------------------------------------------------------------------------

    @classmethod
    def _save(cls, db: sqlite3.Connection, r: NewResponse, max_account_bytes: int) -> bool:
        """One response saved in the open transaction (``save_response``'s rules)."""
        items = [*r.input_items, *r.output_items]
        size = object_bytes(r.body, items)
        conversation = None
        if r.conversation_id is not None:
            conversation = cls._live(db, "conversation", r.account_id, r.conversation_id, r.created_at)
            if conversation is None:
                return False
        appended = [StoredItem(i.id, i.body, "item") for i in items] if conversation else []
        if not cls._charge(db, r.account_id, size + appended_bytes(r), max_account_bytes):
            return False
        db.execute(
            "INSERT INTO stored_objects (id, account_id, kind, key_id, previous_id, conversation_id, "
            "holder, body, bytes, created_at, expires_at) VALUES (?, ?, 'response', ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                r.id,
                r.account_id,
                r.key_id,
                r.previous_id,
                r.conversation_id,
                r.holder,
                r.body,
                size,
                r.created_at,
                r.expires_at,
            ),
        )
        cls._insert_items(db, r.id, r.account_id, 0, items)
        if conversation is not None and r.conversation_id is not None:
            cls._append(db, r.conversation_id, r.account_id, appended, r.expires_at)
        return True

    async def save_response(self, response: NewResponse, max_account_bytes: int) -> bool:
        if _inline(response):
            return await self._group_write(lambda db: self._save(db, response, max_account_bytes))
        return await self._state_write(lambda db: self._save(db, response, max_account_bytes))

    async def save_responses(
        self, responses: Sequence[NewResponse], max_account_bytes: int
    ) -> list[bool | Exception]:
        """The small ones as ONE operation of the ledger's group commit; when the database refuses
        that operation for one of them (a duplicate id: the group commit rolls it back whole), and
        for a large one (on the worker thread), each is saved alone, so only the culprit fails."""
        small = [r for r in responses if _inline(r)]

        def op(db: sqlite3.Connection) -> list[bool]:
            return [self._save(db, r, max_account_bytes) for r in small]

        done: dict[int, bool | Exception] = {}
        if small:
            try:
                for r, outcome in zip(small, await self._group_write(op), strict=True):
                    done[id(r)] = outcome
            except Conflict:
                pass  # saved one by one below
            except StorageError as exc:
                for r in small:
                    done[id(r)] = exc
        for r in responses:
            if id(r) not in done:
                try:
                    done[id(r)] = await self.save_response(r, max_account_bytes)
                except StorageError as exc:
                    done[id(r)] = exc
        return [done[id(r)] for r in responses]

    @classmethod
    def _append(
        cls,
        db: sqlite3.Connection,
        conversation_id: str,
        account_id: int,
        items: Sequence[StoredItem],
        expires: float,
    ) -> None:
        start = db.execute(
            "SELECT COALESCE(MAX(position), -1) + 1 FROM stored_items WHERE owner_id = ?", (conversation_id,)
        ).fetchone()[0]
        cls._insert_items(db, conversation_id, account_id, int(start), items)
        db.execute(
            "UPDATE stored_objects SET bytes = bytes + ?, expires_at = MAX(expires_at, ?) WHERE id = ?",
            (object_bytes(b"", items), expires, conversation_id),
        )

    async def get_response(self, account_id: int, response_id: str, now: float) -> StoredResponse | None:
        def op(db: sqlite3.Connection) -> StoredResponse | None:
            row = self._live(db, "response", account_id, response_id, now)
            return self._response(db, row) if row else None

        return await self._read(op)

    async def response_chain(
        self, account_id: int, response_id: str, now: float, max_depth: int
    ) -> list[StoredResponse] | None:
        def op(db: sqlite3.Connection) -> list[StoredResponse] | None:
            chain: list[StoredResponse] = []
            next_id: str | None = response_id
            while next_id is not None and len(chain) < max_depth:
                row = self._live(db, "response", account_id, next_id, now)
                if row is None:
                    break
                chain.append(self._response(db, row))
                next_id = row[3]
            return chain[::-1] if chain else None

        return await self._read(op)

    async def response_input_items_page(
        self, account_id: int, response_id: str, now: float, max_depth: int, page: PageRequest
    ) -> ItemPage | None:
        def op(db: sqlite3.Connection) -> ItemPage | None:
            owners: list[str] = []
            next_id: str | None = response_id
            while next_id is not None and len(owners) < max_depth:
                row = self._live(db, "response", account_id, next_id, now)
                if row is None:
                    break
                owners.append(row[0])
                next_id = row[3]
            if not owners:
                return None
            return self._page(db, ItemList(account_id, owners[::-1], last_input_only=True), page)

        return await self._read(op)

    async def delete_response(self, account_id: int, response_id: str) -> bool:
        return await self._state_write(
            lambda db: self._delete_object(db, "response", account_id, response_id)
        )

    async def find_item(self, account_id: int, item_id: str, now: float) -> FoundItem | None:
        def op(db: sqlite3.Connection) -> FoundItem | None:
            row = db.execute(
                "SELECT i.item_id, i.body, i.section, o.id, o.holder FROM stored_items i "
                "JOIN stored_objects o ON o.id = i.owner_id "
                "WHERE i.account_id = ? AND i.item_id = ? AND o.account_id = ? AND o.expires_at > ? "
                "ORDER BY o.created_at DESC, i.position DESC LIMIT 1",
                (account_id, item_id, account_id, now),
            ).fetchone()
            if row is None:
                return None
            return FoundItem(StoredItem(row[0], bytes(row[1]), row[2]), row[3], row[4])

        return await self._read(op)

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

        def op(db: sqlite3.Connection) -> bool:
            if not self._charge(db, c.account_id, size, max_account_bytes):
                return False
            db.execute(
                "INSERT INTO stored_objects (id, account_id, kind, body, bytes, created_at, expires_at) "
                "VALUES (?, ?, 'conversation', ?, ?, ?, ?)",
                (c.id, c.account_id, c.metadata, size, c.created_at, expires_at),
            )
            self._insert_items(db, c.id, c.account_id, 0, items)
            return True

        return await self._state_write(op)

    @staticmethod
    def _conversation(row: Any) -> StoredConversation:
        return StoredConversation(row[0], int(row[1]), bytes(row[2]), float(row[6]))

    async def get_conversation(
        self, account_id: int, conversation_id: str, now: float
    ) -> StoredConversation | None:
        row = await self._read(lambda db: self._live(db, "conversation", account_id, conversation_id, now))
        return self._conversation(row) if row else None

    async def update_conversation(
        self, account_id: int, conversation_id: str, metadata: bytes, now: float, max_account_bytes: int
    ) -> StoredConversation | Literal[False] | None:
        def op(db: sqlite3.Connection) -> StoredConversation | Literal[False] | None:
            row = self._live(db, "conversation", account_id, conversation_id, now)
            if row is None:
                return None
            grown = len(metadata) - len(bytes(row[2]))
            if grown > 0:
                if not self._charge(db, account_id, grown, max_account_bytes):
                    return False
            else:
                self._refund(db, account_id, -grown)
            db.execute(
                "UPDATE stored_objects SET body = ?, bytes = bytes + ? WHERE id = ?",
                (metadata, grown, conversation_id),
            )
            return StoredConversation(conversation_id, account_id, metadata, float(row[6]))

        return await self._state_write(op)

    async def delete_conversation(self, account_id: int, conversation_id: str) -> bool:
        return await self._state_write(
            lambda db: self._delete_object(db, "conversation", account_id, conversation_id)
        )

    async def add_conversation_items(
        self,
        account_id: int,
        conversation_id: str,
        items: Sequence[StoredItem],
        now: float,
        expires_at: float,
        max_account_bytes: int,
    ) -> bool | None:
        def op(db: sqlite3.Connection) -> bool | None:
            if self._live(db, "conversation", account_id, conversation_id, now) is None:
                return None
            if not self._charge(db, account_id, object_bytes(b"", items), max_account_bytes):
                return False
            self._append(db, conversation_id, account_id, items, expires_at)
            return True

        return await self._state_write(op)

    async def conversation_items(
        self, account_id: int, conversation_id: str, now: float
    ) -> list[StoredItem] | None:
        def op(db: sqlite3.Connection) -> list[StoredItem] | None:
            if self._live(db, "conversation", account_id, conversation_id, now) is None:
                return None
            return self._items(db, conversation_id)

        return await self._read(op)

    async def conversation_items_page(
        self, account_id: int, conversation_id: str, now: float, page: PageRequest
    ) -> ItemPage | None:
        def op(db: sqlite3.Connection) -> ItemPage | None:
            if self._live(db, "conversation", account_id, conversation_id, now) is None:
                return None
            return self._page(db, ItemList(account_id, [conversation_id]), page)

        return await self._read(op)

    async def conversation_item(
        self, account_id: int, conversation_id: str, item_id: str, now: float
    ) -> StoredItem | None:
        def op(db: sqlite3.Connection) -> StoredItem | None:
            if self._live(db, "conversation", account_id, conversation_id, now) is None:
                return None
            row = db.execute(
                "SELECT item_id, body, section FROM stored_items WHERE owner_id = ? AND item_id = ? "
                "ORDER BY position DESC LIMIT 1",
                (conversation_id, item_id),
            ).fetchone()
            return StoredItem(row[0], bytes(row[1]), row[2]) if row else None

        return await self._read(op)

    async def delete_conversation_item(self, account_id: int, conversation_id: str, item_id: str) -> bool:
        def op(db: sqlite3.Connection) -> bool:
            row = db.execute(
                "DELETE FROM stored_items WHERE owner_id = ? AND account_id = ? AND item_id = ? "
                "AND owner_id IN (SELECT id FROM stored_objects WHERE kind = 'conversation') "
                "RETURNING length(body)",
                (conversation_id, account_id, item_id),
            ).fetchall()
            if not row:
                return False
            size = sum(int(r[0]) for r in row)
            db.execute(
                "UPDATE stored_objects SET bytes = MAX(0, bytes - ?) WHERE id = ?", (size, conversation_id)
            )
            self._refund(db, account_id, size)
            return True

        return await self._state_write(op)

    # retention ----------------------------------------------------------------------------

    async def sweep_state(self, now: float, limit: int) -> int:
        def op(db: sqlite3.Connection) -> int:
            rows = db.execute(
                "DELETE FROM stored_objects WHERE id IN "
                "(SELECT id FROM stored_objects WHERE expires_at <= ? ORDER BY expires_at LIMIT ?) "
                "RETURNING account_id, bytes",
                (now, limit),
            ).fetchall()
            for account_id, size in rows:
                self._refund(db, int(account_id), int(size))
            return len(rows)

        return await self._state_write(op)

    async def forget_account_state(self, account_id: int) -> int:
        def op(db: sqlite3.Connection) -> int:
            deleted = db.execute("DELETE FROM stored_objects WHERE account_id = ?", (account_id,)).rowcount
            db.execute("UPDATE state_usage SET bytes = 0 WHERE account_id = ?", (account_id,))
            return int(deleted)

        return await self._state_write(op)

    async def state_bytes(self, account_id: int) -> int:
        # One number by primary key, read before every stored answer: on the loop, as the ledger's
        # point reads are (a hop to the reader thread cost more than the read).
        sql = "SELECT bytes FROM state_usage WHERE account_id = ?"
        row = await self._run(lambda: self._db().execute(sql, (account_id,)).fetchone())
        return int(row[0]) if row else 0
