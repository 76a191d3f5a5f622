"""Conditional report answers (``admin.conditional``): every usage report carries an ``ETag``; a
poller that sends it back in ``If-None-Match`` gets 304 with no body while its answer is
unchanged; after new usage, the whole new answer once ``admin.report_recheck_seconds`` has passed
since the tag was read (a request without the tag reads the new figures at once). A tag names one
caller's own answer: another account's tag never turns into a 304 of different figures."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from modelgate.clock import month_of
from tests.admin.conftest import Admin, Caller, Tenant
from tests.gateway_server import ManualClock, running_gateway
from tests.observability.scrape import scrape

RECHECK = 2.0

#: The overview's calls (as the dashboard makes them) and the usage log's first page.
REPORTS = (
    "/usage?limit=0",
    "/usage",
    "/usage/daily",
    "/usage/top-keys?limit=8",
    "/usage/records",
    "/usage/records?limit=1",
)


@pytest.fixture(scope="module")
def clock() -> ManualClock:
    return ManualClock(time.time())


@pytest.fixture(scope="module")
def admin(tmp_path_factory: pytest.TempPathFactory, clock: ManualClock) -> Iterator[Admin]:
    data = tmp_path_factory.mktemp("etags") / "data"
    with running_gateway(data, clock=clock, admin={"report_recheck_seconds": RECHECK}) as server:
        helper = Admin(server)
        try:
            yield helper
        finally:
            helper.client.close()


def _tagged(caller: Caller, path: str) -> tuple[str, bytes]:
    answer = caller.request("GET", path)
    assert answer.status_code == 200, answer.text
    assert answer.headers["cache-control"] == "no-store"
    tag = answer.headers["etag"]
    assert tag.startswith('"') and tag.endswith('"') and len(tag) == 34
    return tag, answer.content


def _with_usage(admin: Admin) -> Tenant:
    tenant = admin.tenant(credits=100)
    assert admin.chat(tenant.key.secret).status_code == 200
    return tenant


@pytest.mark.parametrize("path", REPORTS)
def test_an_unchanged_report_is_304_and_new_usage_changes_it(
    admin: Admin, clock: ManualClock, path: str
) -> None:
    tenant = _with_usage(admin)
    owner = tenant.admin
    tag, body = _tagged(owner, path)
    again = owner.request("GET", path, headers={"if-none-match": tag})
    assert again.status_code == 304 and again.content == b""
    assert again.headers["etag"] == tag and again.headers["cache-control"] == "no-store"
    assert "content-type" not in again.headers
    # Weak and listed forms name the same answer (If-None-Match compares weakly).
    for value in (f"W/{tag}", f'"other", {tag}', f'"x" ,W/{tag}', "*"):
        assert owner.request("GET", path, headers={"if-none-match": value}).status_code == 304, value
    # Another tag, or none: the whole answer, the same bytes.
    for value in ('"0123"', tag[:-2] + '"', tag.strip('"'), ""):
        full = owner.request("GET", path, headers={"if-none-match": value})
        assert full.status_code == 200 and full.content == body and full.headers["etag"] == tag, value

    # New usage: the poller's tag is taken as current until the recheck window has passed since
    # it was read, then the new answer comes whole; a request without the tag reads it at once.
    assert admin.chat(tenant.key.secret).status_code == 200
    clock.advance(RECHECK - 0.1)
    assert owner.request("GET", path, headers={"if-none-match": tag}).status_code == 304
    token = admin.gateway.call(admin.gateway.management.issue_admin_token(tenant.account, name="reader"))
    fresh = admin.caller(token.secret).request("GET", path)
    assert fresh.status_code == 200 and fresh.content != body
    clock.advance(0.1)
    changed = owner.request("GET", path, headers={"if-none-match": tag})
    assert changed.status_code == 200 and changed.headers["etag"] != tag
    assert changed.content == fresh.content


def test_without_a_recheck_window_every_request_reads_the_report(tmp_path: Path) -> None:
    with running_gateway(tmp_path / "data", admin={"report_recheck_seconds": 0}) as server:
        admin = Admin(server)
        try:
            tenant = _with_usage(admin)
            owner = tenant.admin
            tag, _ = _tagged(owner, "/usage?limit=0")
            assert owner.request("GET", "/usage?limit=0", headers={"if-none-match": tag}).status_code == 304
            assert admin.chat(tenant.key.secret).status_code == 200
            after = owner.request("GET", "/usage?limit=0", headers={"if-none-match": tag})
            assert after.status_code == 200 and after.json()["summary"]["requests"] == 2
            assert after.json()["month"] == month_of(server.services.clock.time())
            found = scrape(server.base_url)
            # One 304, from a read report; nothing remembered without a window.
            assert found.by("modelgate_admin_reports_not_modified_total", "how") == {"read": 1}
            assert found.value("modelgate_admin_report_tags_remembered") == 0
        finally:
            admin.client.close()


def test_the_304s_and_the_remembered_tags_are_counted(tmp_path: Path) -> None:
    with running_gateway(tmp_path / "data", admin={"report_recheck_seconds": 60}) as server:
        admin = Admin(server)
        try:
            owner = _with_usage(admin).admin
            tags = [_tagged(owner, path)[0] for path in ("/usage?limit=0", "/usage/daily")]
            for _ in range(3):
                response = owner.request("GET", "/usage/daily", headers={"if-none-match": tags[1]})
                assert response.status_code == 304
            found = scrape(server.base_url)
            assert found.by("modelgate_admin_reports_not_modified_total", "how") == {"recent": 3}
            assert found.value("modelgate_admin_report_tags_remembered") == 2
        finally:
            admin.client.close()


def test_a_tag_is_taken_as_current_only_for_its_own_caller_and_url(admin: Admin, clock: ManualClock) -> None:
    tenant = _with_usage(admin)
    owner = tenant.admin
    tag, _ = _tagged(owner, "/usage/daily")
    long_url = "/usage/daily?pad=" + "x" * 600  # longer than MAX_RECENT_URL: never remembered
    long_tag, _ = _tagged(owner, long_url)
    assert admin.chat(tenant.key.secret).status_code == 200
    assert owner.request("GET", long_url, headers={"if-none-match": long_tag}).status_code == 200
    # Within the window, the same URL with the old tag is 304; another URL of the same report
    # (another query) or another caller holding the tag reads the report.
    assert owner.request("GET", "/usage/daily", headers={"if-none-match": tag}).status_code == 304
    other_url = owner.request(
        "GET", "/usage/daily?key_id=" + tenant.key.record.id, headers={"if-none-match": tag}
    )
    assert other_url.status_code == 200
    token = admin.gateway.call(admin.gateway.management.issue_admin_token(tenant.account, name="colleague"))
    colleague = admin.caller(token.secret).request("GET", "/usage/daily", headers={"if-none-match": tag})
    assert colleague.status_code == 200 and colleague.json()["data"][0]["requests"] == 2
    # A revoked token is refused even with a tag taken as current (authentication comes first).
    m = admin.gateway.management
    admin.gateway.call(m.revoke_admin_token(admin.gateway.call(m.admin_token(tenant.token_id))))
    assert owner.request("GET", "/usage/daily", headers={"if-none-match": tag}).status_code == 401
    clock.advance(RECHECK)


@pytest.mark.parametrize("path", REPORTS)
def test_another_accounts_tag_gets_the_callers_own_answer(admin: Admin, path: str) -> None:
    first, second = _with_usage(admin), _with_usage(admin)
    theirs, their_body = _tagged(first.admin, path)
    answer = second.admin.request("GET", path, headers={"if-none-match": theirs})
    # Both accounts made one request alike (their daily series are the same bytes), but a tag
    # names one caller's answer: never the other's 304.
    assert answer.status_code == 200 and answer.headers["etag"] != theirs
    if "/daily" not in path:  # the other answers name their account or keys
        assert answer.content != their_body
    mine = answer.headers["etag"]
    assert second.admin.request("GET", path, headers={"if-none-match": mine}).status_code == 304
    # Another token of the same account: its own tags too.
    token = admin.gateway.call(admin.gateway.management.issue_admin_token(second.account, name="second"))
    colleague = admin.caller(token.secret).request("GET", path, headers={"if-none-match": mine})
    assert colleague.status_code == 200 and colleague.content == answer.content
    # The operator's answer for that account is its own too (a wider scope, another tag).
    operator = admin.operator.request("GET", path, headers={"if-none-match": theirs})
    assert operator.status_code == 200


def test_a_refusal_is_never_a_304(admin: Admin) -> None:
    tenant = _with_usage(admin)
    other = _with_usage(admin)
    path = f"/usage/daily?account_id={other.account.id}"
    refused = tenant.admin.request("GET", path, headers={"if-none-match": "*"})
    assert refused.status_code == 404 and "etag" not in refused.headers
    bad = tenant.admin.request("GET", "/usage?month=2026-13", headers={"if-none-match": "*"})
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
