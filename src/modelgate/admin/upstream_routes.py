"""The routes of the upstream endpoints (``admin.providers``, ``admin.model_routes``), for
``admin.api`` to register."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response

from modelgate.admin.auth import Principal
from modelgate.admin.http import Handler, Route, route
from modelgate.admin.model_routes import ModelRouteEndpoints
from modelgate.admin.providers import ProviderEndpoints
from modelgate.admin.upstream_changes import UpstreamChanges
from modelgate.services import Services

Authed = Callable[[Callable[[Request, Principal], Awaitable[Response]]], Handler]


def upstream_routes(services: Services, prefix: str, authed: Authed) -> list[Route]:
    a = authed
    changes = UpstreamChanges(services)
    providers = ProviderEndpoints(changes)
    models = ModelRouteEndpoints(changes)
    return [
        route(f"{prefix}/providers", {"GET": a(providers.list), "POST": a(providers.create)}),
        route(
            f"{prefix}/providers/{{name}}",
            {
                "GET": a(providers.get),
                "PUT": a(providers.replace),
                "PATCH": a(providers.amend),
                "DELETE": a(providers.delete),
            },
        ),
        route(f"{prefix}/providers/{{name}}/test", {"POST": a(providers.test)}),
        route(
            f"{prefix}/models/{{model_id}}/deployments",
            {
                "GET": a(models.deployments_get),
                "PUT": a(models.deployments_put),
                "DELETE": a(models.deployments_delete),
            },
        ),
        route(
            f"{prefix}/models/{{model_id}}/price",
            {"GET": a(models.price_get), "PUT": a(models.price_put), "DELETE": a(models.price_delete)},
        ),
        route(f"{prefix}/aliases", {"GET": a(models.aliases_list)}),
        route(f"{prefix}/aliases/{{alias}}", {"PUT": a(models.alias_put), "DELETE": a(models.alias_delete)}),
    ]
