"""The guards of every API route, in their one order: admission (draining, the in-flight cap)
→ authenticate (where the route's format takes keys from: ``Format.credentials``) → policy (the
key groups the format does not serve: ``Format.refused_groups``) → limits (one request unit of
the key, ``limit_tickets.take_requests``; a model call takes all its limits at once with its
hold instead) → the handler. One implementation of each, used by the model pipeline
(``gateway.pipeline``), the stored-state endpoints (``gateway.state.http``) and the model list
(``gateway.models``); a refusal is a ``GatewayError`` raised to the route table's one boundary
(``server.app``), which renders it in the route's wire format. The model routes' refusals reach
it the same way, once ``pipeline.run`` has recorded each with its usage and metrics.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response

from modelgate import errors
from modelgate.formats import Format, ids
from modelgate.gateway import key_access, limit_tickets, policy
from modelgate.gateway.boundary import refusal_of
from modelgate.gateway.observe import ShutdownRefusal
from modelgate.gateway.relay import SHUTTING_DOWN
from modelgate.services import Services
from modelgate.storage.base import KeyRecord


@dataclass(frozen=True, slots=True)
class Guards:
    """Which guards a route runs after admission (always first)."""

    #: The key's group must be one the format serves (``Format.refused_groups``).
    policy: bool = True
    #: The request takes one rate-limit unit of the key.
    limits: bool = True


#: The model routes and the stored-state endpoints.
ALL = Guards()
#: Reads that cost nothing and serve every group (``GET /v1/models``).
KEY_ONLY = Guards(policy=False, limits=False)


def shutting_down() -> errors.Unavailable:
    """The answer of a request cut by the end of the shutdown grace, or refused while draining."""
    return ShutdownRefusal(SHUTTING_DOWN.message, headers={"retry-after": "1"})


def admission_refusal(services: Services) -> errors.GatewayError | None:
    """Refused before anything is read (draining, or at the in-flight limit); otherwise the
    request now holds an in-flight slot, which its route gives back when it ends."""
    if services.drain.active:
        return shutting_down()
    if not services.inflight.try_acquire():
        return errors.RateLimited(
            "the gateway is at its limit of requests in flight; retry shortly",
            headers={"retry-after": str(services.settings.server.overload_retry_after)},
        )
    return None


def authenticate(
    services: Services,
    fmt: Format,
    headers: Mapping[str, str],
    now: float,
    guards: Guards = ALL,
    query: Mapping[str, str] | None = None,
    peer: str | None = None,
) -> KeyRecord:
    """The active key, taken where ``fmt``'s clients send it; then its own rules (expiry, the
    address ranges it may be used from, ``peer`` being the socket's address: ``key_access``);
    then (``guards.policy``) the format's refusal of the key's group."""
    key = services.keys.authenticate(headers, now, fmt.credentials, query)
    key_access.check(services, key, now, headers, peer)
    if guards.policy:
        policy.check_format(fmt.name, key)
    return key


async def guarded(
    services: Services,
    fmt: Format,
    request: Request,
    handler: Callable[[KeyRecord], Awaitable[Response]],
    guards: Guards = ALL,
) -> Response:
    """A route that is not a model call, behind the same guards (keys taken where ``fmt``'s
    clients send them). Every refusal, a storage failure (503) and a surprise (500) included, is
    raised with the request id headers for the route table's one boundary (``server.app``) to
    render in the route's wire format."""
    request_id = ids.new_request_id()
    headers = {"request-id": request_id, "x-request-id": request_id}
    early = admission_refusal(services)
    if early is not None:
        early.headers.update({**headers, "connection": "close"})
        raise early
    try:
        key = authenticate(
            services,
            fmt,
            request.headers,
            services.clock.time(),
            guards,
            request.query_params,
            key_access.peer_of(request.scope),
        )
        if guards.limits:
            await limit_tickets.take_requests(services, key, request_id, headers)
        response = await handler(key)
    except Exception as exc:
        # A copy: a refusal raised twice (a shared instance) must not carry this request's headers.
        refusal = copy.copy(refusal_of(exc))
        refusal.headers = {**headers, **refusal.headers}
        raise refusal from None
    finally:
        services.inflight.release()
    response.headers.update(headers)
    return response
