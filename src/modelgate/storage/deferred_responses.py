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
- **Batches.** Deferred writes gather for ``batch_seconds`` (at most ``MAX_BATCH``) and then
  start in one loop turn, so on SQLite they share one transaction of the group commit (on
  PostgreSQL one batch): the pages they touch in common (the account's byte count, the newest
  leaves of the tables and their time-ordered indexes) are written once, not once per answer.
- **Nothing is dropped while the process lives.** A deferred write is held here until it ends
  (never cancelled with its request); ``drain`` starts and waits for all of them and is awaited by
  ``Services.stop`` before the database is closed.
- **What a kill costs.** A process killed after sending an answer but before its write reached
  the database (at most ``batch_seconds`` plus a loop turn on SQLite; on PostgreSQL until its batch
  leaves) has delivered a response that was not kept: it reads as a missing one (``404
  not_found``), as an expired one.
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
from dataclasses import dataclass
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
#: Deferred writes one batch holds at most; one more starts the batch at once.
MAX_BATCH = 64


@dataclass(slots=True)
class _Write:
    response: NewResponse
    limit: int
    on_done: OnDone


class DeferredResponses:
    """A ``ResponseStore`` (the module docstring's invariants) with ``save_after``.

    ``batch_seconds`` (``responses.keep_batch_seconds``): deferred writes gather this long (at most
    ``MAX_BATCH``) and leave as one ``save_responses`` call, so they share one transaction (the
    pages they touch in common are written once) and one task; 0 sends each batch at the next loop
    turn. A read of an account with writes still gathering sends the batch at once."""

    def __init__(self, store: ResponseStore, batch_seconds: float = 0.0) -> None:
        self._store = store
        self._batch_seconds = batch_seconds
        #: account id -> the batches holding its writes not yet ended (what its readers wait for).
        self._pending: dict[int, set[asyncio.Future[None]]] = {}
        #: The batch gathering: its writes, their accounts, the future its end sets, its timer.
        self._gathering: list[_Write] = []
        self._gathering_accounts: set[int] = set()
        self._gathering_end: asyncio.Future[None] | None = None
        self._timer: asyncio.Handle | None = None
        #: Batches at the database (held, so none is garbage-collected).
        self._running: set[asyncio.Task[list[bool | Exception]]] = set()
        #: Deferred writes not yet ended; and those that ended kept, refused or failed (metrics).
        self.in_flight = 0
        self.kept = 0
        self.refused = 0
        self.failed = 0

    def save_after(self, response: NewResponse, max_account_bytes: int, on_done: OnDone) -> None:
        """Keep ``response`` without waiting; ``on_done`` is told the outcome."""
        if self._gathering and self._gathering[0].limit != max_account_bytes:
            self._start()  # one limit per batch (it changes only with a configuration reload)
        loop = asyncio.get_running_loop()
        if self._gathering_end is None:
            self._gathering_end = loop.create_future()
        self._gathering.append(_Write(response, max_account_bytes, on_done))
        self.in_flight += 1
        if response.account_id not in self._gathering_accounts:
            self._gathering_accounts.add(response.account_id)
            self._pending.setdefault(response.account_id, set()).add(self._gathering_end)
        if len(self._gathering) >= MAX_BATCH:
            self._start()
        elif self._timer is None:
            self._timer = (
                loop.call_later(self._batch_seconds, self._start)
                if self._batch_seconds > 0
                else loop.call_soon(self._start)
            )

    def _start(self) -> None:
        """Send the gathering batch to the store (one call, one task)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        writes, self._gathering = self._gathering, []
        accounts, self._gathering_accounts = self._gathering_accounts, set()
        end, self._gathering_end = self._gathering_end, None
        if not writes or end is None:
            return
        task = asyncio.ensure_future(
            self._store.save_responses([w.response for w in writes], writes[0].limit)
        )
        self._running.add(task)
        task.add_done_callback(functools.partial(self._ended, writes, accounts, end))

    def _ended(
        self,
        writes: list[_Write],
        accounts: set[int],
        end: asyncio.Future[None],
        task: asyncio.Task[list[bool | Exception]],
    ) -> None:
        self._running.discard(task)
        for account_id in accounts:
            ends = self._pending.get(account_id)
            if ends is not None:
                ends.discard(end)
                if not ends:
                    del self._pending[account_id]
        outcomes: Sequence[bool | BaseException]
        if task.cancelled():
            outcomes = [asyncio.CancelledError()] * len(writes)
        elif (error := task.exception()) is not None:
            outcomes = [error] * len(writes)
        else:
            outcomes = task.result()
        self.in_flight -= len(writes)
        end.set_result(None)
        for write, outcome in zip(writes, outcomes, strict=True):
            if outcome is True:
                self.kept += 1
            elif outcome is False:
                self.refused += 1
            else:
                self.failed += 1
            write.on_done(outcome)

    async def _settled(self, account_id: int) -> None:
        """Wait for the account's deferred writes (returns at once when there are none)."""
        while ends := self._pending.get(account_id):
            if account_id in self._gathering_accounts:
                self._start()  # a reader waits: the batch leaves now
            await asyncio.wait(tuple(ends))

    async def drain(self) -> None:
        """Start and wait for every deferred write (before the database closes)."""
        while self._pending:
            self._start()
            await asyncio.wait([end for ends in self._pending.values() for end in ends])

    # ResponseStore: each call waits for the account's deferred writes first ----------------

    async def save_response(self, response: NewResponse, max_account_bytes: int) -> bool:
        await self._settled(response.account_id)
        return await self._store.save_response(response, max_account_bytes)

    async def save_responses(
        self, responses: Sequence[NewResponse], max_account_bytes: int
    ) -> list[bool | Exception]:
        for account_id in {r.account_id for r in responses}:
            await self._settled(account_id)
        return await self._store.save_responses(responses, max_account_bytes)

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
