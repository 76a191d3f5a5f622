"""The OpenAPI path and schemas of a key's spend windows (``admin.key_windows``)."""

from __future__ import annotations

from typing import Any

_REF = "#/components/schemas/{model}"
_MONEY = {"type": ["integer", "null"]}
_TEXT = {"type": ["string", "null"]}

_WINDOW = {
    "type": "object",
    "description": "one spend window: cap (null: none), spent, held by requests in flight, left, reset",
    "properties": {
        "period": {"type": "string", "description": "5h, day, week, or the month YYYY-MM"},
        **{f"{name}_uc": _MONEY for name in ("limit", "spent", "held", "remaining")},
        **{name: _TEXT for name in ("limit", "spent", "held", "remaining")},
        "resets_at": {**_TEXT, "description": "RFC 3339 UTC; for 5h when its oldest spend leaves the window"},
    },
}

SCHEMAS: dict[str, Any] = {
    "SpendWindow": _WINDOW,
    "KeyWindows": {
        "type": "object",
        "properties": {
            "key_id": {"type": "string"},
            "caps": {
                "type": "object",
                "description": "the key's 5h, day, week and month",
                "additionalProperties": {"$ref": _REF.format(model="SpendWindow")},
            },
            "account_caps": {
                "type": "object",
                "description": "the account's windows that have a cap (all its keys together)",
                "additionalProperties": {"$ref": _REF.format(model="SpendWindow")},
            },
        },
    },
}

PATHS: dict[str, Any] = {
    "/admin/api/keys/{key_id}/windows": {
        "get": {
            "operationId": "getKeyWindows",
            "summary": "A key's spend windows (5h, day, week, month) and its account's, as the dashboard's bars",
            "parameters": [{"name": "key_id", "in": "path", "required": True, "schema": {"type": "string"}}],
            "responses": {
                "200": {
                    "description": "OK",
                    "content": {"application/json": {"schema": {"$ref": _REF.format(model="KeyWindows")}}},
                },
                "404": {"description": "no such key (or another account's)"},
            },
        }
    }
}
