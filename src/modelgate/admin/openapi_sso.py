"""The OpenAPI paths and schemas of single sign-on (``admin.sso``) and account members
(``admin.members``), merged into the admin API's
document by ``admin.openapi``."""

from __future__ import annotations

from typing import Any

from modelgate.admin.members import MEMBER_REQUEST_MODELS
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
    schema = {"type": "string", "maxLength": 4096}
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": description}


SSO_SCHEMAS: dict[str, Any] = {
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
    "Member": _obj(
        {
            "account_id": {"type": "integer"},
            "person_id": _STR,
            "email": _STR,
            "name": _STR,
            "role": {"type": "string", "enum": ["owner", "member"]},
            "since": {"type": "string", "format": "date-time"},
            "last_sign_in": {"type": "string", "format": "date-time"},
        }
    ),
    "MemberList": _obj({"data": {"type": "array", "items": ref("Member")}}),
    "Invite": _obj(
        {
            "id": _STR,
            "account_id": {"type": "integer"},
            "role": {"type": "string", "enum": ["owner", "member"]},
            "email": _STR,
            "state": {"type": "string", "enum": ["open", "used", "expired"]},
            "created_by": _STR,
            "created_at": {"type": "string", "format": "date-time"},
            "expires_at": {"type": "string", "format": "date-time"},
            "used_at": {"type": ["string", "null"], "format": "date-time"},
            "used_by": _NULLABLE_STR,
        }
    ),
    "InviteWithToken": {
        "allOf": [
            ref("Invite"),
            _obj(
                {
                    "token": {**_STR, "description": "shown once; only its digest is stored"},
                    "link": {**_STR, "description": "the sign-in link to hand the person (relative)"},
                }
            ),
        ]
    },
    "InviteList": _obj({"data": {"type": "array", "items": ref("Invite")}}),
}


SSO_PATHS: dict[str, Any] = {
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


def _body(model: str) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": ref(model)}}}


_ACCOUNT = {"name": "account_id", "in": "path", "required": True, "schema": {"type": "integer", "minimum": 1}}
_PERSON = {"name": "person_id", "in": "path", "required": True, "schema": _STR}
_INVITE = {"name": "invite_id", "in": "path", "required": True, "schema": _STR}

SSO_PATHS.update(
    {
        "/admin/api/accounts/{account_id}/members": {
            "get": {
                "operationId": "listMembers",
                "summary": "The people who are members of an account, with their roles",
                "parameters": [_ACCOUNT],
                "responses": {"200": _json("MemberList"), **_errors("401", "404")},
            }
        },
        "/admin/api/accounts/{account_id}/members/{person_id}": {
            "patch": {
                "operationId": "updateMember",
                "summary": "Change a member's role (owners); the last owner stays an owner",
                "parameters": [_ACCOUNT, _PERSON],
                "requestBody": _body("MemberUpdate"),
                "responses": {"200": _json("Member"), **_errors("400", "401", "403", "404", "409")},
            },
            "delete": {
                "operationId": "removeMember",
                "summary": "Remove a member (owners): their session ends with their next request",
                "parameters": [_ACCOUNT, _PERSON],
                "responses": {"200": _json("Member"), **_errors("401", "403", "404", "409")},
            },
        },
        "/admin/api/invites": {
            "get": {
                "operationId": "listInvites",
                "summary": "Invitations of the caller's account, or (operator) all or one account's",
                "parameters": [
                    {"name": "account_id", "in": "query", "required": False, "schema": {"type": "integer"}}
                ],
                "responses": {"200": _json("InviteList"), **_errors("400", "401", "403", "404")},
            },
            "post": {
                "operationId": "createInvite",
                "summary": "Invite a person to an account with a one-time sign-in link (owners); shown once",
                "requestBody": _body("InviteCreate"),
                "responses": {
                    "201": _json("InviteWithToken", "Created"),
                    **_errors("400", "401", "403", "404"),
                },
            },
        },
        "/admin/api/invites/{invite_id}": {
            "delete": {
                "operationId": "revokeInvite",
                "summary": "Withdraw an invitation (owners)",
                "parameters": [_INVITE],
                "responses": {"200": _json("Invite"), **_errors("401", "403", "404")},
            }
        },
    }
)


def sso_request_schemas(ref_template: str) -> dict[str, Any]:
    return {m.__name__: m.model_json_schema(ref_template=ref_template) for m in MEMBER_REQUEST_MODELS}
