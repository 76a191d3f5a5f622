"""A request's admission ticket on its key's ticket-held limits (``limits.key_limits``): tokens
per minute and requests in flight.

Taken in ``pipeline.reserve`` just before the money hold, with the same worst case (the input
bound plus ``max_tokens``); refused with a 429 that names the limit. The ticket then rides on the
money ``Hold`` (``Hold.on_end``), whose end is already exactly once on every way out (stream end,
disconnect, error, shutdown, a WebSocket response): it is settled there to the tokens really used
and its concurrency slot freed. A key with neither limit takes no ticket and pays nothing here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from modelgate import errors
from modelgate.gateway import headers as hdr
from modelgate.gateway.exchange import Exchange
from modelgate.limits.key_limits import KeyLimits, Resource
from modelgate.limits.rpm import WINDOW_SECONDS, Decision
from modelgate.limits.tickets import Refused, Ticket
from modelgate.services import Services
from modelgate.storage.base import KeyRecord

_NAMES = {Resource.TPM: "tokens per minute", Resource.CONCURRENCY: "requests in flight"}


def subject_of(key: KeyRecord) -> str:
    return f"k:{key.id}"


async def take(
    services: Services,
    exchange: Exchange,
    key: KeyRecord,
    admission: Decision,
    input_bound: int,
    max_tokens: int,
) -> Ticket | None:
    """The key's ticket for a request of ``input_bound`` + ``max_tokens`` tokens at most, or
    None when the key has no ticket-held limit. A refusal gives the request's rate-limit unit
    back (a refused request consumes none) and raises the 429."""
    if key.tpm is None and key.max_concurrency is None:
        return None
    claims = KeyLimits(key.tpm, key.max_concurrency).claims(
        subject_of(key), input_bound + max_tokens, input_bound + min(1, max_tokens)
    )
    outcome = await services.tickets.take(claims, services.clock.steady(), exchange.request_id)
    if isinstance(outcome, Ticket):
        return outcome
    await services.rate_limiter.refund(key.id, admission)
    services.telemetry.metrics.limit_refused(outcome.resource.value)
    exchange.response_headers.update(refusal_headers(outcome))
    raise errors.RateLimited(message(outcome), headers={"retry-after": str(outcome.retry_after)})


def refusal_headers(refused: Refused) -> dict[str, str]:
    """``x-modelgate-limit`` and the IETF draft RateLimit fields of the limit that refused."""
    window = f";w={int(WINDOW_SECONDS)}" if refused.resource is Resource.TPM else ""
    return {
        hdr.LIMIT: refused.resource.value,
        "ratelimit-policy": f"{refused.limit}{window}",
        "ratelimit": f"limit={refused.limit}, remaining=0, reset={refused.retry_after}",
    }


def message(refused: Refused) -> str:
    name = _NAMES[refused.resource]
    if refused.resource is Resource.TPM and refused.wait == float("inf"):
        return (
            f"this request alone may use more than this key's limit of {refused.limit} {name}; "
            "send less input"
        )
    return f"limit of {refused.limit} {name} reached for this key; retry after {refused.retry_after} s"


def ender(services: Services, ticket: Ticket) -> Callable[[int], None]:
    """What ``Hold.on_end`` calls with the tokens really used (0 when released)."""
    return functools.partial(services.tickets.settle, ticket)
