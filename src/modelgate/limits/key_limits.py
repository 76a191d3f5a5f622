"""A key's limits (and an account's) as one value, and the claims a request makes on them.

``KeyLimits`` names every limit a subject may have; ``None`` means "no such limit". Admission turns
the limits a request meets into ``Claim``s, one per (subject, resource), which a ``TicketLimiter``
(``limits.tickets``) takes all at once or not at all. A limit that is unset makes no claim, so a
key with only ``rpm`` and a monthly cap costs the ticket path nothing (``claims`` returns ``()``
without allocating).

Resources:

- ``tpm``: input + output tokens per rolling 60 s. The claim is the request's worst case (its
  input bound plus ``max_tokens``); the least it may be granted is its input bound plus one output
  token (``max_tokens`` is then clamped to what was granted, as with the money hold). The ticket is
  settled to the tokens really used.
- ``concurrency``: requests in flight; the slot is held until the request's hold ends (a stream's
  last byte, a disconnect, an error, a shutdown).

Requests per minute keep their own limiter (``limits.rpm``: in memory, over the worker link, or in
Redis) and the spend caps are the ledger's (``storage.base.decide_hold``): both are decided in one
atomic step of their own backends.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Resource(StrEnum):
    TPM = "tpm"
    CONCURRENCY = "concurrency"


@dataclass(frozen=True, slots=True)
class Claim:
    #: ``"k:<key id>"`` or ``"a:<account id>"``: whose bucket.
    subject: str
    resource: Resource
    limit: int
    #: What the request asks for (its worst case).
    amount: int
    #: The least grant that still lets it run; an elastic claim (tpm) may be granted less than
    #: ``amount`` down to this. Equal to ``amount`` for a fixed claim.
    minimum: int


@dataclass(frozen=True, slots=True)
class KeyLimits:
    """The ticket-held limits of one subject. ``None``: no such limit."""

    tpm: int | None = None
    max_concurrency: int | None = None

    @property
    def empty(self) -> bool:
        return self.tpm is None and self.max_concurrency is None

    def claims(self, subject: str, worst_tokens: int, least_tokens: int) -> tuple[Claim, ...]:
        """The claims of one request on this subject's limits."""
        if self.tpm is None and self.max_concurrency is None:
            return ()
        found: list[Claim] = []
        if self.tpm is not None:
            found.append(
                Claim(subject, Resource.TPM, self.tpm, worst_tokens, min(least_tokens, worst_tokens))
            )
        if self.max_concurrency is not None:
            found.append(Claim(subject, Resource.CONCURRENCY, self.max_concurrency, 1, 1))
        return tuple(found)


NO_LIMITS = KeyLimits()
