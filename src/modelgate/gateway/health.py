"""Public probes: ``/healthz`` (liveness, no I/O), ``/health`` (database and upstreams) and ``/``."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from modelgate import __version__
from modelgate.gateway.replies import json_reply
from modelgate.services import Services


async def healthz(services: Services, request: Request) -> Response:
    return json_reply({"status": "ok", "service": "modelgate", "version": __version__})


async def health(services: Services, request: Request) -> Response:
    settings = services.settings
    database: dict[str, Any] = {"status": "ok", "engine": settings.resolved_database_url.split(":", 1)[0]}
    try:
        await asyncio.wait_for(services.database.ping(), timeout=2.0)
    except Exception as exc:  # any failure to answer means unhealthy, whatever the driver raised
        database = {**database, "status": "unreachable", "error": type(exc).__name__}
        reason = getattr(exc, "reason", None)  # storage.file_probe: the file is gone or the disk full
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
    ok = database["status"] == "ok"
    draining = services.drain.active
    body = {
        "status": "draining" if draining else "ok" if ok else "unavailable",
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
    return json_reply(body, 200 if ok and not draining else 503)


async def readyz(services: Services, request: Request) -> Response:
    """For load balancers: 503 while the instance drains (it no longer takes new requests)."""
    if services.drain.active:
        return json_reply({"status": "draining"}, 503)
    return json_reply({"status": "ready"})


async def root(services: Services, request: Request) -> Response:
    if request.method == "HEAD":
        return Response(status_code=200)
    return json_reply({"service": "modelgate", "version": __version__, "docs": "see README.md"})
