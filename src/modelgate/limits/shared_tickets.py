"""Admission tickets shared by the workers of one ``modelgate serve`` (no Redis needed).

With ``server.workers`` above 1 and no ``redis_url``, the supervising parent process holds the one
``BucketStore`` of the instance (``TicketService``) and every worker asks it over a private socket
pair (``SharedTickets``). The decisions are exactly those of a single process with the same clock:
one set of buckets (requests per minute, tokens per minute, requests in flight, of keys and
accounts) for all workers, the same ``retry-after``, refunds included, never N x the limit. Times
are the ``now`` each worker passes (its steady clock), as with Redis.

Cost: the tickets asked in one turn of a worker's event loop travel as one write and their answers
come back as one (a line of JSON each), so under load one round trip serves many requests. A ticket
that holds only request units (a key with only ``rpm``) is not kept by the parent and needs no
message when it ends; one holding tokens or a slot is, and is released by the parent when that
worker's link closes (the worker died or was stopped): its slots do not stay taken.

Messages (a JSON array per line), told apart by their length: ``[seq, "T", ticket id, claims,
now]`` a ticket taken, ``[ticket id, used tokens]`` a kept ticket ended (-1: refunded), ``[0,
subject, token]`` a request unit of an unkept ticket given back. Reply: ``[seq, granted, tokens,
resource, subject, limit, wait, standing, kept]``.

A worker whose link is gone (the parent died: the worker is being shut down with it) decides alone
with its own buckets, says so once in the log, and never fails a request for it.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any, cast

import orjson

from modelgate.limits.key_limits import Claim, Resource, Standing
from modelgate.limits.rpm import WINDOW_SECONDS
from modelgate.limits.tickets import BucketStore, Refused, Ticket

log = logging.getLogger("modelgate.limits")

#: The longest line a link accepts (a ticket's claims are a few short items; anything longer is
#: a broken peer).
MAX_LINE = 16384
#: ``used tokens`` of an end message that refunds the ticket.
REFUND = -1


class _Lines(asyncio.Protocol):
    """Newline-framed JSON arrays in both directions."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._partial = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses

    def data_received(self, data: bytes) -> None:
        buffer = self._partial + data if self._partial else data
        end = buffer.rfind(b"\n") + 1
        self._partial = buffer[end:]
        if len(self._partial) > MAX_LINE:
            self.broken("a line longer than the limit")
            return
        if end:
            try:
                messages = [orjson.loads(line) for line in buffer[:end].split(b"\n")[:-1]]
            except orjson.JSONDecodeError:
                self.broken("a line that is not JSON")
                return
            self.received(messages)

    def received(self, messages: list[Any]) -> None:
        raise NotImplementedError

    def broken(self, why: str) -> None:
        log.error("rate-limit link: %s; closing it", why)
        if self.transport is not None:
            self.transport.close()


class _ServiceLink(_Lines):
    def __init__(self, buckets: BucketStore) -> None:
        super().__init__()
        self._buckets = buckets
        #: The tickets holding tokens or slots this worker took, released when its link closes.
        self._tickets: dict[str, Ticket] = {}

    def connection_lost(self, exc: Exception | None) -> None:
        tickets, self._tickets = self._tickets, {}
        for ticket in tickets.values():
            self._buckets.settle(ticket, 0)

    def received(self, messages: list[Any]) -> None:
        replies = []
        for message in messages:
            if len(message) == 5:  # [seq, "T", ticket id, claims, now]: take a ticket
                replies.append(self._take(message))
            elif len(message) == 2:  # [ticket id, used tokens]: end a kept ticket
                ticket = self._tickets.pop(message[0], None)
                if ticket is None:
                    continue
                used = int(message[1])
                if used == REFUND:
                    self._buckets.refund(ticket)
                else:
                    self._buckets.settle(ticket, used)
            elif len(message) == 3:  # [0, subject, token]: give a request unit back
                _, subject, token = message
                if isinstance(subject, str) and isinstance(token, float):
                    self._buckets.refund_unit(subject, token)
            else:
                self.broken("a message of unknown shape")
                return
        if replies and self.transport is not None:
            replies.append(b"")
            self.transport.write(b"\n".join(replies))

    def _take(self, message: list[Any]) -> bytes:
        seq, _, ticket_id, raw_claims, now = message
        claims = tuple(Claim(c[0], Resource(c[1]), c[2], c[3], c[4]) for c in raw_claims)
        outcome = self._buckets.admit(claims, now, ticket_id)
        if isinstance(outcome, Refused):
            wait = outcome.wait if outcome.wait != float("inf") else -1.0
            return orjson.dumps(
                [seq, False, 0, outcome.resource, outcome.subject, outcome.limit, wait, [], False]
            )
        kept = outcome.holds
        if kept:
            self._tickets[ticket_id] = outcome
        standing = [[s.resource, s.subject, s.limit, s.remaining, s.reset, s.taken] for s in outcome.standing]
        return orjson.dumps([seq, True, outcome.tokens, "", "", 0, 0.0, standing, kept])


class TicketService:
    """The parent's side: the instance's one set of buckets, served to each worker."""

    def __init__(self, window: float = WINDOW_SECONDS) -> None:
        self.buckets = BucketStore(window)

    async def serve(self, sock: socket.socket) -> asyncio.Transport:
        """Answer the worker at the other end of ``sock`` until it closes."""
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_unix_connection(lambda: _ServiceLink(self.buckets), sock=sock)
        return transport


class _ClientLink(_Lines):
    def __init__(self, owner: SharedTickets) -> None:
        super().__init__()
        self._owner = owner

    def received(self, messages: list[Any]) -> None:
        self._owner.answered(messages)

    def connection_lost(self, exc: Exception | None) -> None:
        self._owner.lost()


#: A ticket asked of the parent and not answered yet: its future, claims, time and id.
_Asked = tuple[asyncio.Future[Ticket | Refused], tuple[Claim, ...], float, str]
#: ``Ticket.remote`` of a ticket the parent keeps.
_KEPT = "parent"


class SharedTickets:
    """A worker's side: ``TicketLimiter`` whose decisions the parent's ``TicketService`` takes."""

    def __init__(self, sock: socket.socket, window: float = WINDOW_SECONDS) -> None:
        self._sock = sock
        self._link: _ClientLink | None = None
        self._taking: dict[int, _Asked] = {}
        self._outbox: list[bytes] = []
        self._seq = 0
        #: Decides alone once the link is gone.
        self.local = BucketStore(window)

    @property
    def connected(self) -> bool:
        return self._link is not None

    async def connect(self) -> None:
        loop = asyncio.get_running_loop()
        _, link = await loop.create_unix_connection(lambda: _ClientLink(self), sock=self._sock)
        self._link = link

    async def take(self, claims: tuple[Claim, ...], now: float, ticket_id: str) -> Ticket | Refused:
        if self._link is None:
            return self.local.admit(claims, now, ticket_id)
        self._seq += 1
        done: asyncio.Future[Ticket | Refused] = asyncio.get_running_loop().create_future()
        self._taking[self._seq] = (done, claims, now, ticket_id)
        wire = [[c.subject, c.resource.value, c.limit, c.amount, c.minimum] for c in claims]
        self._send(orjson.dumps([self._seq, "T", ticket_id, wire, now]))
        return await done

    def settle(self, ticket: Ticket, used_tokens: int) -> None:
        if ticket.ended:
            return
        if ticket.remote is None:  # taken locally (the link was gone)
            self.local.settle(ticket, used_tokens)
            return
        ticket.ended = True
        if ticket.remote == _KEPT:
            self._send(orjson.dumps([ticket.id, max(0, min(used_tokens, ticket.tokens))]))

    def refund(self, ticket: Ticket) -> None:
        if ticket.ended:
            return
        if ticket.remote is None:
            self.local.refund(ticket)
            return
        ticket.ended = True
        self._refund_remote(ticket.id, ticket.remote == _KEPT, ticket.units)

    def _refund_remote(self, ticket_id: str, kept: bool, units: list[tuple[str, float | str]]) -> None:
        if kept:
            self._send(orjson.dumps([ticket_id, REFUND]))
        else:
            for subject, token in units:
                self._send(orjson.dumps([0, subject, token]))

    def _send(self, line: bytes) -> None:
        if self._link is None:
            return
        self._outbox.append(line)
        if len(self._outbox) == 1:
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        lines, self._outbox = self._outbox, []
        link = self._link
        if link is not None and link.transport is not None and lines:
            lines.append(b"")
            link.transport.write(b"\n".join(lines))

    def answered(self, messages: list[Any]) -> None:
        for message in messages:
            if len(message) == 9:
                self._taken(message)

    def _taken(self, message: list[Any]) -> None:
        seq, granted, tokens, resource, subject, limit, wait, standing, kept = message
        entry = self._taking.pop(seq, None)
        if entry is None:
            return
        done, claims, now, ticket_id = entry
        units: list[tuple[str, float | str]] = [
            (c.subject, now) for c in claims if c.resource is Resource.RPM
        ]
        if done.cancelled():  # its request is gone: what it was granted goes back
            if granted:
                self._refund_remote(ticket_id, bool(kept), units)
            return
        if not granted:
            done.set_result(Refused(Resource(resource), subject, limit, float("inf") if wait < 0 else wait))
            return
        ticket = Ticket(ticket_id, tokens=tokens, units=units, remote=_KEPT if kept else "", holds=bool(kept))
        ticket.standing = tuple(Standing(Resource(s[0]), s[1], s[2], s[3], s[4], s[5]) for s in standing)
        ticket.metered = any(s.resource is Resource.TPM for s in ticket.standing)
        done.set_result(ticket)

    def lost(self) -> None:
        if self._link is None:
            return
        self._link = None
        log.warning(
            "the supervisor's shared rate-limit buckets are unreachable; this worker now limits on its own"
        )
        self._outbox = []
        taking, self._taking = self._taking, {}
        for took, claims, now, ticket_id in taking.values():
            # Unanswered tickets are decided here instead, so no request waits forever.
            if not took.done():
                took.set_result(self.local.admit(claims, now, ticket_id))

    async def aclose(self) -> None:
        link, self._link = self._link, None
        if link is not None and link.transport is not None:
            link.transport.close()
