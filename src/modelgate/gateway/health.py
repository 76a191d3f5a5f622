"""Probes: ``/healthz`` (liveness, no I/O), ``/health`` (readiness of each component) and ``/``.

``/health`` has two views. Without credentials (``public``): the overall status and each
component (``database``, ``redis`` when configured, ``upstreams``) as ``ok``, ``degraded`` or
``down``, and which serving process answered (index and pid, with ``server.workers``); no provider names, upstream model ids, cooldowns,
credentials or addresses. With an operator admin token (``details``, authorised by the server
layer): the same plus the diagnosis below it (``checks``: engine, providers, unhealthy deployments
and credentials; requests in flight; connection-level refusals).

Components: the database is ``down`` when it does not answer a ping within 2 s; the ledger is
``degraded`` while settles the database did not take wait to be retried. Redis is ``down``
when it does not answer, ``degraded`` while it answers but rate limits still run per instance (the
limiter's breaker is open). Upstreams are ``down`` when every deployment is cooling down,
``degraded`` when some deployment is failing or cooling down or a pooled credential is out of
rotation. The overall status is ``down`` (503) when the database is down, ``draining`` (503) while
the instance drains, else ``degraded`` when any component is not ``ok``, else ``ok`` (both 200).
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from typing import Any, Literal

from starlette.requests import Request
from starlette.responses import Response

from modelgate import __version__
from modelgate.gateway.replies import json_reply
from modelgate.limits.redis_tickets import RedisTickets
from modelgate.services import Services

Level = Literal["ok", "degraded", "down"]
#: How long a component may take to answer its ping.
PING_SECONDS = 2.0


async def healthz(services: Services, request: Request) -> Response:
    return json_reply({"status": "ok", "service": "modelgate", "version": __version__})


@dataclass(frozen=True, slots=True)
class Components:
    """Each component's level, and the overall status with its HTTP status."""

    levels: dict[str, Level]
    draining: bool
    #: Why the database ping failed, for the details view (None: it answered).
    database_failure: Exception | None

    @property
    def status(self) -> str:
        if self.draining:
            return "draining"
        if self.levels["database"] == "down":
            return "down"
        return "ok" if all(level == "ok" for level in self.levels.values()) else "degraded"

    @property
    def http_status(self) -> int:
        return 503 if self.status in ("down", "draining") else 200


async def _ping(check: Any) -> Exception | None:
    """None when ``check`` (an awaitable) answers in time, else why it did not."""
    try:
        await asyncio.wait_for(check, timeout=PING_SECONDS)
    except Exception as exc:  # any failure to answer means down, whatever the driver raised
        return exc
    return None


async def components(services: Services) -> Components:
    limiter = services.tickets
    redis = limiter if isinstance(limiter, RedisTickets) else None
    database_failure, redis_failure = await asyncio.gather(
        _ping(services.database.ping()), _ping(redis.ping()) if redis is not None else asyncio.sleep(0)
    )
    levels: dict[str, Level] = {"database": "down" if database_failure is not None else "ok"}
    if redis is not None:
        levels["redis"] = "down" if redis_failure is not None else "degraded" if redis.degraded else "ok"
    # Settles the database did not take wait in the journal (billing.settle_journal) until it does.
    levels["ledger"] = "degraded" if services.ledger.journal.waiting else "ok"
    levels["upstreams"] = _upstreams(services)
    return Components(levels, services.drain.active, database_failure)


def _upstreams(services: Services) -> Level:
    deployments = services.router.status()
    cooling = [d for d in deployments if d.cooling_for > 0]
    if deployments and len(cooling) == len(deployments):
        return "down"
    failing = cooling or [d for d in deployments if d.consecutive_failures]
    return "degraded" if failing or services.router.credential_status() else "ok"


async def health(services: Services, request: Request) -> Response:
    """The public view (no credentials needed)."""
    state = await components(services)
    body: dict[str, Any] = {"status": state.status, "components": state.levels}
    if services.worker is not None:  # which serving process answered (``server.workers``)
        body["worker"] = {"index": services.worker, "pid": os.getpid()}
    return json_reply(body, state.http_status)


async def health_details(services: Services, request: Request) -> Response:
    """The operator's view: the public one and the diagnosis behind it."""
    state = await components(services)
    settings = services.settings
    database: dict[str, Any] = {"status": "ok", "engine": settings.resolved_database_url.split(":", 1)[0]}
    failure = state.database_failure
    if failure is not None:
        database = {**database, "status": "unreachable", "error": type(failure).__name__}
        reason = getattr(failure, "reason", None)  # storage.file_probe: the file is gone or the disk full
        if isinstance(reason, str):
            database = {**database, "status": "unavailable", "reason": reason}
    upstreams = [
        {
            "name": p.name,
            "kind": p.kind,
            **({"note": "built-in simulator, not a real model"} if p.kind == "simulator" else {}),
        }
        for p in settings.providers
    ]
    deployments = [
        {
            "model": s.model,
            "provider": s.provider,
            "upstream_model": s.upstream_model,
            "status": "cooling_down" if s.cooling_for > 0 else "ok",
            "consecutive_failures": s.consecutive_failures,
        }
        for s in services.router.status()
        if s.consecutive_failures or s.cooling_for > 0
    ]
    # Pool credentials refused (401/403) or resting after a 429, named by where they are
    # configured (``api_key_env[1]``), never by their value.
    credentials = [
        {
            "provider": c.provider,
            "credential": c.credential,
            "status": c.status,
            "http_status": c.http_status,
            "back_in_seconds": round(c.back_in, 1),
        }
        for c in services.router.credential_status()
    ]
    body = {
        "status": state.status,
        "components": state.levels,
        "version": __version__,
        "checks": {
            "database": database,
            "upstreams": upstreams,
            "unhealthy_deployments": deployments,
            "unhealthy_credentials": credentials,
            # Settles the database did not take, waiting to be retried (billing.settle_journal).
            "settles": {
                "status": "waiting" if services.ledger.journal.waiting else "ok",
                "waiting": services.ledger.journal.waiting,
            },
        },
        "in_flight": services.inflight.in_flight,
        "large_bodies_in_flight": services.large_bodies.in_flight,
        "edge": services.edge.as_dict(),
    }
    if services.worker is not None:  # one of several serving processes (``server.workers``)
        body["worker"] = {"index": services.worker, "pid": os.getpid()}
    return json_reply(body, state.http_status)


async def readyz(services: Services, request: Request) -> Response:
    """For load balancers: 503 while the instance drains (it no longer takes new requests)."""
    if services.drain.active:
        return json_reply({"status": "draining"}, 503)
    return json_reply({"status": "ready"})


async def root(services: Services, request: Request) -> Response:
    if request.method == "HEAD":
        return Response(status_code=200)
    return json_reply({"service": "modelgate", "version": __version__, "docs": "see README.md"})
