"""``/health`` by caller: the public view without credentials, the details with an operator admin
token (``Authorization: Bearer mg-op-…``). A token that is not an operator's is refused (403), a
bad one is a 401, both in the admin API's error shape, so a typo is not mistaken for the public
view. While the database is down no token can be checked, so the public view answers (it says
the database is down). The views themselves are ``gateway.health``; this module only joins them to admin auth."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from modelgate.admin.auth import authenticate
from modelgate.admin.http import AdminError, error_response, forbidden
from modelgate.gateway import health as views
from modelgate.services import Services
from modelgate.storage.base import StorageError


async def health(services: Services, request: Request) -> Response:
    if "authorization" not in request.headers:
        return await views.health(services, request)
    resolution = services.settings.admin.token_last_used_resolution_seconds
    try:
        principal = await authenticate(
            request, services.tokens, services.digester, services.clock, resolution
        )
        if not principal.is_operator:
            raise forbidden("/health details need an operator admin token (mg-op-…)")
    except AdminError as error:
        return error_response(error)
    except StorageError:
        return await views.health(services, request)
    return await views.health_details(services, request)
