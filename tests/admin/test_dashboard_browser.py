"""The dashboard driven in headless Chromium (Debian's package) over the DevTools protocol.

scripts/services.sh installs the browser for `make test`; under CI a missing browser is a failure,
elsewhere the test is skipped with the install command. Proves that the page works
under its own Content-Security-Policy, renders hostile names as text, shows a new secret once, and
that a revocation from the page is refused by the gateway at once.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.sync.client import ClientConnection, connect

from tests.admin.conftest import Admin

BROWSER = shutil.which("chromium-headless-shell") or shutil.which("chromium")
if BROWSER is None and os.environ.get("CI"):
    raise RuntimeError("CI needs Chromium for the dashboard test: apt-get install chromium-headless-shell")
pytestmark = pytest.mark.skipif(
    BROWSER is None, reason="no Chromium: apt-get install chromium-headless-shell"
)
HOSTILE = '<img src=x onerror="document.title=1">'


class Page:
    """Just enough of the DevTools protocol: one page, commands and JavaScript evaluation."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.counter = 0
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]

    def send(self, method: str, params: dict[str, Any] | None = None, session: bool = False) -> Any:
        self.counter += 1
        message: dict[str, Any] = {"id": self.counter, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self.session
        self.ws.send(json.dumps(message))
        while True:
            reply = json.loads(self.ws.recv(timeout=20))
            if reply.get("id") == self.counter:
                assert "error" not in reply, reply
                return reply.get("result", {})

    def js(self, expression: str) -> Any:
        result = self.send(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True}, True
        )
        assert "exceptionDetails" not in result, result
        return result["result"].get("value")

    def wait(self, expression: str, seconds: float = 10) -> Any:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            value = self.js(expression)
            if value:
                return value
            time.sleep(0.05)
        status = self.js("$('status').textContent")
        raise AssertionError(f"timed out waiting for {expression}; status: {status}")

    def goto(self, url: str) -> None:
        self.send("Page.navigate", {"url": url}, True)
        self.wait("document.readyState === 'complete' && typeof signIn === 'function'")

    def sign_in(self, token: str) -> None:
        self.js(f"$('token').value = {json.dumps(token)}; $('signin-form').requestSubmit(); true")


@pytest.fixture
def page(tmp_path: Path) -> Iterator[Page]:
    assert BROWSER is not None
    process = subprocess.Popen(
        [
            BROWSER,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--remote-debugging-port=0",
            f"--user-data-dir={tmp_path / 'profile'}",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        url = ""
        deadline = time.monotonic() + 20
        while not url and time.monotonic() < deadline:
            line = process.stderr.readline()
            if "DevTools listening on " in line:
                url = line.split("DevTools listening on ", 1)[1].strip()
        assert url, "Chromium did not start"
        with connect(url, max_size=None) as ws:
            yield Page(ws)
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_operator_and_owner_use_the_dashboard(admin: Admin, page: Page, tmp_path: Path) -> None:
    tenant = admin.tenant()
    hostile = admin.operator.ok("POST", "/accounts", {"name": HOSTILE}, status=201)
    page.goto(f"{admin.gateway.base_url}/dashboard")
    page.js("window.confirm = () => true; window.prompt = (q, d) => d; true")

    page.sign_in(admin.operator.token)
    page.wait("$('who').textContent === 'operator' && $('accounts-rows').children.length > 1")
    assert page.js("$('token').value") == ""  # the field is emptied; the token lives in sessionStorage
    assert page.js("sessionStorage.getItem('modelgate.adminToken')") == admin.operator.token
    assert "mg-" not in page.js("location.href")
    # A name that looks like markup is shown as text.
    assert page.js("document.querySelectorAll('img').length") == 0
    assert HOSTILE in page.js("$('accounts-rows').textContent")
    assert page.js("document.title") == "modelgate dashboard"

    # Pick the tenant's account, create a key there through the form; its secret is shown once.
    page.js(
        "[...$('accounts-rows').children].find(r => r.firstChild.textContent === "
        f"'{tenant.account.id}').querySelector('button').click(); true"
    )
    page.wait(f"$('keys-scope').textContent === '(account {tenant.account.id})'")
    page.js(
        "$('key-name').value = 'from-page'; $('key-models').value = 'haiku'; $('key-cap').value = '1.5'; true"
    )
    page.js("$('key-form').requestSubmit(); true")
    secret = page.wait("!$('secret-box').hidden && $('secret-value').value")
    assert secret.startswith("sk-cs4-")
    assert admin.chat(secret).status_code == 200
    keys = admin.operator.ok("GET", f"/keys?account_id={tenant.account.id}")["data"]
    created = next(k for k in keys if k["name"] == "from-page")
    assert created["allowed_models"] == ["aria-haiku-4.5"] and created["monthly_cap_uc"] == 1_500_000
    page.js("$('secret-done').click(); true")
    assert page.js("$('secret-value').value") == ""

    # Revoke it from the page: refused by the gateway on the next request.
    page.wait(f"[...$('keys-rows').children].some(r => r.firstChild.textContent === '{created['id']}')")
    page.js(
        f"[...[...$('keys-rows').children].find(r => r.firstChild.textContent === '{created['id']}')"
        ".querySelectorAll('button')].find(b => b.textContent === 'Revoke').click(); true"
    )
    page.wait(f"$('status').textContent === 'revoked key {created['id']}'")
    assert admin.chat(secret).status_code == 401
    shot = page.send("Page.captureScreenshot", {"format": "png"}, True)["data"]
    (tmp_path / "dashboard-operator.png").write_bytes(__import__("base64").b64decode(shot))

    # The account owner sees their own account only.
    page.js("$('signout').click(); true")
    assert page.js("sessionStorage.getItem('modelgate.adminToken')") is None
    page.sign_in(tenant.admin.token)
    page.wait(f"$('who').textContent === 'account {tenant.account.name}'")
    page.wait("$('keys-rows').children.length === 2")
    assert page.js("$('accounts').hidden") is True
    assert hostile["name"] not in page.js("document.body.textContent")
    assert page.wait("$('usage-summary').textContent.includes('requests')")
