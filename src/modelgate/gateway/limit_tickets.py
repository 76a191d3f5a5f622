"""A request's admission ticket on every rate limit it meets (``limits.key_limits``): requests per
minute, tokens per minute and requests in flight, of its key, taken in one atomic step.

A model call takes its ticket in ``pipeline.reserve`` just before the money hold, with the same
worst case (the input bound plus ``max_tokens``); a route that calls no model (the stored-state
endpoints, token counting) takes one of requests alone (``take_requests``). A refusal is a 429
that names the limit. The ticket then rides on the money ``Hold`` (``Hold.on_end``), whose end is
already exactly once on every way out (stream end, disconnect, error, shutdown, a WebSocket
response): it is settled there to the tokens really used and its concurrency slot freed. A request
refused after admission (402) is refunded: it consumes nothing.

Headers (draft-ietf-httpapi-ratelimit-headers-10): ``RateLimit-Policy`` lists every limit the
request met, ``RateLimit`` gives the tightest of them (the least left in proportion to its quota;
on a refusal, the limit that refused, with ``t`` equal to ``retry-after``). ``x-modelgate-limit``
names the limit of a refusal.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

from modelgate import errors
from modelgate.gateway import headers as hdr
from modelgate.gateway.exchange import Exchange
from modelgate.limits.key_limits import Claim, KeyLimits, Resource, Standing
from modelgate.limits.rpm import WINDOW_SECONDS
from modelgate.limits.tickets import Refused, Ticket
from modelgate.services import Services
from modelgate.storage.base import KeyRecord

_NAMES = {
    Resource.RPM: "requests per minute",
    Resource.TPM: "tokens per minute",
    Resource.CONCURRENCY: "requests in flight",
}
_WINDOW = int(WINDOW_SECONDS)


def subject_of(key: KeyRecord) -> str:
    return f"k:{key.id}"


def claims_of(
    key: KeyRecord, account: KeyLimits | None, worst_tokens: int, least_tokens: int
) -> tuple[Claim, ...]:
    """Every claim of one request of ``key`` (its account's after its own)."""
    if account is None and key.tpm is None and key.max_concurrency is None:
        # The common case, built directly: a key with requests per minute only.
        return (Claim(f"k:{key.id}", Resource.RPM, key.rpm, 1, 1),)
    own = KeyLimits(key.tpm, key.max_concurrency, key.rpm).claims(subject_of(key), worst_tokens, least_tokens)
    if account is None:
        return own
    return (*own, *account.claims(f"a:{key.account_id}", worst_tokens, least_tokens))


async def take(
    services: Services, exchange: Exchange, key: KeyRecord, input_bound: int, max_tokens: int
) -> Ticket:
    """The ticket of a model call of ``input_bound`` + ``max_tokens`` tokens at most, or a 429."""
    account = services.account_limits.get(key.account_id)
    claims = claims_of(key, account, input_bound + max_tokens, input_bound + min(1, max_tokens))
    return await _take(services, exchange.request_id, claims, exchange.response_headers)


async def take_requests(services: Services, key: KeyRecord, request_id: str, headers: dict[str, str]) -> None:
    """One request unit of ``key`` (and of its account) for a route that calls no model (kept:
    nothing else held)."""
    account = services.account_limits.get(key.account_id)
    claims = KeyLimits(rpm=key.rpm).claims(subject_of(key), 0, 0)
    if account is not None and account.rpm is not None:
        claims = (*claims, *KeyLimits(rpm=account.rpm).claims(f"a:{key.account_id}", 0, 0))
    ticket = await _take(services, request_id, claims, headers)
    services.tickets.settle(ticket, 0)


async def _take(
    services: Services, request_id: str, claims: tuple[Claim, ...], headers: dict[str, str]
) -> Ticket:
    # Rate windows run on the steady clock: a wall-clock step must not lock a key.
    outcome = await services.tickets.take(claims, services.clock.steady(), request_id)
    if isinstance(outcome, Ticket):
        headers.update(rate_headers(outcome.standing))
        return outcome
    services.telemetry.metrics.limit_refused(outcome.resource.value)
    headers.update(refusal_headers(outcome, claims))
    raise errors.RateLimited(message(outcome), headers={"retry-after": str(outcome.retry_after)})


def refunded_headers(ticket: Ticket) -> dict[str, str]:
    """The figures of a ticket given back (a request refused after admission took nothing)."""
    return rate_headers(
        [Standing(s.resource, s.subject, s.limit, s.remaining + s.taken, s.reset, 0) for s in ticket.standing]
    )


def policy_name(resource: Resource, subject: str) -> str:
    return resource.value if subject.startswith("k:") else f"account-{resource.value}"


def _policy(resource: Resource, subject: str, limit: int) -> str:
    return _policy_of(resource, subject.startswith("k:"), limit)


@functools.lru_cache(maxsize=4096)
def _policy_of(resource: Resource, of_key: bool, limit: int) -> str:
    """A limit's ``RateLimit-Policy`` item (the same few strings every request: cached)."""
    name = resource.value if of_key else f"account-{resource.value}"
    if resource is Resource.CONCURRENCY:  # no window; its unit is not the draft's default
        return f'{name};q={limit};qu="concurrent-requests"'
    return f"{name};q={limit};w={_WINDOW}"


def rate_headers(standing: Sequence[Standing]) -> dict[str, str]:
    """``RateLimit-Policy`` (every limit) and ``RateLimit`` (the tightest) after an admission."""
    if not standing:
        return {}
    tightest = standing[0]
    if len(standing) == 1:  # most keys: requests per minute alone
        policy = _policy(tightest.resource, tightest.subject, tightest.limit)
    else:
        for s in standing[1:]:
            if s.remaining * tightest.limit < tightest.remaining * s.limit:
                tightest = s
        policy = ", ".join([_policy(s.resource, s.subject, s.limit) for s in standing])
    name = policy_name(tightest.resource, tightest.subject)
    return {
        hdr.RATELIMIT_POLICY: policy,
        hdr.RATELIMIT: f"{name};r={max(tightest.remaining, 0)};t={math.ceil(tightest.reset)}",
    }


def refusal_headers(refused: Refused, claims: tuple[Claim, ...]) -> dict[str, str]:
    """``x-modelgate-limit`` and the RateLimit fields of the limit that refused."""
    return {
        hdr.LIMIT: refused.resource.value,
        hdr.RATELIMIT_POLICY: ", ".join(_policy(c.resource, c.subject, c.limit) for c in claims),
        hdr.RATELIMIT: f"{policy_name(refused.resource, refused.subject)};r=0;t={refused.retry_after}",
    }


def message(refused: Refused) -> str:
    name = _NAMES[refused.resource]
    whose = "this key" if refused.subject.startswith("k:") else "this account"
    if refused.resource is Resource.RPM:
        return (
            f"rate limit of {refused.limit} {name} exceeded for {whose}; retry after {refused.retry_after} s"
        )
    if refused.resource is Resource.TPM and refused.wait == float("inf"):
        return (
            f"this request alone may use more than {whose}'s limit of {refused.limit} {name}; send less input"
        )
    return f"limit of {refused.limit} {name} reached for {whose}; retry after {refused.retry_after} s"


def ender(services: Services, ticket: Ticket) -> Callable[[int], None]:
    """What ``Hold.on_end`` calls with the tokens really used (0 when released)."""
    return functools.partial(services.tickets.settle, ticket)
