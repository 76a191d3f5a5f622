"""The dashboard's Upstreams view in headless Chromium at 1280 and 390 px: an operator adds a
provider (its key typed once, shown only as a hint), tests it, edits a model's weights, sets a
scheduled price and removes the provider; the gateway agrees after each step, the page never
shows the key, and the strict CSP holds. Screenshots go to MODELGATE_TEST_SCREENSHOTS (the
docs/screenshots folder when they are remade) or the test's own folder."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.admin.test_dashboard_browser import (
    click,
    csp_violations,
    dialog_closed,
    dialog_open,
    set_value,
    sign_in,
    submit_dialog,
    visit,
)
from tests.browser import BROWSER, DESKTOP, PHONE, Page, chromium
from tests.fakes.upstream import FakeUpstream, Reply
from tests.gateway_server import GatewayServer, running_gateway
from tests.loop_thread import LoopThread
from tests.secret_scan import SCANNER

pytestmark = pytest.mark.skipif(
    BROWSER is None, reason="no Chromium: apt-get install chromium-headless-shell"
)
KEY = "sk-ant-dashboard-credential-" + "d" * 20
SCANNER.register(KEY)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[GatewayServer, FakeUpstream]]:
    with LoopThread("dashboard-upstream") as loop, running_gateway(tmp_path / "data") as gateway:
        yield gateway, loop.start(FakeUpstream(default=Reply(text="ok")))


def shots_dir(tmp_path: Path) -> Path:
    target = Path(os.environ.get("MODELGATE_TEST_SCREENSHOTS") or tmp_path / "shots")
    target.mkdir(parents=True, exist_ok=True)
    return target


def page_text(page: Page) -> str:
    return str(
        page.js(
            "document.body.innerText + [...document.querySelectorAll('input, textarea')].map(i => i.value).join(' ')"
        )
    )


def test_the_upstreams_view_adds_tests_weighs_prices_and_removes(
    world: tuple[GatewayServer, FakeUpstream], tmp_path: Path
) -> None:
    gateway, fake = world
    token = gateway.call(gateway.management.create_admin_token(None))
    shots = shots_dir(tmp_path)
    with chromium(tmp_path / "profile") as (page, _):
        page.send("Log.enable", session=True)
        page.viewport(DESKTOP)
        page.goto(f"{gateway.base_url}/dashboard")
        sign_in(page, token)
        visit(page, "#/upstreams")
        assert page.js("document.querySelectorAll('#providers-rows tr[data-provider]').length") == 1
        # Add a provider: the key typed once.
        click(page, "#provider-new")
        dialog_open(page, "dlg-provider")
        set_value(page, "dlg-provider-name", "fake-ant")
        set_value(page, "dlg-provider-kind", "anthropic")
        set_value(page, "dlg-provider-base", fake.base_url)
        set_value(page, "dlg-provider-key", KEY)
        submit_dialog(page, "dlg-provider")
        dialog_closed(page, "dlg-provider")
        page.wait(
            "!!document.querySelector('#providers-rows tr[data-provider=\"fake-ant\"]') && document.body.dataset.ready === 'upstreams'"
        )
        assert page.js("document.getElementById('dlg-provider-key').value") == ""
        stored = gateway.call(gateway.services.live.store.snapshot())  # type: ignore[union-attr]
        assert [e.name for e in stored.entries] == ["fake-ant"]
        # Weights: aria-haiku-4.5 to the new provider (3) and the simulator (1).
        set_value(page, "routes-model", "aria-haiku-4.5")
        page.js("document.getElementById('routes-model').dispatchEvent(new Event('change')); true")
        page.wait("document.getElementById('routes-source').textContent.includes('default_provider')")
        click(page, "#routes-edit")
        dialog_open(page, "dlg-routes")
        page.js(
            "(() => { const [p, m, w] = document.querySelectorAll('#dlg-routes-rows tr.route')[0]"
            ".querySelectorAll('select, input'); p.value = 'fake-ant'; m.value = 'claude-x'; w.value = '3'; })(); true"
        )
        click(page, "#dlg-routes-add")
        page.js(
            "(() => { const [p, m, w] = document.querySelectorAll('#dlg-routes-rows tr.route')[1]"
            ".querySelectorAll('select, input'); p.value = 'simulator'; m.value = 'aria-haiku-4.5'; w.value = '1'; })(); true"
        )
        submit_dialog(page, "dlg-routes")
        dialog_closed(page, "dlg-routes")
        page.wait("document.getElementById('routes-source').textContent.includes('api')")
        routed = gateway.call(gateway.services.live.store.snapshot())  # type: ignore[union-attr]
        (deployments,) = [json.loads(e.body) for e in routed.entries if e.kind == "deployments"]
        assert deployments == [
            {"provider": "fake-ant", "upstream_model": "claude-x", "weight": 3},
            {"provider": "simulator", "upstream_model": "aria-haiku-4.5", "weight": 1},
        ]
        page.wait(
            "document.querySelector('#providers-rows tr[data-provider=\"fake-ant\"]').textContent.includes('×3')"
        )
        # Test it: the fake answers with the stored key.
        click(page, '#providers-rows tr[data-provider="fake-ant"] button[aria-label="Test fake-ant"]')
        page.wait(
            "document.querySelector('#providers-rows tr[data-provider=\"fake-ant\"]').dataset.tested === 'ok'"
        )
        assert fake.requests and fake.requests[-1].headers["x-api-key"] == KEY
        # A price scheduled ahead.
        click(page, "#price-edit")
        dialog_open(page, "dlg-price")
        set_value(page, "dlg-price-input", "2")
        set_value(page, "dlg-price-output", "10")
        set_value(page, "dlg-price-from", "2030-01-01T00:00")
        submit_dialog(page, "dlg-price")
        dialog_closed(page, "dlg-price")
        page.wait("document.getElementById('price-scheduled').textContent.includes('2030-01-01 00:00')")
        page.screenshot(shots / "upstreams.png")
        page.viewport(PHONE)
        visit(page, "#/overview")
        visit(page, "#/upstreams")
        page.screenshot(shots / "upstreams-phone.png")
        assert page.js("document.documentElement.scrollWidth <= window.innerWidth + 1")
        page.viewport(DESKTOP)
        # The edit dialog shows the key's hint only.
        click(page, '#providers-rows tr[data-provider="fake-ant"] button[aria-label="Edit fake-ant"]')
        dialog_open(page, "dlg-provider")
        assert "…" + KEY[-4:] in str(page.js("document.getElementById('dlg-provider-key').placeholder"))
        page.screenshot(shots / "upstreams-edit-dialog.png", full_page=False)
        assert KEY not in page_text(page)
        click(page, "#dlg-provider button[data-close]")
        dialog_closed(page, "dlg-provider")
        # Remove: a routed provider is refused with the server's reason; unroute, then delete.
        click(page, '#providers-rows tr[data-provider="fake-ant"] button[aria-label="Delete fake-ant"]')
        dialog_open(page, "dlg-confirm")
        submit_dialog(page, "dlg-confirm")
        page.wait("document.querySelector('#dlg-confirm .dialog-error').textContent.includes('still routed')")
        click(page, "#dlg-confirm button[data-close]")
        dialog_closed(page, "dlg-confirm")
        click(page, "#routes-edit")
        dialog_open(page, "dlg-routes")
        click(page, "#dlg-routes-rows tr.route button")
        submit_dialog(page, "dlg-routes")
        dialog_closed(page, "dlg-routes")
        page.wait(
            "!document.querySelector('#providers-rows tr[data-provider=\"fake-ant\"]').textContent.includes('×3')"
        )
        click(page, '#providers-rows tr[data-provider="fake-ant"] button[aria-label="Delete fake-ant"]')
        dialog_open(page, "dlg-confirm")
        submit_dialog(page, "dlg-confirm")
        dialog_closed(page, "dlg-confirm")
        page.wait("!document.querySelector('#providers-rows tr[data-provider=\"fake-ant\"]')")
        left = gateway.call(gateway.services.live.store.snapshot())  # type: ignore[union-attr]
        assert [e.kind for e in left.entries] == ["deployments"]
        assert KEY not in page_text(page)
        assert csp_violations(page) == []
