"""A gateway with single sign-on configured against a real OpenID provider on loopback
(tests/fakes/oidc_provider.py), and a browser-like HTTP client that signs in through it."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import httpx
import pytest

from modelgate.clock import Clock
from tests.fakes.oidc_provider import OpenIDProvider, User
from tests.gateway_server import GatewayServer, free_port, running_gateway

SECRET_ENV = "MODELGATE_SSO_TEST_CLIENT_SECRET"
OPERATORS = "gateway-admins"


@dataclass
class SsoSetup:
    gateway: GatewayServer
    provider: OpenIDProvider

    def browser(self) -> httpx.Client:
        """A fresh cookie jar: one person's browser."""
        return httpx.Client(base_url=self.gateway.base_url, timeout=10)

    def start(self, browser: httpx.Client, path: str = "/admin/api/sso/login") -> str:
        """Start a sign-in; the provider's authorization URL the gateway sent the browser to."""
        response = browser.get(path)
        assert response.status_code == 302, response.text
        location = response.headers["location"]
        assert location.startswith(self.provider.issuer + "/authorize?")
        return location

    def approve(self, browser: httpx.Client, authorization_url: str, username: str) -> str:
        """The person signs in at the provider; the callback URL the provider redirects to."""
        form = browser.get(authorization_url)
        assert form.status_code == 200, form.text
        params = dict(parse_qsl(urlsplit(authorization_url).query))
        answer = browser.post(f"{self.provider.issuer}/authorize", data={**params, "username": username})
        assert answer.status_code == 302, answer.text
        callback = answer.headers["location"]
        assert callback.startswith(self.gateway.base_url + "/admin/api/sso/callback?")
        return callback

    def sign_in(
        self, browser: httpx.Client, username: str, path: str = "/admin/api/sso/login"
    ) -> httpx.Response:
        """The whole flow; the gateway's answer to the callback."""
        return browser.get(self.approve(browser, self.start(browser, path), username))

    def session(self, browser: httpx.Client) -> dict[str, Any]:
        found = browser.get("/admin/api/sso/session")
        assert found.status_code == 200, found.text
        data: dict[str, Any] = found.json()
        return data

    def write(self, browser: httpx.Client, method: str, path: str, json: Any = None) -> httpx.Response:
        """A cookie-authenticated write carrying the session's CSRF token, as the dashboard sends it."""
        csrf = self.session(browser)["csrf_token"]
        return browser.request(method, "/admin/api" + path, json=json, headers={"x-csrf-token": csrf})


@contextmanager
def sso_gateway(data_dir: Path, clock: Clock | None = None, **sso: Any) -> Iterator[SsoSetup]:
    provider = OpenIDProvider().start()
    port = free_port()
    provider.client.redirect_uris.append(f"http://127.0.0.1:{port}/admin/api/sso/callback")
    config = {
        "issuer": provider.issuer,
        "client_id": provider.client.client_id,
        "client_secret_env": SECRET_ENV,
        "redirect_url": provider.client.redirect_uris[0],
        "scopes": ["openid", "email", "profile", "groups"],
        "operator_groups": [OPERATORS],
        **sso,
    }
    try:
        with pytest.MonkeyPatch.context() as env:
            env.setenv(SECRET_ENV, provider.client.client_secret)
            with running_gateway(
                data_dir,
                clock=clock,
                env={SECRET_ENV: provider.client.client_secret},
                server={"port": port},
                sso=config,
            ) as gateway:
                yield SsoSetup(gateway, provider)
    finally:
        provider.stop()


def person(name: str, *groups: str, verified: bool = True) -> User:
    return User(
        sub=secrets.token_hex(8),
        email=f"{name.lower()}@example.com",
        name=name,
        email_verified=verified,
        groups=groups,
    )
