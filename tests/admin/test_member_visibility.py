"""What a member (not an owner) of an account sees and may change, through the real server signed
in with single sign-on: their own keys only (paging, search, cursors and spend never name another
key), limits on their keys they may only lower, and no audit log, ledger or statement."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from modelgate.storage.base import Account
from tests.admin.sso_fixtures import SsoSetup, person, sso_gateway
from tests.gateway_server import ManualClock


@dataclass
class Team:
    account: Account
    owner: httpx.Client
    mark: httpx.Client
    nina: httpx.Client
    #: key name -> the key as created (with its one-time secret)
    keys: dict[str, dict[str, Any]]


def ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json()


@pytest.fixture(scope="module")
def clock() -> ManualClock:
    return ManualClock(time.time())


@pytest.fixture(scope="module")
def sso(tmp_path_factory: pytest.TempPathFactory, clock: ManualClock) -> Iterator[SsoSetup]:
    with sso_gateway(tmp_path_factory.mktemp("member-view") / "data", clock=clock) as setup:
        yield setup


def _join(
    sso: SsoSetup,
    operator: httpx.Client | None,
    owner: httpx.Client | None,
    account: Account,
    name: str,
    role: str,
) -> httpx.Client:
    if operator is not None:
        made = ok(operator.post("/invites", json={"account_id": account.id, "role": role}), 201)
    else:
        assert owner is not None
        made = ok(sso.write(owner, "POST", "/invites", {"role": role}), 201)
    user = sso.provider.add_user(person(name))
    browser = sso.browser()
    assert sso.sign_in(browser, user.sub, path=made["link"]).status_code == 303
    return browser


@pytest.fixture(scope="module")
def team(sso: SsoSetup, clock: ManualClock) -> Iterator[Team]:
    account = sso.gateway.account("members-view")
    token = sso.gateway.call(sso.gateway.management.create_admin_token(None))
    with httpx.Client(
        base_url=sso.gateway.base_url + "/admin/api", headers={"authorization": f"Bearer {token}"}, timeout=10
    ) as operator:
        owner = _join(sso, operator, None, account, "Olivia", "owner")
    mark = _join(sso, None, owner, account, "Mark", "member")
    nina = _join(sso, None, owner, account, "Nina", "member")
    keys: dict[str, dict[str, Any]] = {}
    # The owner's and Nina's keys come first and in between, so a page cut before filtering
    # would start with (and point its cursor at) a key Mark cannot see.
    for who, name, extra in [
        (owner, "olivia-ci", {}),
        (nina, "nina-secret-project", {}),
        (mark, "mark-alpha", {"monthly_cap": "10", "rpm": 20}),
        (owner, "olivia-batch", {}),
        (mark, "mark-beta", {}),
        (nina, "nina-notebook", {}),
        (mark, "mark-gamma", {}),
    ]:
        clock.advance(1)  # keys are listed in creation order
        keys[name] = ok(sso.write(who, "POST", "/keys", {"group": "Basic", "name": name, **extra}), 201)
    try:
        yield Team(account, owner, mark, nina, keys)
    finally:
        for browser in (owner, mark, nina):
            browser.close()


def _others(team: Team) -> list[str]:
    return [k["id"] for name, k in team.keys.items() if not name.startswith("mark-")]


def _walk(browser: httpx.Client, **params: Any) -> tuple[list[str], list[str]]:
    """Every page of ``GET /keys`` with ``limit=1``: the ids in order and the raw answers."""
    ids: list[str] = []
    texts: list[str] = []
    cursor: str | None = None
    while True:
        answer = browser.get(
            "/admin/api/keys", params={"limit": 1, **params, **({"after": cursor} if cursor else {})}
        )
        texts.append(ok(answer) and answer.text)
        page = answer.json()
        ids += [k["id"] for k in page["data"]]
        cursor = page["next_cursor"]
        if cursor is None:
            return ids, texts
        assert len(page["data"]) == 1  # never an empty page with a cursor
        assert len(texts) < 20


def test_a_member_pages_and_searches_only_their_own_keys(team: Team) -> None:
    marks = [team.keys[n]["id"] for n in ("mark-alpha", "mark-beta", "mark-gamma")]
    ids, texts = _walk(team.mark)
    assert ids == marks
    searched, more = _walk(team.mark, q="MARK-")
    assert searched == marks
    # A guess at another's key name finds nothing and says nothing: no data, no cursor. (Guesses
    # of two letters would match random key ids now and then: the search covers ids too.)
    for guess in ("nina", "secret", "olivia", "olivia-ci"):
        answer = ok(team.mark.get("/admin/api/keys", params={"limit": 1, "q": guess}))
        assert answer["data"] == [] and answer["next_cursor"] is None
    # The ones a member gets in pages of 2 are the same, and the owner still sees all seven.
    two = ok(team.mark.get("/admin/api/keys", params={"limit": 2}))
    assert [k["id"] for k in two["data"]] == marks[:2] and two["next_cursor"] is not None
    assert len(ok(team.owner.get("/admin/api/keys"))["data"]) == 7
    for text in texts + more:
        assert not any(other in text for other in _others(team))


def test_a_member_may_only_lower_their_keys_limits(sso: SsoSetup, team: Team) -> None:
    alpha = team.keys["mark-alpha"]["id"]
    for body in ({"monthly_cap": None}, {"monthly_cap": "11"}, {"monthly_cap_uc": None}, {"rpm": 21}):
        refused = sso.write(team.mark, "PATCH", f"/keys/{alpha}", body)
        assert refused.status_code == 403, (body, refused.text)
        assert "may only lower" in refused.json()["error"]["message"]
    # A key without a cap cannot be given one by its member and left unbounded either way.
    beta = team.keys["mark-beta"]["id"]
    assert sso.write(team.mark, "PATCH", f"/keys/{beta}", {"monthly_cap": "5"}).status_code == 403
    lowered = ok(sso.write(team.mark, "PATCH", f"/keys/{alpha}", {"monthly_cap": "4", "rpm": 10}))
    assert (lowered["monthly_cap_uc"], lowered["rpm"]) == (4_000_000, 10)
    # Nothing changed by the refusals; the owner raises and clears as before.
    raised = ok(sso.write(team.owner, "PATCH", f"/keys/{alpha}", {"monthly_cap": None, "rpm": 50}))
    assert (raised["monthly_cap_uc"], raised["rpm"]) == (None, 50)


def test_a_member_creates_keys_only_in_their_account_at_the_default_rate(sso: SsoSetup, team: Team) -> None:
    default_rpm = sso.gateway.settings.keys.default_rpm
    elsewhere = sso.gateway.account("members-view-elsewhere")
    gone = sso.write(team.mark, "POST", "/keys", {"group": "Basic", "account_id": elsewhere.id})
    missing = sso.write(team.mark, "POST", "/keys", {"group": "Basic", "account_id": 987654321})
    assert gone.status_code == missing.status_code == 404
    too_fast = sso.write(team.mark, "POST", "/keys", {"group": "Basic", "rpm": default_rpm + 1})
    assert too_fast.status_code == 403 and "keys.default_rpm" in too_fast.json()["error"]["message"]
    made = ok(
        sso.write(team.mark, "POST", "/keys", {"group": "Basic", "name": "mark-delta", "tpm": 500}), 201
    )
    assert made["account_id"] == team.account.id and made["rpm"] == default_rpm
    assert ok(sso.write(team.mark, "POST", f"/keys/{made['id']}/revoke"))["state"] == "disabled"


def test_a_member_sees_no_audit_log_ledger_or_statement(team: Team) -> None:
    account = team.account.id
    paths = [
        "/admin/api/audit",
        f"/admin/api/audit?account_id={account}",
        f"/admin/api/audit?account_id={account}&format=csv",
        f"/admin/api/accounts/{account}/ledger",
        f"/admin/api/accounts/{account}/statement",
    ]
    for path in paths:
        refused = team.mark.get(path)
        assert refused.status_code == 403, (path, refused.text)
        assert refused.json()["error"]["type"] == "permission_error"
        assert not any(other in refused.text for other in _others(team))
    for path in paths:
        assert team.owner.get(path).status_code == 200, path


def _spend(sso: SsoSetup, team: Team, counts: tuple[tuple[str, int], ...]) -> None:
    with httpx.Client(base_url=sso.gateway.base_url, timeout=30) as client:
        for name, count in counts:
            for _ in range(count):
                sent = client.post(
                    "/v1/chat/completions",
                    headers={"authorization": f"Bearer {team.keys[name]['secret']}"},
                    json={
                        "model": "aria-haiku-4.5",
                        "max_tokens": 50,
                        "messages": [{"role": "user", "content": "hi"}],
                    },
                )
                assert sent.status_code == 200, sent.text


def test_a_members_top_keys_and_records_are_their_own(sso: SsoSetup, team: Team) -> None:
    _spend(sso, team, (("olivia-ci", 3), ("nina-notebook", 2), ("mark-beta", 2), ("mark-gamma", 1)))
    top = ok(team.mark.get("/admin/api/usage/top-keys", params={"limit": 50}))["data"]
    assert [t["key_id"] for t in top] == [team.keys["mark-beta"]["id"], team.keys["mark-gamma"]["id"]]
    assert [t["requests"] for t in top] == [2, 1] and all(
        t["charged_uc"] > 0 and t["tokens"] > 0 for t in top
    )
    assert [t["name"] for t in top] == ["mark-beta", "mark-gamma"]
    # The owner's top keys over the same month agree on Mark's keys' figures.
    everyone = {
        t["key_id"]: t for t in ok(team.owner.get("/admin/api/usage/top-keys", params={"limit": 50}))["data"]
    }
    assert len(everyone) == 4 and all(everyone[t["key_id"]] == t for t in top)
    assert ok(team.mark.get("/admin/api/usage/top-keys", params={"limit": 1}))["data"] == top[:1]
    # Latest records: only their own keys'.
    records = ok(team.mark.get("/admin/api/usage"))["records"]
    assert {r["key_id"] for r in records} == {t["key_id"] for t in top} and len(records) == 3
    own = ok(team.mark.get("/admin/api/usage/records", params={"key_id": team.keys["mark-beta"]["id"]}))
    assert len(own["data"]) == 2
    nina = team.keys["nina-notebook"]["id"]
    assert team.mark.get("/admin/api/usage/records", params={"key_id": nina}).status_code == 404
    for path in ("/admin/api/usage", "/admin/api/usage/top-keys", "/admin/api/usage/daily"):
        assert not any(other in team.mark.get(path).text for other in _others(team)), path


def test_a_members_usage_log_without_a_key_is_their_own_keys(sso: SsoSetup, team: Team) -> None:
    """The dashboard's usage log opens without a key: a member gets all of their own keys'
    records (pages, count, facets, CSV, quality), never a record of another key."""
    _spend(sso, team, (("nina-secret-project", 2), ("mark-alpha", 1), ("olivia-batch", 1), ("mark-gamma", 1)))
    marks = {team.keys[n]["id"] for n in ("mark-alpha", "mark-beta", "mark-gamma")}
    everyone = ok(team.owner.get("/admin/api/usage/records", params={"limit": 500}))
    theirs = [r for r in everyone["data"] if r["key_id"] in marks]
    assert len(theirs) >= 3 and len(everyone["data"]) > len(theirs)  # the owner's log holds others
    seen: list[dict[str, Any]] = []
    cursor: str | None = None
    first = ok(team.mark.get("/admin/api/usage/records", params={"limit": 1}))
    assert first["total"] == len(theirs)
    page = first
    while True:
        seen += page["data"]
        cursor = page["next_cursor"]
        if cursor is None:
            break
        page = ok(team.mark.get("/admin/api/usage/records", params={"limit": 1, "cursor": cursor}))
        assert len(seen) < 20
    assert [r["request_id"] for r in seen] == [r["request_id"] for r in theirs]
    csv = team.mark.get("/admin/api/usage/records.csv")
    assert csv.status_code == 200 and len(csv.text.strip().splitlines()) == 1 + len(theirs)
    quality = team.mark.get("/admin/api/usage/quality")
    assert quality.status_code == 200, quality.text
    # Filters and an account id narrow within their own keys; another account is not found.
    filtered = ok(team.mark.get("/admin/api/usage/records", params={"account_id": team.account.id}))
    assert {r["key_id"] for r in filtered["data"]} <= marks and filtered["total"] == len(theirs)
    assert set(first["facets"]["models"]) == {r["model"] for r in theirs}
    for answer in (first, filtered):
        assert not any(other in str(answer) for other in _others(team))
    assert not any(other in csv.text + quality.text for other in _others(team))
    # The latest records of the summary: as many of their own as asked for, though the owner's
    # key spent in between (the newest two of theirs, not their share of the newest two).
    latest = ok(team.mark.get("/admin/api/usage", params={"limit": 2}))["records"]
    assert [r["request_id"] for r in latest] == [r["request_id"] for r in theirs[:2]]
    assert ok(team.mark.get("/admin/api/usage", params={"limit": 0}))["records"] == []
