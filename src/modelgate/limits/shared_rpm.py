"""Per-key requests per minute shared by the workers of one ``modelgate serve`` (no Redis needed).

With ``server.workers`` above 1 and no ``redis_url``, the supervising parent process holds the one
``RollingWindowLimiter`` of the instance (``WindowService``) and every worker asks it over a
private socket pair (``SharedWindowLimiter``). The decisions are exactly those of a single process
with the same clock: one window per key for all workers, the same ``retry-after``, refunds
included, never N x the limit. Times are the ``now`` each worker passes (its steady clock), as with Redis.

Cost: the admissions asked in one turn of a worker's event loop travel as one write and their
answers come back as one (a line of JSON each), so under load one round trip serves many requests.

The same link carries admission tickets (``limits.tickets``): the parent holds the instance's one
``BucketStore``, so tokens per minute and requests in flight are counted once for all workers. A
ticket a worker took is released by the parent when that worker's link closes (the worker died or
was stopped): its slots do not stay taken.

Messages (a JSON array per line), told apart by their length: ``[seq, key id, limit, now]`` an
admission, ``[0, key id, token]`` a refund, ``[seq, "T", ticket id, claims, now]`` a ticket taken,
``[ticket id, used tokens]`` a ticket ended (0 used: released). Replies: ``[seq, admitted,
remaining, reset after, token]`` and, for a ticket, ``[seq, granted, tokens, resource, subject,
limit, wait]``.

A worker whose link is gone (the parent died: the worker is being shut down with it) decides alone
with its own window, says so once in the log, and never fails a request for it.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any, cast

import orjson

from modelgate.limits.key_limits import Claim, Resource
from modelgate.limits.rpm import WINDOW_SECONDS, Decision, RollingWindowLimiter
from modelgate.limits.tickets import BucketStore, Refused, Ticket

log = logging.getLogger("modelgate.limits")

#: The longest line a link accepts (a key id is short; anything longer is a broken peer).
MAX_LINE = 4096


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
    def __init__(self, limiter: RollingWindowLimiter, buckets: BucketStore) -> None:
        super().__init__()
        self._limiter = limiter
        self._buckets = buckets
        #: The tickets this worker holds, released when its link closes.
        self._tickets: dict[str, Ticket] = {}

    def connection_lost(self, exc: Exception | None) -> None:
        tickets, self._tickets = self._tickets, {}
        for ticket in tickets.values():
            self._buckets.release(ticket)

    def received(self, messages: list[Any]) -> None:
        replies = []
        limiter = self._limiter
        for message in messages:
            if len(message) == 4:  # [seq, key id, limit, now]: an admission
                seq, key_id, limit, now = message
                d = limiter.admit_now(key_id, limit, now)
                replies.append(orjson.dumps([seq, d.admitted, d.remaining, d.reset_after, d.token]))
            elif len(message) == 3:  # [0, key id, token]: give an admitted unit back
                _, key_id, token = message
                limiter.refund_now(key_id, Decision(True, 0, 0, 0.0, token=token))
            elif len(message) == 5:  # [seq, "T", ticket id, claims, now]: take a ticket
                replies.append(self._take(message))
            elif len(message) == 2:  # [ticket id, used tokens]: end a ticket
                ticket = self._tickets.pop(message[0], None)
                if ticket is not None:
                    self._buckets.settle(ticket, int(message[1]))
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
            return orjson.dumps([seq, False, 0, outcome.resource, outcome.subject, outcome.limit, wait])
        self._tickets[ticket_id] = outcome
        return orjson.dumps([seq, True, outcome.tokens, "", "", 0, 0.0])


class WindowService:
    """The parent's side: the instance's one window, served to each worker over its socket."""

    def __init__(self, window: float = WINDOW_SECONDS) -> None:
        self.limiter = RollingWindowLimiter(window)
        self.buckets = BucketStore(window)

    async def serve(self, sock: socket.socket) -> asyncio.Transport:
        """Answer the worker at the other end of ``sock`` until it closes."""
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_unix_connection(
            lambda: _ServiceLink(self.limiter, self.buckets), sock=sock
        )
        return transport


class _ClientLink(_Lines):
    def __init__(self, owner: SharedWindowLimiter) -> None:
        super().__init__()
        self._owner = owner

    def received(self, messages: list[Any]) -> None:
        self._owner.answered(messages)

    def connection_lost(self, exc: Exception | None) -> None:
        self._owner.lost()


class SharedWindowLimiter:
    """A worker's side: ``RateLimiter`` whose decisions the parent's ``WindowService`` takes."""

    def __init__(self, sock: socket.socket, window: float = WINDOW_SECONDS) -> None:
        self._sock = sock
        self._link: _ClientLink | None = None
        self._pending: dict[int, tuple[asyncio.Future[Decision], str, int, float]] = {}
        self._taking: dict[int, tuple[asyncio.Future[Ticket | Refused], tuple[Claim, ...], float, str]] = {}
        self._outbox: list[bytes] = []
        self._seq = 0
        #: Decides alone once the link is gone.
        self.local = RollingWindowLimiter(window)
        self.local_buckets = BucketStore(window)

    @property
    def connected(self) -> bool:
        return self._link is not None

    async def connect(self) -> None:
        loop = asyncio.get_running_loop()
        _, link = await loop.create_unix_connection(lambda: _ClientLink(self), sock=self._sock)
        self._link = link

    async def admit(self, key_id: str, limit: int, now: float) -> Decision:
        if self._link is None:
            return self.local.admit_now(key_id, limit, now)
        self._seq += 1
        done: asyncio.Future[Decision] = asyncio.get_running_loop().create_future()
        self._pending[self._seq] = (done, key_id, limit, now)
        self._send(orjson.dumps([self._seq, key_id, limit, now]))
        return await done

    async def refund(self, key_id: str, decision: Decision) -> None:
        if not decision.admitted:
            return
        if self._link is None:
            self.local.refund_now(key_id, decision)
        else:
            self._send(orjson.dumps([0, key_id, decision.token]))

    async def take(self, claims: tuple[Claim, ...], now: float, ticket_id: str) -> Ticket | Refused:
        if self._link is None:
            return self.local_buckets.admit(claims, now, ticket_id)
        self._seq += 1
        done: asyncio.Future[Ticket | Refused] = asyncio.get_running_loop().create_future()
        self._taking[self._seq] = (done, claims, now, ticket_id)
        wire = [[c.subject, c.resource.value, c.limit, c.amount, c.minimum] for c in claims]
        self._send(orjson.dumps([self._seq, "T", ticket_id, wire, now]))
        return await done

    def settle(self, ticket: Ticket, used_tokens: int) -> None:
        if ticket.ended:
            return
        if ticket.entries or ticket.slots:  # taken locally (the link was gone)
            self.local_buckets.settle(ticket, used_tokens)
            return
        ticket.ended = True
        if self._link is not None:
            self._send(orjson.dumps([ticket.id, max(0, min(used_tokens, ticket.tokens))]))

    def release(self, ticket: Ticket) -> None:
        self.settle(ticket, 0)

    def _send(self, line: bytes) -> None:
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
            if len(message) == 7:
                self._taken(message)
                continue
            seq, admitted, remaining, reset_after, token = message
            entry = self._pending.pop(seq, None)
            if entry is None:
                continue
            done, key_id, limit, _ = entry
            decision = Decision(admitted, limit, remaining, reset_after, token=token)
            if done.cancelled():
                # Its request is gone (the client left while it waited): the unit goes back.
                if admitted:
                    self._send(orjson.dumps([0, key_id, token]))
                continue
            done.set_result(decision)

    def _taken(self, message: list[Any]) -> None:
        seq, granted, tokens, resource, subject, limit, wait = message
        entry = self._taking.pop(seq, None)
        if entry is None:
            return
        done, _, _, ticket_id = entry
        if done.cancelled():  # its request is gone: what it was granted goes back
            if granted:
                self._send(orjson.dumps([ticket_id, 0]))
            return
        if granted:
            done.set_result(Ticket(ticket_id, tokens=tokens))
        else:
            done.set_result(Refused(Resource(resource), subject, limit, float("inf") if wait < 0 else wait))

    def lost(self) -> None:
        if self._link is None:
            return
        self._link = None
        log.warning(
            "the supervisor's shared rate-limit window is unreachable; this worker now limits on its own"
        )
        pending, self._pending = self._pending, {}
        self._outbox = []
        for done, key_id, limit, now in pending.values():
            # Unanswered admissions are decided here instead, so no request waits forever.
            if not done.done():
                done.set_result(self.local.admit_now(key_id, limit, now))
        taking, self._taking = self._taking, {}
        for took, claims, now, ticket_id in taking.values():
            if not took.done():
                took.set_result(self.local_buckets.admit(claims, now, ticket_id))

    async def aclose(self) -> None:
        link, self._link = self._link, None
        if link is not None and link.transport is not None:
            link.transport.close()
