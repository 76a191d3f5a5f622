"""What the database keeps of the upstreams changed at runtime (``modelgate.liveconfig``): entries
(a provider, a model's deployments, an alias) and prices, each change numbered by a generation.

The records are opaque here: ``body`` is JSON the live configuration reads, ``sealed`` the
credential values it sealed. The store only keeps them and counts changes, so every engine
behaves alike. Invariant: every write that changes a row adds one to the generation in the same
transaction, so a process that read generation G and later reads G again has missed nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

EntryKind = Literal["provider", "deployments", "alias"]
ENTRY_KINDS: tuple[EntryKind, ...] = ("provider", "deployments", "alias")


@dataclass(frozen=True, slots=True)
class StoredEntry:
    kind: EntryKind
    name: str
    #: JSON without any credential value.
    body: str
    #: Credential values, sealed (``liveconfig.sealing``); None when the entry holds none.
    sealed: bytes | None
    updated_at: float


@dataclass(frozen=True, slots=True)
class StoredPrice:
    model_id: str
    #: Seconds since the epoch from which this price is charged.
    effective_from: float
    #: JSON: the price fields given, in micro-credits.
    body: str
    created_at: float


@dataclass(frozen=True, slots=True)
class UpstreamSnapshot:
    generation: int
    entries: tuple[StoredEntry, ...]
    prices: tuple[StoredPrice, ...]


class UpstreamStore(Protocol):
    """Each write returns the generation it made (None: nothing was there to delete)."""

    async def generation(self) -> int:
        """The number of changes so far: one cheap read, polled by every serving process."""
        ...

    async def snapshot(self) -> UpstreamSnapshot:
        """Every entry and price with the generation they belong to (read together)."""
        ...

    async def put_entry(self, entry: StoredEntry) -> int: ...
    async def delete_entry(self, kind: EntryKind, name: str) -> int | None: ...
    async def put_price(self, price: StoredPrice) -> int: ...
    async def delete_price(self, model_id: str, effective_from: float) -> int | None: ...
