"""The dashboard driven in Debian's headless Chromium over the DevTools protocol, on a gateway with a
month of real traffic (tests/admin/seed.py).

Every view renders with data at 1280 px and at phone width; an element with the `hidden` attribute
takes no space; every action works end to end (the gateway agrees afterwards); an account owner
never sees another account's data; signing out leaves nothing of the last session in the page;
dialogs are the page's own (window.prompt/confirm never run) and work from the keyboard; the strict
CSP holds (no violation reported). scripts/services.sh installs the browser for `make test`; under
CI a missing browser is a failure, elsewhere the tests are skipped with the install command.
"""

from __future__ import annotations

import csv
import io
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.admin.conftest import Admin
from tests.admin.seed import Seeded, seed
from tests.browser import BROWSER, DESKTOP, PHONE, Page, chromium, group_members
from tests.gateway_server import ManualClock, running_gateway

if BROWSER is None and os.environ.get("CI"):
    raise RuntimeError("CI needs Chromium for the dashboard tests: apt-get install chromium-headless-shell")
pytestmark = pytest.mark.skipif(
    BROWSER is None, reason="no Chromium: apt-get install chromium-headless-shell"
)

HOSTILE = '<img src=x onerror="document.title=1">'
VIEWS = ["overview", "keys", "usage", "accounts", "tokens", "audit"]
# Elements the `hidden` attribute hides but a display rule of app.css would otherwise show.
SIZED_IF_HIDDEN = "[...document.querySelectorAll('[hidden]')].filter(e => { const r = e.getBoundingClientRect(); return r.width > 0 || r.height > 0; }).map(e => e.id || e.outerHTML.slice(0, 60))"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Admin, Seeded]]:
    clock = ManualClock(0)
    with running_gateway(tmp_path_factory.mktemp("dashboard") / "data", clock=clock) as server:
        helper = Admin(server)
        try:
            yield helper, seed(server, clock)
        finally:
            helper.client.close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Page]:
    with chromium(tmp_path_factory.mktemp("chromium") / "profile") as (page, _):
        page.send("Log.enable", session=True)
        yield page


@pytest.fixture
def page(browser: Page, world: tuple[Admin, Seeded]) -> Page:
    """The shared tab, signed out, at desktop size; window.prompt/confirm/alert record any use."""
    admin, _ = world
    browser.viewport(DESKTOP)
    browser.goto(f"{admin.gateway.base_url}/dashboard")
    browser.js("sessionStorage.clear(); true")
    browser.goto(f"{admin.gateway.base_url}/dashboard")
    browser.events.clear()
    browser.js(
        "window.nativeDialogs = []; for (const f of ['prompt', 'confirm', 'alert'])"
        " window[f] = (...a) => { window.nativeDialogs.push(f); return null; }; true"
    )
    return browser


def sign_in(page: Page, token: str) -> None:
    set_value(page, "token", token)
    page.js("document.getElementById('signin-form').requestSubmit(); true")
    page.wait("document.body.dataset.ready === 'overview'")


def visit(page: Page, route: str) -> None:
    view = route.split("?")[0].removeprefix("#/")
    page.js(f"location.hash = {json.dumps(route)}; true")
    page.wait(f"document.body.dataset.ready === {json.dumps(view)}")


def click(page: Page, selector: str) -> None:
    assert page.js(f"!!document.querySelector({json.dumps(selector)})"), selector
    page.js(f"document.querySelector({json.dumps(selector)}).click(); true")


def set_value(page: Page, element_id: str, value: str) -> None:
    page.js(f"document.getElementById({json.dumps(element_id)}).value = {json.dumps(value)}; true")


def submit_dialog(page: Page, dialog: str) -> None:
    click(page, f"#{dialog} button[type=submit]")


def dialog_open(page: Page, dialog: str) -> None:
    page.wait(f"document.getElementById({json.dumps(dialog)}).open")


def dialog_closed(page: Page, dialog: str) -> None:
    page.wait(f"!document.getElementById({json.dumps(dialog)}).open")


def read_secret(page: Page) -> str:
    dialog_open(page, "dlg-secret")
    secret = str(page.js("document.getElementById('dlg-secret-value').value"))
    submit_dialog(page, "dlg-secret")
    dialog_closed(page, "dlg-secret")
    assert page.js("document.getElementById('dlg-secret-value').value") == ""
    return secret


def refreshed(page: Page, view: str) -> None:
    page.wait(f"document.body.dataset.ready === {json.dumps(view)}")


def csp_violations(page: Page) -> list[str]:
    texts = [json.dumps(e.get("params", {})) for e in page.events]
    return [t for t in texts if "Content Security Policy" in t or "Refused to" in t]


def assert_layout_holds(page: Page, where: str) -> None:
    assert page.js(SIZED_IF_HIDDEN) == [], where
    assert page.js("document.documentElement.scrollWidth <= window.innerWidth"), where


# --- rendering -----------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [DESKTOP, PHONE], ids=["1280px", "phone"])
def test_every_view_renders_with_data_at_both_widths(
    page: Page, world: tuple[Admin, Seeded], size: tuple[int, int]
) -> None:
    _, seeded = world
    page.viewport(size)
    assert_layout_holds(page, "sign-in")
    assert page.js("document.getElementById('nav').getBoundingClientRect().height") == 0
    sign_in(page, seeded.operator)
    acme = seeded.acme.account.id
    for route in [*(f"#/{v}" for v in VIEWS), *(f"#/{v}?account={acme}" for v in VIEWS if v != "accounts")]:
        visit(page, route)
        assert_layout_holds(page, route)
    visit(page, "#/overview")
    assert page.js("document.querySelectorAll('#chart-spend rect').length") > 20
    assert page.js("document.querySelectorAll('#chart-requests rect').length") >= 20
    legend = page.js("[...document.querySelectorAll('#chart-spend-legend li')].map(li => li.textContent)")
    assert {"aria-haiku-4.5", "aria-sonnet-4.6", "nova-5.5"} <= set(legend)
    assert page.js("document.querySelectorAll('#top-keys tr').length") == 4
    spend = page.js("document.querySelector('#overview-cards .card:nth-child(2) .value').textContent")
    assert spend not in ("", "0")
    # Each bar says what it stands for.
    title = page.js("document.querySelector('#chart-spend rect title').textContent")
    assert title.startswith("2026-11-") and " · " in title
    visit(page, f"#/keys?account={acme}")
    assert page.js("document.querySelectorAll('#keys-rows tr').length") == len(seeded.acme.keys)
    assert page.js("document.querySelectorAll('#keys-rows svg.capbar').length") == 3
    assert "old secret works until 2026-11-22 09:00" in page.js(
        "document.getElementById('keys-rows').textContent"
    )
    visit(page, "#/usage")
    assert page.js("document.querySelectorAll('#usage-rows tr').length") == 50
    assert page.js("document.getElementById('usage-count').textContent").startswith("184 records")
    visit(page, "#/tokens")
    assert page.js("document.querySelectorAll('#tokens-rows tr').length") >= 3
    assert csp_violations(page) == []
    assert page.js("window.nativeDialogs") == []


def test_hidden_means_no_size_even_where_css_sets_display(page: Page, world: tuple[Admin, Seeded]) -> None:
    """The original bug: `display:flex` on labels showed hidden fields (the operator-only account
    chooser appeared to account owners in the key form)."""
    _, seeded = world
    sign_in(page, seeded.acme.owner.secret)
    visit(page, "#/keys")
    click(page, "#key-new")
    dialog_open(page, "dlg-key")
    assert page.js("document.getElementById('dlg-key-account-label').hidden") is True
    assert page.js("getComputedStyle(document.getElementById('dlg-key-account-label')).display") == "none"
    assert page.js(SIZED_IF_HIDDEN) == []
    # A hidden element under a display rule still takes no space.
    page.js("const l = document.querySelector('#dlg-key label'); l.hidden = true; true")
    assert page.js("document.querySelector('#dlg-key label').getBoundingClientRect().height") == 0
    page.key("Escape")
    dialog_closed(page, "dlg-key")


# --- actions, end to end -------------------------------------------------------------------------


def test_operator_manages_accounts_from_the_page(page: Page, world: tuple[Admin, Seeded]) -> None:
    admin, seeded = world
    sign_in(page, seeded.operator)
    visit(page, "#/accounts")
    click(page, "#account-new")
    dialog_open(page, "dlg-account")
    set_value(page, "dlg-account-name", "initech")
    set_value(page, "dlg-account-credits", "5")
    submit_dialog(page, "dlg-account")
    page.wait("document.getElementById('status').textContent.startsWith('Created account initech')")
    refreshed(page, "accounts")
    created = next(a for a in admin.operator.ok("GET", "/accounts")["data"] if a["name"] == "initech")
    assert created["balance_uc"] == 5_000_000

    # Search, then top up from the row.
    set_value(page, "accounts-q", "INIT")
    click(page, "#accounts-search button[type=submit]")
    page.wait("document.querySelectorAll('#accounts-rows tr').length === 1")
    assert page.js("document.getElementById('accounts-count').textContent").startswith("1 accounts match")
    click(page, f"tr[data-account='{created['id']}'] button[aria-label^='Top up']")
    dialog_open(page, "dlg-topup")
    set_value(page, "dlg-topup-amount", "1.2345678")  # 7 decimals: the form itself refuses it
    submit_dialog(page, "dlg-topup")
    assert page.js("document.getElementById('dlg-topup-amount').validity.valid") is False
    set_value(page, "dlg-topup-amount", "0")  # the server refuses it: the message shows in the dialog
    submit_dialog(page, "dlg-topup")
    page.wait("document.querySelector('#dlg-topup .dialog-error').textContent.includes('must be positive')")
    assert page.js("document.getElementById('dlg-topup').open") is True
    set_value(page, "dlg-topup-amount", "2.5")
    set_value(page, "dlg-topup-note", "invoice 7")
    submit_dialog(page, "dlg-topup")
    dialog_closed(page, "dlg-topup")
    page.wait("document.getElementById('status').textContent === 'initech: balance 7.5 credits.'")
    assert admin.operator.ok("GET", f"/accounts/{created['id']}")["balance_uc"] == 7_500_000

    # Open the account: every view is scoped to it until "All accounts".
    click(page, f"tr[data-account='{created['id']}'] td:nth-child(2) a")
    page.wait("document.body.dataset.ready === 'overview'")
    assert (
        page.js("document.getElementById('scope-label').textContent")
        == f"Account: initech (#{created['id']})"
    )
    assert page.js("document.getElementById('scope-back').hidden") is False
    assert page.js("document.querySelector('#nav a[data-view=keys]').getAttribute('href')") == (
        f"#/keys?account={created['id']}"
    )
    click(page, "#scope-back")
    page.wait("document.body.dataset.ready === 'accounts'")
    assert page.js("document.getElementById('scope-label').textContent") == "All accounts"
    assert page.js("document.getElementById('accounts-q').value") == "INIT"  # the search stays
    assert page.js("window.nativeDialogs") == []


def test_keys_are_created_edited_rotated_and_revoked_from_the_page(
    page: Page, world: tuple[Admin, Seeded]
) -> None:
    admin, seeded = world
    account = admin.gateway.account("keys-from-page", 20)
    sign_in(page, seeded.operator)
    visit(page, f"#/keys?account={account.id}")
    assert page.js("document.getElementById('keys-rows').textContent").startswith("No keys yet")

    click(page, "#key-new")
    dialog_open(page, "dlg-key")
    assert page.js("document.getElementById('dlg-key-account-label').hidden") is True  # scoped already
    page.js(
        "const g = document.getElementById('dlg-key-group'); g.value = 'Pro'; g.dispatchEvent(new Event('change')); true"
    )
    boxes = page.js("[...document.querySelectorAll('#dlg-key-models input')].map(b => b.value)")
    assert "aria-haiku-4.5" in boxes and not any(b.startswith("nova-") for b in boxes)
    set_value(page, "dlg-key-name", "from-page")
    page.js("document.querySelector('#dlg-key-models input[value=\"aria-haiku-4.5\"]').checked = true; true")
    set_value(page, "dlg-key-cap", "1.5")
    submit_dialog(page, "dlg-key")
    secret = read_secret(page)
    refreshed(page, "keys")
    assert admin.chat(secret).status_code == 200
    assert admin.chat(secret, "aria-sonnet-4.6").status_code == 404
    (key,) = admin.operator.ok("GET", f"/keys?account_id={account.id}")["data"]
    assert (key["name"], key["group"], key["allowed_models"], key["monthly_cap_uc"]) == (
        "from-page", "Pro", ["aria-haiku-4.5"], 1_500_000,
    )  # fmt: skip
    row = f"tr[data-key='{key['id']}']"
    page.wait(f'document.querySelector("{row} svg.capbar") !== null')

    # Edit: the dialog holds the key's values; untick the model, clear the cap, lower rpm.
    click(page, f"{row} button[aria-label^='Edit']")
    dialog_open(page, "dlg-key")
    assert page.js("document.getElementById('dlg-key-name').value") == "from-page"
    assert page.js("document.getElementById('dlg-key-group').disabled") is True
    assert page.js("document.querySelector('#dlg-key-models input:checked').value") == "aria-haiku-4.5"
    page.js("document.querySelector('#dlg-key-models input:checked').checked = false; true")
    set_value(page, "dlg-key-cap", "")
    set_value(page, "dlg-key-rpm", "7")
    submit_dialog(page, "dlg-key")
    dialog_closed(page, "dlg-key")
    refreshed(page, "keys")
    edited = admin.operator.ok("GET", f"/keys/{key['id']}")
    assert (edited["rpm"], edited["allowed_models"], edited["monthly_cap_uc"]) == (7, None, None)
    assert admin.chat(secret, "aria-sonnet-4.6").status_code == 200

    # Rotate, the old secret stopping at once; then with an hour of grace.
    click(page, f"{row} button[aria-label^='Rotate']")
    dialog_open(page, "dlg-rotate")
    assert page.js("document.getElementById('dlg-rotate-grace').value") == "86400"  # the default
    set_value(page, "dlg-rotate-grace", "0")
    submit_dialog(page, "dlg-rotate")
    second = read_secret(page)
    refreshed(page, "keys")
    assert admin.chat(second).status_code == 200 and admin.chat(secret).status_code == 401
    click(page, f"{row} button[aria-label^='Rotate']")
    dialog_open(page, "dlg-rotate")
    set_value(page, "dlg-rotate-grace", "3600")
    submit_dialog(page, "dlg-rotate")
    third = read_secret(page)
    refreshed(page, "keys")
    assert admin.chat(third).status_code == 200 and admin.chat(second).status_code == 200
    page.wait(f"document.querySelector(\"{row}\").textContent.includes('old secret works until')")

    # Revoke: the confirmation names the key; cancelling changes nothing.
    click(page, f"{row} button[aria-label^='Revoke']")
    dialog_open(page, "dlg-confirm")
    text = page.js("document.getElementById('dlg-confirm-text').textContent")
    assert "from-page" in text and key["id"] in text
    click(page, "#dlg-confirm [data-close]")
    dialog_closed(page, "dlg-confirm")
    assert admin.chat(third).status_code == 200
    click(page, f"{row} button[aria-label^='Revoke']")
    dialog_open(page, "dlg-confirm")
    submit_dialog(page, "dlg-confirm")
    dialog_closed(page, "dlg-confirm")
    refreshed(page, "keys")
    assert admin.chat(third).status_code == 401 and admin.chat(second).status_code == 401
    assert page.js(f"document.querySelector(\"{row}\").classList.contains('disabled')") is True
    assert page.js(f'document.querySelectorAll("{row} button").length') == 0
    assert page.js("window.nativeDialogs") == []
    assert csp_violations(page) == []


def test_admin_tokens_are_issued_and_revoked_from_the_page(page: Page, world: tuple[Admin, Seeded]) -> None:
    admin, seeded = world
    account = admin.gateway.account("tokens-from-page", 1)
    sign_in(page, seeded.operator)
    visit(page, "#/accounts")
    click(page, f"tr[data-account='{account.id}'] button[aria-label^='Issue an owner token']")
    dialog_open(page, "dlg-token")
    assert page.js("document.getElementById('dlg-token-account').value") == str(account.id)
    set_value(page, "dlg-token-name", "owner laptop")
    submit_dialog(page, "dlg-token")
    owner = read_secret(page)
    me = admin.caller(owner).ok("GET", "/me")
    assert me["scope"] == "account" and me["account"]["id"] == account.id

    visit(page, "#/tokens")
    click(page, "#token-new")
    dialog_open(page, "dlg-token")
    set_value(page, "dlg-token-account", "")
    set_value(page, "dlg-token-expiry", "604800")
    set_value(page, "dlg-token-name", "short-lived operator")
    submit_dialog(page, "dlg-token")
    operator = read_secret(page)
    refreshed(page, "tokens")
    issued = admin.caller(operator).ok("GET", "/me")
    assert issued["scope"] == "operator"
    row = f"tr[data-token='{issued['token_id']}']"
    page.wait(f'document.querySelector("{row}") !== null')
    assert "2026-11-28" in page.js(f'document.querySelector("{row}").textContent')  # expires in 7 days
    click(page, f"{row} button[aria-label^='Revoke']")
    dialog_open(page, "dlg-confirm")
    assert "short-lived operator" in page.js("document.getElementById('dlg-confirm-text').textContent")
    submit_dialog(page, "dlg-confirm")
    dialog_closed(page, "dlg-confirm")
    refreshed(page, "tokens")
    assert admin.caller(operator).request("GET", "/me").status_code == 401
    assert page.js(f'document.querySelector("{row} .badge").textContent') == "revoked"

    # Revoking the token this page is signed in with signs the page out.
    sign_out(page)
    sign_in(page, owner)
    visit(page, "#/tokens")
    mine = admin.caller(owner).ok("GET", "/me")["token_id"]
    click(page, f"tr[data-token='{mine}'] button[aria-label^='Revoke']")
    dialog_open(page, "dlg-confirm")
    assert "you will be signed out" in page.js("document.getElementById('dlg-confirm-text').textContent")
    submit_dialog(page, "dlg-confirm")
    page.wait("document.body.dataset.ready === 'signin'")
    assert "revoked" in page.js("document.getElementById('status').textContent")
    assert page.js("sessionStorage.length") == 0


def test_usage_log_filters_pages_and_exports_csv(
    page: Page, world: tuple[Admin, Seeded], tmp_path: Path
) -> None:
    admin, seeded = world
    owner = admin.caller(seeded.acme.owner.secret)
    notebook = seeded.acme.keys["notebook"].record.id
    sign_in(page, seeded.acme.owner.secret)
    visit(page, "#/usage")
    assert page.js("document.getElementById('f-from').value") == "2026-11-01"
    assert page.js("document.getElementById('f-to').value") == "2026-11-21"
    first_page = page.js("[...document.querySelectorAll('#usage-rows tr')].map(r => r.textContent)")
    assert len(first_page) == 50
    click(page, "#page-next")
    page.wait("document.getElementById('page-info').textContent.startsWith('51–')")
    assert page.js("document.getElementById('page-prev').disabled") is False
    click(page, "#page-prev")
    page.wait("document.getElementById('page-info').textContent.startsWith('1–50')")

    set_value(page, "f-key", notebook)
    set_value(page, "f-from", "2026-11-08")
    set_value(page, "f-to", "2026-11-14")
    click(page, "#usage-filter button[type=submit]")
    expected = owner.ok("GET", f"/usage/records?key_id={notebook}&from=2026-11-08&to=2026-11-14&limit=500")
    page.wait(f"document.getElementById('usage-count').textContent.startsWith('{expected['total']} records')")
    shown = page.js(
        "[...document.querySelectorAll('#usage-rows tr td:nth-child(2) .id')].map(e => e.textContent)"
    )
    assert shown == [notebook] * expected["total"]
    assert page.js("document.getElementById('page-next').disabled") is True
    models = page.js("[...document.getElementById('f-model').options].map(o => o.value)")
    assert models == ["", "aria-haiku-4.5"]

    page.allow_downloads(tmp_path)
    click(page, "#f-csv")
    target = tmp_path / "modelgate-usage-2026-11-08-2026-11-14.csv"
    deadline = time.monotonic() + 15
    while not target.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    rows = list(csv.DictReader(io.StringIO(target.read_text())))
    assert [r["request_id"] for r in rows] == [r["request_id"] for r in expected["data"]]
    page.wait("document.getElementById('status').textContent.startsWith('Exported')")

    click(page, "#f-reset")
    page.wait(
        "document.getElementById('f-key').value === '' && document.getElementById('f-from').value === '2026-11-01'"
    )
    # The overview's month can be moved; an empty month says so.
    visit(page, "#/overview")
    click(page, "#month-prev")
    page.wait("document.getElementById('overview-month').value === '2026-10'")
    page.wait("document.getElementById('chart-spend').textContent === 'No usage in this period.'")
    click(page, "#month-next")
    page.wait("document.querySelectorAll('#chart-spend rect').length > 0")


# --- isolation and session hygiene -----------------------------------------------------------------


def sign_out(page: Page) -> None:
    click(page, "#signout")
    page.wait("document.body.dataset.ready === 'signin'")


def test_an_account_owner_never_sees_another_accounts_data(page: Page, world: tuple[Admin, Seeded]) -> None:
    _, seeded = world
    globex = seeded.globex
    foreign = [globex.account.name, globex.owner.record.id, globex.owner.record.prefix]
    for key in globex.keys.values():
        foreign += [key.record.id, key.record.prefix]
    sign_in(page, seeded.acme.owner.secret)
    assert page.js("document.getElementById('who').textContent") == f"Account {seeded.acme.account.name}"
    assert page.js("document.querySelector('#nav a[data-view=accounts]').hidden") is True
    routes = [
        *(f"#/{v}" for v in VIEWS if v != "accounts"),
        f"#/keys?account={globex.account.id}",
        "#/accounts",
    ]
    for route in routes:
        page.js(f"location.hash = {json.dumps(route)}; true")
        page.wait("document.body.dataset.ready !== ''")
        page.wait("['overview', 'keys', 'usage', 'tokens', 'audit'].includes(document.body.dataset.ready)")
        assert page.js("document.getElementById('scope-label').textContent") == (
            f"Account: {seeded.acme.account.name} (#{seeded.acme.account.id})"
        ), route
        html = page.js("document.documentElement.outerHTML")
        leaked = [item for item in foreign if item in html]
        assert leaked == [], (route, leaked)
    visit(page, "#/tokens")
    assert page.js("document.getElementById('token-new').hidden") is True
    scopes = page.js(
        "[...document.querySelectorAll('#tokens-rows tr td:nth-child(3)')].map(e => e.textContent)"
    )
    assert set(scopes) == {f"account {seeded.acme.account.name} (#{seeded.acme.account.id})"}


def test_signing_out_leaves_nothing_of_the_session(page: Page, world: tuple[Admin, Seeded]) -> None:
    _, seeded = world
    ci = seeded.acme.keys["ci-pipeline"].record
    sign_in(page, seeded.operator)
    visit(page, f"#/keys?account={seeded.acme.account.id}")
    click(page, f"tr[data-key='{ci.id}'] button[aria-label^='Edit']")
    dialog_open(page, "dlg-key")
    assert page.js("document.getElementById('dlg-key-name').value") == "ci-pipeline"
    set_value(page, "dlg-key-cap", "123")
    # Sign out with the dialog still open (as a session expiring under it would).
    page.js("document.getElementById('signout').click(); true")
    page.wait("document.body.dataset.ready === 'signin'")
    assert page.js("[...document.querySelectorAll('dialog')].some(d => d.open)") is False
    values = page.js(
        "[...document.querySelectorAll('input, select')].filter(e => e.id !== 'f-limit' && e.type !== 'checkbox').map(e => e.value).filter(v => v && !['Basic', '86400', '2592000', '50', '25'].includes(v))"
    )
    assert values == []
    assert page.js("[...document.querySelectorAll('tbody')].every(t => t.children.length === 0)") is True
    assert page.js("sessionStorage.length") == 0 and page.js("location.hash") == ""

    sign_in(page, seeded.acme.owner.secret)
    visit(page, "#/keys")
    click(page, "#key-new")
    dialog_open(page, "dlg-key")
    assert page.js("document.getElementById('dlg-key-name').value") == ""
    assert page.js("document.getElementById('dlg-key-cap').value") == ""
    assert page.js("document.getElementById('dlg-key-title').textContent") == "New key"
    assert page.js("document.getElementById('dlg-key-account').options.length") == 0
    page.key("Escape")
    dialog_closed(page, "dlg-key")
    assert seeded.globex.account.name not in page.js("document.documentElement.outerHTML")


def test_the_page_works_from_the_keyboard(page: Page, world: tuple[Admin, Seeded]) -> None:
    admin, _ = world
    account = admin.gateway.account("keyboard-only", 5)
    owner = admin.gateway.call(admin.gateway.management.create_admin_token(account))
    page.tab_to("input#token")
    page.type(owner)
    page.key("Enter")
    page.wait("document.body.dataset.ready === 'overview'")
    page.tab_to("a:Keys")
    page.key("Enter")
    page.wait("document.body.dataset.ready === 'keys'")
    page.tab_to("button#key-new")
    page.key("Enter")
    dialog_open(page, "dlg-key")
    assert page.js("document.getElementById('dlg-key').contains(document.activeElement)") is True
    page.tab_to("input#dlg-key-name")
    page.type("typed")
    page.key("Enter")  # submits the dialog's form
    dialog_open(page, "dlg-secret")
    secret = page.js("document.getElementById('dlg-secret-value').value")
    page.key("Escape")
    dialog_closed(page, "dlg-secret")
    assert page.js("document.getElementById('dlg-secret-value').value") == ""
    refreshed(page, "keys")
    assert admin.chat(secret).status_code == 200
    (key,) = admin.caller(owner).ok("GET", "/keys")["data"]
    assert key["name"] == "typed"
    # Escape backs out of a confirmation without doing anything.
    page.tab_to("button:Revoke")
    page.key("Enter")
    dialog_open(page, "dlg-confirm")
    page.key("Escape")
    dialog_closed(page, "dlg-confirm")
    assert admin.chat(secret).status_code == 200


def test_names_that_look_like_markup_are_shown_as_text(page: Page, world: tuple[Admin, Seeded]) -> None:
    admin, seeded = world
    admin.operator.ok("POST", "/accounts", {"name": HOSTILE}, status=201)
    sign_in(page, seeded.operator)
    visit(page, "#/accounts")
    assert HOSTILE in page.js("document.getElementById('accounts-rows').textContent")
    assert page.js("document.querySelectorAll('img').length") == 0
    assert page.js("document.title") == "modelgate dashboard"
    assert "mg-" not in page.js("location.href")


# --- issue #35 item 9: status line, precision, search, rename, refusals, errors and latency ----------


def test_a_message_does_not_stick_to_the_next_view(page: Page, world: tuple[Admin, Seeded]) -> None:
    admin, seeded = world
    account = admin.gateway.account("sticky-co", 1)
    sign_in(page, seeded.operator)
    visit(page, "#/accounts")
    click(page, f"tr[data-account='{account.id}'] button[aria-label^='Top up']")
    dialog_open(page, "dlg-topup")
    set_value(page, "dlg-topup-amount", "2")
    submit_dialog(page, "dlg-topup")
    dialog_closed(page, "dlg-topup")
    page.wait("document.getElementById('status').textContent === 'sticky-co: balance 3 credits.'")
    refreshed(page, "accounts")
    # The message stays while its view is shown (the refresh after the top-up keeps it) ...
    assert page.js("document.getElementById('status').textContent") == "sticky-co: balance 3 credits."
    # ... and goes with it: another view, or the same view of another account, starts clean.
    visit(page, "#/keys")
    assert page.js("document.getElementById('status').textContent") == ""
    visit(page, "#/accounts")
    click(page, f"tr[data-account='{account.id}'] button[aria-label^='Top up']")
    dialog_open(page, "dlg-topup")
    set_value(page, "dlg-topup-amount", "1")
    submit_dialog(page, "dlg-topup")
    page.wait("document.getElementById('status').textContent === 'sticky-co: balance 4 credits.'")
    visit(page, f"#/overview?account={account.id}")
    assert page.js("document.getElementById('status').textContent") == ""


def test_the_balance_card_shows_the_precision_of_spend(page: Page, world: tuple[Admin, Seeded]) -> None:
    """acme holds hundreds of credits and spends fractions: the cards share the finer precision."""
    _, seeded = world
    sign_in(page, seeded.acme.owner.secret)
    visit(page, "#/overview")
    values = page.js("[...document.querySelectorAll('#overview-cards .card .value')].map(e => e.textContent)")
    available, spent = values[0], values[1]
    assert float(available.replace(",", "")) >= 100
    decimals = [len(v.split(".")[1]) if "." in v else 0 for v in (available, spent)]
    assert decimals[0] == decimals[1] == 4, values
    sub = page.js("document.querySelector('#overview-cards .card .sub').textContent")
    assert all(len(part.split(".")[1].split(" ")[0]) == 4 for part in sub.split("·") if "." in part), sub


def test_keys_are_found_by_search(page: Page, world: tuple[Admin, Seeded]) -> None:
    _, seeded = world
    acme = seeded.acme
    sign_in(page, seeded.operator)
    visit(page, f"#/keys?account={acme.account.id}")
    rows = "document.querySelectorAll('#keys-rows tr[data-key]').length"
    assert page.js(rows) == len(acme.keys)

    def search(text: str) -> None:
        set_value(page, "keys-q", text)
        page.js("document.getElementById('keys-q').dispatchEvent(new Event('input')); true")

    search("NOTE")  # any case, part of the name
    page.wait(f"{rows} === 1")
    assert page.js("document.querySelector('#keys-rows tr').dataset.key") == acme.keys["notebook"].record.id
    assert page.js("document.getElementById('keys-count').textContent").startswith(
        f"1 of {len(acme.keys)} keys"
    )
    search(acme.keys["agents"].record.id)  # by id
    page.wait(f"{rows} === 1")
    assert page.js("document.querySelector('#keys-rows tr').dataset.key") == acme.keys["agents"].record.id
    search("no such key anywhere")
    page.wait(f"{rows} === 0")
    assert page.js("document.getElementById('keys-rows').textContent") == "No key matches."
    search("")
    page.wait(f"{rows} === {len(acme.keys)}")
    assert page.js("document.getElementById('keys-count').textContent") == ""


def test_an_operator_renames_an_account_from_the_page(page: Page, world: tuple[Admin, Seeded]) -> None:
    admin, seeded = world
    account = admin.gateway.account("old-name-co", 1)
    sign_in(page, seeded.operator)
    visit(page, "#/accounts")
    click(page, f"tr[data-account='{account.id}'] button[aria-label^='Rename']")
    dialog_open(page, "dlg-rename")
    assert page.js("document.getElementById('dlg-rename-name').value") == "old-name-co"
    set_value(page, "dlg-rename-name", seeded.globex.account.name)  # taken: the message shows in the dialog
    submit_dialog(page, "dlg-rename")
    page.wait("document.querySelector('#dlg-rename .dialog-error').textContent.includes('already exists')")
    set_value(page, "dlg-rename-name", "new-name-co")
    submit_dialog(page, "dlg-rename")
    dialog_closed(page, "dlg-rename")
    page.wait("document.getElementById('status').textContent === 'Renamed old-name-co to new-name-co.'")
    refreshed(page, "accounts")
    assert "new-name-co" in page.js(
        f"document.querySelector(\"tr[data-account='{account.id}']\").textContent"
    )
    assert admin.operator.ok("GET", f"/accounts/{account.id}")["name"] == "new-name-co"
    # Account owners have no rename (operator-only view).
    assert page.js("window.nativeDialogs") == []


def test_refused_requests_and_the_error_view_in_the_usage_log(
    page: Page, world: tuple[Admin, Seeded]
) -> None:
    """Runs last of the seeded-world tests: it adds records (the earlier ones count them)."""
    admin, seeded = world
    notebook = seeded.acme.keys["notebook"]  # Basic, models ["haiku"] only, rpm 30
    assert admin.chat(notebook.secret, model="aria-sonnet-4.6").status_code == 404  # not its model
    assert admin.chat(notebook.secret, model="no-such-model").status_code == 404
    assert admin.chat("sk-cs4-nobody").status_code == 401  # tied to no key: not in the log
    admin.gateway.call(admin.gateway.services.settlements.drain())  # recorded after the answers
    sign_in(page, seeded.acme.owner.secret)
    visit(page, "#/usage")
    statuses = "[...document.getElementById('f-status').options].map(o => o.value)"
    assert "refused_404" in page.js(statuses)
    set_value(page, "f-status", "refused_404")
    click(page, "#usage-filter button[type=submit]")
    page.wait("document.querySelectorAll('#usage-rows tr').length === 2")
    refreshed(page, "usage")
    cells = page.js(
        "[...document.querySelectorAll('#usage-rows tr td:nth-child(6)')].map(e => e.textContent)"
    )
    assert cells == ["refused_404", "refused_404"]
    assert page.js("document.getElementById('usage-count').textContent").startswith("2 records")
    # The error view of the same filter: one day, two requests, both refused.
    assert page.js("document.querySelectorAll('#quality-rows tr[data-day]').length") == 1
    day = page.js("[...document.querySelectorAll('#quality-rows tr td')].map(e => e.textContent)")
    assert day[1:5] == ["2", "2", "100 %", "2"]
    # Every status: errors and latency over the whole month.
    click(page, "#f-reset")
    refreshed(page, "usage")
    page.wait("document.querySelectorAll('#quality-rows tr[data-day]').length >= 20")
    summary = page.js("document.getElementById('quality-summary').textContent")
    assert summary.startswith("2 of ") and "; 2 refused)" in summary and "at the median" in summary
    assert page.js("document.querySelectorAll('#quality-rows tr.has-errors').length") == 1
    assert csp_violations(page) == []


def test_the_browser_and_its_helpers_are_ended_as_a_group(tmp_path: Path) -> None:
    with chromium(tmp_path / "profile") as (page, pgid):
        assert page.js("1 + 1") == 2
        members = group_members(pgid)
        assert len(members) >= 3, members  # the wrapper script, the browser, its helpers
    assert group_members(pgid) == []


def test_history_shows_the_audit_log_ledger_and_statement(page: Page, world: tuple[Admin, Seeded]) -> None:
    admin, seeded = world
    acme = seeded.acme.account
    admin.operator.ok("POST", f"/accounts/{acme.id}/topups", {"amount": "1.5", "note": "invoice 1042"})
    sign_in(page, seeded.operator)
    visit(page, f"#/audit?account={acme.id}")
    actions = page.js(
        "[...document.querySelectorAll('#audit-rows tr td:nth-child(3)')].map(e => e.textContent)"
    )
    assert actions[0] == "account.topup" and "key.create" in actions
    change = page.js("document.querySelector('#audit-rows tr td:nth-child(5)').textContent")
    assert "balance_uc:" in change and "→" in change and "invoice 1042" in change
    notes = page.js(
        "[...document.querySelectorAll('#ledger-rows tr td:nth-child(4)')].map(e => e.textContent)"
    )
    assert notes[0] == "invoice 1042"
    lines = page.js("[...document.querySelectorAll('#statement-lines tr th')].map(e => e.textContent)")
    assert lines[:5] == ["Opening balance", "Top-ups", "Usage", "Adjustments", "Closing balance"]
    closing = page.js("document.querySelectorAll('#statement-lines tr td')[4].textContent")
    month = page.js("document.getElementById('statement-month').value")
    statement = admin.operator.ok("GET", f"/accounts/{acme.id}/statement?month={month}")
    assert closing == f"{statement['closing_uc'] / 1e6:,.6f}"
    set_value(page, "audit-action", "account.topup")
    page.js("document.getElementById('audit-filter').requestSubmit(); true")
    page.wait(
        "[...document.querySelectorAll('#audit-rows tr td:nth-child(3)')].every(e => e.textContent === 'account.topup')"
    )
    assert csp_violations(page) == []
    # The owner sees its own account's entries only.
    page.js("document.getElementById('signout').click(); true")
    sign_in(page, seeded.acme.owner.secret)
    visit(page, "#/audit")
    targets = page.js(
        "[...document.querySelectorAll('#audit-rows tr td:nth-child(4)')].map(e => e.textContent)"
    )
    assert targets and seeded.globex.account.name not in page.js("document.documentElement.outerHTML")
    assert f"account:{seeded.globex.account.id}" not in targets
