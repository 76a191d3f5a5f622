"""Issue 5 item 8: every admin endpoint's happy path, operator and account tokens, money, auth."""

from __future__ import annotations

import re

from modelgate.keys import new_admin_token, new_api_key
from tests.admin.conftest import Admin

TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def test_operator_manages_accounts_topups_and_account_tokens(admin: Admin) -> None:
    op = admin.operator
    me = op.ok("GET", "/me")
    assert me == {
        "token_id": me["token_id"],
        "scope": "operator",
        "actor": me["token_id"],
        "role": None,
        "account": None,
        "now": me["now"],
        "month": me["now"][:7],
    }
    assert TIME.match(me["now"])

    created = op.ok("POST", "/accounts", {"name": "acme-admin", "credits": "12.5"}, status=201)
    assert created["name"] == "acme-admin"
    assert created["balance_uc"] == 12_500_000 and created["balance"] == "12.5"
    assert created["available_uc"] == 12_500_000 and created["reserved_uc"] == 0
    assert TIME.match(created["created_at"])
    account_id = created["id"]

    listed = op.ok("GET", "/accounts")["data"]
    assert created in listed
    assert op.ok("GET", f"/accounts/{account_id}") == created

    topped = op.ok("POST", f"/accounts/{account_id}/topups", {"amount": "0.000001", "note": "tiny"})
    assert topped["balance_uc"] == 12_500_001 and topped["balance"] == "12.500001"
    topped = op.ok("POST", f"/accounts/{account_id}/topups", {"amount_uc": 7_499_999})
    assert topped["balance_uc"] == 20_000_000 and topped["balance"] == "20"
    assert admin.gateway.call(admin.gateway.services.accounts.topups_total(account_id)) == 20_000_000

    issued = op.ok("POST", f"/accounts/{account_id}/tokens", status=201)
    assert issued["scope"] == "account" and issued["account_id"] == account_id
    assert issued["token"].startswith("mg-acct-")
    owner = admin.caller(issued["token"])
    me = owner.ok("GET", "/me")
    assert me["scope"] == "account" and me["account"] == topped


def test_account_creation_errors(admin: Admin) -> None:
    op = admin.operator
    op.ok("POST", "/accounts", {"name": "dupe-admin"}, status=201)
    again = op.request("POST", "/accounts", {"name": "dupe-admin"})
    assert again.status_code == 409 and again.json()["error"]["type"] == "conflict_error"
    for body, field in [
        ({"name": ""}, "name"),
        ({"name": "x", "credits": "-1"}, "credits"),
        ({"name": "x", "credits": "1", "credits_uc": 1}, "credits"),
        ({"name": "x", "balance_uc": 5}, "balance_uc"),
        ({}, "name"),
    ]:
        response = op.request("POST", "/accounts", body)
        assert response.status_code == 400, body
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error" and error["message"].startswith(field), error


def test_topup_refuses_bad_amounts(admin: Admin) -> None:
    tenant = admin.tenant()
    path = f"/accounts/{tenant.account.id}/topups"
    for body in [
        {},
        {"amount": "0"},
        {"amount": "-3"},
        {"amount": "1.0000001"},
        {"amount": 5},
        {"amount_uc": 0},
    ]:
        response = admin.operator.request("POST", path, body)
        assert response.status_code == 400, (body, response.text)
    assert admin.stored_account(tenant.account.id) == tenant.account


def test_keys_create_list_get_update_by_owner(admin: Admin) -> None:
    tenant = admin.tenant()
    owner = tenant.admin
    created = owner.ok(
        "POST",
        "/keys",
        {
            "group": "Pro",
            "name": "ci",
            "rpm": 7,
            "allowed_models": ["sonnet", "aria-haiku-4.5"],
            "monthly_cap": "3",
        },
        status=201,
    )
    secret = created.pop("secret")
    assert secret.startswith("sk-cs4-") and created["display"] == f"{secret[:11]}…{secret[-4:]}"
    assert created["account_id"] == tenant.account.id and created["state"] == "active"
    assert created["allowed_models"] == ["aria-sonnet-4.6", "aria-haiku-4.5"]
    assert created["monthly_cap_uc"] == 3_000_000 and created["monthly_cap"] == "3"
    assert created["spent_this_month_uc"] == 0 and created["spent_this_month"] == "0"
    assert created["rpm"] == 7 and created["group"] == "Pro"
    # The secret works at once and is never shown again.
    assert admin.chat(secret).status_code == 200
    fetched = owner.ok("GET", f"/keys/{created['id']}")
    assert "secret" not in fetched and secret not in str(fetched)
    listed = owner.ok("GET", "/keys")["data"]
    assert [k["id"] for k in listed] == [tenant.key.record.id, created["id"]]
    assert listed[1]["spent_this_month_uc"] > 0

    updated = owner.ok(
        "PATCH", f"/keys/{created['id']}", {"rpm": 9, "allowed_models": ["haiku"], "name": "ci2"}
    )
    assert (
        updated["rpm"] == 9 and updated["allowed_models"] == ["aria-haiku-4.5"] and updated["name"] == "ci2"
    )
    assert updated["monthly_cap_uc"] == 3_000_000  # untouched
    updated = owner.ok("PATCH", f"/keys/{created['id']}", {"monthly_cap_uc": 1500})
    assert updated["monthly_cap_uc"] == 1500 and updated["monthly_cap"] == "0.0015" and updated["rpm"] == 9
    cleared = owner.ok("PATCH", f"/keys/{created['id']}", {"monthly_cap": None, "allowed_models": None})
    assert cleared["monthly_cap_uc"] is None and cleared["monthly_cap"] is None
    assert cleared["allowed_models"] is None and cleared["rpm"] == 9
    assert owner.ok("PATCH", f"/keys/{created['id']}", {}) == owner.ok("GET", f"/keys/{created['id']}")


def test_update_controls_apply_to_the_running_server_at_once(admin: Admin) -> None:
    tenant = admin.tenant()
    key = tenant.key
    assert admin.chat(key.secret, "aria-sonnet-4.6").status_code == 200
    tenant.admin.ok("PATCH", f"/keys/{key.record.id}", {"allowed_models": ["haiku"]})
    assert admin.chat(key.secret, "aria-sonnet-4.6").status_code == 404
    assert admin.chat(key.secret, "aria-haiku-4.5").status_code == 200
    tenant.admin.ok("PATCH", f"/keys/{key.record.id}", {"rpm": 2})
    assert admin.chat(key.secret).status_code == 429  # two requests in this minute already


def test_key_validation_errors(admin: Admin) -> None:
    tenant = admin.tenant()
    owner = tenant.admin
    for body, field in [
        ({"group": "Gold"}, "group"),
        ({"group": "Basic", "rpm": 0}, "rpm"),
        ({"group": "Basic", "rpm": "5"}, "rpm"),
        ({"group": "Basic", "allowed_models": ["nova-5.5"]}, "models"),
        ({"group": "Basic", "allowed_models": ["no-such-model"]}, "models"),
        ({"group": "Basic", "monthly_cap": "abc"}, "monthly_cap"),
        ({"name": "no group"}, "group"),
    ]:
        response = owner.request("POST", "/keys", body)
        assert response.status_code == 400, (body, response.text)
        assert response.json()["error"]["message"].startswith(field), response.text
    assert len(owner.ok("GET", "/keys")["data"]) == 1
    # Operators must say which account.
    response = admin.operator.request("POST", "/keys", {"group": "Basic"})
    assert response.status_code == 400 and "account_id" in response.json()["error"]["message"]
    bad = owner.request("POST", "/keys", content=b"{not json", headers={"content-type": "application/json"})
    assert bad.status_code == 400 and bad.json()["error"]["message"] == "request body is not valid JSON"
    assert owner.request("POST", "/keys", json=[1]).status_code == 400
    patch = owner.request("PATCH", f"/keys/{tenant.key.record.id}", {"rpm": None})
    assert patch.status_code == 400
    assert owner.request("GET", "/keys?month=2026-13").status_code == 400


def test_operator_creates_and_lists_keys_for_any_account(admin: Admin) -> None:
    a, b = admin.tenant(), admin.tenant("Nova")
    op = admin.operator
    created = op.ok("POST", "/keys", {"account_id": b.account.id, "group": "Nova", "name": "op"}, status=201)
    assert created["account_id"] == b.account.id
    only_b = op.ok("GET", f"/keys?account_id={b.account.id}")["data"]
    assert [k["id"] for k in only_b] == [b.key.record.id, created["id"]]
    everything = {k["id"] for k in op.ok("GET", "/keys")["data"]}
    assert {a.key.record.id, b.key.record.id, created["id"]} <= everything
    assert op.ok("GET", f"/keys/{a.key.record.id}")["account_id"] == a.account.id
    missing = op.request("GET", "/keys?account_id=987654")
    assert missing.status_code == 404


def test_usage_per_key_and_per_account_per_month(admin: Admin) -> None:
    tenant = admin.tenant()
    second = admin.gateway.key(tenant.account, "Basic", name="second")
    for _ in range(2):
        assert admin.chat(tenant.key.secret).status_code == 200
    assert admin.chat(second.secret).status_code == 200

    per_key = tenant.admin.ok("GET", f"/usage?key_id={tenant.key.record.id}")
    assert per_key["scope"] == {"type": "key", "id": tenant.key.record.id}
    assert per_key["summary"]["requests"] == 2 and len(per_key["records"]) == 2
    assert per_key["summary"]["charged_uc"] == sum(r["charged_uc"] for r in per_key["records"]) > 0
    assert per_key["summary"]["by_model"][0]["model"] == "aria-haiku-4.5"
    record = per_key["records"][0]
    assert record["endpoint"] == "chat" and record["request_id"] and TIME.match(record["created_at"])
    assert record["input_tokens"] > 0 and record["charged"] != "-"

    per_account = tenant.admin.ok("GET", "/usage")  # an account token defaults to its account
    assert per_account["scope"] == {"type": "account", "id": tenant.account.id}
    assert per_account["summary"]["requests"] == 3
    assert per_account == admin.operator.ok("GET", f"/usage?account_id={tenant.account.id}")
    limited = tenant.admin.ok("GET", "/usage?limit=1")
    assert len(limited["records"]) == 1 and limited["summary"]["requests"] == 3

    key_row = tenant.admin.ok("GET", f"/keys/{tenant.key.record.id}")
    assert key_row["spent_this_month_uc"] == per_key["summary"]["charged_uc"]
    balance = admin.operator.ok("GET", f"/accounts/{tenant.account.id}")["balance_uc"]
    assert balance == tenant.account.balance_uc - per_account["summary"]["charged_uc"]

    other_month = tenant.admin.ok("GET", "/usage?month=2001-01")
    assert other_month["month"] == "2001-01" and other_month["summary"]["requests"] == 0
    assert other_month["records"] == []
    assert admin.operator.ok("GET", "/usage")["scope"] == {"type": "all", "id": None}
    for query in ["month=2026-1", "month=x", f"key_id={tenant.key.record.id}&account_id=1", "limit=-1"]:
        assert tenant.admin.request("GET", f"/usage?{query}").status_code == 400, query


def test_authentication_is_required_and_checked(admin: Admin) -> None:
    client = admin.client
    missing = client.get("/admin/api/keys")
    assert missing.status_code == 401
    assert missing.json()["error"]["type"] == "authentication_error"
    assert missing.headers["www-authenticate"].startswith("Bearer")
    assert missing.headers["cache-control"] == "no-store"
    tenant = admin.tenant()
    unknown_operator = new_admin_token(operator=True)
    for token in [
        "garbage",
        tenant.key.secret,
        new_api_key(),
        unknown_operator,
        tenant.admin.token[:-1] + ("y" if tenant.admin.token.endswith("x") else "x"),  # one character off
    ]:
        response = client.get("/admin/api/me", headers={"authorization": f"Bearer {token}"})
        assert response.status_code == 401, token
        assert token not in response.text
    # The key header of the model API is not an admin credential.
    assert client.get("/admin/api/me", headers={"x-api-key": tenant.admin.token}).status_code == 401
    assert (
        client.get("/admin/api/me", headers={"authorization": f"Basic {tenant.admin.token}"}).status_code
        == 401
    )


def test_operator_only_operations_are_403_for_account_tokens(admin: Admin) -> None:
    tenant = admin.tenant()
    owner = tenant.admin
    own = tenant.account.id
    for method, path, body in [
        ("GET", "/accounts", None),
        ("POST", "/accounts", {"name": "sneaky"}),
        ("POST", f"/accounts/{own}/topups", {"amount": "1000"}),
        ("POST", f"/accounts/{own}/tokens", None),
    ]:
        response = owner.request(method, path, body)
        assert response.status_code == 403, (method, path)
        assert response.json()["error"]["type"] == "permission_error"
    assert admin.stored_account(own) == tenant.account
    assert admin.gateway.call(admin.gateway.services.accounts.find_account("sneaky")) is None
    # What an owner may read about their own account.
    assert owner.ok("GET", f"/accounts/{own}")["balance_uc"] == tenant.account.balance_uc


def test_unknown_paths_and_methods(admin: Admin) -> None:
    op = admin.operator
    response = op.request("GET", "/nothing-here")
    assert response.status_code == 404 and response.json()["error"]["type"] == "not_found_error"
    wrong = op.request("DELETE", "/keys")
    assert wrong.status_code == 405 and wrong.headers["allow"] == "GET, POST"
    assert wrong.json()["error"]["type"] == "method_not_allowed"
    big = op.request("POST", "/accounts", content=b"{" + b" " * 70_000 + b"}")
    assert big.status_code == 413
