"""The admin REST API (``/admin/api``) and the dashboard (``/dashboard``) built on it: their
routes, handlers and error shape; ``server.app`` puts the routes in the one route table."""

from modelgate.admin.api import PREFIX, UNKNOWN_METHODS, AdminAPI, Authed, unknown
from modelgate.admin.dashboard import dashboard_routes
from modelgate.admin.dashboard import missing as dashboard_missing
from modelgate.admin.http import Route, render_error

__all__ = [
    "PREFIX",
    "UNKNOWN_METHODS",
    "AdminAPI",
    "Authed",
    "Route",
    "dashboard_missing",
    "dashboard_routes",
    "render_error",
    "unknown",
]
