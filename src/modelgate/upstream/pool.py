"""Credential pools: a provider with several credentials spreads requests across them, takes a
refused one out and rests a throttled one, and the others carry on.

Per request the pool offers its usable credentials round-robin, starting one further each time.
An attempt whose credential is refused (401, or a 403 the provider says concerns its
credentials) or throttled (429) moves on to the next credential at once, within the same
attempt: neither verdict says anything about the request, and no byte has reached the client.
Only when no credential is left does the reply go back to the router, whose retry and failover
rules then apply as for a single credential. So a pool of N adds at most N - 1 upstream calls to
one attempt, and only while credentials fail.

- Refused: out for ``refused_recheck`` seconds (keys do not heal by themselves), then one request
  tries it again. Logged at ERROR (only the operator can fix it) and listed on ``/health``.
- Throttled: rests for its ``retry-after`` (``throttle_cooldown`` when none), at most
  ``max_throttle_cooldown``.
- When every credential is out or resting, the one back first is tried anyway: a request is
  never refused while a credential might work.
- Session affinity (``upstream.affinity``): an attempt made for a session offers the session's
  pinned credential first (the others after it), or, with no usable pin, the credentials in the
  session's rendezvous order (so a new session lands on the same credential on every instance),
  usable ones only, as above; the credential whose 2xx reply is handed back is noted for the pin.

State is per provider and per gateway instance; the clock is injected so tests drive it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from modelgate import errors
from modelgate.upstream.affinity import STEER, ranked, salt
from modelgate.upstream.base import BufferedReply, CredentialStatus, UpstreamReply
from modelgate.upstream.credentials import Credential
from modelgate.upstream.error_mapping import UpstreamError, parse_error_body, retry_after_seconds
from modelgate.upstream.kind import CredentialPoolConfig

log = logging.getLogger("modelgate.upstream")

#: An error body is read only to judge it; a stalled one must not hold the request up.
_ERROR_BODY_TIMEOUT = 5.0

#: Decides whether a 401/403 reply refused the credential (True) or the request (False).
JudgeRefusal = Callable[[int, UpstreamError], bool]


@dataclass(slots=True)
class Slot:
    credential: Credential
    #: Refused: clock time before which it is not offered. ``None`` when not refused.
    refused_until: float | None = None
    refused_status: int = 0
    #: Throttled: clock time before which it rests.
    resting_until: float = 0.0

    def back_at(self) -> float:
        return max(self.refused_until or 0.0, self.resting_until)


async def read_error_body(reply: UpstreamReply) -> bytes:
    """An error reply's body (empty when it stalls or breaks); the reply is closed."""
    try:
        async with asyncio.timeout(_ERROR_BODY_TIMEOUT):
            return await reply.read()
    except (errors.GatewayError, TimeoutError):
        return b""
    finally:
        await reply.close()


class CredentialPool:
    def __init__(
        self,
        provider: str,
        credentials: Sequence[Credential],
        config: CredentialPoolConfig,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not credentials:
            raise ValueError(f"provider {provider!r}: a credential pool needs at least one credential")
        self._provider = provider
        self._slots = [Slot(c) for c in credentials]
        #: Rendezvous salts of the credentials' labels (``upstream.affinity.ranked``).
        self._salts = [salt(c.label) for c in credentials]
        self._config = config
        self._clock = clock
        self._next = 0

    def __len__(self) -> int:
        return len(self._slots)

    def order(self) -> list[Slot]:
        """The credentials one request may use, in the order to try them."""
        slots = self._slots
        count = len(slots)
        now = self._clock()
        steer = STEER.get()
        if steer is not None and count > 1:
            pinned = [s for s in slots if s.credential.label == steer.preferred and s.back_at() <= now]
            if pinned:  # the common case: the pin first, the others after it as they come
                ordered = pinned + [s for s in slots if s is not pinned[0]]
            else:  # a new session, or its pin is out: the session's own order
                ordered = [slots[i] for i in ranked(steer.session, self._salts)]
        else:
            start = self._next
            self._next = (start + 1) % count
            ordered = [slots[(start + i) % count] for i in range(count)]
        ready = [slot for slot in ordered if slot.back_at() <= now]
        return ready or [min(slots, key=Slot.back_at)]

    async def judge(
        self,
        slot: Slot,
        reply: UpstreamReply,
        *,
        last: bool,
        refusal: JudgeRefusal,
        redact: Callable[[str], str],
    ) -> UpstreamReply | None:
        """The reply to hand back, or ``None`` to try the next credential (``reply`` is closed)."""
        status = reply.status
        if 200 <= status < 300:
            slot.refused_until = None
            slot.resting_until = 0.0
            steer = STEER.get()
            if steer is not None:
                steer.served = slot.credential.label
            return reply
        if status not in (401, 403, 429):
            return reply
        body = await read_error_body(reply)
        buffered = BufferedReply(status, reply.headers, body)
        if status == 429:
            self.throttled(slot, retry_after_seconds(reply.headers))
        else:
            detail = parse_error_body(body, redact)
            if not refusal(status, detail):
                return buffered
            self.refused(slot, status, detail.message or "no message")
        return buffered if last else None

    def refused(self, slot: Slot, status: int, message: str) -> None:
        """``message`` is already scrubbed of secrets."""
        slot.refused_until = self._clock() + self._config.refused_recheck
        slot.refused_status = status
        slot.credential.invalidate()
        log.error(
            "upstream %s refused credential %s (HTTP %d): %s; it is out of rotation for %gs",
            self._provider,
            slot.credential.label,
            status,
            message,
            self._config.refused_recheck,
        )

    def throttled(self, slot: Slot, retry_after: float | None) -> None:
        rest = self._config.throttle_cooldown if retry_after is None else retry_after
        rest = min(rest, self._config.max_throttle_cooldown)
        slot.resting_until = max(slot.resting_until, self._clock() + rest)
        if len(self._slots) > 1:
            log.warning(
                "upstream %s throttled credential %s; it rests for %gs",
                self._provider,
                slot.credential.label,
                rest,
            )

    def status(self) -> list[CredentialStatus]:
        now = self._clock()
        out: list[CredentialStatus] = []
        for slot in self._slots:
            if slot.refused_until is not None:
                back = max(0.0, slot.refused_until - now)
                out.append(
                    CredentialStatus(
                        self._provider, slot.credential.label, "refused", slot.refused_status, back
                    )
                )
            elif slot.resting_until > now:
                out.append(
                    CredentialStatus(
                        self._provider, slot.credential.label, "cooling_down", 429, slot.resting_until - now
                    )
                )
        return out

    def secrets(self) -> tuple[str, ...]:
        return tuple(s for slot in self._slots for s in slot.credential.secrets() if s)

    async def aclose(self) -> None:
        for slot in self._slots:
            await slot.credential.aclose()
