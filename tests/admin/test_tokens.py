"""Admin token lifecycle over the admin API: list, issue with a name and an expiry, revoke; a revoked
or expired token gets 401 on its next request; owners list and revoke only their own account's
tokens; every malformed input is a 4xx in the admin error shape."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from modelgate.keys import is_well_formed_admin_token
from tests.admin.conftest import Admin, Caller
from tests.gateway_server import ManualClock, running_gateway

NOW = 1_780_000_000.0


@pytest.fixture(scope="module")
def clock() -> ManualClock:
    return ManualClock(NOW)


@pytest.fixture(scope="module")
def timed(tmp_path_factory: pytest.TempPathFactory, clock: ManualClock) -> Iterator[Admin]:
    """An admin helper on a gateway whose clock the tests move."""
    with running_gateway(tmp_path_factory.mktemp("tokens") / "data", clock=clock) as server:
        helper = Admin(server)
        try:
            yield helper
        finally:
            helper.client.close()


def _listed(caller: Caller, query: str = "") -> dict[str, dict[str, object]]:
    return {t["id"]: t for t in caller.ok("GET", f"/tokens{query}")["data"]}


def test_operator_issues_lists_and_revokes_tokens(timed: Admin) -> None:
    tenant = timed.tenant()
    issued = timed.operator.ok(
        "POST", "/tokens", {"account_id": tenant.account.id, "name": "ci deploy"}, status=201
    )
    secret = issued["token"]
    assert is_well_formed_admin_token(secret) and secret.startswith("mg-acct-")
    assert issued["display"] == f"{secret[:12]}…{secret[-4:]}"
    assert (issued["scope"], issued["account_id"], issued["state"], issued["name"]) == (
        "account",
        tenant.account.id,
        "active",
        "ci deploy",
    )
    assert (
        issued["expires_at"] is None and issued["created_by"] == timed.operator.ok("GET", "/me")["token_id"]
    )

    listed = _listed(timed.operator)
    assert listed[issued["id"]] == {k: v for k, v in issued.items() if k != "token"}
    assert all("token" not in t and "digest" not in t for t in listed.values())
    assert secret not in timed.operator.request("GET", "/tokens").text
    assert set(_listed(timed.operator, f"?account_id={tenant.account.id}")) == {tenant.token_id, issued["id"]}

    holder = timed.caller(secret)
    assert holder.ok("GET", "/me")["token_id"] == issued["id"]
    revoked = timed.operator.ok("POST", f"/tokens/{issued['id']}/revoke")
    assert revoked["state"] == "revoked" and revoked["revoked_at"] is not None
    refused = holder.request("GET", "/me")
    assert (
        refused.status_code == 401
        and refused.json()["error"]["message"] == "this admin token has been revoked"
    )
    assert holder.request("GET", "/keys").status_code == 401
    # Idempotent: the first revocation instant stays.
    assert timed.operator.ok("POST", f"/tokens/{issued['id']}/revoke")["revoked_at"] == revoked["revoked_at"]
    # The owner's other token is untouched.
    assert tenant.admin.ok("GET", "/me")["token_id"] == tenant.token_id


def test_operator_tokens_and_expiry(timed: Admin, clock: ManualClock) -> None:
    issued = timed.operator.ok("POST", "/tokens", {"name": "short", "expires_in_seconds": 3600}, status=201)
    assert issued["scope"] == "operator" and issued["token"].startswith("mg-op-")
    expected = datetime.fromtimestamp(clock.now + 3600, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert issued["expires_at"] == expected
    short = timed.caller(issued["token"])
    assert short.ok("GET", "/accounts")["data"] is not None
    clock.advance(3599)
    assert short.request("GET", "/me").status_code == 200
    clock.advance(1)
    expired = short.request("GET", "/me")
    assert expired.status_code == 401 and expired.json()["error"]["message"] == "this admin token has expired"
    assert expired.headers["www-authenticate"].startswith("Bearer")
    assert _listed(timed.operator)[issued["id"]]["state"] == "expired"


def test_owner_lists_and_revokes_only_its_own_accounts_tokens(timed: Admin) -> None:
    tenant, other = timed.tenant(), timed.tenant()
    spare = timed.operator.ok("POST", f"/accounts/{tenant.account.id}/tokens", {"name": "spare"}, status=201)
    mine = _listed(tenant.admin)
    assert set(mine) == {tenant.token_id, spare["id"]}
    assert mine[tenant.token_id]["current"] is True and mine[spare["id"]]["current"] is False
    # Issuing stays with operators, for its own account and for no account at all.
    for body in [{"account_id": tenant.account.id}, {}]:
        response = tenant.admin.request("POST", "/tokens", body)
        assert response.status_code == 403 and response.json()["error"]["type"] == "permission_error"
    # Another account's token is not found, exactly like a missing one, and stays valid.
    foreign = tenant.admin.request("POST", f"/tokens/{other.token_id}/revoke")
    missing = tenant.admin.request("POST", "/tokens/tok_ZZZZZZZZZZZZ/revoke")
    assert foreign.status_code == missing.status_code == 404
    assert foreign.json()["error"]["message"].replace(other.token_id, "X") == missing.json()["error"][
        "message"
    ].replace("tok_ZZZZZZZZZZZZ", "X")
    assert other.admin.ok("GET", "/me")["token_id"] == other.token_id
    assert tenant.admin.request("GET", f"/tokens?account_id={other.account.id}").status_code == 404

    assert tenant.admin.ok("POST", f"/tokens/{spare['id']}/revoke")["state"] == "revoked"
    assert timed.caller(spare["token"]).request("GET", "/me").status_code == 401
    # Revoking the token in use signs its holder out.
    assert tenant.admin.ok("POST", f"/tokens/{tenant.token_id}/revoke")["current"] is True
    assert tenant.admin.request("GET", "/me").status_code == 401


def test_last_use_is_recorded_at_most_once_a_minute(timed: Admin, clock: ManualClock) -> None:
    tenant = timed.tenant()
    start = clock.now

    def last_used() -> object:
        return _listed(timed.operator, f"?account_id={tenant.account.id}")[tenant.token_id]["last_used_at"]

    assert last_used() is None
    tenant.admin.ok("GET", "/me")
    first = last_used()
    assert first is not None
    for _ in range(5):
        clock.advance(10)
        tenant.admin.ok("GET", "/keys")
    assert last_used() == first  # 50 s later: not written again
    clock.advance(10)
    tenant.admin.ok("GET", "/keys")
    assert last_used() != first and clock.now == start + 60


@pytest.mark.parametrize(
    "body",
    [
        {"expires_in_seconds": 0},
        {"expires_in_seconds": 59},
        {"expires_in_seconds": -60},
        {"expires_in_seconds": "3600"},
        {"expires_in_seconds": 3.5},
        {"expires_in_seconds": 10**12},
        {"expires_in_seconds": 10**40},
        {"name": "x" * 101},
        {"name": 5},
        {"account_id": "1"},
        {"account_id": 2**70},
        {"scope": "operator"},
        [],
        "text",
    ],
    ids=repr,
)
def test_malformed_token_requests_are_400_and_issue_nothing(timed: Admin, body: object) -> None:
    before = timed.gateway.call(timed.gateway.services.tokens.count_admin_tokens())
    response = timed.operator.request("POST", "/tokens", body)
    assert response.status_code in (400, 404), response.text
    assert set(response.json()) == {"error"} and response.json()["error"]["type"] in (
        "invalid_request_error",
        "not_found_error",
    )
    assert timed.gateway.call(timed.gateway.services.tokens.count_admin_tokens()) == before


@pytest.mark.parametrize(
    "path",
    [
        "/tokens/%C2%B2/revoke",
        "/tokens/" + "t" * 5000 + "/revoke",
        "/tokens/tok_%00/revoke",
        "/tokens/..%2F..%2Fkeys/revoke",
        "/tokens?account_id=%C2%B2",
        "/tokens?account_id=-1",
        "/tokens?account_id=99999999999999999999999",
    ],
)
def test_hostile_token_paths_answer_4xx_json(timed: Admin, path: str) -> None:
    method = "POST" if path.endswith("/revoke") else "GET"
    response = timed.operator.request(method, path)
    assert 400 <= response.status_code < 500, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"]["type"] in ("invalid_request_error", "not_found_error")
