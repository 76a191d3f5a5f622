"""Stored responses written after their answer is sent, with read-your-writes on this instance.

Keeping a Responses answer (``gateway.state.keep``) is a database write: on the request's path it
cost a commit and a loop turn per answer (about a fifth of a millisecond at one request in flight).
``DeferredResponses`` wraps an engine's ``ResponseStore`` so a write whose outcome the gateway can
tell in advance is started with ``save_after`` and the answer is sent without waiting for it.

Invariants:

- **Read-your-writes on this instance.** Every call that names an account first waits for the
  writes of that account still in flight here (``_settled``), so a ``GET``, a ``DELETE``, a
  ``previous_response_id``, an ``item_reference`` or a conversation read that follows an answer on
  this instance finds what the answer stored. A read of an account with nothing in flight waits
  for nothing (one dict lookup).
- **Nothing is dropped while the process lives.** A deferred write is its own task, held here until
  it ends (never cancelled with its request); ``drain`` waits for all of them and is awaited by
  ``Services.stop`` before the database is closed.
- **What a kill costs.** A process killed after sending an answer but before its write reached
  the database (on SQLite the next loop turn, on PostgreSQL the batch's departure) has delivered a
  response that was not kept: it reads as a missing one (``404 not_found``), as an expired one.
- **Other instances** see a response once its write has committed; a client continuing over the
  same connection (one worker) always finds it.
- Outcomes after the answer: a write refused (the account filled meanwhile by another instance, its
  conversation deleted) or failed (a database error) is counted in ``refused`` / ``failed``
  (``modelgate_responses_saves_after_answer_total{outcome}``) and logged by the caller's
  ``on_done``.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence
from typing import Literal

from modelgate.storage.responses import (
    FoundItem,
    ItemPage,
    NewResponse,
    PageRequest,
    ResponseStore,
    StoredConversation,
    StoredItem,
    StoredResponse,
)

#: Told how a deferred write ended: True (kept), False (refused), or the exception it raised.
OnDone = Callable[[bool | BaseException], None]


class DeferredResponses:
    """A ``ResponseStore`` (the module docstring's invariants) with ``save_after``."""

    def __init__(self, store: ResponseStore) -> None:
        self._store = store
        #: account id -> its writes in flight on this instance (held, so none is garbage-collected).
        self._pending: dict[int, set[asyncio.Task[bool]]] = {}
        #: Deferred writes that ended kept, refused or failed (metrics).
        self.kept = 0
        self.refused = 0
        self.failed = 0

    @property
    def in_flight(self) -> int:
        """Deferred writes not yet ended."""
        return sum(len(tasks) for tasks in self._pending.values())

    def save_after(self, response: NewResponse, max_account_bytes: int, on_done: OnDone) -> None:
        """Start keeping ``response`` and return at once; ``on_done`` is told the outcome."""
        task = asyncio.ensure_future(self._store.save_response(response, max_account_bytes))
        self._pending.setdefault(response.account_id, set()).add(task)
        task.add_done_callback(functools.partial(self._ended, response.account_id, on_done))

    def _ended(self, account_id: int, on_done: OnDone, task: asyncio.Task[bool]) -> None:
        tasks = self._pending.get(account_id)
        if tasks is not None:
            tasks.discard(task)
            if not tasks:
                del self._pending[account_id]
        outcome: bool | BaseException = (
            asyncio.CancelledError() if task.cancelled() else task.exception() or task.result()
        )
        if outcome is True:
            self.kept += 1
        elif outcome is False:
            self.refused += 1
        else:
            self.failed += 1
        on_done(outcome)

    async def _settled(self, account_id: int) -> None:
        """Wait for the account's writes in flight here (returns at once when there are none)."""
        while tasks := self._pending.get(account_id):
            await asyncio.wait(tuple(tasks))

    async def drain(self) -> None:
        """Wait for every deferred write to end (before the database closes)."""
        while self._pending:
            await asyncio.wait([task for tasks in self._pending.values() for task in tasks])

    # ResponseStore: each call waits for the account's deferred writes first ----------------

    async def save_response(self, response: NewResponse, max_account_bytes: int) -> bool:
        await self._settled(response.account_id)
        return await self._store.save_response(response, max_account_bytes)

    async def get_response(self, account_id: int, response_id: str, now: float) -> StoredResponse | None:
        await self._settled(account_id)
        return await self._store.get_response(account_id, response_id, now)

    async def response_chain(
        self, account_id: int, response_id: str, now: float, max_depth: int
    ) -> list[StoredResponse] | None:
        await self._settled(account_id)
        return await self._store.response_chain(account_id, response_id, now, max_depth)

    async def delete_response(self, account_id: int, response_id: str) -> bool:
        await self._settled(account_id)
        return await self._store.delete_response(account_id, response_id)

    async def find_item(self, account_id: int, item_id: str, now: float) -> FoundItem | None:
        await self._settled(account_id)
        return await self._store.find_item(account_id, item_id, now)

    async def create_conversation(
        self,
        conversation: StoredConversation,
        items: Sequence[StoredItem],
        expires_at: float,
        max_account_bytes: int,
    ) -> bool:
        await self._settled(conversation.account_id)
        return await self._store.create_conversation(conversation, items, expires_at, max_account_bytes)

    async def get_conversation(
        self, account_id: int, conversation_id: str, now: float
    ) -> StoredConversation | None:
        await self._settled(account_id)
        return await self._store.get_conversation(account_id, conversation_id, now)

    async def update_conversation(
        self, account_id: int, conversation_id: str, metadata: bytes, now: float, max_account_bytes: int
    ) -> StoredConversation | Literal[False] | None:
        await self._settled(account_id)
        return await self._store.update_conversation(
            account_id, conversation_id, metadata, now, max_account_bytes
        )

    async def delete_conversation(self, account_id: int, conversation_id: str) -> bool:
        await self._settled(account_id)
        return await self._store.delete_conversation(account_id, conversation_id)

    async def add_conversation_items(
        self,
        account_id: int,
        conversation_id: str,
        items: Sequence[StoredItem],
        now: float,
        expires_at: float,
        max_account_bytes: int,
    ) -> bool | None:
        await self._settled(account_id)
        return await self._store.add_conversation_items(
            account_id, conversation_id, items, now, expires_at, max_account_bytes
        )

    async def conversation_items(
        self, account_id: int, conversation_id: str, now: float
    ) -> list[StoredItem] | None:
        await self._settled(account_id)
        return await self._store.conversation_items(account_id, conversation_id, now)

    async def conversation_items_page(
        self, account_id: int, conversation_id: str, now: float, page: PageRequest
    ) -> ItemPage | None:
        await self._settled(account_id)
        return await self._store.conversation_items_page(account_id, conversation_id, now, page)

    async def conversation_item(
        self, account_id: int, conversation_id: str, item_id: str, now: float
    ) -> StoredItem | None:
        await self._settled(account_id)
        return await self._store.conversation_item(account_id, conversation_id, item_id, now)

    async def response_input_items_page(
        self, account_id: int, response_id: str, now: float, max_depth: int, page: PageRequest
    ) -> ItemPage | None:
        await self._settled(account_id)
        return await self._store.response_input_items_page(account_id, response_id, now, max_depth, page)

    async def delete_conversation_item(self, account_id: int, conversation_id: str, item_id: str) -> bool:
        await self._settled(account_id)
        return await self._store.delete_conversation_item(account_id, conversation_id, item_id)

    async def sweep_state(self, now: float, limit: int) -> int:
        # Only objects already expired are swept: a write in flight is never one of them.
        return await self._store.sweep_state(now, limit)

    async def forget_account_state(self, account_id: int) -> int:
        await self._settled(account_id)
        return await self._store.forget_account_state(account_id)

    async def state_bytes(self, account_id: int) -> int:
        await self._settled(account_id)
        return await self._store.state_bytes(account_id)
