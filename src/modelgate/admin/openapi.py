"""The OpenAPI 3.1 document of the admin API (served at ``/admin/api/openapi.json``).

Request schemas come from the pydantic models that validate the bodies, so the document cannot
drift from what the server accepts; response schemas are written out here next to the views.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from modelgate import __version__
from modelgate.admin import schemas

_REF = "#/components/schemas/{model}"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _obj(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required or list(properties)}


_STR = {"type": "string"}
_INT = {"type": "integer"}
_TIME = {"type": "string", "format": "date-time"}
_TIME_OR_NULL = {"type": ["string", "null"], "format": "date-time"}


def _money(name: str, nullable: bool = False) -> dict[str, Any]:
    return {
        f"{name}_uc": {
            "type": ["integer", "null"] if nullable else "integer",
            "description": "micro-credits",
        },
        name: {"type": ["string", "null"] if nullable else "string", "description": "credits"},
    }


_RESPONSE_SCHEMAS: dict[str, Any] = {
    "Error": _obj(
        {
            "error": _obj(
                {
                    "type": {
                        "type": "string",
                        "enum": [
                            "invalid_request_error",
                            "authentication_error",
                            "permission_error",
                            "not_found_error",
                            "method_not_allowed",
                            "conflict_error",
                            "request_too_large",
                        ],
                    },
                    "message": _STR,
                }
            )
        }
    ),
    "Account": _obj(
        {
            "id": _INT,
            "name": _STR,
            **_money("balance"),
            **_money("reserved"),
            **_money("available"),
            "created_at": _TIME,
        }
    ),
    "AccountList": _obj({"data": {"type": "array", "items": _ref("Account")}}),
    "AccountToken": _obj(
        {
            "token": {"type": "string", "description": "mg-acct-…; shown once, store it now"},
            "scope": {"const": "account"},
            "account_id": _INT,
        }
    ),
    "Me": _obj(
        {
            "token_id": _STR,
            "scope": {"type": "string", "enum": ["operator", "account"]},
            "account": {"oneOf": [_ref("Account"), {"type": "null"}]},
        }
    ),
    "Key": _obj(
        {
            "id": _STR,
            "account_id": _INT,
            "name": _STR,
            "group": {"type": "string", "enum": ["Basic", "Pro", "Nova"]},
            "display": {"type": "string", "description": "prefix…last4; never the secret"},
            "state": {"type": "string", "enum": ["active", "disabled"]},
            "rpm": _INT,
            "allowed_models": {
                "type": ["array", "null"],
                "items": _STR,
                "description": "canonical model ids; null: every model of the group",
            },
            **_money("monthly_cap", nullable=True),
            "month": {"type": "string", "description": "YYYY-MM the spend figures are for"},
            **_money("spent_this_month"),
            **_money("reserved_this_month"),
            "created_at": _TIME,
            "rotated_at": _TIME_OR_NULL,
            "revoked_at": _TIME_OR_NULL,
            "previous_secret_valid_until": _TIME_OR_NULL,
        }
    ),
    "KeyWithSecret": {
        "allOf": [
            _ref("Key"),
            _obj({"secret": {"type": "string", "description": "sk-cs4-…; shown once, store it now"}}),
        ]
    },
    "KeyList": _obj({"month": _STR, "data": {"type": "array", "items": _ref("Key")}}),
    "UsageRecord": _obj(
        {
            "request_id": _STR,
            "key_id": _STR,
            "account_id": _INT,
            "endpoint": _STR,
            "model": _STR,
            "status": _STR,
            "created_at": _TIME,
            "finished_at": _TIME,
            "input_tokens": _INT,
            "output_tokens": _INT,
            "cache_creation_tokens": _INT,
            "cache_read_tokens": _INT,
            **_money("charged"),
        }
    ),
    "UsageSummary": _obj(
        {
            "requests": _INT,
            "input_tokens": _INT,
            "output_tokens": _INT,
            "cache_creation_tokens": _INT,
            "cache_read_tokens": _INT,
            **_money("charged"),
            "by_model": {"type": "array", "items": _obj({"model": _STR, **_money("charged")})},
        }
    ),
    "Usage": _obj(
        {
            "month": _STR,
            "scope": _obj(
                {
                    "type": {"type": "string", "enum": ["key", "account", "all"]},
                    "id": {"type": ["string", "integer", "null"]},
                }
            ),
            "summary": _ref("UsageSummary"),
            "records": {"type": "array", "items": _ref("UsageRecord")},
        }
    ),
}

_ERRORS = {
    "400": "Invalid request (bad JSON, unknown or invalid field; the message names the field)",
    "401": "Missing, malformed or unknown admin token",
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
                "content": {"application/json": {"schema": _ref(schema)}},
            },
            **_error_responses(*errors),
        },
    }
    if description:
        operation["description"] = description
    if body:
        operation["requestBody"] = {
            "required": body_required,
            "content": {"application/json": {"schema": _ref(body)}},
        }
    return operation


def _path_param(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": schema}


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": description}


_ACCOUNT_ID = _path_param("account_id", {"type": "integer", "minimum": 1})
_KEY_ID = _path_param("key_id", {"type": "string"})
_MONTH = _query("month", {"type": "string", "pattern": r"^\d{4}-(0[1-9]|1[0-2])$"}, "UTC month, default now")


@cache
def openapi_document() -> dict[str, Any]:
    components: dict[str, Any] = dict(_RESPONSE_SCHEMAS)
    for model in schemas.REQUEST_MODELS:
        components[model.__name__] = model.model_json_schema(ref_template=_REF)
    paths: dict[str, Any] = {
        "/admin/api/me": {
            "get": _op("getMe", "The calling token's scope (and account)", ("200", "Me"), errors=("401",))
        },
        "/admin/api/accounts": {
            "get": _op("listAccounts", "List accounts", ("200", "AccountList"), errors=("401", "403")),
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
                ("201", "AccountToken"),
                body="Empty",
                body_required=False,
                params=[_ACCOUNT_ID],
                errors=("400", "401", "403", "404"),
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
            "get": _op(
                "getUsage",
                "Usage summary and recent records for a key, an account or (operator) everything",
                ("200", "Usage"),
                params=[
                    _MONTH,
                    _query("key_id", {"type": "string"}, "one key"),
                    _query("account_id", {"type": "integer"}, "one account (default: the token's)"),
                    _query("limit", {"type": "integer", "minimum": 0, "maximum": 500}, "records, default 50"),
                ],
                errors=("400", "401", "404"),
            )
        },
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "modelgate admin API",
            "version": __version__,
            "description": (
                "Accounts, top-ups, keys and usage. Operator tokens (mg-op-…) see everything; "
                "account tokens (mg-acct-…) see only their account, and anything else answers 404 "
                "exactly like a missing id. Money: *_uc integers in micro-credits plus credits strings."
            ),
        },
        "security": [{"adminToken": []}],
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {"adminToken": {"type": "http", "scheme": "bearer"}},
            "responses": {
                f"E{code}": {
                    "description": text,
                    "content": {"application/json": {"schema": _ref("Error")}},
                }
                for code, text in _ERRORS.items()
            },
        },
    }
