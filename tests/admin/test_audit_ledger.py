"""The audit log and the account ledger through the real admin API: an entry for every write,
with the state before and after and never a secret; what an account token sees; the ledger with
notes and actors; monthly statements that balance to the micro-credit, CSV included."""

from __future__ import annotations

import asyncio
import csv
import io
import sqlite3
from typing import Any

import httpx
import pytest

from modelgate.audit import describe
from modelgate.audit.actor import Actor, acting, draft
from tests.admin.conftest import Admin
from tests.whole_store import whole_store

SECRET_MARKERS = ("digest", "secret':")


def _entries(admin: Admin, query: str) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = admin.operator.ok("GET", "/audit?" + query)["data"]
    return data


def test_every_admin_write_is_audited_with_before_after_actor_and_request(admin: Admin) -> None:
    me = admin.operator.ok("GET", "/me")["token_id"]
    account = admin.operator.ok("POST", "/accounts", {"name": "audited-co", "credits": "5"}, status=201)
    target = f"account:{account['id']}"
    admin.operator.ok("PATCH", f"/accounts/{account['id']}", {"name": "audited-co-2"})
    admin.operator.ok("POST", f"/accounts/{account['id']}/topups", {"amount": "2.5", "note": "invoice 1042"})
    key = admin.operator.ok(
        "POST", "/keys", {"account_id": account["id"], "group": "Basic", "name": "k1"}, status=201
    )
    admin.operator.ok("PATCH", f"/keys/{key['id']}", {"rpm": 7})
    rotated = admin.operator.ok("POST", f"/keys/{key['id']}/rotate", {"grace_seconds": 0})
    admin.operator.ok("POST", f"/keys/{key['id']}/revoke")
    admin.operator.ok("POST", f"/keys/{key['id']}/revoke")  # a repeat changes nothing: no entry
    token = admin.operator.ok("POST", f"/accounts/{account['id']}/tokens", {"name": "owner"}, status=201)
    admin.operator.ok("POST", f"/tokens/{token['id']}/revoke")
    admin.operator.ok("PUT", f"/accounts/{account['id']}/alerts", {"low_balance": "1"})
    admin.operator.ok(
        "POST", f"/accounts/{account['id']}/adjustments", {"amount": "-0.5", "note": "refund fix"}
    )

    log = list(reversed(_entries(admin, f"account_id={account['id']}")))
    actions = [e["action"] for e in log]
    assert actions == [
        "account.create",
        "account.update",
        "account.topup",
        "key.create",
        "key.update",
        "key.rotate",
        "key.revoke",
        "token.create",
        "token.revoke",
        "account.update",
        "account.adjust",
    ]
    for entry in log:
        assert entry["actor"] == me
        assert entry["request_id"].startswith("req_")
        assert entry["client"] == "127.0.0.1"
        assert entry["account_id"] == account["id"]
        text = str(entry)
        assert not any(marker in text for marker in SECRET_MARKERS), entry
    assert (
        rotated["secret"] not in str(log) and key["secret"] not in str(log) and token["token"] not in str(log)
    )
    create, rename, topup = log[0], log[1], log[2]
    assert (
        create["target"] == target and create["before"] is None and create["after"]["balance_uc"] == 5_000_000
    )
    assert rename["before"]["name"] == "audited-co" and rename["after"]["name"] == "audited-co-2"
    assert topup["before"]["balance_uc"] == 5_000_000 and topup["after"]["balance_uc"] == 7_500_000
    assert topup["after"]["amount_uc"] == 2_500_000 and topup["after"]["note"] == "invoice 1042"
    update = log[4]
    assert update["target"] == f"key:{key['id']}"
    assert update["before"]["rpm"] != 7 and update["after"]["rpm"] == 7
    revoke = log[6]
    assert revoke["before"]["state"] == "active" and revoke["after"]["state"] == "disabled"
    assert log[-1]["after"]["amount_uc"] == -500_000
    # Filters: action, target, actor, since/until; keyset pages.
    assert [e["action"] for e in _entries(admin, f"action=key.rotate&account_id={account['id']}")] == [
        "key.rotate"
    ]
    assert {e["target"] for e in _entries(admin, f"target=key:{key['id']}")} == {f"key:{key['id']}"}
    assert len(_entries(admin, f"actor={me}&account_id={account['id']}")) == len(log)
    assert _entries(admin, f"account_id={account['id']}&until=1970-01-02") == []
    first = admin.operator.ok("GET", f"/audit?account_id={account['id']}&limit=4")
    second = admin.operator.ok(
        "GET", f"/audit?account_id={account['id']}&limit=4&cursor={first['next_cursor']}"
    )
    assert [e["id"] for e in first["data"] + second["data"]] == [e["id"] for e in reversed(log)][:8]


def test_the_log_is_append_only_in_the_database(admin: Admin) -> None:
    admin.operator.ok("POST", "/accounts", {"name": "append-only"}, status=201)
    path = admin.gateway.settings.data_dir / "modelgate.db"
    db = sqlite3.connect(path)
    try:
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            db.execute("UPDATE audit_log SET actor = 'someone else'")
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            db.execute("DELETE FROM audit_log")
    finally:
        db.close()
    assert (
        admin.client.delete(
            "/admin/api/audit", headers={"authorization": f"Bearer {admin.operator.token}"}
        ).status_code
        == 405
    )


def test_an_account_token_sees_only_its_own_accounts_entries(admin: Admin) -> None:
    mallory, victim = admin.tenant(), admin.tenant()
    admin.operator.ok("POST", f"/accounts/{victim.account.id}/topups", {"amount": "1", "note": "victim"})
    admin.operator.ok("POST", f"/accounts/{mallory.account.id}/topups", {"amount": "1", "note": "mallory"})
    admin.operator.ok("POST", "/tokens", {"name": "another operator"}, status=201)
    own = mallory.admin.ok("GET", "/audit?limit=500")["data"]
    assert own and {e["account_id"] for e in own} == {mallory.account.id}
    # Another account's target or id is empty / 404, exactly like a missing one.
    assert mallory.admin.ok("GET", f"/audit?target=account:{victim.account.id}")["data"] == []
    assert mallory.admin.ok("GET", "/audit?target=account:987654321")["data"] == []
    foreign = mallory.admin.request("GET", f"/audit?account_id={victim.account.id}")
    missing = mallory.admin.request("GET", "/audit?account_id=987654321")
    assert foreign.status_code == missing.status_code == 404
    csv_rows = list(csv.reader(io.StringIO(mallory.admin.request("GET", "/audit?format=csv").text)))
    assert csv_rows[0][:4] == ["id", "at", "actor", "action"]
    assert {row[5] for row in csv_rows[1:]} == {str(mallory.account.id)}


def test_cli_writes_are_audited_as_cli(admin: Admin) -> None:
    gateway = admin.gateway
    account = gateway.account("cli-made", 1)
    gateway.key(account, "Basic", name="from the cli")
    log = _entries(admin, f"account_id={account.id}")
    assert [(e["action"], e["actor"]) for e in reversed(log)] == [
        ("account.create", "cli"),
        ("key.create", "cli"),
    ]


def test_the_recorder_is_callable_by_other_modules(admin: Admin) -> None:
    """What members, settings and providers use: a draft for an audited storage write, or
    ``record`` for an entry of its own, by whoever is acting."""
    gateway = admin.gateway
    account = gateway.account("recorded", 1)
    store = whole_store(gateway.services)

    async def change() -> None:
        with acting(Actor("tok_colleague", "req_x", "10.0.0.1")):
            await store.rename_account(
                account.id, "recorded-2", audit=draft("account.update", describe.account, 1.0, before=account)
            )
            from modelgate.audit.actor import record

            await record(store, "provider.create", "provider:p1", 2.0, after={"name": "p1"})

    gateway.call(change())
    latest = admin.operator.ok("GET", "/audit?actor=tok_colleague")["data"]
    assert [(e["action"], e["target"], e["client"]) for e in latest] == [
        ("provider.create", "provider:p1", "10.0.0.1"),
        ("account.update", f"account:{account.id}", "10.0.0.1"),
    ]


def test_ledger_lists_topups_and_adjustments_with_notes_and_actors(admin: Admin) -> None:
    tenant = admin.tenant(credits=10)
    me = admin.operator.ok("GET", "/me")["token_id"]
    base = f"/accounts/{tenant.account.id}"
    admin.operator.ok("POST", f"{base}/topups", {"amount": "3", "note": "invoice 1042"})
    admin.operator.ok("POST", f"{base}/topups", {"amount_uc": 7, "note": '=HYPERLINK("http://x")'})
    admin.operator.ok("POST", f"{base}/adjustments", {"amount_uc": -2, "note": "-correction"})
    ledger = tenant.admin.ok("GET", f"{base}/ledger")
    assert [(e["kind"], e["amount_uc"], e["note"], e["actor"]) for e in ledger["data"]] == [
        ("adjustment", -2, "-correction", me),
        ("topup", 7, '=HYPERLINK("http://x")', me),
        ("topup", 3_000_000, "invoice 1042", me),
        ("topup", 10_000_000, "initial", "cli"),
    ]
    rows = list(csv.reader(io.StringIO(tenant.admin.request("GET", f"{base}/ledger?format=csv").text)))
    assert rows[0] == ["id", "created_at", "kind", "amount_uc", "amount", "note", "actor"]
    notes = [r[5] for r in rows[1:]]
    assert notes[:2] == ["'-correction", '\'=HYPERLINK("http://x")']
    # A negative amount stays a number; only text that could be a formula is quoted.
    assert [r[3] for r in rows[1:3]] == ["-2", "7"] and rows[1][4] == "-0.000002"
    # The owner reads but does not write the ledger.
    assert (
        tenant.admin.request("POST", f"{base}/adjustments", {"amount_uc": 5, "note": "me"}).status_code == 403
    )
    # A debit below what is held, or without a note, is refused.
    assert (
        admin.operator.request(
            "POST", f"{base}/adjustments", {"amount_uc": -(10**12), "note": "x"}
        ).status_code
        == 409
    )
    assert admin.operator.request("POST", f"{base}/adjustments", {"amount_uc": -1}).status_code == 400


def test_statement_balances_to_the_micro_credit_and_matches_the_balance(admin: Admin) -> None:
    tenant = admin.tenant(credits=50)
    for _ in range(3):
        assert admin.chat(tenant.key.secret).status_code == 200
    admin.operator.ok("POST", f"/accounts/{tenant.account.id}/topups", {"amount": "1.000001", "note": "more"})
    admin.operator.ok("POST", f"/accounts/{tenant.account.id}/adjustments", {"amount_uc": -3, "note": "fix"})
    statement = tenant.admin.ok("GET", f"/accounts/{tenant.account.id}/statement")
    account = admin.operator.ok("GET", f"/accounts/{tenant.account.id}")
    assert statement["current"] is True
    assert statement["opening_uc"] == 0
    assert statement["top_ups_uc"] == 51_000_001 and statement["adjustments_uc"] == -3
    assert statement["usage_uc"] > 0 and statement["requests"] == 3
    assert statement["closing_uc"] == (
        statement["opening_uc"]
        + statement["top_ups_uc"]
        - statement["usage_uc"]
        + statement["adjustments_uc"]
    )
    assert statement["closing_uc"] == statement["balance_uc"] == account["balance_uc"]
    assert statement["held_uc"] == 0 and statement["available_uc"] == statement["closing_uc"]
    rows = list(
        csv.reader(
            io.StringIO(
                tenant.admin.request("GET", f"/accounts/{tenant.account.id}/statement?format=csv").text
            )
        )
    )
    assert [r[2] for r in rows[1:]] == ["opening", "top_ups", "usage", "adjustments", "closing"]
    assert rows[-1][3] == str(statement["closing_uc"])
    # An earlier month: nothing yet, all zero; a later one has not started.
    assert tenant.admin.ok("GET", f"/accounts/{tenant.account.id}/statement?month=2001-01")["closing_uc"] == 0
    assert (
        tenant.admin.request("GET", f"/accounts/{tenant.account.id}/statement?month=9000-01").status_code
        == 400
    )


def test_statement_balances_after_top_ups_race_200_requests(admin: Admin) -> None:
    tenant = admin.tenant(credits=1)
    key = admin.gateway.key(tenant.account, "Basic", name="racer", rpm=100_000)
    base = admin.gateway.base_url
    operator = {"authorization": f"Bearer {admin.operator.token}"}

    async def race() -> tuple[list[int], list[int]]:
        async with httpx.AsyncClient(
            base_url=base, timeout=60, limits=httpx.Limits(max_connections=250)
        ) as client:
            requests = [
                client.post(
                    "/v1/chat/completions",
                    headers={"authorization": f"Bearer {key.secret}"},
                    json={
                        "model": "aria-haiku-4.5",
                        "messages": [{"role": "user", "content": "race"}],
                        "max_tokens": 32,
                    },
                )
                for _ in range(200)
            ]
            top_ups = [
                client.post(
                    f"/admin/api/accounts/{tenant.account.id}/topups",
                    headers=operator,
                    json={"amount_uc": 100_001 + i, "note": f"race {i}"},
                )
                for i in range(20)
            ]
            answers = await asyncio.gather(*requests, *top_ups)
            return [r.status_code for r in answers[:200]], [r.status_code for r in answers[200:]]

    served, topped = asyncio.run(race())
    assert topped == [200] * 20
    assert 200 in served and set(served) <= {200, 402}
    statement = tenant.admin.ok("GET", f"/accounts/{tenant.account.id}/statement")
    added = sum(100_001 + i for i in range(20))
    assert statement["top_ups_uc"] == 1_000_000 + added
    usage = admin.operator.ok("GET", f"/usage?account_id={tenant.account.id}")["summary"]
    assert statement["usage_uc"] == usage["charged_uc"] > 0
    assert (
        statement["closing_uc"] == statement["top_ups_uc"] - statement["usage_uc"] == statement["balance_uc"]
    )
    assert statement["balance_uc"] == admin.stored_account(tenant.account.id).balance_uc  # type: ignore[union-attr]
    assert len(tenant.admin.ok("GET", f"/accounts/{tenant.account.id}/ledger?limit=500")["data"]) == 21


def test_every_hostile_query_of_the_new_endpoints_is_a_json_4xx(admin: Admin) -> None:
    """Each hostile path and body of the fuzz suite for these endpoints, every one sent (the fuzz
    run draws a sample): a JSON 4xx, nothing changed."""
    from tests.fuzz.hostile import ADMIN_BODIES, ADMIN_PATHS

    tenant = admin.tenant()
    before = admin.stored_account(tenant.account.id)
    words = ("/audit", "/ledger", "/statement", "/alerts", "/adjustments")
    paths = [
        p.replace("/accounts/1/", f"/accounts/{tenant.account.id}/")
        for p in ADMIN_PATHS
        if any(w in p for w in words)
    ]
    bodies = [
        (m, p.replace("/accounts/1/", f"/accounts/{tenant.account.id}/"), b)
        for m, p, b in ADMIN_BODIES
        if any(w in p for w in words)
    ]
    assert len(paths) >= 20 and len(bodies) >= 10
    auth = {"authorization": f"Bearer {admin.operator.token}"}
    for path in paths:
        response = admin.client.get(path, headers=auth)
        assert 400 <= response.status_code < 500, (path, response.status_code, response.text)
        assert response.headers["content-type"] == "application/json", path
        assert response.json()["error"]["type"], path
    for method, path, body in bodies:
        response = admin.client.request(method, path, json=body, headers=auth)
        assert 400 <= response.status_code < 500, (path, body, response.text)
    assert admin.stored_account(tenant.account.id) == before
