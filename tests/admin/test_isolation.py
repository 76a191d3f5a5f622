"""Account tokens see only their own account: another account's ids answer exactly like missing ids.

The table below enumerates every admin endpoint that takes an account or key id (path, query or
body); a test checks that it is complete against the OpenAPI document.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from modelgate.admin.openapi import openapi_document
from tests.admin.conftest import Admin, Tenant

MISSING_ACCOUNT = 987_654_321
MISSING_KEY = "key_ZZZZZZZZZZZZZZZZ"
MISSING_TOKEN = "tok_ZZZZZZZZZZZZ"

# (method, path, body); {account}, {key} and {token} are filled with the target's ids.
TARGETED: list[tuple[str, str, Any]] = [
    ("GET", "/accounts/{account}", None),
    ("PATCH", "/accounts/{account}", {"name": "taken over"}),
    ("PATCH", "/accounts/{account}", {"hide_balance": True}),
    ("POST", "/accounts/{account}/topups", {"amount": "1000"}),
    ("POST", "/accounts/{account}/tokens", None),
    ("GET", "/keys?account_id={account}", None),
    ("POST", "/keys", {"account_id": "{account}", "group": "Basic", "name": "intruder"}),
    ("GET", "/keys/{key}", None),
    ("PATCH", "/keys/{key}", {"rpm": 1, "monthly_cap": "0"}),
    ("PATCH", "/keys/{key}", {"expires_at": "2020-01-01T00:00:00Z", "allowed_ips": ["203.0.113.0/24"]}),
    ("POST", "/keys/{key}/rotate", {"grace_seconds": 0}),
    ("POST", "/keys/{key}/revoke", None),
    ("GET", "/keys/{key}/windows", None),
    ("PATCH", "/keys/{key}", {"caps": {"day": "1"}, "caps_uc": {"5h": 1}}),
    ("PATCH", "/accounts/{account}", {"caps": {"week": "1"}}),
    ("GET", "/usage?key_id={key}", None),
    ("GET", "/usage?account_id={account}", None),
    ("GET", "/usage/records?account_id={account}", None),
    ("GET", "/usage/records?key_id={key}", None),
    ("GET", "/usage/records?account_id={account}&key_id={key}", None),
    ("GET", "/usage/records.csv?key_id={key}", None),
    ("GET", "/usage/records.csv?account_id={account}", None),
    ("GET", "/usage/daily?account_id={account}", None),
    ("GET", "/usage/daily?key_id={key}", None),
    ("GET", "/usage/top-keys?account_id={account}", None),
    ("GET", "/usage/quality?account_id={account}", None),
    ("GET", "/usage/quality?key_id={key}", None),
    ("GET", "/tokens?account_id={account}", None),
    ("POST", "/tokens", {"account_id": "{account}", "name": "intruder"}),
    ("POST", "/tokens/{token}/revoke", None),
    ("GET", "/accounts/{account}/members", None),
    ("GET", "/invites?account_id={account}", None),
    ("POST", "/invites", {"account_id": "{account}", "role": "owner"}),
    ("GET", "/audit?account_id={account}", None),
    ("GET", "/audit?account_id={account}&format=csv", None),
    ("GET", "/accounts/{account}/ledger", None),
    ("GET", "/accounts/{account}/ledger?format=csv", None),
    ("POST", "/accounts/{account}/adjustments", {"amount": "-1", "note": "taken"}),
    ("GET", "/accounts/{account}/statement", None),
    ("GET", "/accounts/{account}/statement?format=csv", None),
    ("GET", "/accounts/{account}/alerts", None),
    ("PUT", "/accounts/{account}/alerts", {"low_balance": "5"}),
]
# Operations on a member or an invitation id: their isolation (another account's ids answer like
# missing ones) is checked with real people and invitations in tests/admin/test_members.py.
COVERED_ELSEWHERE = {
    ("PATCH", "/admin/api/accounts/{account_id}/members/{person_id}"),
    ("DELETE", "/admin/api/accounts/{account_id}/members/{person_id}"),
    ("DELETE", "/admin/api/invites/{invite_id}"),
}
# Endpoints that take no id of another account: what an account token gets there.
UNTARGETED = {
    ("GET", "/admin/api/me"): 200,
    ("GET", "/admin/api/accounts"): 403,
    ("POST", "/admin/api/accounts"): 403,
    ("GET", "/admin/api/models"): 200,
    # Upstreams (providers, deployments, prices, aliases): operators only.
    **{
        (method, "/admin/api" + path): 403
        for path, methods in {
            "/providers": ("GET", "POST"),
            "/providers/{name}": ("GET", "PUT", "PATCH", "DELETE"),
            "/providers/{name}/test": ("POST",),
            "/models/{model_id}/deployments": ("GET", "PUT", "DELETE"),
            "/models/{model_id}/price": ("GET", "PUT", "DELETE"),
            "/aliases": ("GET",),
            "/aliases/{alias}": ("PUT", "DELETE"),
        }.items()
        for method in methods
    },
    # Single sign-on (not configured on this gateway); a token has no session to show or end.
    ("GET", "/admin/api/sso"): 200,
    ("GET", "/admin/api/sso/login"): 404,
    ("GET", "/admin/api/sso/callback"): 404,
    ("GET", "/admin/api/sso/session"): 404,
    ("POST", "/admin/api/sso/logout"): 400,
}


def _fill(value: Any, account: int, key: str, token: str) -> Any:
    if isinstance(value, str):
        if value == "{account}":
            return account
        return value.replace("{account}", str(account)).replace("{key}", key).replace("{token}", token)
    if isinstance(value, dict):
        return {k: _fill(v, account, key, token) for k, v in value.items()}
    return value


def _call(
    tenant: Tenant, method: str, path: str, body: Any, account: int, key: str, token: str
) -> httpx.Response:
    return tenant.admin.request(method, _fill(path, account, key, token), _fill(body, account, key, token))


def _normalised(response: httpx.Response, account: int, key: str, token: str) -> tuple[int, str, Any]:
    text = response.text.replace(key, "<key>").replace(token, "<token>").replace(str(account), "<account>")
    return response.status_code, response.headers["content-type"], text


def test_the_table_covers_every_documented_operation() -> None:
    documented = {
        (method.upper(), path) for path, item in openapi_document()["paths"].items() for method in item
    }
    covered = {
        (
            m,
            "/admin/api"
            + p.split("?")[0]
            .replace("{account}", "{account_id}")
            .replace("{key}", "{key_id}")
            .replace("{token}", "{token_id}"),
        )
        for m, p, _ in TARGETED
    }
    assert documented == covered | set(UNTARGETED) | COVERED_ELSEWHERE


@pytest.mark.parametrize(("method", "path", "body"), TARGETED, ids=[f"{m} {p}" for m, p, _ in TARGETED])
def test_other_accounts_ids_are_indistinguishable_from_missing_ids(
    admin: Admin, method: str, path: str, body: Any
) -> None:
    mallory, victim = admin.tenant(), admin.tenant()
    before_key = admin.stored_key(victim.key.record.id)
    before_account = admin.stored_account(victim.account.id)
    tokens_before = admin.gateway.call(admin.gateway.services.tokens.count_admin_tokens())
    keys_before = admin.operator.ok("GET", "/keys")["data"]

    tokens_of_victim = admin.operator.ok("GET", f"/tokens?account_id={victim.account.id}")["data"]
    foreign = _call(mallory, method, path, body, victim.account.id, victim.key.record.id, victim.token_id)
    missing = _call(mallory, method, path, body, MISSING_ACCOUNT, MISSING_KEY, MISSING_TOKEN)

    assert foreign.status_code == 404, foreign.text
    assert foreign.json()["error"]["type"] == "not_found_error"
    assert _normalised(foreign, victim.account.id, victim.key.record.id, victim.token_id) == _normalised(
        missing, MISSING_ACCOUNT, MISSING_KEY, MISSING_TOKEN
    )
    assert set(foreign.headers) - {"content-length", "date"} == set(missing.headers) - {
        "content-length",
        "date",
    }
    # Nothing of the victim changed, and its key still works.
    assert admin.stored_key(victim.key.record.id) == before_key
    assert admin.stored_account(victim.account.id) == before_account
    assert admin.gateway.call(admin.gateway.services.tokens.count_admin_tokens()) == tokens_before
    assert admin.operator.ok("GET", "/keys")["data"] == keys_before
    assert admin.chat(victim.key.secret).status_code == 200
    assert admin.operator.ok("GET", f"/tokens?account_id={victim.account.id}")["data"] == tokens_of_victim
    assert victim.admin.ok("GET", "/me")["token_id"] == victim.token_id
    # The owner reaches the same resource (the 404 above is isolation, not a broken endpoint).
    reached = _call(
        victim, "GET", "/keys/{key}", None, victim.account.id, victim.key.record.id, victim.token_id
    )
    assert reached.status_code == 200


def test_untargeted_endpoints_for_an_account_token(admin: Admin) -> None:
    tenant = admin.tenant()
    for (method, path), status in UNTARGETED.items():
        body = {"name": "nope"} if method == "POST" else None
        response = tenant.admin.request(method, path.removeprefix("/admin/api"), body)
        assert response.status_code == status, (method, path, response.text)


def test_listings_of_an_account_token_hold_only_its_own_account(admin: Admin) -> None:
    mine, other = admin.tenant(), admin.tenant()
    admin.chat(other.key.secret)
    admin.chat(mine.key.secret)
    keys = mine.admin.ok("GET", "/keys")["data"]
    assert {k["account_id"] for k in keys} == {mine.account.id}
    assert mine.admin.ok("GET", f"/keys?account_id={mine.account.id}")["data"] == keys
    usage = mine.admin.ok("GET", "/usage")
    assert {r["account_id"] for r in usage["records"]} == {mine.account.id}
    assert {r["key_id"] for r in usage["records"]} == {mine.key.record.id}
    # Keys created by an account token always land in its own account.
    created = mine.admin.ok("POST", "/keys", {"group": "Nova"}, status=201)
    assert created["account_id"] == mine.account.id


@pytest.mark.parametrize(
    "extra",
    [
        {"account_id": "{other}"},
        {"group": "Nova"},
        {"state": "active"},
        {"state": "disabled"},
        {"digest": "00" * 32},
        {"prefix": "sk-cs4-AAAA"},
        {"spent_this_month_uc": 0},
        {"version": 0},
        {"id": "key_AAAAAAAAAAAAAAAA"},
        {"previous_expires_at": 9_999_999_999},
    ],
    ids=lambda extra: next(iter(extra)),
)
def test_update_bodies_cannot_change_protected_fields(admin: Admin, extra: dict[str, Any]) -> None:
    tenant, other = admin.tenant(), admin.tenant()
    admin.chat(tenant.key.secret)
    key_id = tenant.key.record.id
    before = admin.stored_key(key_id)
    spend_before = tenant.admin.ok("GET", f"/keys/{key_id}")["spent_this_month_uc"]
    body = {"rpm": 5, **{k: other.account.id if v == "{other}" else v for k, v in extra.items()}}
    for caller in (tenant.admin, admin.operator):
        response = caller.request("PATCH", f"/keys/{key_id}", body)
        assert response.status_code == 400, response.text
        name = next(iter(extra))
        assert response.json()["error"]["message"].startswith(f"{name}: ")
    assert admin.stored_key(key_id) == before  # the whole body was refused: not even rpm changed
    assert tenant.admin.ok("GET", f"/keys/{key_id}")["spent_this_month_uc"] == spend_before
    assert admin.chat(tenant.key.secret).status_code == 200


def test_other_bodies_refuse_unknown_fields_too(admin: Admin) -> None:
    tenant = admin.tenant()
    key_id = tenant.key.record.id
    before_key, before_account = admin.stored_key(key_id), admin.stored_account(tenant.account.id)
    for method, path, body in [
        ("POST", f"/keys/{key_id}/rotate", {"grace_seconds": 0, "digest": "00"}),
        ("POST", f"/keys/{key_id}/revoke", {"state": "active"}),
        ("POST", f"/accounts/{tenant.account.id}/topups", {"amount": "1", "balance_uc": 0}),
        ("POST", f"/accounts/{tenant.account.id}/tokens", {"account_id": None}),
    ]:
        response = admin.operator.request(method, path, body)
        assert response.status_code == 400, (path, response.text)
    response = tenant.admin.request("POST", "/keys", {"group": "Basic", "state": "disabled"})
    assert response.status_code == 400
    assert admin.stored_key(key_id) == before_key
    assert admin.stored_account(tenant.account.id) == before_account
    assert len(tenant.admin.ok("GET", "/keys")["data"]) == 1
