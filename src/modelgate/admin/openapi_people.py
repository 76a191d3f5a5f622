"""The OpenAPI paths and schemas of single sign-on (``admin.sso``), merged into the admin API's
document by ``admin.openapi``."""

from __future__ import annotations

from typing import Any

from modelgate.admin.openapi_schemas import ref

_STR = {"type": "string"}
_NULLABLE_STR = {"type": ["string", "null"]}


def _obj(properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(properties)}


def _errors(*codes: str) -> dict[str, Any]:
    return {c: {"$ref": f"#/components/responses/E{c}"} for c in codes}


def _json(schema: str, description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": ref(schema)}}}


def _query(name: str, description: str) -> dict[str, Any]:
    schema = {"type": "string", "maxLength": 2048}
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": description}


PEOPLE_SCHEMAS: dict[str, Any] = {
    "SsoStatus": _obj({"enabled": {"type": "boolean"}, "login_url": _NULLABLE_STR}),
    "Person": _obj({"id": _STR, "email": _STR, "name": _STR}),
    "SsoSession": _obj(
        {
            "person": ref("Person"),
            "role": {"type": "string", "enum": ["operator", "owner", "member"]},
            "account_id": {"type": ["integer", "null"]},
            "csrf_token": {**_STR, "description": "send as x-csrf-token on every write made with the cookie"},
            "expires_at": {"type": "integer", "description": "the session's absolute end (Unix seconds)"},
        }
    ),
    "SignedOut": _obj({"signed_out": {"type": "boolean"}}),
}

PEOPLE_PATHS: dict[str, Any] = {
    "/admin/api/sso": {
        "get": {
            "operationId": "getSsoStatus",
            "summary": "Whether single sign-on is configured (public: the dashboard's sign-in button)",
            "security": [],
            "responses": {"200": _json("SsoStatus")},
        }
    },
    "/admin/api/sso/login": {
        "get": {
            "operationId": "startSignIn",
            "summary": "Start a sign-in: redirects the browser to the OpenID provider (state, nonce, PKCE S256)",
            "security": [],
            "parameters": [_query("invite", "an invitation token (mg-inv-…) this sign-in accepts")],
            "responses": {
                "302": {"description": "to the provider's authorization endpoint; sets mg_sso_login"},
                **_errors("400", "404"),
            },
        }
    },
    "/admin/api/sso/callback": {
        "get": {
            "operationId": "finishSignIn",
            "summary": "The provider's redirect back: code exchanged, ID token verified, session started",
            "security": [],
            "parameters": [
                _query("code", "the authorization code"),
                _query("state", "the state the sign-in started with (one use)"),
                _query("error", "the provider's refusal"),
            ],
            "responses": {
                "303": {"description": "to /dashboard; sets the mg_session cookie"},
                **_errors("400", "401", "403", "404"),
            },
        }
    },
    "/admin/api/sso/session": {
        "get": {
            "operationId": "getSsoSession",
            "summary": "The signed-in person, their role and the session's CSRF token",
            "responses": {"200": _json("SsoSession"), **_errors("401", "404")},
        }
    },
    "/admin/api/sso/logout": {
        "post": {
            "operationId": "signOut",
            "summary": "End the signed-in session (needs x-csrf-token)",
            "responses": {"200": _json("SignedOut"), **_errors("400", "401", "403")},
        }
    },
}
