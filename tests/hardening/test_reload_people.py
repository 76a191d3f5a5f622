"""SIGHUP applies ``[alerts]`` and ``[sso]`` without a restart, through a real ``modelgate serve``
process: single sign-on switched on (a person signs in through a real OpenID provider on
loopback) and off again, alert webhooks configured (a revoked key is announced to a real
receiver), and a reload whose ``[sso]`` names an unset secret variable refused with the running
configuration kept."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import httpx
import pytest

from tests.admin.sso_fixtures import OPERATORS, person
from tests.fakes.oidc_provider import OpenIDProvider
from tests.fakes.webhook_receiver import Receiver, webhook_receiver
from tests.hardening.process import GatewayProcess, write_config
from tests.hardening.test_reload import count_logged, hangup, log_lines
from tests.polling import wait_until
from tests.secret_scan import SCANNER

SECRET_ENV = "GATEWAY_RELOAD_TEST_SSO_SECRET"
UNSET_ENV = "GATEWAY_RELOAD_TEST_NEVER_SET"
HOOK_SECRET = "whsec-reload-" + "r" * 24
SCANNER.register(HOOK_SECRET)


@pytest.fixture
def provider() -> Iterator[OpenIDProvider]:
    found = OpenIDProvider().start()
    try:
        yield found
    finally:
        found.stop()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with webhook_receiver() as hooks:
        yield hooks


def _sso(gateway: GatewayProcess, provider: OpenIDProvider, secret_env: str = SECRET_ENV) -> dict[str, Any]:
    return {
        "issuer": provider.issuer,
        "client_id": provider.client.client_id,
        "client_secret_env": secret_env,
        "redirect_url": f"{gateway.base_url}/admin/api/sso/callback",
        "scopes": ["openid", "email", "profile", "groups"],
        "operator_groups": [OPERATORS],
    }


def _webhooks(receiver: Receiver) -> str:
    return (
        "[alerts]\nscan_interval_seconds = 0.1\nrecheck_seconds = 0.05\nbackoff_seconds = 0.05\n\n"
        f'[[alerts.webhooks]]\nurl = "{receiver.url}"\nsecret = "{HOOK_SECRET}"\nevents = ["key.revoked"]\n'
    )


def _reload(gateway: GatewayProcess, level: str, words: str) -> str:
    """SIGHUP, and the message of the next log line at ``level`` holding ``words``."""
    seen = count_logged(gateway, level, words)
    hangup(gateway)
    wait_until(
        lambda: count_logged(gateway, level, words) > seen, f"a {level} line with {words!r}", timeout=60
    )
    return str([x for x in log_lines(gateway) if x["level"] == level and words in x["msg"]][-1]["msg"])


@contextmanager
def _sign_in(gateway: GatewayProcess, provider: OpenIDProvider, username: str) -> Iterator[httpx.Client]:
    """The whole authorization-code flow in a fresh browser; the browser, signed in."""
    with httpx.Client(base_url=gateway.base_url, timeout=10) as browser:
        yield _signed_in(browser, gateway, provider, username)


def _signed_in(
    browser: httpx.Client, gateway: GatewayProcess, provider: OpenIDProvider, username: str
) -> httpx.Client:
    started = browser.get("/admin/api/sso/login")
    assert started.status_code == 302, started.text
    authorization_url = started.headers["location"]
    params = dict(parse_qsl(urlsplit(authorization_url).query))
    approved = browser.post(f"{provider.issuer}/authorize", data={**params, "username": username})
    assert approved.status_code == 302, approved.text
    callback = browser.get(approved.headers["location"])
    assert callback.status_code == 303, callback.text
    return browser


def test_alerts_and_sso_apply_on_sighup(
    tmp_path: Path, provider: OpenIDProvider, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SECRET_ENV, provider.client.client_secret)  # inherited by the process
    monkeypatch.delenv(UNSET_ENV, raising=False)
    gateway = GatewayProcess(tmp_path)
    provider.client.redirect_uris.append(f"{gateway.base_url}/admin/api/sso/callback")
    operator = gateway.operator_headers()
    seeded = gateway.seed()
    admin = httpx.Client(base_url=f"{gateway.base_url}/admin/api", headers=operator, timeout=10)
    with gateway, admin:
        gateway.start()
        assert admin.get("/sso").json()["enabled"] is False
        assert admin.get("/sso/login").status_code == 404
        first = admin.post(
            "/keys", json={"account_id": seeded.account_id, "group": "Basic", "name": "before"}
        )
        assert admin.post(f"/keys/{first.json()['id']}/revoke").status_code == 200

        # Both sections at once: applied by the reload, nothing restarted.
        write_config(gateway.config, gateway.port, _webhooks(receiver), sso=_sso(gateway, provider))
        applied = _reload(gateway, "warning", "reloaded")
        assert "applied: alerts, sso" in applied and "needs a restart" not in applied, applied
        status = admin.get("/sso").json()
        assert status == {"enabled": True, "login_url": "/admin/api/sso/login"}
        opal = provider.add_user(person("Opal", OPERATORS))
        with _sign_in(gateway, provider, opal.sub) as browser:
            me = browser.get("/admin/api/sso/session").json()
            assert me["role"] == "operator" and me["person"]["email"] == opal.email
        # The alert monitor was built by the reload: a revocation now is announced once, and so
        # is the one just before it (revocations of the last two minutes are news to a monitor
        # that starts, as at a process's start).
        second = admin.post(
            "/keys", json={"account_id": seeded.account_id, "group": "Basic", "name": "after"}
        )
        assert admin.post(f"/keys/{second.json()['id']}/revoke").status_code == 200
        wait_until(lambda: len(receiver.events("key.revoked")) >= 2, "the key.revoked alerts")
        expected = sorted(f"key:{k.json()['id']}" for k in (first, second))
        assert sorted(a["subject"] for a in receiver.events("key.revoked")) == expected

        # A [sso] whose secret variable is not set is refused as at start: nothing changes.
        write_config(
            gateway.config, gateway.port, _webhooks(receiver), sso=_sso(gateway, provider, UNSET_ENV)
        )
        refused = _reload(gateway, "error", "reload of")
        assert UNSET_ENV in refused and "still serving" in refused, refused
        with _sign_in(gateway, provider, opal.sub) as browser:
            assert browser.get("/admin/api/sso/session").status_code == 200

        # Both sections taken out again: sign-in is off and sessions are no way in any more.
        write_config(gateway.config, gateway.port)
        applied = _reload(gateway, "warning", "reloaded")
        assert "applied: alerts, sso" in applied, applied
        assert admin.get("/sso").json()["enabled"] is False
        assert admin.get("/sso/login").status_code == 404
        assert gateway.proc is not None and gateway.proc.poll() is None
    assert len(receiver.events("key.revoked")) == 2  # each once, nothing after the webhooks went
