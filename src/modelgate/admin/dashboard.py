"""The dashboard: static files (one page, its stylesheet and ES modules) served with a strict
Content-Security-Policy.

The page holds no data and no secrets; it asks for an admin token, keeps it in ``sessionStorage``
and calls ``/admin/api`` with it as ``Authorization: Bearer``. No inline script or style is
allowed by the policy, and the scripts build the DOM with ``textContent`` only. What is served is
exactly the package's ``dashboard/`` files with a known type, looked up by exact name; any other
path below ``/dashboard`` (``%2e%2e%2f`` decoded into ``../`` included) is the admin API's JSON 404.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from starlette.requests import Request
from starlette.responses import Response

from modelgate.admin.http import AdminError, Route, error_response, route

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
MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
}


@cache
def assets() -> dict[str, tuple[bytes, str]]:
    """Every servable file of the package's dashboard folder: name -> (content, media type)."""
    folder = files("modelgate").joinpath("dashboard")
    found: dict[str, tuple[bytes, str]] = {}
    for entry in folder.iterdir():
        media = MEDIA_TYPES.get("." + entry.name.rpartition(".")[2])
        if entry.is_file() and media is not None:
            found[entry.name] = (entry.read_bytes(), media)
    return found


def _serve(name: str) -> Response:
    content, media = assets()[name]
    return Response(content, media_type=media, headers=HEADERS)


async def page(request: Request) -> Response:
    return _serve("index.html")


async def key_page(request: Request) -> Response:
    """The key holder's read-only page (``view-key.js``): signed in with the API key itself."""
    return _serve("key.html")


async def asset(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in assets():
        return await missing(request)
    return _serve(name)


async def missing(request: Request) -> Response:
    response = error_response(AdminError(404, "not_found_error", "no dashboard file at this path"))
    response.headers.update(HEADERS)
    return response


def dashboard_routes() -> list[Route]:
    """The page, the key holder's page and the assets; any other path below ``/dashboard`` is
    ``missing`` (``server.app`` routes the prefix to it)."""
    read = ("GET", "HEAD")
    return [
        route("/dashboard", dict.fromkeys(read, page)),
        route("/dashboard/", dict.fromkeys(read, page)),
        route("/dashboard/key", dict.fromkeys(read, key_page)),
        route("/dashboard/{name}", dict.fromkeys(read, asset)),
    ]
