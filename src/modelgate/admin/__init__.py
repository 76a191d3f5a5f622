"""The admin REST API (``/admin/api``) and the dashboard (``/dashboard``) built on it."""

from modelgate.admin.api import admin_routes

__all__ = ["admin_routes"]
