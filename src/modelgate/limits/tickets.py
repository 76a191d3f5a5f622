"""Admission tickets over generic (subject, resource, window) buckets, exact for one process.

``BucketStore.admit`` takes every claim of a request (``limits.key_limits.Claim``: requests per
minute, tokens per minute, requests in flight, of the key and of its account) at once or none of
them: first each bucket's room is read, then, only if all fit, all are taken, with nothing in
between (one synchronous step: no other admission of this process interleaves). An elastic claim
(tpm) is granted ``min(amount, room)`` of every bucket it meets, when that is at least its minimum.

A ticket ends exactly once: ``settle(ticket, used)`` (the request ran) keeps its request units,
keeps ``min(used, granted)`` tokens in the rolling buckets (at the admission's time) and frees the
concurrency slots; ``refund`` (a later step refused the request) takes back everything, request
units included. A second end changes nothing.

Requests per minute are ``limits.rpm.RollingWindowLimiter`` logs. Rolling token buckets count the
amounts of entries in ``(now - 60, now]``: a claim fits when that sum plus its minimum is within
the limit. A refused claim waits until enough entries have left the window (``retry_after``); a
concurrency refusal waits one second (nothing says when a slot frees).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

from modelgate.limits.key_limits import Claim, Resource, Standing
from modelgate.limits.rpm import WINDOW_SECONDS, Decision, RollingWindowLimiter


class _Entry:
    """One admission's amount in a rolling bucket; ``alive`` until it leaves the window."""

    __slots__ = ("alive", "amount", "at")

    def __init__(self, at: float, amount: int) -> None:
        self.at = at
        self.amount = amount
        self.alive = True


class _Rolling:
    __slots__ = ("entries", "total")

    def __init__(self) -> None:
        self.entries: deque[_Entry] = deque()
        self.total = 0

    def trim(self, horizon: float) -> None:
        entries = self.entries
        while entries and entries[0].at <= horizon:
            gone = entries.popleft()
            gone.alive = False
            self.total -= gone.amount

    def wait_for(self, room_needed: int, limit: int, now: float, window: float) -> float:
        """Seconds until ``room_needed`` fits under ``limit`` as entries leave (inf: never)."""
        if room_needed > limit:
            return math.inf
        total = self.total
        for entry in self.entries:
            total -= entry.amount
            if total + room_needed <= limit:
                # An entry leaves when ``at <= now - window``; the nudge keeps a wait that float
                # rounding puts a hair short of that instant from being refused again.
                return max(entry.at + window - now + 1e-6, 0.0)
        return 0.0

    def reset(self, now: float, window: float) -> float:
        return max(self.entries[0].at + window - now, 0.0) if self.entries else 0.0


@dataclass(slots=True)
class Ticket:
    """What one admission holds; ended once by ``settle`` or ``refund``."""

    id: str
    #: Tokens granted on the tpm buckets (0: none claimed).
    tokens: int = 0
    #: The rolling entries this ticket made (one per tpm bucket).
    entries: list[tuple[_Rolling, _Entry]] = field(default_factory=list)
    #: The concurrency buckets this ticket holds a slot of.
    slots: list[str] = field(default_factory=list)
    #: The request units this ticket took: (subject, the log's token), given back by a refund.
    units: list[tuple[str, float | str]] = field(default_factory=list)
    #: Every bucket's figures after the admission (``RateLimit`` headers).
    standing: tuple[Standing, ...] = ()
    #: Where the ticket is held when not in this process's own buckets (the supervisor over the
    #: worker link, or Redis): the backend's own handle.
    remote: object | None = None
    ended: bool = False
    #: Ending it changes a bucket (tokens or slots held, not request units alone).
    holds: bool = False
    #: It claimed tokens per minute (``tokens`` is then the grant).
    metered: bool = False


@dataclass(frozen=True, slots=True)
class Refused:
    resource: Resource
    subject: str
    limit: int
    #: Seconds until the claim could fit (inf: never, the request alone exceeds the limit).
    wait: float

    @property
    def retry_after(self) -> int:
        """Whole seconds, at least 1, capped at the window for a claim that can never fit."""
        if not math.isfinite(self.wait):
            return int(WINDOW_SECONDS)
        return max(1, math.ceil(self.wait))


class BucketStore:
    """The buckets of one process (or, behind the worker link, of one instance)."""

    def __init__(self, window: float = WINDOW_SECONDS) -> None:
        self._window = window
        self.requests = RollingWindowLimiter(window)
        self._rolling: dict[str, _Rolling] = {}
        self._in_flight: dict[str, int] = {}

    def admit(self, claims: tuple[Claim, ...], now: float, ticket_id: str) -> Ticket | Refused:
        if len(claims) == 1 and claims[0].resource is Resource.RPM:
            return self._admit_request(claims[0], now, ticket_id)
        horizon = now - self._window
        grant: int | None = None
        # Pass 1: read every bucket, decide. Nothing is changed until every claim fits.
        for claim in claims:
            resource = claim.resource
            if resource is Resource.RPM:
                refused = self.requests.refusal(claim.subject, claim.limit, now)
                if refused is not None:
                    return Refused(resource, claim.subject, claim.limit, refused.reset_after)
                continue
            bucket_key = f"{claim.subject}|{resource}"
            if resource is Resource.CONCURRENCY:
                if self._in_flight.get(bucket_key, 0) + claim.amount > claim.limit:
                    return Refused(resource, claim.subject, claim.limit, 1.0)
                continue
            bucket = self._rolling.get(bucket_key)
            if bucket is not None:
                bucket.trim(horizon)
            used = bucket.total if bucket is not None else 0
            room = claim.limit - used
            if room < claim.minimum:
                wait = bucket.wait_for(claim.minimum, claim.limit, now, self._window) if bucket else math.inf
                return Refused(resource, claim.subject, claim.limit, wait)
            grant = min(claim.amount, room) if grant is None else min(grant, claim.amount, room)
        # Pass 2: take everything.
        ticket = Ticket(ticket_id, tokens=grant or 0)
        standing: list[Standing] = []
        for claim in claims:
            resource = claim.resource
            if resource is Resource.RPM:
                remaining, reset = self.requests.take_now(claim.subject, claim.limit, now)
                ticket.units.append((claim.subject, now))
                standing.append(Standing(resource, claim.subject, claim.limit, remaining, reset, 1))
                continue
            ticket.holds = True
            bucket_key = f"{claim.subject}|{resource}"
            if resource is Resource.CONCURRENCY:
                held = self._in_flight[bucket_key] = self._in_flight.get(bucket_key, 0) + claim.amount
                ticket.slots.append(bucket_key)
                standing.append(Standing(resource, claim.subject, claim.limit, claim.limit - held, 0.0, 1))
                continue
            ticket.metered = True
            bucket = self._rolling.get(bucket_key)
            if bucket is None:
                bucket = self._rolling[bucket_key] = _Rolling()
            entry = _Entry(now, ticket.tokens)
            bucket.entries.append(entry)
            bucket.total += entry.amount
            ticket.entries.append((bucket, entry))
            standing.append(
                Standing(
                    resource,
                    claim.subject,
                    claim.limit,
                    claim.limit - bucket.total,
                    bucket.reset(now, self._window),
                    ticket.tokens,
                )
            )
        ticket.standing = tuple(standing)
        return ticket

    def _admit_request(self, claim: Claim, now: float, ticket_id: str) -> Ticket | Refused:
        """``admit`` of one request unit alone (a key with only ``rpm``: most requests), the same
        decision without the general loop."""
        requests, subject, limit = self.requests, claim.subject, claim.limit
        refused = requests.refusal(subject, limit, now)
        if refused is not None:
            return Refused(Resource.RPM, subject, limit, refused.reset_after)
        remaining, reset = requests.take_now(subject, limit, now)
        standing = (Standing(Resource.RPM, subject, limit, remaining, reset, 1),)
        return Ticket(ticket_id, units=[(subject, now)], standing=standing)

    def settle(self, ticket: Ticket, used_tokens: int) -> None:
        """The request ran: keep its request units and ``min(used_tokens, granted)`` tokens, free
        its slots; once."""
        if ticket.ended:
            return
        ticket.ended = True
        kept = max(0, min(used_tokens, ticket.tokens))
        for bucket, entry in ticket.entries:
            if entry.alive:
                bucket.total += kept - entry.amount
                entry.amount = kept
        self._free_slots(ticket)

    def refund(self, ticket: Ticket) -> None:
        """The request was refused after admission: take back everything it holds; once."""
        if ticket.ended:
            return
        self.settle(ticket, 0)
        for subject, token in ticket.units:
            self.refund_unit(subject, token)

    def refund_unit(self, subject: str, token: float | str) -> None:
        if isinstance(token, float):
            self.requests.refund_now(subject, Decision(True, 0, 0, 0.0, token=token))

    def _free_slots(self, ticket: Ticket) -> None:
        for bucket_key in ticket.slots:
            left = self._in_flight.get(bucket_key, 0) - 1
            if left > 0:
                self._in_flight[bucket_key] = left
            else:
                self._in_flight.pop(bucket_key, None)

    def in_flight(self, subject: str) -> int:
        return self._in_flight.get(f"{subject}|{Resource.CONCURRENCY}", 0)

    def tokens_in_window(self, subject: str, now: float) -> int:
        bucket = self._rolling.get(f"{subject}|{Resource.TPM}")
        if bucket is None:
            return 0
        bucket.trim(now - self._window)
        return bucket.total


class TicketLimiter(Protocol):
    """Where tickets are taken: this process (``LocalTickets``), the instance's supervisor over
    the worker link (``limits.shared_tickets.SharedTickets``) or Redis
    (``limits.redis_tickets.RedisTickets``). ``settle`` and ``refund`` return at once (what they
    send travels in the background) and end a ticket once, however often called."""

    async def take(self, claims: tuple[Claim, ...], now: float, ticket_id: str) -> Ticket | Refused: ...

    def settle(self, ticket: Ticket, used_tokens: int) -> None: ...

    def refund(self, ticket: Ticket) -> None: ...


class LocalTickets:
    """``TicketLimiter`` on this process's own buckets."""

    def __init__(self, window: float = WINDOW_SECONDS) -> None:
        self.buckets = BucketStore(window)

    def __len__(self) -> int:
        """Subjects holding a request log (metrics: the window's memory)."""
        return len(self.buckets.requests)

    async def take(self, claims: tuple[Claim, ...], now: float, ticket_id: str) -> Ticket | Refused:
        return self.buckets.admit(claims, now, ticket_id)

    def settle(self, ticket: Ticket, used_tokens: int) -> None:
        self.buckets.settle(ticket, used_tokens)

    def refund(self, ticket: Ticket) -> None:
        self.buckets.refund(ticket)
