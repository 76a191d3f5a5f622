"""Stored Responses state: responses and conversations, each owned by one account.

The Responses API is stateful (``store`` defaults to true): a later request may continue from a
stored response (``previous_response_id``), point at one stored item (``item_reference``) or append
to a conversation. ``ResponseStore`` keeps that state in the gateway's own database, on SQLite and
PostgreSQL alike (``tests/storage/test_contract_responses.py``).

Invariants every engine keeps:

- Every read and write names the account: an object of another account, and one past its
  ``expires_at``, is exactly a missing one (``None`` / ``False``), so existence never leaks.
- An object's items keep their order (``position``); a response's ``input`` items precede its
  ``output`` items, a conversation's items are in the order they were added.
- ``state_usage.bytes`` of an account is the sum of ``bytes`` of its objects, where an object's
  ``bytes`` are its body's plus its items'. A write that would take the sum past the limit it is
  given changes nothing and returns ``False`` (the check and the write are one transaction, so
  concurrent writers never overshoot).
- Lists of items are paged in the database (``PageRequest`` -> ``ItemPage``): a page reads at
  most ``limit + 1`` items, however long the conversation or chain, so no caller ever loads or
  parses a whole one to answer a list request.
- Deleting an object deletes its items; deleting an account row deletes its objects (foreign keys
  ``ON DELETE CASCADE``, migration 0005), and ``forget_account_state`` does it on demand.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

ObjectKind = Literal["response", "conversation"]
#: ``input``/``output`` items of a response; ``item`` items of a conversation.
Section = Literal["input", "output", "item"]


@dataclass(frozen=True, slots=True)
class StoredItem:
    id: str
    #: The item's JSON object, as it is listed to clients.
    body: bytes
    section: Section = "item"


@dataclass(frozen=True, slots=True)
class NewResponse:
    id: str
    account_id: int
    key_id: str
    #: The response object (JSON) as the client received it.
    body: bytes
    input_items: Sequence[StoredItem]
    output_items: Sequence[StoredItem]
    #: The response this one continued (``previous_response_id``), if any.
    previous_id: str | None
    #: The conversation the request appended to: its input and output items are appended to the
    #: conversation in the same transaction (nothing is stored when the conversation is gone).
    conversation_id: str | None
    #: The provider that holds this response's state upstream as well ("" = the gateway alone).
    holder: str
    created_at: float
    expires_at: float


@dataclass(frozen=True, slots=True)
class StoredResponse:
    id: str
    account_id: int
    body: bytes
    previous_id: str | None
    conversation_id: str | None
    holder: str
    created_at: float
    input_items: tuple[StoredItem, ...]
    output_items: tuple[StoredItem, ...]


@dataclass(frozen=True, slots=True)
class StoredConversation:
    id: str
    account_id: int
    #: The conversation's ``metadata`` object (JSON).
    metadata: bytes
    created_at: float


@dataclass(frozen=True, slots=True)
class FoundItem:
    """An item found by its id, with the object that holds it."""

    item: StoredItem
    owner_id: str
    #: The holder of the owning response ("" for the gateway alone, and for conversations).
    holder: str


@dataclass(frozen=True, slots=True)
class PageRequest:
    """One cursor page as the OpenAI list endpoints page: ``limit`` items after the item with id
    ``after`` (its first occurrence in the page's order), oldest first when ``ascending``."""

    limit: int
    ascending: bool
    after: str | None = None


@dataclass(frozen=True, slots=True)
class ItemPage:
    #: In the order asked for.
    items: tuple[StoredItem, ...]
    #: More items follow the page in that order.
    has_more: bool


class UnknownCursor(LookupError):
    """``PageRequest.after`` names no item of the list."""


def page_of(rows: Sequence[StoredItem], limit: int) -> ItemPage:
    """A page from up to ``limit + 1`` rows read in the page's order."""
    return ItemPage(tuple(rows[:limit]), len(rows) > limit)


class ResponseStore(Protocol):
    """Stored responses and conversations (the module docstring's invariants)."""

    async def save_response(self, response: NewResponse, max_account_bytes: int) -> bool:
        """Store a response with its items; with ``conversation_id`` also append its input and
        output items to that conversation and extend its expiry. False: over the account's limit,
        or the conversation is missing (then nothing is written)."""
        ...

    async def save_responses(
        self, responses: Sequence[NewResponse], max_account_bytes: int
    ) -> list[bool | Exception]:
        """``save_response`` of each, in order, as one batch where the engine can (one transaction
        that each answer's failure leaves to the others); each one's outcome or error, in order."""
        ...

    async def get_response(self, account_id: int, response_id: str, now: float) -> StoredResponse | None: ...

    async def response_chain(
        self, account_id: int, response_id: str, now: float, max_depth: int
    ) -> list[StoredResponse] | None:
        """The response and those it continued, oldest first (at most ``max_depth``; the chain
        ends early where a previous response is gone). None when ``response_id`` itself is."""
        ...

    async def delete_response(self, account_id: int, response_id: str) -> bool: ...

    async def find_item(self, account_id: int, item_id: str, now: float) -> FoundItem | None:
        """The newest live item of the account with this id."""
        ...

    async def create_conversation(
        self,
        conversation: StoredConversation,
        items: Sequence[StoredItem],
        expires_at: float,
        max_account_bytes: int,
    ) -> bool: ...

    async def get_conversation(
        self, account_id: int, conversation_id: str, now: float
    ) -> StoredConversation | None: ...

    async def update_conversation(
        self, account_id: int, conversation_id: str, metadata: bytes, now: float, max_account_bytes: int
    ) -> StoredConversation | Literal[False] | None:
        """Replace the metadata (None: no such conversation; False: growing it would take the
        account past its limit, and nothing changed)."""
        ...

    async def delete_conversation(self, account_id: int, conversation_id: str) -> bool: ...

    async def add_conversation_items(
        self,
        account_id: int,
        conversation_id: str,
        items: Sequence[StoredItem],
        now: float,
        expires_at: float,
        max_account_bytes: int,
    ) -> bool | None:
        """Append items (None: no such conversation; False: over the account's limit)."""
        ...

    async def conversation_items(
        self, account_id: int, conversation_id: str, now: float
    ) -> list[StoredItem] | None:
        """All items in order (None: no such conversation)."""
        ...

    async def conversation_items_page(
        self, account_id: int, conversation_id: str, now: float, page: PageRequest
    ) -> ItemPage | None:
        """One page of the items (None: no such conversation; ``UnknownCursor``: no item ``after``)."""
        ...

    async def conversation_item(
        self, account_id: int, conversation_id: str, item_id: str, now: float
    ) -> StoredItem | None:
        """The newest item with this id in a live conversation of the account."""
        ...

    async def response_input_items_page(
        self, account_id: int, response_id: str, now: float, max_depth: int, page: PageRequest
    ) -> ItemPage | None:
        """One page of what the response was given: the input and output items of the responses
        it continued (its chain, at most ``max_depth`` long, oldest first), then its own input
        items. None: no such response; ``UnknownCursor``: no item ``after``."""
        ...

    async def delete_conversation_item(self, account_id: int, conversation_id: str, item_id: str) -> bool:
        """False when the conversation or the item is missing."""
        ...

    async def sweep_state(self, now: float, limit: int) -> int:
        """Delete up to ``limit`` objects whose ``expires_at`` is past; the number deleted."""
        ...

    async def forget_account_state(self, account_id: int) -> int:
        """Delete every stored object of the account; the number deleted."""
        ...

    async def state_bytes(self, account_id: int) -> int:
        """Bytes the account's stored objects take (what the per-account limit counts)."""
        ...


def object_bytes(body: bytes, items: Sequence[StoredItem]) -> int:
    """What an object counts toward its account's limit."""
    return len(body) + sum(len(item.body) for item in items)


def appended_bytes(response: NewResponse) -> int:
    """What saving ``response`` adds to its conversation (a copy of each of its items), if any."""
    if response.conversation_id is None:
        return 0
    return object_bytes(b"", [*response.input_items, *response.output_items])


#: The columns of ``stored_objects`` that ``stored_response`` reads, in its order (both engines).
OBJECT_COLUMNS = "id, account_id, body, previous_id, conversation_id, holder, created_at"


def stored_response(row: Sequence[Any], items: Sequence[StoredItem]) -> StoredResponse:
    """A response from its ``OBJECT_COLUMNS`` row and its items in position order."""
    return StoredResponse(
        id=row[0],
        account_id=int(row[1]),
        body=bytes(row[2]),
        previous_id=row[3],
        conversation_id=row[4],
        holder=row[5],
        created_at=float(row[6]),
        input_items=tuple(i for i in items if i.section == "input"),
        output_items=tuple(i for i in items if i.section == "output"),
    )
