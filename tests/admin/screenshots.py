"""Screenshots of every dashboard view for docs/, taken by headless Chromium from a gateway with a
month of seeded traffic (``tests/admin/seed.py``). Run by ``make screenshots``
(``scripts/screenshots.sh``); never edit the PNGs by hand.

    python -m tests.admin.screenshots [OUTPUT_DIR]      default: docs/screenshots
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.admin.seed import Seeded, seed
from tests.browser import DESKTOP, PHONE, Page, chromium
from tests.gateway_server import ManualClock, running_gateway

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Shot:
    name: str
    #: "operator", "owner" (acme's owner token) or "key" (acme's ci-pipeline key, on /dashboard/key)
    who: str
    #: the dashboard route, e.g. "#/keys?account=1"; "" for the sign-in page
    route: str
    size: tuple[int, int] = DESKTOP
    #: JavaScript run once the view is ready (open a dialog, fill a filter), and what to wait for then
    then: str = ""
    until: str = "true"
    full_page: bool = True
    caption: str = ""


#: Every screenshot, in the order docs/dashboard.md shows them.
NAMES = (
    "sign-in",
    "overview-operator",
    "overview-account",
    "keys",
    "keys-rotate-dialog",
    "usage",
    "usage-refused",
    "keys-search",
    "accounts",
    "accounts-rename-dialog",
    "tokens",
    "history",
    "overview-phone",
    "keys-phone",
    "usage-phone",
    "upstreams",
    "upstreams-phone",
    "upstreams-edit-dialog",
    "key-page",
)


def shots(seeded: Seeded) -> list[Shot]:
    acme = seeded.acme.account.id
    ci = seeded.acme.keys["ci-pipeline"].record.id
    made = [
        Shot("sign-in", "", "", caption="Sign-in: an operator or account owner's admin token"),
        Shot(
            "overview-operator", "operator", "#/overview", caption="Overview across all accounts (operator)"
        ),
        Shot(
            "overview-account", "owner", "#/overview", caption="Overview of one account, as its owner sees it"
        ),
        Shot(
            "keys",
            "operator",
            f"#/keys?account={acme}",
            caption="Keys of one account, with cap bars and rotation",
        ),
        Shot(
            "keys-rotate-dialog",
            "operator",
            f"#/keys?account={acme}",
            then=f'document.querySelector(\'tr[data-key="{ci}"] button[aria-label^="Rotate"]\').click()',
            full_page=False,
            caption="Rotating a key: the grace period is chosen in an in-page dialog",
        ),
        Shot(
            "usage",
            "owner",
            "#/usage",
            then="document.getElementById('f-limit').value = '25'; document.getElementById('f-limit').dispatchEvent(new Event('change'))",
            until="document.body.dataset.ready === 'usage' && document.querySelectorAll('#usage-rows tr').length === 25",
            caption="Usage log with filters, paging and CSV export",
        ),
        Shot(
            "usage-refused",
            "owner",
            "#/usage",
            then="document.getElementById('f-status').value = 'refused_404';"
            " document.getElementById('usage-filter').requestSubmit()",
            until="document.body.dataset.ready === 'usage'"
            " && [...document.querySelectorAll('#usage-rows tr td:nth-child(6)')].every(td => td.textContent === 'refused_404')",
            caption="Refused requests in the usage log, with the errors and latency of the filter",
        ),
        Shot(
            "keys-search",
            "owner",
            "#/keys",
            then="document.getElementById('keys-q').value = 'note';"
            " document.getElementById('keys-q').dispatchEvent(new Event('input'))",
            until="document.querySelectorAll('#keys-rows tr[data-key]').length === 1",
            caption="Keys found by name, id or prefix as you type",
        ),
        Shot("accounts", "operator", "#/accounts", caption="Accounts (operator), with search"),
        Shot(
            "accounts-rename-dialog",
            "operator",
            "#/accounts",
            then=f'document.querySelector(\'tr[data-account="{acme}"] button[aria-label^="Rename"]\').click()',
            until="document.getElementById('dlg-rename').open",
            full_page=False,
            caption="Renaming an account (operator)",
        ),
        Shot("tokens", "operator", "#/tokens", caption="Admin tokens: scope, last use, expiry, revoke"),
        Shot(
            "history",
            "operator",
            f"#/audit?account={acme}",
            caption="History of one account: the audit log, the monthly statement, top-ups and adjustments",
        ),
        Shot("overview-phone", "owner", "#/overview", size=PHONE, caption="Overview at phone width"),
        Shot("keys-phone", "owner", "#/keys", size=PHONE, full_page=False, caption="Keys at phone width"),
        Shot(
            "usage-phone", "owner", "#/usage", size=PHONE, full_page=False, caption="Usage log at phone width"
        ),
        Shot(
            "upstreams", "operator", "#/upstreams", caption="Upstreams: providers, weights, health and prices"
        ),
        Shot("upstreams-phone", "operator", "#/upstreams", size=PHONE, caption="Upstreams at phone width"),
        Shot(
            "upstreams-edit-dialog",
            "operator",
            "#/upstreams",
            then='document.querySelector(\'tr[data-provider="simulator"] button[aria-label^="Edit"]\').click()',
            until="document.getElementById('dlg-provider').open",
            full_page=False,
            caption="Editing a provider (its key shown only as a hint)",
        ),
        Shot("key-page", "key", "", caption="The key holder's page, signed in with the API key"),
    ]
    assert tuple(s.name for s in made) == NAMES
    return made


def refuse(base_url: str, seeded: Seeded) -> None:
    """Two requests the gateway refuses for acme's notebook key (a model it may not use, a model
    that does not exist), so the usage log has refusals to show."""
    notebook = seeded.acme.keys["notebook"]
    for model in ("aria-sonnet-4.6", "no-such-model"):
        response = httpx.post(
            f"{base_url}/v1/chat/completions",
            headers={"authorization": f"Bearer {notebook.secret}"},
            json={"model": model, "messages": [{"role": "user", "content": "Hello"}]},
            timeout=30,
        )
        assert response.status_code == 404, response.text


def sign_in(page: Page, token: str) -> None:
    page.js(
        f"document.getElementById('token').value = {token!r};"
        " document.getElementById('signin-form').requestSubmit(); true"
    )
    page.wait("document.body.dataset.ready === 'overview'")


def take(page: Page, base_url: str, seeded: Seeded, shot: Shot, folder: Path) -> Path:
    page.viewport(shot.size)
    start = f"{base_url}/dashboard" + ("/key" if shot.who == "key" else "")
    page.goto(start)
    page.js("sessionStorage.clear(); true")
    page.goto(start)
    if shot.who == "key":
        secret = seeded.acme.keys["ci-pipeline"].secret
        page.js(
            f"document.getElementById('key').value = {secret!r};"
            " document.getElementById('signin-form').requestSubmit(); true"
        )
        page.wait("document.body.dataset.ready === 'key'")
    elif shot.who:
        sign_in(page, seeded.operator if shot.who == "operator" else seeded.acme.owner.secret)
        view = shot.route.split("?")[0].removeprefix("#/")
        page.js(f"location.hash = {shot.route!r}; true")
        page.wait(f"document.body.dataset.ready === {view!r}")
    if shot.then:
        page.js(shot.then + "; true")
        page.wait(shot.until)
    path = folder / f"{shot.name}.png"
    page.js("document.activeElement && document.activeElement.blur(); true")
    page.screenshot(path, full_page=shot.full_page)
    return path


def main(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    clock = ManualClock(0)
    with tempfile.TemporaryDirectory(prefix="modelgate-screenshots-") as scratch:
        work = Path(scratch)
        with running_gateway(work / "data", clock=clock) as gateway:
            seeded = seed(gateway, clock)
            refuse(gateway.base_url, seeded)
            gateway.call(gateway.services.settlements.drain())  # the refusals' records
            with chromium(work / "profile") as (page, _):
                return [take(page, gateway.base_url, seeded, shot, folder) for shot in shots(seeded)]


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "screenshots"
    for written in main(target):
        print(written.relative_to(ROOT) if written.is_relative_to(ROOT) else written)
