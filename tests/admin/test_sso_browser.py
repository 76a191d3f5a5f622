"""Single sign-on in Debian's headless Chromium: the dashboard's button, the real provider's sign-in
page, the way back to the dashboard signed in as the person, sign-out, and the refusals a browser
meets (a forged state, a replayed callback, an unverified email). The provider is Authlib's
authorization server on loopback (tests/fakes/oidc_provider.py)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import httpx
import pytest

from tests.admin.sso_fixtures import OPERATORS, SsoSetup, person, sso_gateway
from tests.browser import BROWSER, DESKTOP, Page, chromium

if BROWSER is None and os.environ.get("CI"):
    raise RuntimeError("CI needs Chromium for the dashboard tests: apt-get install chromium-headless-shell")
pytestmark = pytest.mark.skipif(
    BROWSER is None, reason="no Chromium: apt-get install chromium-headless-shell"
)

#: The single sign-on screenshots in docs/ are taken by these tests when `make screenshots` runs
#: them (MODELGATE_TEST_SCREENSHOTS=docs/screenshots); otherwise they go to a scratch folder, so a
#: test run leaves the work tree as it was.
SCREENSHOTS = os.environ.get("MODELGATE_TEST_SCREENSHOTS")


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    return Path(SCREENSHOTS) if SCREENSHOTS else tmp_path


@pytest.fixture(scope="module")
def sso(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SsoSetup]:
    with sso_gateway(tmp_path_factory.mktemp("sso-browser") / "data") as setup:
        yield setup


@pytest.fixture
def page(tmp_path: Path) -> Iterator[Page]:
    """A fresh browser (its own cookie jar) per test."""
    with chromium(tmp_path / "profile") as (tab, _):
        tab.viewport(DESKTOP)
        yield tab


def settle(page: Page, expression: str, seconds: float = 15) -> Any:
    """Wait for ``expression`` across navigations (evaluations fail while a page is replaced)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            value = page.js(expression)
        except AssertionError:
            value = None
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {expression}; at {page.js('location.href')}")


def through_provider(page: Page, sso: SsoSetup, username: str) -> None:
    """From the dashboard's sign-in page: the button, then the provider's form."""
    settle(page, "!document.getElementById('sso').hidden")
    page.js("document.getElementById('sso-link').click(); true")
    settle(
        page,
        f"location.href.startsWith({sso.provider.issuer + '/authorize'!r}) && !!document.getElementById('username')",
    )
    page.js(f"document.getElementById('username').value = {username!r}; document.forms[0].submit(); true")


def test_a_person_signs_in_to_the_dashboard_and_out_again(sso: SsoSetup, page: Page, shots: Path) -> None:
    alice = sso.provider.add_user(person("Alice", OPERATORS))
    page.goto(f"{sso.gateway.base_url}/dashboard")
    settle(page, "!document.getElementById('sso').hidden")
    page.screenshot(shots / "sso-sign-in.png", full_page=False)
    through_provider(page, sso, alice.sub)
    settle(page, "document.body.dataset.ready === 'overview'")
    assert page.js("location.pathname") == "/dashboard"
    assert page.js("document.getElementById('who').textContent") == "Alice <alice@example.com> · Operator"
    # The session cookie is HttpOnly: the page's scripts never see it.
    assert "mg_session" not in page.js("document.cookie")
    page.screenshot(shots / "sso-signed-in.png", full_page=False)
    # A write from the page (it carries the CSRF token): a new account, which the gateway agrees on.
    created = page.js(
        "import('/dashboard/api.js').then(m => m.api('POST', '/accounts', {name: 'made-in-browser'}))"
        ".then(a => a.name)"
    )
    assert created == "made-in-browser"
    page.js("document.getElementById('signout').click(); true")
    settle(page, "document.body.dataset.ready === 'signin'")
    status = page.js("fetch('/admin/api/me', {credentials: 'same-origin'}).then(r => r.status)")
    assert status == 401


def test_a_forged_state_and_a_replayed_callback_are_refused(sso: SsoSetup, page: Page) -> None:
    bob = sso.provider.add_user(person("Bob", OPERATORS))
    page.send("Network.enable", session=True)
    page.goto(f"{sso.gateway.base_url}/dashboard")
    through_provider(page, sso, bob.sub)
    settle(page, "document.body.dataset.ready === 'overview'")
    # The callback URL the provider sent the browser to, as the browser requested it; replay it.
    sent = [
        e["params"]["request"]["url"] for e in page.events if e.get("method") == "Network.requestWillBeSent"
    ]
    callback = next(url for url in sent if "/admin/api/sso/callback?" in url)
    page.send("Page.navigate", {"url": callback}, True)
    text = settle(
        page, "document.body && document.body.innerText.includes('state') && document.body.innerText"
    )
    assert "already used" in text
    params = dict(parse_qsl(urlsplit(callback).query))
    forged = f"{sso.gateway.base_url}/admin/api/sso/callback?" + urlencode({**params, "state": "forged"})
    page.send("Page.navigate", {"url": forged}, True)
    settle(
        page, f"location.href === {forged!r} && document.body.innerText.includes('unknown or already used')"
    )


def test_an_unverified_email_is_refused_in_the_browser(sso: SsoSetup, page: Page) -> None:
    eve = sso.provider.add_user(person("Eve", OPERATORS, verified=False))
    page.goto(f"{sso.gateway.base_url}/dashboard")
    through_provider(page, sso, eve.sub)
    settle(
        page,
        "location.pathname === '/admin/api/sso/callback' && document.body.innerText.includes('verified')",
    )
    page.goto(f"{sso.gateway.base_url}/dashboard")
    settle(page, "document.body.dataset.ready === 'signin'")
    assert page.js("fetch('/admin/api/me').then(r => r.status)") == 401


def test_an_owner_invites_a_member_from_the_people_view(sso: SsoSetup, page: Page, shots: Path) -> None:
    token = sso.gateway.call(sso.gateway.management.create_admin_token(None))
    account = sso.gateway.account("browser-team")
    with httpx.Client(
        base_url=sso.gateway.base_url, headers={"authorization": f"Bearer {token}"}
    ) as operator:
        first = operator.post("/admin/api/invites", json={"account_id": account.id, "role": "owner"}).json()
    olivia = sso.provider.add_user(person("Olivia"))
    page.send("Page.navigate", {"url": sso.gateway.base_url + first["link"]}, True)
    settle(page, "!!document.getElementById('username')")
    page.js(f"document.getElementById('username').value = {olivia.sub!r}; document.forms[0].submit(); true")
    settle(page, "document.body.dataset.ready === 'overview'")
    page.js("location.hash = '#/members'; true")
    settle(
        page,
        "document.body.dataset.ready === 'members' && !!document.querySelector('#members-rows [data-person]')",
    )
    assert page.js("document.querySelector('#members-rows tr').innerText").startswith("Olivia")
    page.js("document.getElementById('invite-new').click(); true")
    settle(page, "document.getElementById('dlg-invite').open")
    page.js(
        "document.getElementById('dlg-invite-email').value = 'mark@example.com';"
        "document.querySelector('#dlg-invite form').requestSubmit(); true"
    )
    link = settle(
        page,
        "document.getElementById('dlg-secret').open && document.getElementById('dlg-secret-value').value",
    )
    assert link.startswith(sso.gateway.base_url + "/admin/api/sso/login?invite=mg-inv-")
    page.js("document.querySelector('#dlg-secret form').requestSubmit(); true")
    settle(page, "!!document.querySelector('#invites-rows [data-invite]')")
    page.screenshot(shots / "people.png", full_page=False)
    # The link works for the person it was handed to, as a member.
    mark = sso.provider.add_user(person("Mark"))
    with sso.browser() as browser:
        assert sso.sign_in(browser, mark.sub, path=link.removeprefix(sso.gateway.base_url)).status_code == 303
        assert browser.get("/admin/api/me").json()["role"] == "member"
    page.js("location.hash = '#/members?refresh=1'; true")
    settle(page, "document.querySelectorAll('#members-rows [data-person]').length === 2")


def test_a_members_usage_log_opens_on_their_own_keys(sso: SsoSetup, page: Page) -> None:
    """The Usage log needs no key picked: a member sees their own keys' records, and no other's."""
    token = sso.gateway.call(sso.gateway.management.create_admin_token(None))
    account = sso.gateway.account("browser-usage")
    with httpx.Client(
        base_url=sso.gateway.base_url, headers={"authorization": f"Bearer {token}"}
    ) as operator:
        invite = operator.post("/admin/api/invites", json={"account_id": account.id, "role": "member"}).json()
    mia = sso.provider.add_user(person("Mia"))
    with sso.browser() as mias_api:  # Mia's keys, made by her (another session of hers)
        assert sso.sign_in(mias_api, mia.sub, path=invite["link"]).status_code == 303
        made = sso.write(mias_api, "POST", "/keys", {"group": "Basic", "name": "mia-notebook"})
        assert made.status_code == 201, made.text
    theirs = sso.gateway.key(account, "Basic", name="someone-elses")
    with httpx.Client(base_url=sso.gateway.base_url, timeout=30) as client:
        for secret, count in ((made.json()["secret"], 2), (theirs.secret, 3)):
            for _ in range(count):
                sent = client.post(
                    "/v1/chat/completions",
                    headers={"authorization": f"Bearer {secret}"},
                    json={
                        "model": "aria-haiku-4.5",
                        "max_tokens": 20,
                        "messages": [{"role": "user", "content": "hi"}],
                    },
                )
                assert sent.status_code == 200, sent.text
    sso.gateway.call(sso.gateway.services.settlements.drain())
    through_provider_page(page, sso, mia.sub)
    page.js("location.hash = '#/usage'; true")
    settle(
        page,
        "document.body.dataset.ready === 'usage' && document.querySelectorAll('#usage-rows tr').length === 2",
    )
    rows = page.js("[...document.querySelectorAll('#usage-rows tr')].map(tr => tr.innerText).join('\\n')")
    assert rows.count("mia-notebook") == 2 and theirs.record.id not in rows, rows
    assert page.js("document.getElementById('usage-count').textContent") == "2 records match"
    assert page.js("document.getElementById('status').textContent") == ""


def through_provider_page(page: Page, sso: SsoSetup, username: str) -> None:
    """Signed in to the dashboard in Chromium, from its sign-in page through the provider."""
    page.send("Page.navigate", {"url": sso.gateway.base_url + "/dashboard"}, True)
    through_provider(page, sso, username)
    settle(page, "document.body.dataset.ready === 'overview'")
