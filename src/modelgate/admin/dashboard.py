"""The dashboard: three static files served with a strict Content-Security-Policy.

The page holds no data and no secrets; it asks for an admin token, keeps it in ``sessionStorage``
and calls ``/admin/api`` with it as ``Authorization: Bearer``. No inline script or style is
allowed by the policy, and the script builds the DOM with ``textContent`` only.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cache-control": "no-cache",
}
ASSETS = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
}


@cache
def _asset(name: str) -> bytes:
    return files("modelgate").joinpath("dashboard", name).read_bytes()


def _serve(name: str) -> Response:
    return Response(_asset(name), media_type=ASSETS[name], headers=HEADERS)


async def page(request: Request) -> Response:
    return _serve("index.html")


async def asset(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in ASSETS:
        return Response(b"not found", status_code=404, media_type="text/plain", headers=HEADERS)
    return _serve(name)


def dashboard_routes() -> list[Route]:
    return [
        Route("/dashboard", page, methods=["GET", "HEAD"]),
        Route("/dashboard/", page, methods=["GET", "HEAD"]),
        Route("/dashboard/{name}", asset, methods=["GET", "HEAD"]),
    ]
