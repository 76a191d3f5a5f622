"""`modelgate tokens create/list/revoke` and `keys list`, run as real subprocesses against the
database of a running gateway: the server refuses a token the CLI revoked on its next request, and
an 80-column terminal shows key and token ids whole."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from tests.gateway_server import GatewayServer, running_gateway

SECRET = "cli-token-secret-" + "z" * 40


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    with running_gateway(tmp_path_factory.mktemp("cli-tokens") / "data", secret=SECRET) as server:
        yield server


def modelgate(
    gateway: GatewayServer, *args: str, ok: bool = True, columns: int = 200
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELGATE_")}
    env.update(MODELGATE_SECRET=SECRET, COLUMNS=str(columns))
    result = subprocess.run(
        [sys.executable, "-m", "modelgate", *args, "--data-dir", str(gateway.settings.data_dir)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert (result.returncode == 0) == ok, result.stderr or result.stdout
    return result


def as_json(gateway: GatewayServer, *args: str) -> Any:
    return orjson.loads(modelgate(gateway, *args, "--json").stdout)


def me(gateway: GatewayServer, token: str) -> int:
    response = httpx.get(
        f"{gateway.base_url}/admin/api/me", headers={"authorization": f"Bearer {token}"}, timeout=10
    )
    return response.status_code


def test_tokens_create_list_revoke_with_the_server_running(gateway: GatewayServer) -> None:
    gateway.account("cli-acme")
    operator = as_json(gateway, "tokens", "create", "--name", "ops laptop", "--expires", "90d")
    owner = as_json(gateway, "tokens", "create", "--account", "cli-acme")
    assert operator["token"].startswith("mg-op-") and operator["scope"] == "operator"
    assert operator["name"] == "ops laptop" and operator["expires"] is not None
    assert (
        owner["token"].startswith("mg-acct-") and owner["account_id"] is not None and owner["expires"] is None
    )
    assert me(gateway, operator["token"]) == me(gateway, owner["token"]) == 200

    listed = {t["id"]: t for t in as_json(gateway, "tokens", "list")}
    assert listed[operator["id"]]["state"] == "active" and listed[operator["id"]]["last_used"] is not None
    assert listed[operator["id"]]["token"] == f"{operator['token'][:10]}…{operator['token'][-4:]}"
    assert operator["token"] not in modelgate(gateway, "tokens", "list").stdout
    assert [t["id"] for t in as_json(gateway, "tokens", "list", "--account", "cli-acme")] == [owner["id"]]

    revoked = as_json(gateway, "tokens", "revoke", operator["id"])
    assert revoked["state"] == "revoked" and revoked["revoked"] is not None
    assert me(gateway, operator["token"]) == 401  # the next request, no waiting
    assert me(gateway, owner["token"]) == 200
    again = as_json(gateway, "tokens", "revoke", operator["id"])
    assert again["revoked"] == revoked["revoked"]

    assert "not found" in modelgate(gateway, "tokens", "revoke", "tok_missing", ok=False).stderr
    for bad in ["5y", "0", "30s", "1999-01-01", "99999999999d", "tomorrow"]:
        failed = modelgate(gateway, "tokens", "create", "--expires", bad, ok=False)
        assert "expires:" in failed.stderr, bad


def test_listings_show_whole_ids_in_an_80_column_terminal(gateway: GatewayServer) -> None:
    account = gateway.account("cli-narrow")
    keys = [
        gateway.key(account, group, name=f"a-rather-long-key-name-{group}", models=None, monthly_cap_uc=10**7)
        for group in ("Basic", "Pro", "Nova")
    ]
    table = modelgate(gateway, "keys", "list", "--account", "cli-narrow", columns=80).stdout
    assert max(len(line) for line in table.splitlines()) <= 80
    for key in keys:
        assert re.search(rf"^{key.record.id}\s", table, re.MULTILINE), table
        assert f"{key.record.prefix}…{key.record.last4}" in table
    # Wider terminals add the columns that do not fit.
    assert "models" not in table and "models" in modelgate(gateway, "keys", "list", columns=160).stdout

    issued = as_json(gateway, "tokens", "create", "--account", "cli-narrow", "--expires", "365d")
    tokens = modelgate(gateway, "tokens", "list", columns=80).stdout
    assert max(len(line) for line in tokens.splitlines()) <= 80
    assert re.search(rf"^{issued['id']}\s", tokens, re.MULTILINE), tokens
