"""The request path, top to bottom (DESIGN.md §3):

edge → authenticate → authorize (group, model, alias) → limit → reserve → route to a deployment →
call (passthrough or translate) → stream back → settle.

Every step is a call into a small module; this file only orders them and owns the lifecycle of
one request: once money is reserved, exactly one of settle or release runs, whatever happens
(success, upstream failure, client disconnect, bug).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from modelgate import errors, ir
from modelgate.billing.pricing import (
    affordable_output_tokens,
    bound_uc,
    cost_uc,
    input_tokens_bound,
)
from modelgate.catalogue import Model
from modelgate.clock import month_of
from modelgate.errors import WireFormat
from modelgate.formats import CODECS, ids
from modelgate.gateway import headers as hdr
from modelgate.gateway import shape
from modelgate.gateway.body import parse_object, read_limited
from modelgate.gateway.disconnect import ClientGone, DisconnectWatch
from modelgate.gateway.relay import Relay, StreamResponse
from modelgate.gateway.services import Services
from modelgate.gateway.translate import Translation, build_upstream_body
from modelgate.limits.rpm import Decision
from modelgate.storage.base import KeyRecord, Refusal, ReserveRequest, StorageError, UsageRecord

log = logging.getLogger("modelgate.request")
T = TypeVar("T")

_FAMILY_OF_GROUP = {"Basic": "aria", "Pro": "aria", "Nova": "nova"}
_WRONG_ENDPOINT = {
    "messages": "Nova keys are not served on /v1/messages; use /v1/chat/completions or /v1/responses",
    "responses": "Basic and Pro keys are not served on /v1/responses; use /v1/messages or /v1/chat/completions",
}


@dataclass(slots=True)
class Call:
    """Everything known about one request as it moves down the path."""

    request_id: str
    fmt: WireFormat
    endpoint: str
    started: float
    headers: Mapping[str, str]
    response_headers: dict[str, str] = field(default_factory=dict)
    key: KeyRecord | None = None
    model: Model | None = None
    body: dict[str, Any] = field(default_factory=dict)
    raw: bytes = b""
    stream: bool = False
    max_tokens: int = 0
    input_bound: int = 0
    #: ``max_tokens`` as the client asked (None: not given), for the clamp header.
    requested_max_tokens: int | None = None
    admission: Decision | None = None


async def handle(services: Services, fmt: WireFormat, endpoint: str, request: Request) -> Response:
    """Serve one model request; every refusal is rendered in the endpoint's wire format."""
    call = Call(ids.new_request_id(), fmt, endpoint, services.clock.time(), request.headers)
    if not services.inflight.try_acquire():
        error = errors.RateLimited(
            "the gateway is at its limit of requests in flight; retry shortly",
            headers={"retry-after": str(services.settings.server.overload_retry_after)},
        )
        return render_error(call, error)
    handed_off = False
    try:
        response = await _serve(services, call, request)
        handed_off = isinstance(response, StreamResponse)
        return response
    except errors.GatewayError as error:
        return render_error(call, error)
    except ClientDisconnect:  # gone while sending its body: nothing reserved, nobody to answer
        return Response(status_code=499, headers=_common_headers(call))
    except StorageError as exc:
        # The database is down or unreachable: a retryable 503, not a bug. A reservation made
        # before the failure is released by the sweeper (billing.sweeper) once it expires.
        log.warning("request %s: storage unavailable: %s", call.request_id, exc)
        return render_error(call, errors.Unavailable("the gateway's database is unavailable; retry shortly"))
    except Exception:  # the one boundary where surprises become a 500
        log.exception("request %s failed with an unexpected error", call.request_id)
        return render_error(
            call, errors.InternalError("internal error; the request id identifies it in the logs")
        )
    finally:
        if not handed_off:
            services.inflight.release()


async def _serve(services: Services, call: Call, request: Request) -> Response:
    limit = services.settings.server.max_body_bytes
    call.raw = await read_limited(request.stream(), call.headers.get("content-length"), limit)
    call.key = services.keys.authenticate(call.headers, call.started)
    if call.fmt == "messages":
        hdr.check_version(call.headers, services.settings.api_versions)
    call.body = parse_object(call.raw)
    call.model = authorize(services, call)
    shape.validate(call.fmt, call.endpoint, call.body)
    await admit_rate(services, call)
    if call.endpoint == "count_tokens":
        return await count_tokens(services, call)
    call.stream = call.body.get("stream") is True
    call.max_tokens = clamp_max_tokens(call, shape.requested_max_tokens(call.fmt, call.body))
    await reserve(services, call)
    watch = DisconnectWatch(request.receive)
    try:
        return await _call_upstream(services, call, watch)
    finally:
        watch.close()


async def _call_upstream(services: Services, call: Call, watch: DisconnectWatch) -> Response:
    assert call.model is not None
    try:
        translation = Translation(call.fmt, call.body)
        attempt = await watch.run(
            services.router.open(
                call.model.id,
                lambda deployment, provider: build_upstream_body(call, translation, deployment, provider),
                stream=call.stream,
                client_headers=call.headers,
            )
        )
    except BaseException as exc:
        await release_on_failure(services, call, exc)
        if isinstance(exc, ClientGone):
            return Response(status_code=499, headers=_common_headers(call))
        raise
    relay = Relay(call, translation, attempt, services)
    if call.stream:
        return StreamResponse(
            relay,
            headers=_common_headers(call),
            settle=lambda usage, status: finish(services, call, usage, status=status, charge=True),
            on_done=services.inflight.release,
        )
    try:
        body, usage, status = await watch.run(relay.whole())
    except ClientGone:
        # The upstream had accepted the request (its headers came) and worked on the input
        # until we cancelled it: bill the input, as a stream cut at its first byte would be.
        await finish(
            services,
            call,
            ir.Usage(input_tokens=relay.estimate_input()),
            status="client_disconnected",
            charge=True,
        )
        return Response(status_code=499, headers=_common_headers(call))
    except BaseException as exc:
        await release_on_failure(services, call, exc)
        raise
    settlement = await finish(services, call, usage, status=status, charge=True)
    call.response_headers.update(
        hdr.money_headers(settlement.charged_uc, settlement.cap_remaining_uc, settlement.balance_uc)
    )
    return Response(body, media_type="application/json", headers=_common_headers(call))


def _status_of(exc: BaseException) -> str:
    if isinstance(exc, ClientGone):
        return "client_disconnected"
    if isinstance(exc, errors.GatewayError):
        return f"upstream_{exc.kind}"
    if isinstance(exc, asyncio.CancelledError):
        return "cancelled"
    return "gateway_error"


def authorize(services: Services, call: Call) -> Model:
    """Group rules, then alias resolution, then family and allowed-models checks."""
    assert call.key is not None
    group = call.key.group
    if call.fmt == "messages" and group == "Nova":
        raise errors.PermissionDenied(_WRONG_ENDPOINT["messages"], code="wrong_endpoint_for_key_group")
    if call.fmt == "responses" and group != "Nova":
        raise errors.PermissionDenied(_WRONG_ENDPOINT["responses"], code="wrong_endpoint_for_key_group")
    name = call.body.get("model")
    if not isinstance(name, str) or not name:
        raise errors.InvalidRequest("model: a model id is required", param="model")
    model = services.catalogue.resolve(name)
    allowed = call.key.allowed_models
    if (
        model is None
        or model.family != _FAMILY_OF_GROUP[group]
        or (allowed is not None and model.id not in allowed)
    ):
        raise errors.NotFound(f"model {name} is not available for this key", param="model")
    return model


async def admit_rate(services: Services, call: Call) -> None:
    assert call.key is not None
    decision = await services.rate_limiter.admit(call.key.id, call.key.rpm, call.started)
    call.admission = decision
    call.response_headers.update(decision.headers())
    if not decision.admitted:
        raise errors.RateLimited(
            f"rate limit of {call.key.rpm} requests per minute exceeded for this key; retry after "
            f"{decision.retry_after} s",
            headers={"retry-after": str(decision.retry_after)},
        )


def clamp_max_tokens(call: Call, requested: int | None) -> int:
    assert call.model is not None
    call.requested_max_tokens = requested
    limit = call.model.output_limit
    if requested is None:
        return limit
    if requested > limit:
        call.response_headers[hdr.MAX_TOKENS_CLAMPED] = f"{requested}->{limit}; reason=model_limit"
        return limit
    return requested


async def reserve(services: Services, call: Call) -> None:
    """Hold the worst case against the key's monthly cap and the account balance, atomically."""
    assert call.key is not None and call.model is not None
    billing = services.settings.billing
    price = call.model.price
    call.input_bound = input_tokens_bound(
        len(call.raw), call.raw.count(b'"url"'), billing.input_overhead_tokens, billing.tokens_per_image_url
    )
    outcome = await services.store.reserve(
        ReserveRequest(
            request_id=call.request_id,
            key_id=call.key.id,
            account_id=call.key.account_id,
            month=month_of(call.started),
            amount_uc=bound_uc(call.input_bound, call.max_tokens, price),
            minimum_uc=bound_uc(call.input_bound, min(1, call.max_tokens), price),
            now=call.started,
            expires_at=call.started + billing.reservation_ttl_seconds,
            endpoint=call.endpoint,
            model=call.model.id,
        )
    )
    if isinstance(outcome, Refusal):
        # A refused request consumes no rate-limit unit either.
        if call.admission is not None:
            await services.rate_limiter.refund(call.key.id, call.admission)
            call.response_headers.update(
                replace(call.admission, remaining=call.admission.remaining + 1).headers()
            )
        if outcome.reason == "monthly_cap":
            message, code = "this key has reached its monthly credit cap", "monthly_cap_reached"
        else:
            message, code = "the account's credit balance is too low for this request", "insufficient_balance"
        raise errors.BillingRefused(message, code=code, headers={"x-should-retry": "false"})
    affordable = affordable_output_tokens(outcome.granted_uc, call.input_bound, price)
    if affordable < call.max_tokens:
        asked = call.requested_max_tokens if call.requested_max_tokens is not None else call.max_tokens
        call.response_headers[hdr.MAX_TOKENS_CLAMPED] = f"{asked}->{affordable}; reason=credits"
        call.max_tokens = affordable
    call.response_headers.update(
        hdr.money_headers(None, outcome.cap_remaining_after_uc, outcome.balance_after_uc)
    )


async def release_on_failure(services: Services, call: Call, exc: BaseException) -> None:
    """Nothing usable came back: free the hold, and let the error response show the figures
    after the release (not the reservation's, which counted the hold)."""
    settlement = await finish(services, call, ir.Usage(), status=_status_of(exc), charge=False)
    call.response_headers.update(hdr.money_headers(None, settlement.cap_remaining_uc, settlement.balance_uc))


async def finish(services: Services, call: Call, usage: ir.Usage, *, status: str, charge: bool) -> Any:
    """Settle (charge the real cost) or release the reservation; exactly once per request."""
    assert call.key is not None and call.model is not None
    record = UsageRecord(
        request_id=call.request_id,
        key_id=call.key.id,
        account_id=call.key.account_id,
        endpoint=call.endpoint,
        model=call.model.id,
        month=month_of(call.started),
        status=status,
        created_at=call.started,
        finished_at=services.clock.time(),
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_creation_tokens=usage.cache_creation_input_tokens,
        cache_read_tokens=usage.cache_read_input_tokens,
        charged_uc=cost_uc(usage, call.model.price) if charge else 0,
    )
    operation = services.store.settle if charge else services.store.release
    return await services.settlements.run(operation(record))


async def count_tokens(services: Services, call: Call) -> Response:
    """``/v1/messages/count_tokens``: forwarded to a Messages upstream, or counted locally."""
    assert call.model is not None
    result = await services.token_counter.count(call.model.id, call.raw, call.body, call.headers)
    return Response(
        orjson.dumps({"input_tokens": result}), media_type="application/json", headers=_common_headers(call)
    )


def _common_headers(call: Call) -> dict[str, str]:
    return {"request-id": call.request_id, "x-request-id": call.request_id, **call.response_headers}


def render_error(call: Call, error: errors.GatewayError) -> Response:
    body = CODECS[call.fmt].render_error(error, call.request_id)
    headers = {**_common_headers(call), **error.headers}
    if error.spec.retryable is False:
        headers.setdefault("x-should-retry", "false")
    return Response(
        body, status_code=error.status_for(call.fmt), media_type="application/json", headers=headers
    )
