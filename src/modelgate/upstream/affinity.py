"""Session affinity: a session keeps the deployment and the pool credential that served it, so
the upstream's prompt cache (per organization/credential and per deployment) is read, not
rewritten, turn after turn (docs/upstreams.md, "Session affinity").

- A new session is placed by weighted rendezvous hashing of its key: deterministic, so every
  gateway instance places a session alike without sharing state, and spread by the deployments'
  weights across sessions (credentials of a pool weigh alike).
- A known session goes back to its pin while the pinned deployment is not cooling down and the
  pinned credential is neither refused nor resting: failure beats stickiness. Whatever actually
  served the request becomes the pin (``hit``: the pin served, ``miss``: a new session,
  ``repinned``: something else served it).
- Pins live in a bounded LRU per gateway instance: at most ``affinity_max_sessions`` entries,
  each forgotten ``affinity_ttl_seconds`` after its last use (an upstream's cache is gone by
  then too). Since rendezvous placement needs no shared state, only sessions re-pinned after a
  failure can be placed differently by two instances, until the failure is over.

The pool (``upstream.pool``) learns a request's session through ``STEER``, a context variable set
around each attempt's ``Provider.send``: the providers' signatures stay as they are.
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Literal

from modelgate.upstream.affinity_key import SessionKey
from modelgate.upstream.base import Deployment

AffinityResult = Literal["hit", "miss", "repinned"]
RESULTS: tuple[AffinityResult, ...] = ("hit", "miss", "repinned")


@dataclass(slots=True)
class Steer:
    """One attempt's session, as the credential pool sees it."""

    session: SessionKey
    #: The credential label the session is pinned to on this attempt's deployment, if any.
    preferred: str | None = None
    #: Set by the pool: the label of the credential whose reply was handed back with a 2xx.
    served: str | None = None


#: The session of the attempt being sent (None outside an attempt, or with affinity off).
STEER: ContextVar[Steer | None] = ContextVar("modelgate_affinity_steer", default=None)


_MASK = (1 << 64) - 1


def salt(name: str) -> int:
    """A name's 64-bit salt for ``ranked`` (computed once per name by its owner)."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big")


def _mix(session: SessionKey, salt: int) -> int:
    """A uniform 64-bit value from (session, salt): the session key is already a digest, so a
    splitmix64 finaliser over its first 8 bytes and the name's salt suffices (no hash call)."""
    x = (int.from_bytes(session[:8], "big") ^ salt) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def score(session: SessionKey, salt: int, weight: int = 1) -> float:
    """Weighted rendezvous score (highest wins): -weight / ln(u), u uniform in (0, 1) from
    (session, name). The winner among n names is name i with probability w_i / Σw."""
    unit = (_mix(session, salt) + 0.5) / 2.0**64
    return -weight / math.log(unit)


def ranked(session: SessionKey, salts: Sequence[int], weights: Sequence[int] | None = None) -> list[int]:
    """Indexes of the names whose ``salt``s are given, from the session's first choice to its
    last (equal weights: by the mixed value alone, which orders as the score does)."""
    if weights is None or len(set(weights)) == 1:
        keys: list[float] | list[int] = [_mix(session, s) for s in salts]
    else:
        keys = [score(session, s, weights[i]) for i, s in enumerate(salts)]
    return sorted(range(len(salts)), key=keys.__getitem__, reverse=True)


def deployment_name(deployment: Deployment) -> str:
    return f"{deployment.provider}\x00{deployment.upstream_model}"


@dataclass(slots=True)
class Pin:
    deployment: Deployment
    credential: str | None
    last_used: float


@dataclass(slots=True)
class AffinityCounts:
    hit: int = 0
    miss: int = 0
    repinned: int = 0
    #: Pins dropped to stay within the bound (not idle expiry).
    evicted: int = 0
    expired: int = 0

    def add(self, result: AffinityResult) -> None:
        setattr(self, result, getattr(self, result) + 1)


@dataclass(slots=True)
class AffinityTable:
    """Pins by (model, session key): an LRU in last-use order, so the idlest entries are first
    and both the bound and the idle expiry only ever drop from the front (O(1) per request)."""

    ttl: float
    max_entries: int
    clock: Callable[[], float]
    counts: AffinityCounts = field(default_factory=AffinityCounts)
    _pins: OrderedDict[tuple[str, SessionKey], Pin] = field(default_factory=OrderedDict)

    def __len__(self) -> int:
        return len(self._pins)

    def get(self, model: str, session: SessionKey) -> Pin | None:
        """The session's pin, unless it has been idle for ``ttl`` (then it is forgotten)."""
        key = (model, session)
        pin = self._pins.get(key)
        if pin is None:
            return None
        if self.clock() - pin.last_used >= self.ttl:
            del self._pins[key]
            self.counts.expired += 1
            return None
        return pin

    def served(
        self, model: str, session: SessionKey, pin: Pin | None, deployment: Deployment, credential: str | None
    ) -> AffinityResult:
        """Record what served the session's request; its pin becomes that."""
        now = self.clock()
        if pin is None:
            result: AffinityResult = "miss"
        elif pin.deployment == deployment and pin.credential == credential:
            result = "hit"
        else:
            result = "repinned"
        self.counts.add(result)
        key = (model, session)
        pins = self._pins
        if pin is not None and key in pins:
            pin.deployment, pin.credential, pin.last_used = deployment, credential, now
            pins.move_to_end(key)
        else:
            pins[key] = Pin(deployment, credential, now)
        self._trim(now)
        return result

    def _trim(self, now: float) -> None:
        pins = self._pins
        while pins:
            oldest = next(iter(pins.values()))
            if now - oldest.last_used >= self.ttl:
                self.counts.expired += 1
            elif len(pins) > self.max_entries:
                self.counts.evicted += 1
            else:
                return
            pins.popitem(last=False)
