"""The OpenAPI 3.1 document of the admin API (served at ``/admin/api/openapi.json``).

Request schemas come from the pydantic models that validate the bodies, so the document cannot
drift from what the server accepts; response schemas are written out here next to the views.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from modelgate import __version__
from modelgate.admin import openapi_people, openapi_windows, schemas
from modelgate.admin.conditional import described_conditional
from modelgate.admin.openapi_schemas import RESPONSE_SCHEMAS, ref
from modelgate.admin.openapi_sso import SSO_PATHS, SSO_SCHEMAS, sso_request_schemas
from modelgate.admin.openapi_upstreams import upstream_components, upstream_paths

_REF = "#/components/schemas/{model}"


_ERRORS = {
    "400": "Invalid request (bad JSON, unknown or invalid field; the message names the field)",
    "401": "Missing, malformed or unknown admin token (or session)",
    "403": "Needs an operator token",
    "404": "No such id, or not visible to this token (indistinguishable)",
    "405": "Method not allowed on this path",
    "409": "Conflicts with the current state (taken name, revoked key)",
}


def _error_responses(*codes: str) -> dict[str, Any]:
    return {c: {"$ref": f"#/components/responses/E{c}"} for c in codes}


def _op(
    op_id: str,
    summary: str,
    ok: tuple[str, str],
    *,
    body: str | None = None,
    body_required: bool = True,
    params: list[dict[str, Any]] | None = None,
    errors: tuple[str, ...] = ("401", "404"),
    description: str | None = None,
) -> dict[str, Any]:
    status, schema = ok
    operation: dict[str, Any] = {
        "operationId": op_id,
        "summary": summary,
        "parameters": params or [],
        "responses": {
            status: {
                "description": "OK" if status == "200" else "Created",
                "content": {"application/json": {"schema": ref(schema)}},
            },
            **_error_responses(*errors),
        },
    }
    if description:
        operation["description"] = description
    if body:
        operation["requestBody"] = {
            "required": body_required,
            "content": {"application/json": {"schema": ref(body)}},
        }
    return operation


def _path_param(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": schema}


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": description}


_ACCOUNT_ID = _path_param("account_id", {"type": "integer", "minimum": 1})
_KEY_ID = _path_param("key_id", {"type": "string"})
_TOKEN_ID = _path_param("token_id", {"type": "string"})
_MONTH = _query(
    "month", {"type": "string", "pattern": r"^[0-9]{4}-(0[1-9]|1[0-2])$"}, "UTC month, default now"
)
_SCOPE = [
    _query("account_id", {"type": "integer"}, "one account (account tokens: their own, the default)"),
    _query("key_id", {"type": "string"}, "one key"),
]
_DAY = {"type": "string", "format": "date"}
_LABEL = {"type": "string", "pattern": "^[A-Za-z0-9._:/-]{1,100}$"}
_FILTERS = [
    *_SCOPE,
    _query("model", _LABEL, "canonical model id"),
    _query("endpoint", _LABEL, "messages, count_tokens, chat, responses or generate_content"),
    _query("status", _LABEL, "usage status, e.g. ok, client_disconnected, upstream_rate_limit"),
    _query("from", _DAY, "first UTC day (inclusive)"),
    _query("to", _DAY, "last UTC day (inclusive)"),
]
_CSV = {
    "200": {
        "description": "CSV (RFC 4180, header row); cells starting with = + - @ are prefixed with '",
        "content": {"text/csv": {"schema": {"type": "string"}}},
    }
}


@cache
def openapi_document() -> dict[str, Any]:
    components: dict[str, Any] = {**RESPONSE_SCHEMAS, **SSO_SCHEMAS}
    for model in schemas.REQUEST_MODELS:
        components[model.__name__] = model.model_json_schema(ref_template=_REF)
    components.update(sso_request_schemas(_REF))
    paths: dict[str, Any] = {
        "/admin/api/me": {
            "get": _op("getMe", "The calling token's scope (and account)", ("200", "Me"), errors=("401",))
        },
        "/admin/api/accounts": {
            "get": _op(
                "listAccounts",
                "List accounts (operator)",
                ("200", "AccountList"),
                params=[
                    _query("q", {"type": "string", "maxLength": 100}, "name contains (any case), or the id"),
                    _query("limit", {"type": "integer", "minimum": 1, "maximum": 1000}, "default 1000"),
                ],
                errors=("400", "401", "403"),
            ),
            "post": _op(
                "createAccount",
                "Create an account",
                ("201", "Account"),
                body="AccountCreate",
                errors=("400", "401", "403", "409"),
            ),
        },
        "/admin/api/accounts/{account_id}": {
            "get": _op("getAccount", "One account", ("200", "Account"), params=[_ACCOUNT_ID]),
            "patch": _op(
                "renameAccount",
                "Rename an account, hide its balance from key holders or set its rate limits (operator); "
                "keys, tokens and usage stay",
                ("200", "Account"),
                body="AccountRename",
                params=[_ACCOUNT_ID],
                errors=("400", "401", "403", "404", "409"),
            ),
        },
        "/admin/api/accounts/{account_id}/topups": {
            "post": _op(
                "topUpAccount",
                "Add credits to an account (operator)",
                ("200", "Account"),
                body="TopUp",
                params=[_ACCOUNT_ID],
                errors=("400", "401", "403", "404"),
            )
        },
        "/admin/api/accounts/{account_id}/tokens": {
            "post": _op(
                "createAccountToken",
                "Issue an account-scoped admin token (operator); shown once",
                ("201", "TokenWithSecret"),
                body="AccountTokenCreate",
                body_required=False,
                params=[_ACCOUNT_ID],
                errors=("400", "401", "403", "404"),
            )
        },
        "/admin/api/tokens": {
            "get": _op(
                "listTokens",
                "Admin tokens: the caller's account's, or (operator) all or one account's",
                ("200", "TokenList"),
                params=[_query("account_id", {"type": "integer"}, "one account")],
                errors=("400", "401", "404"),
            ),
            "post": _op(
                "createToken",
                "Issue an admin token (operator); account_id null: an operator token; shown once",
                ("201", "TokenWithSecret"),
                body="TokenCreate",
                errors=("400", "401", "403", "404"),
            ),
        },
        "/admin/api/tokens/{token_id}/revoke": {
            "post": _op(
                "revokeToken",
                "Revoke an admin token: refused everywhere from the next request (idempotent)",
                ("200", "Token"),
                body="Empty",
                body_required=False,
                params=[_TOKEN_ID],
                errors=("400", "401", "404"),
            )
        },
        "/admin/api/models": {
            "get": _op(
                "listModels",
                "Catalogue models and the key groups that may use them",
                ("200", "ModelList"),
                errors=("401",),
            )
        },
        "/admin/api/keys": {
            "get": _op(
                "listKeys",
                "List keys with this month's spend",
                ("200", "KeyList"),
                params=[
                    _query("account_id", {"type": "integer"}, "operator: one account; default all"),
                    _MONTH,
                    _query(
                        "limit",
                        {"type": "integer", "minimum": 1, "maximum": 1000},
                        "keys per page (default 100)",
                    ),
                    _query("after", {"type": "string"}, "next_cursor of the previous page"),
                    _query(
                        "q",
                        {"type": "string", "maxLength": 100},
                        "name, id or key prefix contains (any case)",
                    ),
                ],
                errors=("400", "401", "404"),
            ),
            "post": _op(
                "createKey",
                "Create a key; the secret is in this response only",
                ("201", "KeyWithSecret"),
                body="KeyCreate",
                errors=("400", "401", "404"),
            ),
        },
        "/admin/api/keys/{key_id}": {
            "get": _op("getKey", "One key", ("200", "Key"), params=[_KEY_ID, _MONTH]),
            "patch": _op(
                "updateKey",
                "Change a key's name, rpm, allowed models or monthly cap",
                ("200", "Key"),
                body="KeyUpdate",
                params=[_KEY_ID],
                errors=("400", "401", "404"),
                description="Unknown fields (account_id, group, state, …) are refused with 400.",
            ),
        },
        "/admin/api/keys/{key_id}/rotate": {
            "post": _op(
                "rotateKey",
                "New secret for the same key; the old one works for grace_seconds",
                ("200", "KeyWithSecret"),
                body="KeyRotate",
                body_required=False,
                params=[_KEY_ID],
                errors=("400", "401", "404", "409"),
            )
        },
        "/admin/api/keys/{key_id}/revoke": {
            "post": _op(
                "revokeKey",
                "Disable a key at once (idempotent)",
                ("200", "Key"),
                body="Empty",
                body_required=False,
                params=[_KEY_ID],
                errors=("400", "401", "404"),
            )
        },
        "/admin/api/usage": {
            "get": described_conditional(
                _op(
                    "getUsage",
                    "Usage summary and recent records for a key, an account or (operator) everything",
                    ("200", "Usage"),
                    params=[
                        _MONTH,
                        _query("key_id", {"type": "string"}, "one key"),
                        _query("account_id", {"type": "integer"}, "one account (default: the token's)"),
                        _query(
                            "limit", {"type": "integer", "minimum": 0, "maximum": 500}, "records, default 50"
                        ),
                    ],
                    errors=("400", "401", "404"),
                )
            )
        },
        "/admin/api/usage/records": {
            "get": described_conditional(
                _op(
                    "listUsageRecords",
                    "The usage log: filtered records, newest first, one page at a time",
                    ("200", "UsagePage"),
                    params=[
                        *_FILTERS,
                        _query(
                            "limit", {"type": "integer", "minimum": 1, "maximum": 500}, "records, default 50"
                        ),
                        _query("cursor", {"type": "string"}, "next_cursor of the previous page"),
                    ],
                    errors=("400", "401", "404"),
                )
            )
        },
        "/admin/api/usage/records.csv": {
            "get": {
                **_op(
                    "exportUsageRecords",
                    "Every record of the filter as CSV (at most admin.csv_max_rows, else 400)",
                    ("200", "UsagePage"),
                    params=_FILTERS,
                    errors=("400", "401", "404"),
                ),
                "responses": {**_CSV, **_error_responses("400", "401", "404")},
            }
        },
        "/admin/api/usage/quality": {
            "get": _op(
                "getUsageQuality",
                "Error rate and latency per UTC day, from the usage log (at most admin.csv_max_rows records)",
                ("200", "UsageQuality"),
                params=_FILTERS,
                errors=("400", "401", "404"),
            )
        },
        "/admin/api/usage/daily": {
            "get": described_conditional(
                _op(
                    "getDailyUsage",
                    "Requests, tokens and spend per UTC day and model in a month",
                    ("200", "DailyUsage"),
                    params=[_MONTH, *_SCOPE],
                    errors=("400", "401", "404"),
                )
            )
        },
        "/admin/api/usage/top-keys": {
            "get": described_conditional(
                _op(
                    "getTopKeys",
                    "The keys that spent most in a month",
                    ("200", "TopKeys"),
                    params=[
                        _MONTH,
                        _SCOPE[0],
                        _query("limit", {"type": "integer", "minimum": 1, "maximum": 50}, "keys, default 5"),
                    ],
                    errors=("400", "401", "404"),
                )
            )
        },
    }
    paths.update(upstream_paths())
    components.update(upstream_components())
    paths.update(SSO_PATHS)
    paths.update(openapi_people.PATHS)
    components.update(openapi_people.SCHEMAS)
    paths.update(openapi_windows.PATHS)
    components.update(openapi_windows.SCHEMAS)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "modelgate admin API",
            "version": __version__,
            "description": (
                "Accounts, top-ups, admin tokens, keys and usage. Operator tokens (mg-op-…) see everything; "
                "account tokens (mg-acct-…) see only their account, and anything else answers 404 "
                "exactly like a missing id. Money: *_uc integers in micro-credits plus credits strings."
            ),
        },
        "security": [{"adminToken": []}, {"session": []}],
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {
                "adminToken": {"type": "http", "scheme": "bearer"},
                "session": {"type": "apiKey", "in": "cookie", "name": "mg_session"},
            },
            "responses": {
                f"E{code}": {
                    "description": text,
                    "content": {"application/json": {"schema": ref("Error")}},
                }
                for code, text in _ERRORS.items()
            },
        },
    }
