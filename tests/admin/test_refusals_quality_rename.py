"""Refused requests in the usage log, the error-rate and latency view, and account rename
(issue #35 item 9, the admin API side; the dashboard's side is in test_dashboard_browser.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.admin.conftest import Admin
from tests.gateway_server import running_gateway
from tests.observability.scrape import scrape
from tests.polling import wait_until
from tests.storage.engines import create_database, database_url, drop_database


def _records(admin: Admin, key_id: str) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = admin.operator.ok("GET", f"/usage/records?key_id={key_id}&limit=100")["data"]
    return data


def _count_of(admin: Admin, key_id: str, count: int) -> list[dict[str, Any]]:
    """The key's records once there are ``count`` of them."""

    def found() -> list[dict[str, Any]]:
        records = _records(admin, key_id)
        return records if len(records) == count else []

    return wait_until(found, f"{count} usage records of {key_id}")


def test_refusals_for_a_known_key_are_in_the_usage_log_with_their_status(admin: Admin) -> None:
    gateway = admin.gateway
    account = gateway.account("refused-log", credits=100)
    capped = gateway.key(account, "Basic", monthly_cap_uc=1)
    limited = gateway.key(account, "Basic", rpm=1)
    assert admin.chat(capped.secret).status_code == 402  # a cap of 1 µc holds nothing
    assert admin.chat(capped.secret, model="no-such-model").status_code == 404
    assert admin.chat(limited.secret).status_code == 200
    assert admin.chat(limited.secret).status_code == 429  # the second request of the minute (rpm 1)
    # 401: no key of ours, nothing to tie it to: no record anywhere.
    before = admin.operator.ok("GET", "/usage/records?limit=500")["total"]
    assert admin.chat("sk-cs4-not-a-key").status_code == 401
    records = _count_of(admin, capped.record.id, 2)
    assert sorted(r["status"] for r in records) == ["refused_402", "refused_404"]
    assert all(r["charged_uc"] == 0 and r["input_tokens"] == 0 for r in records)
    by_status = {r["status"]: r for r in records}
    assert by_status["refused_402"]["model"] == "aria-haiku-4.5"
    assert by_status["refused_404"]["model"] == "unknown"  # never the client's string
    limited_records = _count_of(admin, limited.record.id, 2)
    assert [r["status"] for r in limited_records] == ["refused_429", "ok"]  # newest first
    assert admin.operator.ok("GET", "/usage/records?limit=500")["total"] == before
    # Nothing stays held.
    stored = admin.stored_account(account.id)
    assert stored is not None and stored.reserved_uc == 0
    # The log filters by status.
    facets = admin.operator.ok("GET", f"/usage/records?account_id={account.id}")["facets"]["statuses"]
    assert set(facets) == {"ok", "refused_402", "refused_404", "refused_429"}
    only = admin.operator.ok("GET", f"/usage/records?account_id={account.id}&status=refused_429")["data"]
    assert [r["key_id"] for r in only] == [limited.record.id]


def test_the_quality_view_counts_errors_and_latency_per_day(admin: Admin) -> None:
    tenant = admin.tenant()
    for _ in range(3):
        assert admin.chat(tenant.key.secret).status_code == 200
    assert admin.chat(tenant.key.secret, model="no-such-model").status_code == 404
    key_id = tenant.key.record.id
    wait_until(lambda: len(_records(admin, key_id)) == 4, "4 records")
    body = tenant.admin.ok("GET", f"/usage/quality?key_id={key_id}")
    (day,) = body["data"]
    assert (day["requests"], day["errors"], day["refused"], day["error_rate"]) == (4, 1, 1, 0.25)
    assert day["p50_ms"] is not None and 0 <= day["p50_ms"] <= day["p95_ms"] <= day["max_ms"]
    assert body["total"]["requests"] == 4 and body["total"]["day"] == "all"
    # Another account's key is not visible to this owner (404, as if missing).
    other = admin.tenant()
    assert tenant.admin.request("GET", f"/usage/quality?key_id={other.key.record.id}").status_code == 404


def test_an_operator_renames_an_account(admin: Admin) -> None:
    tenant = admin.tenant()
    taken = admin.tenant()
    path = f"/accounts/{tenant.account.id}"
    renamed = admin.operator.ok("PATCH", path, {"name": "  Renamed Co  "})
    assert renamed["name"] == "Renamed Co" and renamed["id"] == tenant.account.id
    assert admin.operator.ok("GET", path)["name"] == "Renamed Co"
    # The key and its owner token keep working under the new name.
    assert admin.chat(tenant.key.secret).status_code == 200
    assert tenant.admin.ok("GET", "/me")["account"]["name"] == "Renamed Co"
    conflict = admin.operator.request("PATCH", path, {"name": taken.account.name})
    assert conflict.status_code == 409 and "already exists" in conflict.json()["error"]["message"]
    assert admin.operator.request("PATCH", path, {"name": ""}).status_code == 400
    assert admin.operator.request("PATCH", path, {"name": "x" * 101}).status_code == 400
    assert admin.operator.request("PATCH", path, {"nom": "x"}).status_code == 400
    # An owner cannot rename (403), another account's owner sees a 404.
    assert tenant.admin.request("PATCH", path, {"name": "Mine"}).status_code == 403
    assert taken.admin.request("PATCH", path, {"name": "Theirs"}).status_code == 404
    assert admin.operator.request("PATCH", "/accounts/999999", {"name": "Ghost"}).status_code == 404


def test_refusals_and_rename_on_postgresql(tmp_path: Path) -> None:
    """The same through PostgreSQL's batched ledger and its account table (scripts/test.sh)."""
    database_url()  # skips locally (fails in CI) without the test server

    async def fresh() -> str:
        return await create_database("mgrename")

    url = asyncio.run(fresh())
    try:
        with running_gateway(tmp_path / "data", database_url=url) as gateway:
            helper = Admin(gateway)
            try:
                account = gateway.account("pg-refused", credits=100)
                capped = gateway.key(account, "Basic", monthly_cap_uc=1)
                assert helper.chat(capped.secret).status_code == 402
                (record,) = _count_of(helper, capped.record.id, 1)
                assert (record["status"], record["charged_uc"]) == ("refused_402", 0)
                stored = helper.stored_account(account.id)
                assert stored is not None and stored.reserved_uc == 0
                other = gateway.account("pg-taken")
                path = f"/accounts/{account.id}"
                assert helper.operator.ok("PATCH", path, {"name": "pg-renamed"})["name"] == "pg-renamed"
                assert helper.operator.request("PATCH", path, {"name": other.name}).status_code == 409
            finally:
                helper.client.close()
    finally:
        asyncio.run(drop_database(url))


def test_refusal_records_waiting_are_bounded_and_the_rest_counted(tmp_path: Path) -> None:
    """``billing.max_pending_refusal_records``: past it a refusal is answered and counted in the
    metrics, never queued for a write (0 here: nothing may wait)."""
    with running_gateway(tmp_path / "data", billing={"max_pending_refusal_records": 0}) as gateway:
        helper = Admin(gateway)
        try:
            account = gateway.account("refusals-bounded", credits=100)
            capped = gateway.key(account, "Basic", monthly_cap_uc=1)
            for _ in range(3):
                assert helper.chat(capped.secret).status_code == 402
            served = gateway.key(account, "Basic")
            assert helper.chat(served.secret).status_code == 200
            _count_of(helper, served.record.id, 1)  # the served request's record landed
            assert _records(helper, capped.record.id) == []
            assert scrape(gateway.base_url).value("modelgate_refusal_records_dropped_total") == 3
        finally:
            helper.client.close()
