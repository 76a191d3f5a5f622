"""The OpenAPI paths and schemas of the audit log, the ledger, statements and account alerts
(merged into ``admin.openapi``)."""

from __future__ import annotations

from typing import Any

from modelgate.admin.ledger import Adjustment, LowBalance

_REF = "#/components/schemas/{model}"
_ERR = {c: {"$ref": f"#/components/responses/E{c}"} for c in ("400", "401", "403", "404")}
_ACCOUNT = {"name": "account_id", "in": "path", "required": True, "schema": {"type": "integer", "minimum": 1}}
_CSV_NOTE = "JSON, or CSV with ?format=csv or Accept: text/csv (cells starting with = + - @ get a ' prefix)"


def _q(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": description}


def _ok(schema: str) -> dict[str, Any]:
    return {
        "200": {
            "description": "OK",
            "content": {
                "application/json": {"schema": {"$ref": _REF.format(model=schema)}},
                "text/csv": {"schema": {"type": "string"}},
            },
        }
    }


def _op(
    op_id: str, summary: str, schema: str, params: list[dict[str, Any]], body: str | None = None
) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "operationId": op_id,
        "summary": summary,
        "parameters": params,
        "responses": {**_ok(schema), **_ERR},
    }
    if body is not None:
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": _REF.format(model=body)}}},
        }
    return operation


_CURSOR = _q("cursor", {"type": "string", "pattern": "^[0-9]{1,18}$"}, "next_cursor of the previous page")
_WHEN = {"type": "string", "maxLength": 40}

PATHS: dict[str, Any] = {
    "/admin/api/audit": {
        "get": _op(
            "listAudit",
            "The audit log, newest first. " + _CSV_NOTE,
            "AuditPage",
            [
                _q("account_id", {"type": "integer"}, "one account (account tokens: their own)"),
                _q("action", {"type": "string"}, "e.g. key.rotate"),
                _q("actor", {"type": "string"}, "a token id (tok_…) or cli"),
                _q("target", {"type": "string"}, "kind:id, e.g. key:key_… or account:3"),
                _q("since", _WHEN, "RFC 3339 date-time or date (inclusive)"),
                _q("until", _WHEN, "RFC 3339 date-time or date (exclusive)"),
                _q("limit", {"type": "integer", "minimum": 1, "maximum": 500}, "default 50"),
                _CURSOR,
                _q("format", {"type": "string", "enum": ["json", "csv"]}, "csv: the whole filter as CSV"),
            ],
        )
    },
    "/admin/api/accounts/{account_id}/ledger": {
        "get": _op(
            "listLedger",
            "An account's top-ups and adjustments with notes and actors, newest first. " + _CSV_NOTE,
            "LedgerPage",
            [
                _ACCOUNT,
                _q("limit", {"type": "integer", "minimum": 1, "maximum": 500}, "default 50"),
                _CURSOR,
                _q("format", {"type": "string", "enum": ["json", "csv"]}, "csv"),
            ],
        )
    },
    "/admin/api/accounts/{account_id}/adjustments": {
        "post": _op(
            "adjustAccount",
            "A signed correction of the balance with its reason (operator)",
            "Account",
            [_ACCOUNT],
            body="Adjustment",
        )
    },
    "/admin/api/accounts/{account_id}/statement": {
        "get": _op(
            "getStatement",
            "Monthly statement: opening + top-ups - usage + adjustments = closing. " + _CSV_NOTE,
            "Statement",
            [
                _ACCOUNT,
                _q("month", {"type": "string", "pattern": r"^[0-9]{4}-(0[1-9]|1[0-2])$"}, "UTC month"),
                _q("format", {"type": "string", "enum": ["json", "csv"]}, "csv"),
            ],
        )
    },
    "/admin/api/accounts/{account_id}/alerts": {
        "get": _op("getAccountAlerts", "The account's balance.low threshold", "AccountAlerts", [_ACCOUNT]),
        "put": _op(
            "setAccountAlerts",
            "Set the account's balance.low threshold (operator); null: the configured default",
            "AccountAlerts",
            [_ACCOUNT],
            body="LowBalance",
        ),
    },
}

_OBJ: dict[str, Any] = {"type": "object"}
SCHEMAS: dict[str, Any] = {
    "AuditEntry": {
        "type": "object",
        "required": [
            "id",
            "at",
            "actor",
            "action",
            "target",
            "account_id",
            "before",
            "after",
            "request_id",
            "client",
        ],
        "properties": {
            "id": {"type": "integer"},
            "at": {"type": "string"},
            "at_epoch": {"type": "number"},
            "actor": {"type": "string"},
            "action": {"type": "string"},
            "target": {"type": "string"},
            "account_id": {"type": ["integer", "null"]},
            "before": {"type": ["object", "null"]},
            "after": {"type": ["object", "null"]},
            "request_id": {"type": "string"},
            "client": {"type": "string"},
        },
    },
    "AuditPage": {
        "type": "object",
        "required": ["data", "next_cursor"],
        "properties": {
            "data": {"type": "array", "items": {"$ref": _REF.format(model="AuditEntry")}},
            "next_cursor": {"type": ["string", "null"]},
        },
    },
    "LedgerPage": {
        "type": "object",
        "required": ["account_id", "data", "next_cursor"],
        "properties": {
            "account_id": {"type": "integer"},
            "data": {"type": "array", "items": _OBJ},
            "next_cursor": {"type": ["string", "null"]},
        },
    },
    "Statement": {
        "type": "object",
        "required": [
            "account_id",
            "month",
            "opening_uc",
            "top_ups_uc",
            "usage_uc",
            "adjustments_uc",
            "closing_uc",
        ],
        "properties": {
            name: {"type": "integer"}
            for name in ("account_id", "opening_uc", "top_ups_uc", "usage_uc", "adjustments_uc", "closing_uc")
        },
    },
    "AccountAlerts": {
        "type": "object",
        "required": ["account_id", "low_balance_uc", "effective_low_balance_uc"],
        "properties": {
            "account_id": {"type": "integer"},
            "low_balance_uc": {"type": ["integer", "null"]},
            "effective_low_balance_uc": {"type": ["integer", "null"]},
        },
    },
    "Adjustment": Adjustment.model_json_schema(ref_template=_REF),
    "LowBalance": LowBalance.model_json_schema(ref_template=_REF),
}
