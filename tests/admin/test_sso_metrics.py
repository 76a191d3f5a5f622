"""Single sign-on in ``/metrics``, through the real server and a real OpenID provider on loopback:
each way a sign-in succeeds or is refused is counted once under its role or reason, refused
session cookies by reason, and the live sessions as the database holds them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from urllib.parse import parse_qsl, urlencode, urlsplit

import pytest

from tests.admin.sso_fixtures import OPERATORS, SsoSetup, person, sso_gateway
from tests.gateway_server import ManualClock
from tests.observability.scrape import Scrape, scrape

IDLE = 600.0


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(time.time())


@pytest.fixture
def sso(tmp_path_factory: pytest.TempPathFactory, clock: ManualClock) -> Iterator[SsoSetup]:
    rules = [{"group": "team-m", "account_id": 1, "role": "owner"}]
    with sso_gateway(
        tmp_path_factory.mktemp("sso-metrics") / "data",
        clock=clock,
        accounts=rules,
        session_idle_seconds=IDLE,
    ) as setup:
        setup.gateway.account("team-m")  # account 1
        yield setup


def _scrape(sso: SsoSetup) -> Scrape:
    return scrape(sso.gateway.base_url)


def _query(url: str) -> dict[str, str]:
    return dict(parse_qsl(urlsplit(url).query))


def test_sign_ins_and_their_refusals_are_counted_by_role_and_reason(
    sso: SsoSetup, clock: ManualClock
) -> None:
    before = _scrape(sso)
    assert before.by("modelgate_sso_sign_ins_total", "role") == {}
    assert before.by("modelgate_sso_sign_in_failures_total", "reason") == {}
    assert before.value("modelgate_admin_sessions_active") == 0

    operator = sso.provider.add_user(person("Opal", OPERATORS))
    owner = sso.provider.add_user(person("Otto", "team-m"))
    with sso.browser() as first, sso.browser() as second, sso.browser() as third:
        assert sso.sign_in(first, operator.sub).status_code == 303
        assert sso.sign_in(second, owner.sub).status_code == 303
        # A wrong state, then the real callback twice (the second is a replay: its state is used).
        callback = sso.approve(third, sso.start(third), operator.sub)
        forged = third.get("/admin/api/sso/callback?" + urlencode({**_query(callback), "state": "forged"}))
        assert forged.status_code == 400
        assert third.get(callback).status_code == 303
        assert third.get(callback).status_code == 400
        # The same code under a fresh state: the provider refuses to redeem it twice.
        fresh = _query(sso.approve(third, sso.start(third), operator.sub))
        code = _query(callback)["code"]
        replayed = third.get("/admin/api/sso/callback?" + urlencode({"code": code, "state": fresh["state"]}))
        assert replayed.status_code == 400
        # Started in one browser, finished in another.
        with sso.browser() as elsewhere:
            assert elsewhere.get(sso.approve(first, sso.start(first), operator.sub)).status_code == 400
            # A provider's error, a missing code, a value no gateway issues.
            assert elsewhere.get("/admin/api/sso/callback?error=access_denied").status_code == 401
            assert elsewhere.get("/admin/api/sso/callback?state=abc").status_code == 400
            assert elsewhere.get("/admin/api/sso/callback?state=" + "x" * 5000 + "&code=c").status_code == 400
            # An unknown invitation link.
            assert elsewhere.get("/admin/api/sso/login?invite=mg-inv-nothing").status_code == 400
        with sso.browser() as browser:
            unverified = sso.provider.add_user(person("Uma", OPERATORS, verified=False))
            assert sso.sign_in(browser, unverified.sub).status_code == 403
            nobody = sso.provider.add_user(person("Ned", "unrelated"))
            assert sso.sign_in(browser, nobody.sub).status_code == 403

        signed_in = _scrape(sso)
        assert signed_in.by("modelgate_sso_sign_ins_total", "role") == {"operator": 2, "owner": 1}
        assert signed_in.by("modelgate_sso_sign_in_failures_total", "reason") == {
            "unknown_state": 2,
            "code_refused": 1,
            "other_browser": 1,
            "provider_refused": 1,
            "missing_code": 1,
            "malformed": 1,
            "invite_invalid": 1,
            "unverified_email": 1,
            "no_mapping": 1,
        }
        assert signed_in.value("modelgate_admin_sessions_active") == 3

        # Sessions: one signs out, one goes idle and is refused at its next use.
        csrf = sso.session(third)["csrf_token"]
        assert third.post("/admin/api/sso/logout", headers={"x-csrf-token": csrf}).status_code == 200
        assert _scrape(sso).value("modelgate_admin_sessions_active") == 2
        clock.advance(IDLE + 1)
        assert _scrape(sso).value("modelgate_admin_sessions_active") == 0
        assert first.get("/admin/api/me").status_code == 401
        assert first.get("/admin/api/me").status_code == 401  # its row is gone: unknown now
    after = _scrape(sso)
    assert after.by("modelgate_admin_session_refusals_total", "reason") == {"idle": 1, "unknown": 1}
    for family in (
        "modelgate_sso_sign_in_failures",
        "modelgate_sso_sign_ins",
        "modelgate_admin_session_refusals",
    ):
        assert after.families[family].type == "counter"
    # Labels are fixed words: no person, email or subject reaches the metrics page.
    for who in (operator, owner):
        assert who.email not in after.text and who.sub not in after.text
