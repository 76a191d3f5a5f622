"""The request path, top to bottom (docs/architecture.md §3):

edge → authenticate → authorize (group, model, alias) → limit → reserve → route to a deployment →
call (passthrough or translate) → stream back → settle.

This module only orders the steps; each is a call into a small module. ``handle`` serves an HTTP
request; a ``response.create`` message on a Responses WebSocket (``gateway.websocket``) is served
by the same steps, entered through ``open_exchange`` and ``run`` with its body in hand
(``authenticate``, ``admit_request``, ``serve_admitted``). It also owns the one
lifecycle rule of a request: once money is held, the hold ends exactly once (``Hold.settle`` or
``Hold.release``), whatever happens (success, upstream failure, client disconnect, bug).
"""

from __future__ import annotations

import asyncio
import copy
import functools
import logging
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Receive

from modelgate import errors, ir
from modelgate.billing.ledger import Hold, Purpose, UsageStatus
from modelgate.billing.refusal import LIMITS as SPEND_LIMITS
from modelgate.billing.refusal import refused as billing_refusal
from modelgate.catalogue import Model
from modelgate.formats import CODECS, ClientRequest
from modelgate.gateway import guards, key_access, limit_tickets, policy
from modelgate.gateway import headers as hdr
from modelgate.gateway.bodies import (
    BodyRules,
    Facts,
    analyse,
    analyse_in_worker,
    built_in_worker,
    prompt_tokens_in_worker,
)
from modelgate.gateway.body import read_limited, splice_top_level
from modelgate.gateway.boundary import refusal_of
from modelgate.gateway.counting import upstream_count, upstream_counts
from modelgate.gateway.disconnect import ClientGone, DisconnectWatch, ShuttingDown
from modelgate.gateway.exchange import Admitted, Endpoint, Exchange
from modelgate.gateway.observe import AttemptLog, refused, settled
from modelgate.gateway.output_tokens import attempt_max_tokens, held_default
from modelgate.gateway.refusals import record_refusal
from modelgate.gateway.relay import StreamResponse, relay_whole
from modelgate.gateway.replies import json_reply
from modelgate.gateway.streams import estimate_input, open_stream
from modelgate.gateway.translate import Built, HostedToolPolicy, build_body, choose_dialect
from modelgate.services import Services
from modelgate.storage.base import KeyRecord, Refusal, Settlement
from modelgate.telemetry.logs import CURRENT_REQUEST
from modelgate.upstream.base import Deployment, Dialect, Provider
from modelgate.upstream.error_mapping import sanitise
from modelgate.upstream.router import Router

log = logging.getLogger("modelgate.request")


async def handle(services: Services, endpoint: Endpoint, request: Request) -> Response:
    """Serve one model request; every refusal is rendered in the endpoint's wire format."""
    exchange = open_exchange(services, endpoint, request.headers, "POST", request.scope["path"])
    exchange.peer = key_access.peer_of(request.scope)
    params = request.scope.get("path_params")
    if params:  # a templated route's parameters (``server.app``)
        exchange.params = params
    return await run(services, exchange, _serve(services, exchange, request))


def open_exchange(
    services: Services,
    endpoint: Endpoint,
    headers: Mapping[str, str],
    method: str,
    path: str,
    *,
    transport: str = "http",
    trace_headers: Mapping[str, str] | None = None,
) -> Exchange:
    """A request begins: its id (in the log context) and, when tracing is on, its server span.
    ``transport`` is how it arrived (``http``, or ``websocket`` for a frame on a socket)."""
    exchange = Exchange(endpoint, services.clock.time(), headers)
    exchange.record.transport = transport
    CURRENT_REQUEST.set(exchange.request_id)
    tracing = services.telemetry.tracing
    if tracing is not None:
        exchange.trace = tracing.begin(
            headers if trace_headers is None else trace_headers, method, path, exchange.record
        )
    return exchange


async def run(services: Services, exchange: Exchange, work: Coroutine[Any, Any, Response]) -> Response:
    """Run ``work`` (the request's steps) as one request holding an in-flight slot: it ends in an
    answer (a stream when it ends) or a refusal, recorded here and raised with the request's
    headers for the boundary (``server.app``'s, the WebSocket session's) to render."""
    early = guards.admission_refusal(services)
    if early is not None:
        work.close()  # never started
        raise refusal(services, exchange, early, slot=False) from None
    response: Response
    try:
        response = await work
    except errors.GatewayError as error:
        raise refusal(services, exchange, error, usage=True) from None
    except ClientDisconnect:  # gone while sending its body: nothing reserved, nobody to answer
        response = client_gone(exchange)
    except Exception as exc:
        # A storage failure (a reservation made before it is released by the sweeper once it
        # expires) or a surprise: the refusal it is (``gateway.boundary``).
        raise refusal(services, exchange, refusal_of(exc)) from None
    except BaseException:  # cancelled (the server's shutdown gave up on it): still give back its slots
        finish_exchange(services, exchange, None)
        raise
    if not isinstance(response, StreamResponse):  # a stream finishes when it ends (on_done)
        finish_exchange(services, exchange, response)
    return response


def refusal(
    services: Services,
    exchange: Exchange,
    error: errors.GatewayError,
    *,
    slot: bool = True,
    usage: bool = False,
) -> errors.GatewayError:
    """The request ends refused: recorded from ``error`` (with ``usage``, its usage record where one
    belongs) and finished; returned with the request's headers, for the boundary to render."""
    status = exchange.endpoint.codec.http_status(error)
    refused(exchange.record, error, status)
    if usage:
        record_refusal(services, exchange.record, exchange.started, status)
    finish_exchange(services, exchange, error, slot=slot)
    headers = exchange.reply_headers()
    if not exchange.body_read:  # close instead of reading (or keeping) what the client still sends
        headers["connection"] = "close"
    # A copy: a refusal raised twice (a shared instance) must not carry this request's headers.
    answer = copy.copy(error)
    answer.headers = {**headers, **error.headers}
    return answer


def finish_exchange(
    services: Services,
    exchange: Exchange,
    response: Response | errors.GatewayError | None,
    *,
    slot: bool = True,
) -> None:
    """The request is over: give back what it held in this instance (its in-flight and
    large-body slots), then count, log and close its trace."""
    if slot:
        services.inflight.release()
    if exchange.large_body:
        exchange.large_body = False
        services.large_bodies.release()
    record = exchange.record
    if response is None:  # cancelled before an answer existed
        record.outcome = "cancelled"
    elif not record.status and isinstance(response, Response):  # a refusal's is recorded already
        record.status = response.status_code
    services.telemetry.finish(record)
    if exchange.trace is not None:
        exchange.trace.end(record)


async def _serve(services: Services, exchange: Exchange, request: Request) -> Response:
    with exchange.span("authenticate"):
        query = request.query_params if exchange.endpoint.format.credentials.query else None
        key = authenticate(services, exchange, query)
        raw = await read_body(services, exchange, request)
        admitted = await admit_request(services, exchange, key, raw)
    return await serve_admitted(services, admitted, request.receive)


async def admit_request(services: Services, exchange: Exchange, key: KeyRecord, raw: bytes) -> Admitted:
    """``admit``, then (stateful endpoints) the stored state the request refers to resolved."""
    admitted = await admit(services, exchange, key, raw)
    state = exchange.endpoint.state
    if state is not None:  # e.g. stored Responses history resolved and expanded
        admitted = await state.admit(services, admitted)
    return admitted


async def serve_admitted(services: Services, admitted: Admitted, receive: Receive) -> Response:
    """Reserve, call the upstream and relay (or count): the steps after admission, shared by
    HTTP requests and WebSocket frames. ``receive`` reports the client's disconnect."""
    exchange = admitted.exchange
    if exchange.endpoint.counting:
        await limit_tickets.take_requests(
            services, admitted.key, exchange.request_id, exchange.response_headers
        )
        return await count_tokens(services, admitted)
    with exchange.span("reserve"):
        hold = await reserve(services, admitted)
    watch = DisconnectWatch(receive, services.drain)
    # The exchange keeps the router it started with to its end: a reload that replaces it
    # closes it only once every exchange released it (a stream releases it when it ends).
    router = services.router
    router.acquire()
    try:
        response = await call_upstream(services, router, admitted, hold, watch)
    except BaseException:
        router.release()
        raise
    finally:
        watch.close()
    if not isinstance(response, StreamResponse):
        router.release()
    return response


def authenticate(services: Services, exchange: Exchange, query: Mapping[str, str] | None = None) -> KeyRecord:
    """Everything decided from the headers alone, before a byte of the body is read: the key,
    the format's required headers, and whether the key's group may use this format."""
    endpoint = exchange.endpoint
    fmt = endpoint.format
    key = guards.authenticate(
        services, fmt, exchange.headers, exchange.started, guards.KEY_ONLY, query, exchange.peer
    )
    record = exchange.record
    record.key_id, record.account_id, record.group = key.id, key.account_id, key.group
    endpoint.codec.check_headers(exchange.headers, services.settings.api_versions)
    if fmt.check_query is not None and endpoint.route is not None:  # e.g. a stream's ?alt=sse
        fmt.check_query(endpoint.route, query or {})
    policy.check_format(fmt.name, key)  # after the headers: a malformed request is a 400 first
    return key


async def read_body(services: Services, exchange: Exchange, request: Request) -> bytes:
    """The body, bounded by ``server.max_body_bytes``; a large one first takes a large-body slot,
    so an instance never holds more than ``server.max_large_bodies`` of them."""
    server = services.settings.server
    raw = await read_limited(
        request.stream(),
        exchange.headers.get("content-length"),
        server.max_body_bytes,
        large=server.offload_body_bytes,
        on_large=functools.partial(take_large_body_slot, services, exchange),
    )
    exchange.body_read = True
    return raw


def take_large_body_slot(services: Services, exchange: Exchange) -> None:
    """Before a large body is held: one of the instance's large-body slots, or a fast 429."""
    if not services.large_bodies.try_acquire():
        raise errors.RateLimited(
            "the gateway is handling its limit of large requests; retry shortly",
            headers={"retry-after": str(services.settings.server.overload_retry_after)},
        )
    exchange.large_body = True


async def admit(services: Services, exchange: Exchange, key: KeyRecord, raw: bytes) -> Admitted:
    """Analyse the body, authorize the model (alias, family, allowed list) and validate. The rate
    limits are taken with the hold (``reserve``): a WebSocket pre-warm, which calls no upstream,
    takes none."""
    facts = await analyse_body(services, exchange, raw)
    codec = exchange.endpoint.codec
    fmt = exchange.endpoint.format
    model = policy.model_for(services.catalogue, key, fmt.model_name(facts.body, exchange.params))
    stream = fmt.wants_stream(facts.body, exchange.endpoint.route)
    exchange.record.model, exchange.record.stream = model.id, stream
    if facts.invalid is not None:
        raise facts.invalid
    client = ClientRequest(codec, facts.body, model.id, facts.request)
    return Admitted(exchange, key, model, client, raw, facts, stream)


async def analyse_body(services: Services, exchange: Exchange, raw: bytes) -> Facts:
    server = services.settings.server
    endpoint = exchange.endpoint
    billing = services.settings.billing
    rules = BodyRules(server.max_json_depth, billing.media_rules(), billing.max_web_searches_per_request)
    if len(raw) > server.offload_body_bytes:
        return await services.offload.run_on_body(
            analyse_in_worker, raw, endpoint.codec.name, endpoint.counting, rules
        )
    return analyse(raw, endpoint.codec.name, endpoint.counting, rules)


def clamp_max_tokens(services: Services, exchange: Exchange, model: Model, requested: int | None) -> int:
    limit = model.output_limit
    if requested is None:
        return held_default(model, services.router.deployments_for(model.id))
    if requested > limit:
        exchange.response_headers[hdr.MAX_TOKENS_CLAMPED] = f"{requested}->{limit}; reason=model_limit"
        services.telemetry.metrics.clamped("model_limit")
        return limit
    return requested


async def reserve(services: Services, admitted: Admitted) -> Hold:
    """Hold the worst case against the key's monthly cap and the account balance, atomically."""
    exchange, key, model = admitted.exchange, admitted.key, admitted.model
    requested = admitted.client.codec.requested_max_tokens(admitted.client.body)
    max_tokens = clamp_max_tokens(services, exchange, model, requested)
    input_bound = admitted.facts.input_bound
    if model.context_length is not None:
        # No provider bills input beyond the model's context window (it refuses the request).
        input_bound = min(input_bound, model.context_length)
    purpose = Purpose(
        exchange.request_id, key.id, key.account_id, exchange.endpoint.name, model, exchange.started
    )
    # Every rate limit of the request in one atomic step, just before the money hold.
    ticket = await limit_tickets.take(services, exchange, key, input_bound, max_tokens)
    if ticket.metered and ticket.tokens < input_bound + max_tokens:
        # Less than the worst case was left this minute (at least input + one output token).
        asked = requested if requested is not None else max_tokens
        max_tokens = ticket.tokens - input_bound
        exchange.response_headers[hdr.MAX_TOKENS_CLAMPED] = f"{asked}->{max_tokens}; reason=tpm"
        services.telemetry.metrics.clamped("tpm")
    try:
        outcome = await services.ledger.reserve(
            purpose, input_bound=input_bound, max_tokens=max_tokens, web_searches=admitted.facts.web_searches
        )
    except BaseException:
        services.tickets.settle(ticket, 0)  # nothing used; the request unit stays taken
        raise
    if isinstance(outcome, Refusal):
        # A refused request consumes no rate-limit unit either.
        services.tickets.refund(ticket)
        exchange.response_headers.update(limit_tickets.refunded_headers(ticket))
        limit = SPEND_LIMITS.get(outcome.reason)
        if limit is not None:
            exchange.response_headers[hdr.LIMIT] = limit
            services.telemetry.metrics.limit_refused(limit)
        raise billing_refusal(outcome, services.telemetry.metrics)
    if ticket.holds:
        outcome.on_end = limit_tickets.ender(services, ticket)
    if outcome.max_tokens < max_tokens:
        asked = requested if requested is not None else max_tokens
        exchange.response_headers[hdr.MAX_TOKENS_CLAMPED] = f"{asked}->{outcome.max_tokens}; reason=credits"
        services.telemetry.metrics.clamped("credits")
    exchange.response_headers.update(
        hdr.money_headers(None, outcome.cap_remaining_after_uc, outcome.balance_after_uc)
    )
    return outcome


async def call_upstream(
    services: Services, router: Router, admitted: Admitted, hold: Hold, watch: DisconnectWatch
) -> Response:
    """Route, call and relay; the hold is settled or released on every way out."""
    exchange, client = admitted.exchange, admitted.client
    state = exchange.endpoint.state

    async def build(deployment: Deployment, provider: Provider) -> tuple[Dialect, bytes]:
        max_tokens = attempt_max_tokens(admitted.model, deployment, hold.max_tokens, client)
        return await upstream_body(services, admitted, max_tokens, deployment, provider)

    observer = AttemptLog(services.telemetry.metrics, exchange.record, exchange.trace)
    try:
        attempt = await watch.run(
            router.open(
                admitted.model.id,
                build,
                stream=admitted.stream,
                client_headers=exchange.headers,
                observer=observer,
                session=router.session_of(admitted),
            )
        )
    except BaseException as exc:
        await release_on_failure(exchange, hold, exc)
        if isinstance(exc, ClientGone):
            return client_gone(exchange)
        if isinstance(exc, ShuttingDown):
            raise guards.shutting_down() from None
        raise
    if admitted.stream:
        provider = attempt.provider
        stream = open_stream(
            client,
            lambda: input_estimate(services, admitted),
            dialect=CODECS[attempt.dialect],
            upstream_model=attempt.deployment.upstream_model,
            redact=redactor(provider),
        )

        def ended() -> None:
            router.release()
            finish_exchange(services, exchange, response)

        response = StreamResponse(
            stream,
            attempt,
            headers=exchange.reply_headers(),
            settle=functools.partial(settle_hold, exchange, hold),
            on_done=ended,
            drain=services.drain,
            record=exchange.record,
            telemetry=services.telemetry,
            keep=None if state is None else state.stream_keeper(services, admitted, provider),
        )
        return response
    try:
        body, usage = await watch.run(relay_whole(attempt, client, exchange.record))
    except ClientGone:
        # The upstream had accepted the request (its headers came) and worked on the input
        # until we cancelled it: bill the input, as a stream cut at its first byte would be.
        usage = ir.Usage(input_tokens=await input_estimate(services, admitted))
        await settle_hold(exchange, hold, usage, UsageStatus.CLIENT_DISCONNECTED)
        return client_gone(exchange)
    except BaseException as exc:
        await release_on_failure(exchange, hold, exc)
        if isinstance(exc, ShuttingDown):
            raise guards.shutting_down() from None
        raise
    with exchange.span("settle"):
        settlement = await hold.settle(usage, UsageStatus.OK)
    settled(exchange.record, usage, UsageStatus.OK, settlement)
    if state is not None:  # a completed answer is kept before it is returned
        body = await state.keep_whole(services, admitted, attempt.provider, body, exchange.response_headers)
    exchange.response_headers.update(
        hdr.money_headers(settlement.charged_uc, settlement.cap_remaining_uc, settlement.balance_uc)
    )
    return Response(body, media_type="application/json", headers=exchange.reply_headers())


async def upstream_body(
    services: Services, admitted: Admitted, max_tokens: int, deployment: Deployment, provider: Provider
) -> tuple[Dialect, bytes]:
    """The body of one attempt on ``deployment``: built here, or in a worker for a large body.
    The hosted tools it drops are named in ``x-modelgate-dropped-tools`` and the request log
    (the last attempt's, since a failover may reach an upstream that runs them)."""
    codec = admitted.client.codec
    facts = admitted.facts
    searching = codec.name not in provider.dialects and (
        facts.web_search if facts.offloaded else codec.offers_web_search(facts.body)
    )
    dialect = choose_dialect(codec.name, provider, web_search=searching)
    state = admitted.exchange.endpoint.state
    if state is not None:
        admitted = state.for_provider(admitted, provider, dialect)
    client = admitted.client
    facts = admitted.facts
    policy = hosted_tool_policy(services, provider)
    if not facts.offloaded:
        built = build_body(
            client,
            admitted.raw,
            dialect,
            upstream_model=deployment.upstream_model,
            max_tokens=max_tokens,
            stream=admitted.stream,
            legacy_limit=provider.legacy_chat_limit,
            hosted_tools=policy,
            web_searches=facts.web_searches,
            provider_kind=provider.kind,
        )
    elif dialect == codec.name and facts.spans is not None:
        # Passthrough of a large body: spliced here from the spans the worker found; the one
        # copy runs on a thread (a large join releases the GIL), so the loop keeps serving.
        built = await asyncio.to_thread(
            build_body,
            client,
            admitted.raw,
            dialect,
            upstream_model=deployment.upstream_model,
            max_tokens=max_tokens,
            stream=admitted.stream,
            legacy_limit=provider.legacy_chat_limit,
            spans=facts.spans,
        )
    else:
        body, dropped = await services.offload.run_on_body(
            built_in_worker,
            admitted.raw,
            facts.body,
            codec.name,
            dialect,
            deployment.upstream_model,
            max_tokens,
            admitted.stream,
            provider.legacy_chat_limit,
            policy,
            facts.web_searches,
            provider.kind,
        )
        built = Built(body, dropped)
    exchange = admitted.exchange
    exchange.record.dropped_tools = ",".join(built.dropped) or None
    if built.dropped:
        exchange.response_headers[hdr.DROPPED_TOOLS] = ",".join(built.dropped)
    else:
        exchange.response_headers.pop(hdr.DROPPED_TOOLS, None)
    return dialect, built.body


def hosted_tool_policy(services: Services, provider: Provider) -> HostedToolPolicy:
    """``providers[].hosted_tools`` of the provider (``drop`` for providers built elsewhere)."""
    for config in services.settings.providers:
        if config.name == provider.name:
            return config.hosted_tools
    return "drop"


async def input_estimate(services: Services, admitted: Admitted) -> int:
    """Input tokens of a request the upstream never reported (``streams.estimate_input``)."""
    if admitted.facts.offloaded:
        return await services.offload.run_on_body(
            prompt_tokens_in_worker, admitted.raw, admitted.client.codec.name
        )
    return estimate_input(admitted.client, admitted.raw)


def redactor(provider: Provider) -> Callable[[str], str]:
    """What scrubs upstream text before a client sees it: the provider's own secrets (key, base
    URL, host) and anything else shaped like an API key (``upstream.error_mapping.sanitise``)."""
    # (``Redacts`` by attribute: an isinstance check against a runtime protocol costs ~10 µs
    # per request on Python 3.11.)
    own: Callable[[str], str] | None = getattr(provider, "redact", None)
    return functools.partial(sanitise, redact=own) if callable(own) else sanitise


def client_gone(exchange: Exchange) -> Response:
    """The answer nobody reads: the client disconnected (499, as nginx logs it)."""
    exchange.record.outcome = "client_gone"
    return Response(status_code=499, headers=exchange.reply_headers())


async def settle_hold(exchange: Exchange, hold: Hold, usage: ir.Usage, status: UsageStatus) -> Settlement:
    """Charge the request's usage (``Hold.settle``) and note it for the telemetry."""
    with exchange.span("settle"):
        settlement = await hold.settle(usage, status)
    settled(exchange.record, usage, status, settlement)
    return settlement


def status_of(exc: BaseException) -> UsageStatus:
    if isinstance(exc, ClientGone):
        return UsageStatus.CLIENT_DISCONNECTED
    if isinstance(exc, ShuttingDown):
        return UsageStatus.SHUTDOWN
    if isinstance(exc, errors.GatewayError):
        return UsageStatus.upstream(exc.kind) if exc.from_upstream else UsageStatus.REFUSED
    if isinstance(exc, asyncio.CancelledError):
        return UsageStatus.CANCELLED
    return UsageStatus.GATEWAY_ERROR


async def release_on_failure(exchange: Exchange, hold: Hold, exc: BaseException) -> None:
    """Nothing usable came back: free the hold, and let the error response show the figures
    after the release (not the reservation's, which counted the hold)."""
    status = status_of(exc)
    with exchange.span("settle"):
        settlement = await hold.release(status)
    settled(exchange.record, None, status, settlement)
    exchange.response_headers.update(
        hdr.money_headers(None, settlement.cap_remaining_uc, settlement.balance_uc)
    )


async def count_tokens(services: Services, admitted: Admitted) -> Response:
    exchange = admitted.exchange
    router = services.router
    model_id = admitted.model.id
    router.acquire()  # released once the count is read: a reload closes the router after that
    try:
        count = await _count(services, admitted, router, model_id)
    finally:
        router.release()
    return json_reply(exchange.endpoint.format.count_answer(count), headers=exchange.reply_headers())


async def _count(services: Services, admitted: Admitted, router: Router, model_id: str) -> int:
    exchange = admitted.exchange
    fmt = exchange.endpoint.format
    # The count goes, as the client sent it, to an upstream of the route's own format.
    dialect = fmt.name
    if not upstream_counts(router, model_id, dialect):
        return await input_estimate(services, admitted)

    async def build(deployment: Deployment, provider: Provider) -> tuple[Dialect, bytes]:
        fields = {fmt.model_field or "model": deployment.upstream_model}
        facts = admitted.facts
        if facts.offloaded:
            return dialect, await asyncio.to_thread(splice_top_level, admitted.raw, fields, spans=facts.spans)
        return dialect, splice_top_level(admitted.raw, fields, parsed=admitted.client.body)

    observer = AttemptLog(services.telemetry.metrics, exchange.record, exchange.trace)
    return await upstream_count(router, model_id, build, exchange.headers, observer)
