"""Who is acting, for the audit entries of the writes made while serving one admin request.

``acting(actor)`` marks the actor for the code it wraps; ``current()`` is what a write records
(``cli`` when nobody said otherwise: the command-line tools and start-up bootstrap). The value
lives in a ``ContextVar``, so it follows one request's task and never leaks into another: the
admin API sets it once per request (``admin.api``), and every write reached from there, in
``management`` or a colleague's module (members, settings, providers), records the same actor,
request id and client address without passing them through each call.

``draft`` builds the ``AuditDraft`` a storage write completes inside its transaction; ``record``
appends an entry for a write that has no audited storage method of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

from modelgate.storage.audit import AuditDraft, AuditEntry, AuditStore, State, Subject

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Actor:
    #: An admin token's id (``tok_…``), ``cli``, or a person.
    name: str
    request_id: str = ""
    #: The client's address as the server saw it.
    client: str = ""


CLI = Actor("cli")
_ACTING: ContextVar[Actor] = ContextVar("modelgate_audit_actor", default=CLI)


def current() -> Actor:
    return _ACTING.get()


@contextmanager
def acting(actor: Actor) -> Iterator[Actor]:
    token = _ACTING.set(actor)
    try:
        yield actor
    finally:
        _ACTING.reset(token)


def draft(
    action: str,
    describe: Callable[[R], Subject],
    now: float,
    *,
    before: R | None = None,
    detail: Mapping[str, Any] | None = None,
) -> AuditDraft[R]:
    """The entry ``action`` on a record described by ``describe``, by the current actor; the
    storage completes it with the record as its write committed it."""
    who = current()
    return AuditDraft(
        at=now,
        actor=who.name,
        action=action,
        describe=describe,
        before=None if before is None else describe(before).state,
        detail=dict(detail or {}),
        request_id=who.request_id,
        client=who.client,
    )


async def record(
    store: AuditStore,
    action: str,
    target: str,
    now: float,
    *,
    account_id: int | None = None,
    before: State | None = None,
    after: State | None = None,
) -> int:
    """Append an entry on its own, by the current actor: for a change whose storage write takes
    no draft (prefer a draft: then change and entry commit together)."""
    who = current()
    return await store.append_audit(
        AuditEntry(
            at=now,
            actor=who.name,
            action=action,
            target=target,
            account_id=account_id,
            before=before,
            after=after,
            request_id=who.request_id,
            client=who.client,
        )
    )
