"""The CLI's key expiry and address ranges (``--expires-at``, ``--allow-ip``, ``--allowed-ips``) and
an account's ``--hide-balance``, run as real subprocesses against a running gateway's database;
the gateway then refuses or serves as the CLI left the key."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.admin.test_cli import SECRET, as_json, chat, modelgate, server_follows
from tests.gateway_server import GatewayServer, running_gateway


@pytest.fixture(scope="module")
def cli_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    with running_gateway(tmp_path_factory.mktemp("cli-access") / "data", secret=SECRET) as server:
        yield server


def test_keys_get_expiry_and_ranges_from_the_cli(cli_gateway: GatewayServer) -> None:
    gw = cli_gateway
    modelgate(gw, "accounts", "create", "cli-access", "--credits", "5")
    made = as_json(
        modelgate(
            gw, "keys", "create", "--account", "cli-access", "--group", "Basic",
            "--expires-at", "2099-01-31T00:00:00Z", "--allow-ip", "203.0.113.0/24",
            "--allowed-ips", "198.51.100.0/24,::1", "--json",
        )
    )  # fmt: skip
    assert made["expires"] == "2099-01-31 00:00:00Z"
    assert made["allowed_ips"] == "203.0.113.0/24,198.51.100.0/24,::1/128"
    server_follows(gw, made["id"])
    assert chat(gw, made["secret"]) == 403  # from 127.0.0.1
    widened = as_json(modelgate(gw, "keys", "update", made["id"], "--allow-ip", "127.0.0.0/8", "--json"))
    assert widened["allowed_ips"] == "127.0.0.0/8"
    server_follows(gw, made["id"])
    assert chat(gw, made["secret"]) == 200
    past = as_json(
        modelgate(gw, "keys", "update", made["id"], "--expires-at", "2020-01-01T00:00:00Z", "--json")
    )
    assert past["expires"] == "2020-01-01 00:00:00Z"
    server_follows(gw, made["id"])
    assert chat(gw, made["secret"]) == 401
    cleared = as_json(
        modelgate(gw, "keys", "update", made["id"], "--expires-at", "never", "--allowed-ips", "", "--json")
    )
    assert cleared["expires"] is None and cleared["allowed_ips"] == "(anywhere)"
    server_follows(gw, made["id"])
    assert chat(gw, made["secret"]) == 200


def test_bad_expiry_or_range_fails_with_a_message(cli_gateway: GatewayServer) -> None:
    gw = cli_gateway
    modelgate(gw, "accounts", "create", "cli-bad", "--credits", "1")
    base = ("keys", "create", "--account", "cli-bad", "--group", "Pro")
    bad_date = modelgate(gw, *base, "--expires-at", "next week", ok=False)
    assert "expires_at" in bad_date.stderr + bad_date.stdout
    bad_range = modelgate(gw, *base, "--allow-ip", "300.1.1.1/8", ok=False)
    assert "allowed_ips" in bad_range.stderr + bad_range.stdout
    listed = as_json(modelgate(gw, "keys", "list", "--account", "cli-bad", "--json"))
    assert listed == []


def test_hide_balance_from_the_cli(cli_gateway: GatewayServer) -> None:
    gw = cli_gateway
    modelgate(gw, "accounts", "create", "cli-hidden", "--credits", "3")
    made = as_json(modelgate(gw, "keys", "create", "--account", "cli-hidden", "--group", "Pro", "--json"))
    hidden = as_json(modelgate(gw, "accounts", "update", "cli-hidden", "--hide-balance", "--json"))
    assert hidden["hide_balance"] is True
    server_follows(gw, made["id"])
    view = httpx.get(f"{gw.base_url}/v1/key", headers={"authorization": f"Bearer {made['secret']}"}).json()
    assert view["balance"] is None and view["balance_hidden"] is True
    shown = as_json(modelgate(gw, "accounts", "update", "cli-hidden", "--show-balance", "--json"))
    assert shown["hide_balance"] is False
    assert modelgate(gw, "accounts", "update", "cli-hidden", ok=False).returncode != 0
