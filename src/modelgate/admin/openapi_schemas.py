"""Response schemas of the admin API's OpenAPI document, written out next to the views in
``admin.schemas`` that produce them (``tests/admin`` validates real responses against them)."""

from __future__ import annotations

from typing import Any


def ref(name: str) -> dict[str, str]:
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


#: Spend caps by window (admin/schemas.caps_view): credits strings and µc, null: no cap.
_CAPS: dict[str, Any] = {
    name: {
        "type": "object",
        "properties": {w: {"type": [kind, "null"]} for w in ("5h", "day", "week", "month")},
        "required": ["5h", "day", "week", "month"],
        "description": f"spend caps by window ({unit}): rolling 5 h, UTC day, UTC ISO week, UTC month; null: none",
    }
    for name, kind, unit in (("caps", "string", "credits"), ("caps_uc", "integer", "micro-credits"))
}

RESPONSE_SCHEMAS: dict[str, Any] = {
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
                            "upstream_error",
                            "rate_limit_error",
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
            "hide_balance": {"type": "boolean", "description": "GET /v1/key does not show the balance"},
            **_CAPS,
            "rpm": {
                "type": ["integer", "null"],
                "description": "requests per minute of all the account's keys together; null: no limit",
            },
            "tpm": {
                "type": ["integer", "null"],
                "description": "input + output tokens per rolling minute of all its keys; null: no limit",
            },
            "max_concurrency": {
                "type": ["integer", "null"],
                "description": "requests in flight at once for all its keys; null: no limit",
            },
        }
    ),
    "AccountList": _obj(
        {"data": {"type": "array", "items": ref("Account")}, "total": {**_INT, "description": "matches"}}
    ),
    "Token": _obj(
        {
            "id": _STR,
            "name": _STR,
            "scope": {"type": "string", "enum": ["operator", "account"]},
            "account_id": {"type": ["integer", "null"]},
            "display": {
                "type": ["string", "null"],
                "description": "prefix…last4; never the secret (null for tokens issued before this was kept)",
            },
            "state": {"type": "string", "enum": ["active", "revoked", "expired"]},
            "current": {"type": "boolean", "description": "the token making this request"},
            "created_at": _TIME,
            "created_by": {"type": ["string", "null"], "description": "id of the issuing admin token"},
            "expires_at": _TIME_OR_NULL,
            "revoked_at": _TIME_OR_NULL,
            "last_used_at": {**_TIME_OR_NULL, "description": "updated at most once a minute"},
        }
    ),
    "TokenWithSecret": {
        "allOf": [
            ref("Token"),
            _obj(
                {"token": {"type": "string", "description": "mg-op-… or mg-acct-…; shown once, store it now"}}
            ),
        ]
    },
    "TokenList": _obj({"data": {"type": "array", "items": ref("Token")}}),
    "Model": _obj(
        {
            "id": _STR,
            "display_name": _STR,
            "family": {"type": "string", "enum": ["aria", "nova"]},
            "groups": {"type": "array", "items": {"type": "string", "enum": ["Basic", "Pro", "Nova"]}},
        }
    ),
    "ModelList": _obj({"data": {"type": "array", "items": ref("Model")}}),
    "Me": _obj(
        {
            "token_id": _STR,
            "scope": {"type": "string", "enum": ["operator", "account"]},
            "actor": {"type": "string", "description": "who acts: the signed-in person, or the token id"},
            "role": {"type": ["string", "null"], "enum": ["operator", "owner", "member", None]},
            "account": {"oneOf": [ref("Account"), {"type": "null"}]},
            "now": {**_TIME, "description": "the server's clock"},
            "month": {"type": "string", "description": "the current UTC month, YYYY-MM"},
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
            **_money("cap_remaining", nullable=True),
            "last_used_at": {**_TIME_OR_NULL, "description": "start of the key's latest recorded request"},
            "created_at": _TIME,
            "rotated_at": _TIME_OR_NULL,
            "revoked_at": _TIME_OR_NULL,
            "previous_secret_valid_until": _TIME_OR_NULL,
            "previous_secret_active": {
                "type": "boolean",
                "description": "the secret replaced by the last rotation still works (never for a revoked key)",
            },
            "tpm": {
                "type": ["integer", "null"],
                "description": "input + output tokens per rolling minute; null: no limit",
            },
            "max_concurrency": {
                "type": ["integer", "null"],
                "description": "requests in flight at once; null: no limit",
            },
            "expires_at": {**_TIME_OR_NULL, "description": "refused from this instant on; null: never"},
            "expired": {"type": "boolean", "description": "expires_at has passed: the key is refused (401)"},
            "allowed_ips": {
                "type": ["array", "null"],
                "items": _STR,
                "description": "CIDRs the key may be used from (403 elsewhere); null: anywhere",
            },
            **_CAPS,
        }
    ),
    "KeyWithSecret": {
        "allOf": [
            ref("Key"),
            _obj({"secret": {"type": "string", "description": "sk-cs4-…; shown once, store it now"}}),
        ]
    },
    "KeyList": _obj(
        {
            "month": _STR,
            "data": {"type": "array", "items": ref("Key")},
            "next_cursor": {"type": ["string", "null"], "description": "pass as after for the next page"},
        }
    ),
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
            "cache_write_1h_tokens": _INT,
            "web_search_requests": _INT,
            **_money("charged"),
            "shortfall_uc": _INT,
        }
    ),
    "UsageSummary": _obj(
        {
            "requests": _INT,
            "input_tokens": _INT,
            "output_tokens": _INT,
            "cache_creation_tokens": _INT,
            "cache_read_tokens": _INT,
            "web_search_requests": _INT,
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
            "summary": ref("UsageSummary"),
            "records": {"type": "array", "items": ref("UsageRecord")},
        }
    ),
    "UsagePage": _obj(
        {
            "data": {"type": "array", "items": ref("UsageRecord")},
            "next_cursor": {"type": ["string", "null"], "description": "pass as cursor for the next page"},
            "total": {**_INT, "description": "records matching the filter (first page only)"},
            "facets": {
                **_obj(
                    {
                        "models": {"type": "array", "items": _STR},
                        "endpoints": {"type": "array", "items": _STR},
                        "statuses": {"type": "array", "items": _STR},
                    }
                ),
                "description": "values present in the scope and dates (first page only)",
            },
        },
        required=["data", "next_cursor"],
    ),
    "DailyUsage": _obj(
        {
            "month": _STR,
            "data": {
                "type": "array",
                "items": _obj(
                    {
                        "day": {"type": "string", "format": "date"},
                        "model": _STR,
                        "requests": _INT,
                        "input_tokens": _INT,
                        "output_tokens": _INT,
                        "cache_tokens": _INT,
                        **_money("charged"),
                    }
                ),
            },
        }
    ),
    "UsageQuality": _obj(
        {
            "data": {"type": "array", "items": ref("QualityDay")},
            "total": {**ref("QualityDay"), "description": "the whole filter (day: all)"},
        }
    ),
    "QualityDay": _obj(
        {
            "day": {"type": "string", "description": "YYYY-MM-DD (UTC), or all"},
            "requests": _INT,
            "errors": {**_INT, "description": "records whose status is not ok"},
            "refused": {**_INT, "description": "of them refused for the key (refused_402/404/429)"},
            "error_rate": {"type": "number", "description": "errors / requests"},
            "p50_ms": {"type": ["number", "null"], "description": "median latency of served requests"},
            "p95_ms": {"type": ["number", "null"]},
            "max_ms": {"type": ["number", "null"]},
        }
    ),
    "TopKeys": _obj(
        {
            "month": _STR,
            "data": {
                "type": "array",
                "items": _obj(
                    {
                        "key_id": _STR,
                        "account_id": _INT,
                        "name": _STR,
                        "requests": _INT,
                        "tokens": _INT,
                        **_money("charged"),
                    }
                ),
            },
        }
    ),
}
