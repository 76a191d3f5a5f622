"""A real gateway on loopback shared by the admin tests of one module, plus callers holding tokens.

Each test makes its own accounts (unique names), so tests stay independent while the server is
started once per module.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from modelgate.management import IssuedKey
from modelgate.storage.base import Account, KeyRecord
from tests.gateway_server import GatewayServer, running_gateway

_names = itertools.count(1)


@dataclass
class Caller:
    """An HTTP client for ``/admin/api`` holding one admin token."""

    client: httpx.Client
    token: str

    def request(self, method: str, path: str, json: Any = None, **kwargs: Any) -> httpx.Response:
        headers = {"authorization": f"Bearer {self.token}", **kwargs.pop("headers", {})}
        return self.client.request(method, "/admin/api" + path, json=json, headers=headers, **kwargs)

    def ok(self, method: str, path: str, json: Any = None, status: int = 200, **kwargs: Any) -> Any:
        response = self.request(method, path, json, **kwargs)
        assert response.status_code == status, response.text
        return response.json()


@dataclass
class Tenant:
    account: Account
    admin: Caller
    key: IssuedKey
    #: The id of ``admin``'s token.
    token_id: str


class Admin:
    def __init__(self, gateway: GatewayServer) -> None:
        self.gateway = gateway
        self.client = httpx.Client(base_url=gateway.base_url, timeout=10)
        self.operator = Caller(self.client, gateway.call(gateway.management.create_admin_token(None)))

    def caller(self, token: str) -> Caller:
        return Caller(self.client, token)

    def tenant(self, group: str = "Basic", credits: float = 100) -> Tenant:
        account = self.gateway.account(f"tenant-{next(_names)}", credits)
        token = self.gateway.call(self.gateway.management.issue_admin_token(account, name="owner"))
        key = self.gateway.key(account, group, name="first")
        return Tenant(account, self.caller(token.secret), key, token.record.id)

    def stored_key(self, key_id: str) -> KeyRecord | None:
        return self.gateway.call(self.gateway.services.key_records.get_key(key_id))

    def stored_account(self, account_id: int) -> Account | None:
        return self.gateway.call(self.gateway.services.accounts.get_account(account_id))

    def chat(self, secret: str, model: str = "aria-haiku-4.5") -> httpx.Response:
        return self.client.post(
            "/v1/chat/completions",
            headers={"authorization": f"Bearer {secret}"},
            json={"model": model, "messages": [{"role": "user", "content": "Hello admin"}]},
        )


@pytest.fixture(scope="module")
def admin_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    with running_gateway(tmp_path_factory.mktemp("admin") / "data") as server:
        yield server


@pytest.fixture(scope="module")
def admin(admin_gateway: GatewayServer) -> Iterator[Admin]:
    helper = Admin(admin_gateway)
    try:
        yield helper
    finally:
        helper.client.close()
