"""The usage endpoints behind the dashboard, over a month of real traffic: the paged and filtered
log, its CSV export, per-day totals by model and top keys; hostile parameters are 400s."""

from __future__ import annotations

import csv
import io
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from tests.admin.conftest import Admin, Caller
from tests.admin.seed import MONTH, Seeded, seed
from tests.gateway_server import ManualClock, running_gateway


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Admin, Seeded]]:
    clock = ManualClock(0)
    data = tmp_path_factory.mktemp("usage-log") / "data"
    with running_gateway(data, clock=clock, admin={"csv_max_rows": 150}) as server:
        helper = Admin(server)
        try:
            yield helper, seed(server, clock)
        finally:
            helper.client.close()


def _all_pages(caller: Caller, query: str, limit: int = 7) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    cursor = ""
    while True:
        page = caller.ok("GET", f"/usage/records?{query}&limit={limit}{cursor}")
        records += page["data"]
        assert len(page["data"]) <= limit
        if page["next_cursor"] is None:
            return records
        assert "total" not in page or cursor == ""
        cursor = f"&cursor={page['next_cursor']}"


def test_the_log_pages_through_every_record_of_the_scope(world: tuple[Admin, Seeded]) -> None:
    admin, seeded = world
    acme = seeded.acme
    owner = admin.caller(acme.owner.secret)
    first = owner.ok("GET", "/usage/records?limit=7")
    expected = sum(acme.requests.values())
    assert first["total"] == expected and len(first["data"]) == 7
    assert first["facets"]["endpoints"] == ["chat", "messages", "responses"]
    assert first["facets"]["statuses"] == ["ok"]
    assert "nova-6-sol" in first["facets"]["models"]
    records = _all_pages(owner, "")
    assert len(records) == expected == len({r["request_id"] for r in records})
    assert {r["account_id"] for r in records} == {acme.account.id}
    starts = [(r["created_at"], r["request_id"]) for r in records]
    assert starts == sorted(starts, reverse=True)
    # The operator's view of that account is the same log.
    operator = admin.caller(seeded.operator)
    assert _all_pages(operator, f"account_id={acme.account.id}", limit=50) == records
    everything = operator.ok("GET", "/usage/records?limit=1")["total"]
    assert everything == expected + sum(seeded.globex.requests.values())


def test_filters_narrow_the_log(world: tuple[Admin, Seeded]) -> None:
    admin, seeded = world
    owner = admin.caller(seeded.acme.owner.secret)
    notebook = seeded.acme.keys["notebook"].record.id
    by_key = _all_pages(owner, f"key_id={notebook}", limit=50)
    assert len(by_key) == seeded.acme.requests["notebook"] and {r["key_id"] for r in by_key} == {notebook}
    assert {r["model"] for r in by_key} == {"aria-haiku-4.5"}

    opus = _all_pages(owner, "model=aria-opus-4.8", limit=50)
    assert opus and {r["model"] for r in opus} == {"aria-opus-4.8"}
    responses = _all_pages(owner, "endpoint=responses", limit=50)
    assert responses and {r["endpoint"] for r in responses} == {"responses"}
    assert _all_pages(owner, "status=client_disconnected") == []

    week = _all_pages(owner, f"from={MONTH}-08&to={MONTH}-14", limit=50)
    assert week and {r["created_at"][:10] for r in week} <= {f"{MONTH}-{d:02d}" for d in range(8, 15)}
    one_day = owner.ok("GET", f"/usage/records?from={MONTH}-09&to={MONTH}-09")
    assert {r["created_at"][:10] for r in one_day["data"]} == {f"{MONTH}-09"}
    combined = owner.ok(
        "GET", f"/usage/records?key_id={notebook}&from={MONTH}-09&to={MONTH}-09&model=aria-haiku-4.5"
    )
    assert combined["total"] == len(combined["data"]) > 0
    assert combined["facets"]["models"] == ["aria-haiku-4.5"]  # the key's scope
    # Facets list every value of the scope and dates, whatever the model/endpoint/status filters choose.
    haiku = owner.ok("GET", f"/usage/records?from={MONTH}-09&to={MONTH}-09&model=aria-haiku-4.5")
    assert {r["model"] for r in haiku["data"]} == {"aria-haiku-4.5"}
    assert set(haiku["facets"]["models"]) >= {"aria-haiku-4.5", "aria-sonnet-4.6"}


def test_csv_export_holds_exactly_the_filtered_records(world: tuple[Admin, Seeded]) -> None:
    admin, seeded = world
    owner = admin.caller(seeded.acme.owner.secret)
    query = f"from={MONTH}-03&to={MONTH}-17&endpoint=chat"
    response = owner.request("GET", f"/usage/records.csv?{query}")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "text/csv; charset=utf-8"
    assert response.headers["content-disposition"] == (
        f'attachment; filename="modelgate-usage-{MONTH}-03-{MONTH}-17.csv"'
    )
    assert response.headers["cache-control"] == "no-store"
    rows = list(csv.DictReader(io.StringIO(response.text)))
    expected = _all_pages(owner, query, limit=500)
    assert [r["request_id"] for r in rows] == [r["request_id"] for r in expected]
    for row, record in zip(rows, expected, strict=True):
        assert int(row["charged_uc"]) == record["charged_uc"] and row["charged"] == record["charged"]
        assert row["model"] == record["model"] and row["created_at"] == record["created_at"]
    # Too many rows for admin.csv_max_rows (150 in this module's config): refused, nothing streamed.
    operator = admin.caller(seeded.operator)
    assert operator.ok("GET", "/usage/records?limit=1")["total"] > 150
    refused = operator.request("GET", "/usage/records.csv")
    assert refused.status_code == 400 and "admin.csv_max_rows" in refused.json()["error"]["message"]
    # Another account's records never appear in an owner's export.
    assert {r["account_id"] for r in rows} == {str(seeded.acme.account.id)}


def test_daily_totals_and_top_keys(world: tuple[Admin, Seeded]) -> None:
    admin, seeded = world
    owner = admin.caller(seeded.acme.owner.secret)
    days = owner.ok("GET", f"/usage/daily?month={MONTH}")
    assert days["month"] == MONTH
    per_model = Counter[str]()
    for row in days["data"]:
        per_model[row["model"]] += row["requests"]
    records = _all_pages(owner, "", limit=500)
    assert per_model == Counter(r["model"] for r in records)
    assert sum(d["charged_uc"] for d in days["data"]) == sum(r["charged_uc"] for r in records)
    assert {d["day"] for d in days["data"]} == {f"{MONTH}-{n:02d}" for n in range(1, 21)}
    summary = owner.ok("GET", f"/usage?month={MONTH}")["summary"]
    assert summary["charged_uc"] == sum(d["charged_uc"] for d in days["data"])

    top = owner.ok("GET", f"/usage/top-keys?month={MONTH}&limit=2")["data"]
    spend = Counter[str]()
    for r in records:
        spend[r["key_id"]] += r["charged_uc"]
    assert [t["key_id"] for t in top] == [k for k, _ in spend.most_common(2)]
    assert top[0]["name"] in seeded.acme.keys and top[0]["charged_uc"] == spend.most_common(1)[0][1]
    everyone = admin.caller(seeded.operator).ok("GET", f"/usage/top-keys?month={MONTH}&limit=50")["data"]
    assert {t["account_id"] for t in everyone} == {seeded.acme.account.id, seeded.globex.account.id}


def test_key_views_carry_cap_activity_and_rotation(world: tuple[Admin, Seeded]) -> None:
    admin, seeded = world
    owner = admin.caller(seeded.acme.owner.secret)
    keys = {k["name"]: k for k in owner.ok("GET", "/keys")["data"]}
    ci = keys["ci-pipeline"]
    assert ci["monthly_cap_uc"] is not None and ci["monthly_cap_uc"] > ci["spent_this_month_uc"]
    assert (
        ci["cap_remaining_uc"]
        == ci["monthly_cap_uc"] - ci["spent_this_month_uc"] - ci["reserved_this_month_uc"]
    )
    assert ci["spent_this_month_uc"] > 0 and ci["last_used_at"].startswith(f"{MONTH}-20")
    assert ci["previous_secret_active"] is True and ci["previous_secret_valid_until"] is not None
    assert keys["old-laptop"]["state"] == "disabled" and keys["old-laptop"]["last_used_at"] is None
    assert keys["old-laptop"]["previous_secret_active"] is False
    assert owner.ok("GET", f"/keys/{ci['id']}") == ci


HOSTILE = [
    "from=2026-13-01",
    "from=2026-02-30",
    "from=20261101",
    "from=%D9%A2%D9%A0%D9%A2%D9%A6-11-01",  # Arabic-Indic digits
    "from=2026-11-01%0A",
    "to=9999-12-31",
    "from=0001-01-01",
    f"from={MONTH}-10&to={MONTH}-09",
    "limit=0",
    "limit=501",
    "limit=%C2%B2",
    "limit=-5",
    "limit=1e3",
    "cursor=garbage",
    "cursor=1e99~req_x",
    "cursor=nan~req_x",
    "cursor=1.5~req%00x",
    "cursor=" + "9" * 40 + "~req",
    "model=%3Cscript%3E",
    "model=" + "m" * 101,
    "status=ok%27%20OR%201%3D1",
    "endpoint=chat;drop",
    "account_id=%C2%B2",
    "account_id=99999999999999999999",
    "account_id=-1",
    "month=2026-11%0A",
]


@pytest.mark.parametrize("query", HOSTILE)
@pytest.mark.parametrize("path", ["/usage/records", "/usage/records.csv", "/usage/daily", "/usage/top-keys"])
def test_hostile_parameters_are_4xx_in_the_admin_shape(
    world: tuple[Admin, Seeded], path: str, query: str
) -> None:
    admin, seeded = world
    response = admin.caller(seeded.operator).request("GET", f"{path}?{query}")
    assert response.status_code < 500, response.text
    if response.status_code != 200:  # a parameter this endpoint does not take is ignored
        assert response.status_code == 400, response.text
        assert response.headers["content-type"] == "application/json"
        assert response.json()["error"]["type"] == "invalid_request_error"
