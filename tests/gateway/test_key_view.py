"""``GET /v1/key`` and ``GET /v1/key/usage`` against a real gateway, asked with the key itself
over plain HTTP (no SDK): what each group's key sees, that asking spends nothing and takes no
rate-limit unit, that a key sees only its own usage, and the account's ``hide_balance``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from modelgate.management import IssuedKey
from modelgate.storage.base import Account
from tests.gateway_server import GatewayServer, ManualClock, running_gateway

#: Mid-month, so the monthly window's reset is the first of the next month.
NOW = datetime(2026, 11, 15, 12, 0, tzinfo=UTC).timestamp()
_names = itertools.count(1)


@pytest.fixture(scope="module")
def clock() -> ManualClock:
    return ManualClock(NOW)


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory, clock: ManualClock) -> Iterator[GatewayServer]:
    with running_gateway(tmp_path_factory.mktemp("keyview") / "data", clock=clock) as server:
        yield server


@pytest.fixture(scope="module")
def http(gw: GatewayServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gw.base_url, timeout=10) as client:
        yield client


def account(gw: GatewayServer, credits: float = 100) -> Account:
    return gw.account(f"kv-{next(_names)}", credits)


def as_bearer(secret: str) -> dict[str, str]:
    return {"authorization": f"Bearer {secret}"}


def as_x_api_key(secret: str) -> dict[str, str]:
    return {"x-api-key": secret, "anthropic-version": "2023-06-01"}


def chat(http: httpx.Client, secret: str, model: str = "aria-haiku-4.5") -> httpx.Response:
    return http.post(
        "/v1/chat/completions",
        headers=as_bearer(secret),
        json={"model": model, "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]},
    )


def usage_records(gw: GatewayServer, key_id: str) -> list[Any]:
    return gw.call(gw.services.usage.usage_records("2026-11", key_id=key_id, limit=1000))


@pytest.mark.parametrize(("group", "family"), [("Basic", "aria"), ("Pro", "aria"), ("Nova", "nova")], ids=str)
def test_each_group_sees_its_key(gw: GatewayServer, http: httpx.Client, group: str, family: str) -> None:
    acct = account(gw, 25)
    issued = gw.key(acct, group, name=f"mine-{group}", rpm=7, monthly_cap_uc=3_000_000, tpm=9000)
    for headers in (as_bearer(issued.secret), as_x_api_key(issued.secret)):
        response = http.get("/v1/key", headers=headers)
        assert response.status_code == 200, response.text
        assert response.headers["cache-control"] == "no-store"
        body = response.json()
        assert body["object"] == "key"
        assert (body["id"], body["name"], body["group"]) == (issued.record.id, f"mine-{group}", group)
        assert body["account_id"] == acct.id
        assert body["limits"] == {"rpm": 7, "tpm": 9000, "max_concurrency": None}
        assert body["account_limits"] == {"rpm": None, "tpm": None, "max_concurrency": None}
        assert body["models"] and all(m.startswith(family + "-") for m in body["models"])
        assert body["allowed_models"] is None
        assert body["expires_at"] is None and body["allowed_ips"] is None
        month = body["caps"]["month"]
        assert month["period"] == "2026-11"
        assert (month["limit_uc"], month["limit"]) == (3_000_000, "3")
        assert (month["spent_uc"], month["held_uc"], month["remaining_uc"]) == (0, 0, 3_000_000)
        assert month["resets_at"] == "2026-12-01T00:00:00Z"
        assert body["balance"] == {"available_uc": 25_000_000, "available": "25"}
        assert body["balance_hidden"] is False
        assert issued.secret not in response.text


def test_key_view_shows_spend_after_a_request_and_the_allowed_models(
    gw: GatewayServer, http: httpx.Client
) -> None:
    acct = account(gw, 10)
    issued = gw.key(acct, "Pro", models=["aria-haiku-4.5"], monthly_cap_uc=5_000_000)
    served = chat(http, issued.secret)
    assert served.status_code == 200, served.text
    charged = int(served.headers["x-modelgate-credits-charged"])
    assert charged > 0
    body = http.get("/v1/key", headers=as_bearer(issued.secret)).json()
    assert body["allowed_models"] == ["aria-haiku-4.5"] and body["models"] == ["aria-haiku-4.5"]
    month = body["caps"]["month"]
    assert (month["spent_uc"], month["held_uc"]) == (charged, 0)
    assert month["remaining_uc"] == 5_000_000 - charged
    assert body["balance"]["available_uc"] == 10_000_000 - charged


def test_asking_spends_nothing_and_takes_no_rate_limit_unit(gw: GatewayServer, http: httpx.Client) -> None:
    acct = account(gw, 5)
    issued = gw.key(acct, "Basic", rpm=1)
    for _ in range(5):
        assert http.get("/v1/key", headers=as_bearer(issued.secret)).status_code == 200
        assert http.get("/v1/key/usage", headers=as_x_api_key(issued.secret)).status_code == 200
    assert gw.call(gw.services.accounts.get_account(acct.id)) == acct  # balance and holds untouched
    assert usage_records(gw, issued.record.id) == []
    # The one unit of this minute is still there for a model request, and only one.
    assert chat(http, issued.secret).status_code == 200
    limited = chat(http, issued.secret)
    assert limited.status_code == 429
    # Still readable at the limit (a key holder asks what is left precisely then).
    assert http.get("/v1/key", headers=as_bearer(issued.secret)).status_code == 200


def test_errors_come_in_the_callers_wire_format(gw: GatewayServer, http: httpx.Client) -> None:
    messages_shaped = http.get("/v1/key", headers=as_x_api_key("sk-cs4-nonsense"))
    assert messages_shaped.status_code == 401
    body = messages_shaped.json()
    assert body["type"] == "error" and body["error"]["type"] == "authentication_error"
    openai_shaped = http.get("/v1/key/usage", headers=as_bearer("sk-cs4-nonsense"))
    assert openai_shaped.status_code == 401
    error = openai_shaped.json()["error"]
    assert error["code"] == "invalid_api_key" and "param" in error
    missing = http.get("/v1/key")
    assert missing.status_code == 401 and "missing API key" in missing.json()["error"]["message"]
    issued = gw.key(account(gw), "Basic")
    bad_limit = http.get("/v1/key/usage?limit=0", headers=as_bearer(issued.secret))
    assert bad_limit.status_code == 400 and bad_limit.json()["error"]["param"] == "limit"
    bad_cursor = http.get("/v1/key/usage?cursor=%FF", headers=as_x_api_key(issued.secret))
    assert bad_cursor.status_code == 400 and bad_cursor.json()["type"] == "error"
    assert http.post("/v1/key", headers=as_bearer(issued.secret)).status_code == 405


def test_a_revoked_key_is_refused(gw: GatewayServer, http: httpx.Client) -> None:
    issued = gw.key(account(gw), "Pro")
    gw.services.keys.apply(gw.call(gw.management.revoke_key(issued.record)))
    refused = http.get("/v1/key", headers=as_bearer(issued.secret))
    assert refused.status_code == 401 and "revoked" in refused.json()["error"]["message"]


def test_usage_pages_hold_only_the_keys_own_records(gw: GatewayServer, http: httpx.Client) -> None:
    acct = account(gw, 50)
    mine, theirs = gw.key(acct, "Basic", rpm=100), gw.key(acct, "Basic", rpm=100)
    other_account_key = gw.key(account(gw, 50), "Basic", rpm=100)
    mine_ids = set()
    for _ in range(5):
        mine_ids.add(chat(http, mine.secret).headers["request-id"])
        chat(http, theirs.secret)
        chat(http, other_account_key.secret)
    seen: list[dict[str, Any]] = []
    cursor = None
    pages = 0
    while True:
        query = "?limit=2" + (f"&cursor={cursor}" if cursor else "")
        page = http.get("/v1/key/usage" + query, headers=as_bearer(mine.secret)).json()
        pages += 1
        assert page["key_id"] == mine.record.id and page["object"] == "list"
        seen += page["data"]
        cursor = page["next_cursor"]
        assert page["has_more"] is (cursor is not None)
        if cursor is None:
            break
    assert pages == 3
    assert {r["request_id"] for r in seen} == mine_ids
    times = [r["created_at"] for r in seen]
    assert times == sorted(times, reverse=True)
    assert all(r["charged_uc"] > 0 and r["model"] == "aria-haiku-4.5" for r in seen)
    assert all("key_id" not in r and "account_id" not in r for r in seen)
    # Another key's cursor (taken from its own pages) still pages only the caller's records.
    their_page = http.get("/v1/key/usage?limit=1", headers=as_bearer(theirs.secret)).json()
    from_their_cursor = http.get(
        f"/v1/key/usage?cursor={their_page['next_cursor']}", headers=as_bearer(mine.secret)
    ).json()
    assert {r["request_id"] for r in from_their_cursor["data"]} <= mine_ids


def test_hide_balance_is_the_operators_switch(gw: GatewayServer, http: httpx.Client) -> None:
    acct = account(gw, 12)
    issued = gw.key(acct, "Nova")
    operator = gw.call(gw.management.create_admin_token(None))
    owner = gw.call(gw.management.issue_admin_token(acct, name="owner")).secret
    path = f"/admin/api/accounts/{acct.id}"
    denied = http.patch(path, headers=as_bearer(owner), json={"hide_balance": True})
    assert denied.status_code == 403
    hidden = http.patch(path, headers=as_bearer(operator), json={"hide_balance": True})
    assert hidden.status_code == 200 and hidden.json()["hide_balance"] is True
    assert hidden.json()["name"] == acct.name
    response = http.get("/v1/key", headers=as_bearer(issued.secret))
    body = response.json()
    assert body["balance"] is None and body["balance_hidden"] is True
    assert "12000000" not in response.text  # nothing of the balance shows elsewhere
    audit = http.get("/admin/api/audit", headers=as_bearer(operator), params={"action": "account.update"})
    [entry] = [e for e in audit.json()["data"] if e["target"] == f"account:{acct.id}"]
    assert (entry["before"]["hide_balance"], entry["after"]["hide_balance"]) == (False, True)
    shown = http.patch(
        path, headers=as_bearer(operator), json={"hide_balance": False, "name": acct.name + "-x"}
    )
    assert shown.json()["hide_balance"] is False and shown.json()["name"] == acct.name + "-x"
    body = http.get("/v1/key", headers=as_bearer(issued.secret)).json()
    assert body["balance"]["available_uc"] == 12_000_000
    empty = http.patch(path, headers=as_bearer(operator), json={})
    assert empty.status_code == 400
    assert http.patch(path, headers=as_bearer(operator), json={"hide_balance": "yes"}).status_code == 400


def test_the_accounts_rate_limits_show_beside_the_keys(gw: GatewayServer, http: httpx.Client) -> None:
    acct = account(gw)
    issued = gw.key(acct, "Pro", rpm=30)
    operator = gw.call(gw.management.create_admin_token(None))
    changed = http.patch(
        f"/admin/api/accounts/{acct.id}",
        headers=as_bearer(operator),
        json={"tpm": 50_000, "max_concurrency": 4},
    )
    assert changed.status_code == 200, changed.text
    body = http.get("/v1/key", headers=as_bearer(issued.secret)).json()
    assert body["limits"] == {"rpm": 30, "tpm": None, "max_concurrency": None}
    assert body["account_limits"] == {"rpm": None, "tpm": 50_000, "max_concurrency": 4}


def test_issued_keys_of_an_account_get_their_own_view(gw: GatewayServer, http: httpx.Client) -> None:
    acct = account(gw)
    first: IssuedKey = gw.key(acct, "Basic", name="a")
    second: IssuedKey = gw.key(acct, "Pro", name="b")
    assert http.get("/v1/key", headers=as_bearer(first.secret)).json()["id"] == first.record.id
    assert http.get("/v1/key", headers=as_bearer(second.secret)).json()["id"] == second.record.id


def test_a_fresh_gateway_answers_an_unused_key(tmp_path: Path) -> None:
    with running_gateway(tmp_path / "data") as server:
        issued = server.key(server.account("fresh", 1), "Basic")
        with httpx.Client(base_url=server.base_url, timeout=10) as client:
            body = client.get("/v1/key", headers=as_bearer(issued.secret)).json()
    assert body["caps"]["month"]["limit_uc"] is None and body["caps"]["month"]["remaining_uc"] is None
    assert body["caps"]["month"]["spent_uc"] == 0


def test_the_key_view_lists_keys_expiring_in_a_window(gw: GatewayServer) -> None:
    acct = account(gw)
    soon = gw.key(acct, "Basic", expires_at=NOW + 100)
    later = gw.key(acct, "Basic", expires_at=NOW + 50)
    gw.key(acct, "Basic", expires_at=NOW + 10_000)
    gone = gw.key(acct, "Basic", expires_at=NOW + 60)
    gw.services.keys.apply(gw.call(gw.management.revoke_key(gone.record)))
    due = [k.id for k in gw.services.keys.expiring(NOW, NOW + 1000) if k.account_id == acct.id]
    assert due == [later.record.id, soon.record.id]
