"""The dashboard asks for a report it has already shown with ``If-None-Match`` (admin.conditional):
drawn again with nothing changed, the overview's reports come back 304 and the page shows the
same figures; after new usage (once ``admin.report_recheck_seconds`` has passed) they come back
whole and the page shows the new figures; signing out forgets every remembered answer. Driven in Debian's headless Chromium, as
tests/admin/test_dashboard_browser.py."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.admin.conftest import Admin, Tenant
from tests.browser import BROWSER, DESKTOP, Page, chromium
from tests.gateway_server import ManualClock, running_gateway

if BROWSER is None and os.environ.get("CI"):
    raise RuntimeError("CI needs Chromium for the dashboard tests: apt-get install chromium-headless-shell")
pytestmark = pytest.mark.skipif(
    BROWSER is None, reason="no Chromium: apt-get install chromium-headless-shell"
)

#: Every answer the page's fetch gets: [path, status, If-None-Match sent].
RECORD_FETCHES = """
window.fetched = [];
if (!window.unrecordedFetch) {
  window.unrecordedFetch = window.fetch;
  window.fetch = async (url, init) => {
    const answer = await window.unrecordedFetch(url, init);
    const sent = init && init.headers ? init.headers["If-None-Match"] || null : null;
    window.fetched.push([String(url), answer.status, sent]);
    return answer;
  };
}
true
"""
REQUESTS_CARD = "document.querySelector('#overview-cards .card:nth-child(3) .value').textContent"
REPORTS = ("/admin/api/usage?", "/admin/api/usage/daily?", "/admin/api/usage/top-keys?")


@pytest.fixture(scope="module")
def clock() -> ManualClock:
    return ManualClock(time.time())


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, clock: ManualClock) -> Iterator[tuple[Admin, Tenant]]:
    with running_gateway(tmp_path_factory.mktemp("etags") / "data", clock=clock) as server:
        helper = Admin(server)
        try:
            tenant = helper.tenant(credits=100)
            assert helper.chat(tenant.key.secret).status_code == 200
            yield helper, tenant
        finally:
            helper.client.close()


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory, world: tuple[Admin, Tenant]) -> Iterator[Page]:
    admin, _ = world
    with chromium(tmp_path_factory.mktemp("chromium") / "profile") as (tab, _):
        tab.viewport(DESKTOP)
        tab.goto(f"{admin.gateway.base_url}/dashboard")
        yield tab


def _show_overview_again(page: Page) -> list[Any]:
    """The overview drawn again (another view, then back), and the report calls it made."""
    page.js("location.hash = '#/keys'; true")
    page.wait("document.body.dataset.ready === 'keys'")
    page.js(RECORD_FETCHES)
    page.js("location.hash = '#/overview'; true")
    page.wait("document.body.dataset.ready === 'overview'")
    return [f for f in page.js("window.fetched") if f[0].startswith(REPORTS)]


def _sign_in(page: Page, token: str) -> None:
    page.js(f"document.getElementById('token').value = {json.dumps(token)}; true")
    page.js("document.getElementById('signin-form').requestSubmit(); true")
    page.wait("document.body.dataset.ready === 'overview'")


def test_an_unchanged_overview_is_answered_304_and_drawn_the_same(
    page: Page, world: tuple[Admin, Tenant], clock: ManualClock
) -> None:
    admin, tenant = world
    _sign_in(page, tenant.admin.token)
    assert page.js(REQUESTS_CARD) == "1"
    again = _show_overview_again(page)
    assert len(again) == 3 and all(status == 304 and sent for _, status, sent in again), again
    assert page.js(REQUESTS_CARD) == "1"
    assert page.js("document.querySelectorAll('#top-keys tr').length") == 1

    # New usage: within admin.report_recheck_seconds the tags are taken as current; after it, they
    # no longer match: whole answers, and the page shows them.
    assert admin.chat(tenant.key.secret).status_code == 200
    assert [status for _, status, _ in _show_overview_again(page)] == [304, 304, 304]
    assert page.js(REQUESTS_CARD) == "1"
    clock.advance(admin.gateway.services.settings.admin.report_recheck_seconds)
    changed = _show_overview_again(page)
    assert len(changed) == 3 and all(status == 200 and sent for _, status, sent in changed), changed
    assert page.js(REQUESTS_CARD) == "2"
    assert [status for _, status, _ in _show_overview_again(page)] == [304, 304, 304]

    # Signed out, the remembered answers go with the session: the next overview asks afresh.
    page.js("document.getElementById('signout').click(); true")
    page.wait("document.body.dataset.ready === 'signin'")
    page.js(RECORD_FETCHES)
    _sign_in(page, tenant.admin.token)
    fresh = [f for f in page.js("window.fetched") if f[0].startswith(REPORTS)]
    assert len(fresh) == 3 and all(status == 200 and sent is None for _, status, sent in fresh), fresh
    assert page.js(REQUESTS_CARD) == "2"
