"""A key's limits (and an account's) as one value, and the claims a request makes on them.

``KeyLimits`` names every rate limit a subject may have; ``None`` means "no such limit". Admission
turns the limits a request meets (its key's and its account's) into ``Claim``s, one per (subject,
resource), which a ``TicketLimiter`` (``limits.tickets``) takes all at once or not at all: one
atomic step, in memory, over the worker link or in Redis.

Resources:

- ``rpm``: requests per rolling 60 s. The claim is one request; it stays taken when the request
  has run (whatever its outcome) and is given back only when a later step refused the request
  (a refused request consumes nothing).
- ``tpm``: input + output tokens per rolling 60 s. The claim is the request's worst case (its
  input bound plus ``max_tokens``); the least it may be granted is its input bound plus one output
  token (``max_tokens`` is then clamped to what was granted, as with the money hold). The ticket is
  settled to the tokens really used.
- ``concurrency``: requests in flight; the slot is held until the request's hold ends (a stream's
  last byte, a disconnect, an error, a shutdown).

The spend caps are the ledger's (``storage.base.decide_hold``), decided in one atomic step of the
database. A further rate limit is one more ``Resource``, its field here and its rule in each bucket
backend (docs/architecture.md §7).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple


class Resource(StrEnum):
    RPM = "rpm"
    TPM = "tpm"
    CONCURRENCY = "concurrency"


class Claim(NamedTuple):
    """One claim of a request on one bucket (a tuple: one is made per limit on every request)."""

    #: ``"k:<key id>"`` or ``"a:<account id>"``: whose bucket.
    subject: str
    resource: Resource
    limit: int
    #: What the request asks for (its worst case).
    amount: int
    #: The least grant that still lets it run; an elastic claim (tpm) may be granted less than
    #: ``amount`` down to this. Equal to ``amount`` for a fixed claim.
    minimum: int


class Standing(NamedTuple):
    """Where one bucket stands after an admission (the IETF ``RateLimit`` fields' figures)."""

    resource: Resource
    subject: str
    limit: int
    #: Units left in the bucket after this admission.
    remaining: int
    #: Seconds until the bucket's oldest entry leaves the window (0: nothing to wait for).
    reset: float
    #: What this admission took from the bucket (given back when the request is refused later).
    taken: int


@dataclass(frozen=True, slots=True)
class KeyLimits:
    """The ticket-held limits of one subject. ``None``: no such limit."""

    tpm: int | None = None
    max_concurrency: int | None = None
    rpm: int | None = None

    @property
    def empty(self) -> bool:
        return self.tpm is None and self.max_concurrency is None and self.rpm is None

    def claims(self, subject: str, worst_tokens: int, least_tokens: int) -> tuple[Claim, ...]:
        """The claims of one request on this subject's limits (requests first: a request over
        its rate is refused for that before anything else)."""
        found: list[Claim] = []
        if self.rpm is not None:
            found.append(Claim(subject, Resource.RPM, self.rpm, 1, 1))
        if self.tpm is not None:
            found.append(
                Claim(subject, Resource.TPM, self.tpm, worst_tokens, min(least_tokens, worst_tokens))
            )
        if self.max_concurrency is not None:
            found.append(Claim(subject, Resource.CONCURRENCY, self.max_concurrency, 1, 1))
        return tuple(found)


NO_LIMITS = KeyLimits()
