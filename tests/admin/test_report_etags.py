"""Conditional report answers (``admin.conditional``): every usage report carries an ``ETag``; a
poller that sends it back in ``If-None-Match`` gets 304 with no body while its answer is
unchanged, and the full new answer as soon as new usage changes it. A tag names one caller's own
answer: another account's tag never turns into a 304 of different figures."""

from __future__ import annotations

import pytest

from modelgate.clock import month_of
from tests.admin.conftest import Admin, Caller, Tenant

#: The overview's calls (as the dashboard makes them) and the usage log's first page.
REPORTS = (
    "/usage?limit=0",
    "/usage",
    "/usage/daily",
    "/usage/top-keys?limit=8",
    "/usage/records",
    "/usage/records?limit=1",
)


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
def test_an_unchanged_report_is_304_and_new_usage_changes_it(admin: Admin, path: str) -> None:
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

    # New usage: the tag no longer matches, and the answer shows it at once (no cache in between).
    assert admin.chat(tenant.key.secret).status_code == 200
    changed = owner.request("GET", path, headers={"if-none-match": tag})
    assert changed.status_code == 200 and changed.headers["etag"] != tag and changed.content != body


def test_the_month_summary_after_a_304_is_the_new_one(admin: Admin) -> None:
    tenant = _with_usage(admin)
    owner = tenant.admin
    tag, _ = _tagged(owner, "/usage?limit=0")
    assert owner.request("GET", "/usage?limit=0", headers={"if-none-match": tag}).status_code == 304
    assert admin.chat(tenant.key.secret).status_code == 200
    after = owner.request("GET", "/usage?limit=0", headers={"if-none-match": tag})
    assert after.status_code == 200 and after.json()["summary"]["requests"] == 2
    assert after.json()["month"] == month_of(admin.gateway.services.clock.time())


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
