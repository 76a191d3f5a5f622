"""Single sign-on (OpenID Connect) end to end against a real provider on loopback: sign-in,
refusals (state, replayed code, unverified email, no role, another browser), group mappings,
sessions (CSRF, expiry, sign-out) and admin tokens beside them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit

import pytest

from modelgate.config import ConfigError, load_settings
from modelgate.storage.base import Account
from tests.admin.sso_fixtures import OPERATORS, SsoSetup, person, sso_gateway
from tests.gateway_server import ManualClock

IDLE = 600.0
ROTATE = 300.0


@pytest.fixture(scope="module")
def clock() -> ManualClock:
    return ManualClock(time.time())


@pytest.fixture(scope="module")
def team_account(sso: SsoSetup) -> Account:
    found = sso.gateway.call(sso.gateway.services.accounts.get_account(1))
    assert found is not None and found.name == "team-a"
    return found


@pytest.fixture(scope="module")
def sso(tmp_path_factory: pytest.TempPathFactory, clock: ManualClock) -> Iterator[SsoSetup]:
    # The rule names account 1: the first account this fresh database makes (team_account).
    rules = [{"group": "team-a", "account_id": 1, "role": "owner"}]
    with sso_gateway(
        tmp_path_factory.mktemp("sso") / "data",
        clock=clock,
        accounts=rules,
        session_idle_seconds=IDLE,
        session_rotate_seconds=ROTATE,
    ) as setup:
        setup.gateway.account("team-a")  # account 1, before any test makes another
        yield setup


def test_an_operator_signs_in_and_the_session_authenticates_the_admin_api(sso: SsoSetup) -> None:
    alice = sso.provider.add_user(person("Alice", OPERATORS))
    with sso.browser() as browser:
        answer = sso.sign_in(browser, alice.sub)
        assert answer.status_code == 303, answer.text
        assert answer.headers["location"] == "/dashboard"
        cookie = next(c for c in answer.headers.get_list("set-cookie") if c.startswith("mg_session="))
        attributes = {part.strip().split("=")[0].lower() for part in cookie.split(";")}
        assert {"httponly", "path", "max-age", "samesite"} <= attributes
        assert "samesite=lax" in cookie.lower() and "path=/admin/api" in cookie.lower()
        assert "secure" not in attributes  # loopback HTTP only
        me = browser.get("/admin/api/me").json()
        assert me["scope"] == "operator" and me["role"] == "operator"
        assert me["actor"] == "Alice <alice@example.com>"
        # The stored session is a digest: the cookie's value is nowhere in the database.
        value = browser.cookies["mg_session"]
        stored = sso.gateway.call(sso.gateway.services.people.find_session(value.encode()))
        assert stored is None
        # Writes need the CSRF token; with it, the person manages the gateway.
        refused = browser.post("/admin/api/accounts", json={"name": "by-alice"})
        assert refused.status_code == 403 and "x-csrf-token" in refused.json()["error"]["message"]
        wrong = browser.post("/admin/api/accounts", json={"name": "by-alice"}, headers={"x-csrf-token": "x"})
        assert wrong.status_code == 403
        created = sso.write(browser, "POST", "/accounts", {"name": "by-alice"})
        assert created.status_code == 201, created.text
        # A request a browser marks cross-site is refused even for reads.
        cross = browser.get("/admin/api/me", headers={"sec-fetch-site": "cross-site"})
        assert cross.status_code == 403
        # Signing out ends the session everywhere it was used.
        assert sso.write(browser, "POST", "/sso/logout").json() == {"signed_out": True}
        browser.cookies.set("mg_session", value, domain="127.0.0.1", path="/admin/api")
        assert browser.get("/admin/api/me").status_code == 401


def test_a_group_rule_maps_a_person_to_an_account_as_owner(sso: SsoSetup, team_account: Account) -> None:
    bob = sso.provider.add_user(person("Bob", "team-a"))
    other = sso.gateway.account("not-bobs")
    with sso.browser() as browser:
        assert sso.sign_in(browser, bob.sub).status_code == 303
        me = browser.get("/admin/api/me").json()
        assert me["scope"] == "account" and me["role"] == "owner"
        assert me["account"]["id"] == team_account.id
        # Another account answers exactly like a missing one.
        hidden = browser.get(f"/admin/api/accounts/{other.id}")
        missing = browser.get("/admin/api/accounts/999999")
        assert hidden.status_code == missing.status_code == 404
        assert hidden.json()["error"]["message"] == f"account {other.id} not found"
        assert browser.get("/admin/api/accounts").status_code == 403  # operators only
        members = sso.gateway.call(sso.gateway.services.people.members(team_account.id))
        assert [(m.person.email, m.role) for m in members] == [("bob@example.com", "owner")]


def test_a_wrong_state_is_refused_and_the_real_one_still_works(sso: SsoSetup) -> None:
    carol = sso.provider.add_user(person("Carol", OPERATORS))
    with sso.browser() as browser:
        callback = sso.approve(browser, sso.start(browser), carol.sub)
        params = dict(parse_qsl(urlsplit(callback).query))
        forged = browser.get("/admin/api/sso/callback?" + urlencode({**params, "state": "forged-state"}))
        assert forged.status_code == 400 and "state" in forged.json()["error"]["message"]
        assert "mg_session" not in browser.cookies
        assert browser.get(callback).status_code == 303


def test_a_replayed_code_is_refused(sso: SsoSetup) -> None:
    dave = sso.provider.add_user(person("Dave", OPERATORS))
    with sso.browser() as browser:
        callback = sso.approve(browser, sso.start(browser), dave.sub)
        assert browser.get(callback).status_code == 303
        # The same callback again: its state was taken once.
        again = browser.get(callback)
        assert again.status_code == 400
        # The same code under a fresh sign-in's state: the provider refuses to redeem it twice.
        code = dict(parse_qsl(urlsplit(callback).query))["code"]
        fresh = dict(parse_qsl(urlsplit(sso.approve(browser, sso.start(browser), dave.sub)).query))
        replay = browser.get("/admin/api/sso/callback?" + urlencode({"code": code, "state": fresh["state"]}))
        assert replay.status_code == 400, replay.text
        assert "refused the code" in replay.json()["error"]["message"]
        assert sso.provider.redemptions.count(code) == 2


def test_an_unverified_email_is_refused(sso: SsoSetup) -> None:
    eve = sso.provider.add_user(person("Eve", OPERATORS, verified=False))
    with sso.browser() as browser:
        answer = sso.sign_in(browser, eve.sub)
        assert answer.status_code == 403
        assert "verified" in answer.json()["error"]["message"]
        assert "mg_session" not in browser.cookies
        assert browser.get("/admin/api/me").status_code == 401


def test_a_person_without_a_role_is_refused(sso: SsoSetup) -> None:
    frank = sso.provider.add_user(person("Frank", "unrelated-group"))
    with sso.browser() as browser:
        answer = sso.sign_in(browser, frank.sub)
        assert answer.status_code == 403 and "no role" in answer.json()["error"]["message"]
        assert "mg_session" not in browser.cookies


def test_a_callback_in_another_browser_is_refused(sso: SsoSetup) -> None:
    grace = sso.provider.add_user(person("Grace", OPERATORS))
    with sso.browser() as started, sso.browser() as victim:
        callback = sso.approve(started, sso.start(started), grace.sub)
        answer = victim.get(callback)
        assert answer.status_code == 400 and "another browser" in answer.json()["error"]["message"]
        assert "mg_session" not in victim.cookies


def test_sessions_end_when_idle_and_admin_tokens_keep_working(sso: SsoSetup, clock: ManualClock) -> None:
    heidi = sso.provider.add_user(person("Heidi", OPERATORS))
    token = sso.gateway.call(sso.gateway.management.create_admin_token(None))
    with sso.browser() as browser:
        assert sso.sign_in(browser, heidi.sub).status_code == 303
        assert browser.get("/admin/api/me").status_code == 200
        # An Authorization header wins over the cookie: automation is unchanged.
        me = browser.get("/admin/api/me", headers={"authorization": f"Bearer {token}"}).json()
        assert me["role"] is None and me["actor"] == me["token_id"]
        clock.advance(IDLE + 1)
        ended = browser.get("/admin/api/me")
        assert ended.status_code == 401 and "ended" in ended.json()["error"]["message"]
        assert browser.get("/admin/api/me", headers={"authorization": f"Bearer {token}"}).status_code == 200


def test_the_dashboard_learns_whether_sign_in_is_offered(sso: SsoSetup) -> None:
    with sso.browser() as browser:
        assert browser.get("/admin/api/sso").json() == {"enabled": True, "login_url": "/admin/api/sso/login"}


@pytest.mark.parametrize(
    ("sso", "message"),
    [
        ({"issuer": "http://idp.example.com", "client_id": "c"}, "sso.issuer"),
        (
            {"issuer": "https://idp.example.com", "redirect_url": "https://gw/admin/api/sso/callback"},
            "client_id",
        ),
        ({"issuer": "https://idp.example.com", "client_id": "c"}, "redirect_url"),
        (
            {"issuer": "https://idp.example.com", "client_id": "c", "redirect_url": "https://gw/cb"},
            "redirect_url",
        ),
        (
            {
                "issuer": "https://i",
                "client_id": "c",
                "redirect_url": "https://gw/admin/api/sso/callback",
                "scopes": ["email"],
            },
            "sso.scopes",
        ),
        ({"accounts": [{"group": "g", "account_id": 0}]}, "sso.accounts.0.account_id"),
        ({"session_idle_seconds": 5}, "sso.session_idle_seconds"),
    ],
)
def test_sso_settings_are_validated_with_messages_naming_the_key(
    sso: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings(None, environ={}, sso=sso)
    assert message in str(raised.value)


def test_sso_settings_come_from_the_environment_too() -> None:
    settings = load_settings(
        None,
        environ={
            "MODELGATE_SSO__ISSUER": "https://idp.example.com",
            "MODELGATE_SSO__CLIENT_ID": "gw",
            "MODELGATE_SSO__REDIRECT_URL": "https://gw.example.com/admin/api/sso/callback",
            "MODELGATE_SSO__OPERATOR_GROUPS": '["admins"]',
        },
    )
    assert settings.sso.enabled and settings.sso.operator_groups == ["admins"] and settings.sso.secure_cookies


def test_sign_ins_under_way_are_bounded(tmp_path: Path) -> None:
    clock = ManualClock(time.time())
    with (
        sso_gateway(tmp_path / "data", clock=clock, max_pending_sign_ins=2) as setup,
        setup.browser() as browser,
    ):
        setup.start(browser)
        setup.start(browser)
        refused = browser.get("/admin/api/sso/login")
        assert refused.status_code == 429 and refused.headers["retry-after"] == "60"
        assert refused.json()["error"]["type"] == "rate_limit_error"
        # Unfinished sign-ins expire after login_timeout_seconds, and new ones start again.
        clock.advance(setup.gateway.settings.sso.login_timeout_seconds + 1)
        setup.start(browser)


def test_a_session_in_use_gets_a_new_id_and_the_old_one_ends_soon_after(
    sso: SsoSetup, clock: ManualClock
) -> None:
    ivan = sso.provider.add_user(person("Ivan", OPERATORS))
    with sso.browser() as browser:
        assert sso.sign_in(browser, ivan.sub).status_code == 303
        first = browser.cookies["mg_session"]
        csrf = sso.session(browser)["csrf_token"]
        clock.advance(ROTATE + 1)
        renewed = browser.get("/admin/api/accounts/987654321")  # any answer carries the new id
        assert renewed.status_code == 404
        second = browser.cookies["mg_session"]
        assert second != first
        # The new id keeps the person, the role and the CSRF token.
        assert sso.session(browser)["csrf_token"] == csrf
        assert browser.get("/admin/api/me").json()["actor"] == "Ivan <ivan@example.com>"
        # The old id still works for requests already on their way, without rotating again.
        with sso.browser() as late:
            late.cookies.set("mg_session", first, domain="127.0.0.1", path="/admin/api")
            old = late.get("/admin/api/me")
            assert old.status_code == 200 and "mg_session=" not in old.headers.get("set-cookie", "")
        clock.advance(31)
        with sso.browser() as stale:
            stale.cookies.set("mg_session", first, domain="127.0.0.1", path="/admin/api")
            assert stale.get("/admin/api/me").status_code == 401
        assert browser.get("/admin/api/me").status_code == 200
        # Signing out right when a rotation is due ends both ids.
        clock.advance(ROTATE + 1)
        signed_out = browser.post("/admin/api/sso/logout", headers={"x-csrf-token": csrf})
        assert signed_out.status_code == 200
        assert "mg_session" not in browser.cookies
        for value in (second, first):
            with sso.browser() as again:
                again.cookies.set("mg_session", value, domain="127.0.0.1", path="/admin/api")
                assert again.get("/admin/api/me").status_code == 401


def test_a_refused_cross_site_or_csrf_less_request_never_signs_the_person_out(
    sso: SsoSetup, clock: ManualClock
) -> None:
    """Refused writes leave the session's id alone even when its rotation is due: the refusal sets
    no cookie, so rotating there would leave the browser holding an id about to end."""
    vera = sso.provider.add_user(person("Vera", OPERATORS))
    with sso.browser() as browser:
        assert sso.sign_in(browser, vera.sub).status_code == 303
        held = browser.cookies["mg_session"]
        clock.advance(ROTATE + 1)
        cross = browser.get("/admin/api/me", headers={"sec-fetch-site": "cross-site"})
        assert cross.status_code == 403 and "mg_session=" not in cross.headers.get("set-cookie", "")
        bare = browser.post("/admin/api/sso/logout")
        assert bare.status_code == 403
        assert "GET /admin/api/sso/session" in bare.json()["error"]["message"]
        assert browser.cookies["mg_session"] == held
        # Long after the old id's grace would have run out, the browser's id still works.
        clock.advance(31)
        assert browser.get("/admin/api/me").status_code == 200
        assert browser.cookies["mg_session"] != held  # rotated now, by an accepted request
        assert browser.get("/admin/api/me").status_code == 200
