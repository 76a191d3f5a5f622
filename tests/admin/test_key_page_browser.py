"""The key holder's page (``/dashboard/key``) in Debian's headless Chromium, on a real gateway:
signed in with the API key itself it shows the key's caps, limits, models, expiry, ranges and
balance (or that the account hides it) and pages through the key's own usage, never another
key's; a wrong or expired key does not get in; signing out leaves nothing; the strict CSP holds
and the layout fits a phone.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from modelgate.management import IssuedKey
from tests.browser import BROWSER, DESKTOP, PHONE, Page, chromium
from tests.gateway_server import GatewayServer, running_gateway

if BROWSER is None and os.environ.get("CI"):
    raise RuntimeError("CI needs Chromium for the dashboard tests: apt-get install chromium-headless-shell")
pytestmark = pytest.mark.skipif(
    BROWSER is None, reason="no Chromium: apt-get install chromium-headless-shell"
)

SIZED_IF_HIDDEN = "[...document.querySelectorAll('[hidden]')].filter(e => { const r = e.getBoundingClientRect(); return r.width > 0 || r.height > 0; }).map(e => e.id || e.outerHTML.slice(0, 60))"


class World:
    def __init__(self, gw: GatewayServer) -> None:
        self.gw = gw
        self.account = gw.account("key-page", 40)
        self.key: IssuedKey = gw.key(
            self.account,
            "Pro",
            name="laptop",
            models=["aria-haiku-4.5"],
            monthly_cap_uc=9_000_000,
            expires_at=datetime(2099, 1, 31, tzinfo=UTC).timestamp(),
            allowed_ips=["127.0.0.0/8"],
        )
        self.other: IssuedKey = gw.key(self.account, "Pro", name="<b>other</b>")
        self.own_requests: list[str] = []
        with httpx.Client(base_url=gw.base_url, timeout=10) as http:
            for n in range(27):
                self.own_requests.append(self.chat(http, self.key.secret, n))
                if n % 9 == 0:
                    self.chat(http, self.other.secret, n)

    @staticmethod
    def chat(http: httpx.Client, secret: str, n: int) -> str:
        response = http.post(
            "/v1/chat/completions",
            headers={"authorization": f"Bearer {secret}"},
            json={
                "model": "aria-haiku-4.5",
                "max_tokens": 8,
                "messages": [{"role": "user", "content": f"hi {n}"}],
            },
        )
        assert response.status_code == 200, response.text
        return response.headers["request-id"]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with running_gateway(tmp_path_factory.mktemp("keypage") / "data") as server:
        yield World(server)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Page]:
    with chromium(tmp_path_factory.mktemp("chromium") / "profile") as (page, _):
        page.send("Log.enable", session=True)
        yield page


@pytest.fixture
def page(browser: Page, world: World) -> Page:
    browser.viewport(DESKTOP)
    browser.goto(f"{world.gw.base_url}/dashboard/key")
    browser.js("sessionStorage.clear(); true")
    browser.goto(f"{world.gw.base_url}/dashboard/key")
    browser.wait("document.body.dataset.ready === 'signin'")
    browser.events.clear()
    return browser


def sign_in(page: Page, secret: str, ready: str = "key") -> None:
    page.js(f"document.getElementById('key').value = {json.dumps(secret)}; true")
    page.js("document.getElementById('signin-form').requestSubmit(); true")
    page.wait(
        f"document.body.dataset.ready === {json.dumps(ready)} && document.getElementById('status').textContent !== 'x'"
    )


def text(page: Page, element_id: str) -> str:
    return str(page.js(f"document.getElementById({json.dumps(element_id)}).textContent"))


def shown_requests(page: Page) -> list[str]:
    rows = page.js(
        "[...document.querySelectorAll('#key-usage-rows tr[data-request]')].map(r => r.dataset.request)"
    )
    return [str(r) for r in rows]


def csp_violations(page: Page) -> list[str]:
    texts = [json.dumps(e.get("params", {})) for e in page.events]
    return [t for t in texts if "Content Security Policy" in t or "Refused to" in t]


def test_the_key_holder_sees_the_key_and_pages_through_its_own_usage(page: Page, world: World) -> None:
    sign_in(page, world.key.secret)
    cards = text(page, "key-cards")
    assert "Spend this month" in cards and "of 9.000 spent" in cards and "left" in cards
    assert "available" in cards and "60 / min" in cards
    facts = text(page, "key-facts")
    assert "aria-haiku-4.5" in facts and "2099-01-31 00:00 UTC" in facts and "127.0.0.0/8" in facts
    assert world.key.record.id in facts
    assert "laptop" in text(page, "who") and world.key.secret not in str(page.js("document.body.innerHTML"))
    first = shown_requests(page)
    assert len(first) == 25
    page.js("document.getElementById('key-page-next').click(); true")
    page.wait("document.querySelectorAll('#key-usage-rows tr[data-request]').length === 2")
    second = shown_requests(page)
    assert page.js("document.getElementById('key-page-next').disabled") is True
    assert first + second == list(reversed(world.own_requests))
    page.js("document.getElementById('key-page-prev').click(); true")
    page.wait("document.querySelectorAll('#key-usage-rows tr[data-request]').length === 25")
    assert shown_requests(page) == first
    assert csp_violations(page) == []

    # Signing out leaves nothing of the session in the tab.
    page.js("document.getElementById('signout').click(); true")
    page.wait("document.body.dataset.ready === 'signin'")
    assert page.js("sessionStorage.length") == 0
    assert text(page, "key-cards") == "" and text(page, "key-usage-rows") == "" and text(page, "who") == ""


def test_the_other_key_sees_only_its_own_requests_and_markup_stays_text(page: Page, world: World) -> None:
    sign_in(page, world.other.secret)
    assert len(shown_requests(page)) == 3
    assert not set(shown_requests(page)) & set(world.own_requests)
    assert "<b>other</b>" in text(page, "who")  # a name is text, never markup
    assert page.js("document.querySelector('#who b')") is None


def test_a_hidden_balance_says_so(page: Page, world: World) -> None:
    gw = world.gw
    gw.call(gw.management.set_hide_balance(world.account, True))
    try:
        sign_in(page, world.other.secret)
        assert "hidden" in text(page, "key-cards") and "available" not in text(page, "key-cards")
    finally:
        gw.call(gw.management.set_hide_balance(world.account, False))


def test_a_wrong_or_expired_key_does_not_get_in(page: Page, world: World) -> None:
    gw = world.gw
    sign_in(page, "sk-cs4-nonsense", ready="signin")
    page.wait("document.getElementById('status').textContent.includes('Sign-in failed')")
    assert page.js("sessionStorage.length") == 0
    expired = gw.key(world.account, "Basic", expires_at=1_000_000_000.0)
    sign_in(page, expired.secret, ready="signin")
    page.wait("document.getElementById('status').textContent.includes('expired')")
    assert page.js("document.getElementById('view-key').hidden") is True


def test_the_page_fits_a_phone(page: Page, world: World, tmp_path: Path) -> None:
    page.viewport(PHONE)
    sign_in(page, world.key.secret)
    assert page.js(SIZED_IF_HIDDEN) == []
    assert page.js("document.documentElement.scrollWidth <= window.innerWidth")


def test_the_key_dialogs_set_and_clear_expiry_and_ranges(page: Page, world: World) -> None:
    from tests.admin.conftest import Admin
    from tests.admin.test_dashboard_browser import (
        click,
        dialog_closed,
        dialog_open,
        read_secret,
        refreshed,
        set_value,
        submit_dialog,
        visit,
    )
    from tests.admin.test_dashboard_browser import (
        sign_in as admin_sign_in,
    )

    admin = Admin(world.gw)
    try:
        account = world.gw.account("dialog-access", 5)
        page.goto(f"{world.gw.base_url}/dashboard")
        admin_sign_in(page, admin.operator.token)
        visit(page, f"#/keys?account={account.id}")
        click(page, "#key-new")
        dialog_open(page, "dlg-key")
        set_value(page, "dlg-key-name", "bound")
        set_value(page, "dlg-key-expires", "2099-03-04T05:06")
        set_value(page, "dlg-key-ips", "203.0.113.0/24\n198.51.100.7, 2001:db8::/32")
        submit_dialog(page, "dlg-key")
        secret = read_secret(page)
        refreshed(page, "keys")
        (key,) = admin.operator.ok("GET", f"/keys?account_id={account.id}")["data"]
        assert key["expires_at"] == "2099-03-04T05:06:00Z"
        assert key["allowed_ips"] == ["203.0.113.0/24", "198.51.100.7/32", "2001:db8::/32"]
        assert admin.chat(secret).status_code == 403  # from 127.0.0.1
        row = f"tr[data-key='{key['id']}']"
        page.wait(f"document.querySelector(\"{row}\").textContent.includes('until 2099-03-04 05:06')")

        # A bad range is the API's message in the dialog, which stays open.
        click(page, f"{row} button[aria-label^='Edit']")
        dialog_open(page, "dlg-key")
        assert str(page.js("document.getElementById('dlg-key-expires').value")).startswith("2099-03-04T05:06")
        set_value(page, "dlg-key-ips", "300.1.1.1/8")
        submit_dialog(page, "dlg-key")
        page.wait("document.querySelector('#dlg-key .dialog-error').textContent.includes('300.1.1.1/8')")
        set_value(page, "dlg-key-ips", "")
        set_value(page, "dlg-key-expires", "")
        submit_dialog(page, "dlg-key")
        dialog_closed(page, "dlg-key")
        refreshed(page, "keys")
        cleared = admin.operator.ok("GET", f"/keys/{key['id']}")
        assert cleared["expires_at"] is None and cleared["allowed_ips"] is None
        world.gw.refresh_keys()
        assert admin.chat(secret).status_code == 200
        assert csp_violations(page) == []
    finally:
        admin.client.close()
