"""A key's spend windows in the dashboard (Chromium) and through ``GET /admin/api/keys/{id}/windows``:
a bar per window with a cap, the key's and its account's, saying spent, held, left and when it
frees; another account's key answers 404 like a missing one."""

from __future__ import annotations

from tests.admin.conftest import Admin
from tests.admin.seed import Seeded
from tests.admin.test_dashboard_browser import browser, csp_violations, page, sign_in, visit, world
from tests.browser import Page

__all__ = ["browser", "page", "world"]  # the fixtures, shared


def test_each_window_with_a_cap_gets_a_bar(page: Page, world: tuple[Admin, Seeded]) -> None:
    admin, seeded = world
    acme = seeded.acme.account.id
    capped = next(iter(seeded.acme.keys.values())).record
    admin.operator.ok("PATCH", f"/keys/{capped.id}", {"caps": {"day": "50", "5h": "20"}})
    admin.operator.ok("PATCH", f"/accounts/{acme}", {"caps": {"week": "500"}})
    try:
        windows = admin.operator.ok("GET", f"/keys/{capped.id}/windows")
        assert list(windows["caps"]) == ["5h", "day", "week", "month"]
        assert (
            windows["caps"]["day"]["limit_uc"] == 50_000_000 and windows["caps"]["week"]["limit_uc"] is None
        )
        assert list(windows["account_caps"]) == ["week"]
        assert windows["caps"]["day"]["resets_at"].endswith("T00:00:00Z")
        other = seeded.globex.owner.secret
        for key_id in (capped.id, "key_missing"):
            refused = admin.caller(other).request("GET", f"/keys/{key_id}/windows")
            assert refused.status_code == 404, refused.text

        sign_in(page, seeded.operator)
        visit(page, f"#/keys?account={acme}")
        bars = f"document.querySelectorAll(\"[data-windows='{capped.id}'] .window\")"
        page.wait(f"{bars}.length === 3")
        shown = page.js(f"[...{bars}].map(b => b.dataset.window)")
        assert shown == ["5h", "day", "account week"]
        text = page.js(f"document.querySelector(\"[data-windows='{capped.id}']\").textContent")
        assert "day 0 / 50" in text and "account week 0 / 500" in text and "left, frees" in text
        # Keys without a window cap fetch nothing and show no bar.
        assert page.js("document.querySelectorAll('[data-windows] .window').length") == 3
        assert csp_violations(page) == []
    finally:
        admin.operator.ok("PATCH", f"/keys/{capped.id}", {"caps": {"day": None, "5h": None}})
        admin.operator.ok("PATCH", f"/accounts/{acme}", {"caps": {"week": None}})
