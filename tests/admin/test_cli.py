"""Issue 5 item 8, CLI additions: `keys rotate`, `keys update`, `usage`, run as real subprocesses
with --json against the database of a running gateway (which must pick the changes up)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from tests.gateway_server import GatewayServer, running_gateway

SECRET = "cli-admin-secret-" + "y" * 40


@pytest.fixture(scope="module")
def cli_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    with running_gateway(tmp_path_factory.mktemp("cli") / "data", secret=SECRET) as server:
        yield server


def modelgate(gateway: GatewayServer, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELGATE_")}
    env["MODELGATE_SECRET"] = SECRET  # the server's HMAC secret, so digests agree
    result = subprocess.run(
        [sys.executable, "-m", "modelgate", *args, "--data-dir", str(gateway.settings.data_dir)],
        capture_output=True,
        text=True,
        env=env,
        cwd=gateway.settings.data_dir,
        timeout=60,
    )
    assert (result.returncode == 0) == ok, result.stderr or result.stdout
    return result


def as_json(result: subprocess.CompletedProcess[str]) -> Any:
    return orjson.loads(result.stdout)


def chat(gateway: GatewayServer, secret: str, model: str = "aria-haiku-4.5") -> int:
    response = httpx.post(
        f"{gateway.base_url}/v1/chat/completions",
        headers={"authorization": f"Bearer {secret}"},
        json={"model": model, "messages": [{"role": "user", "content": "Hello cli"}]},
        timeout=10,
    )
    return response.status_code


def server_follows(gateway: GatewayServer, key_id: str) -> None:
    """Wait until the running server's key view holds the key as the CLI left it (its own refresh
    loads it, every 0.25 s); tests then assert what the first request after that sees. Waiting on
    the view, not by polling with requests, leaves the key's rate-limit window untouched."""
    record = gateway.call(gateway.services.key_records.get_key(key_id))
    assert record is not None
    gateway.wait_for_key_version(key_id, record.version)


def test_keys_update_changes_controls_and_the_running_server_follows(cli_gateway: GatewayServer) -> None:
    account = cli_gateway.account("cli-update")
    key = cli_gateway.key(account, "Pro")
    assert chat(cli_gateway, key.secret, "aria-sonnet-4.6") == 200

    row = as_json(
        modelgate(
            cli_gateway, "keys", "update", key.record.id, "--rpm", "5", "--models", "haiku", "--monthly-cap",
            "2.5", "--json",
        )
    )  # fmt: skip
    assert row["id"] == key.record.id and row["rpm"] == 5
    assert row["models"] == "aria-haiku-4.5"
    assert row["monthly_cap_uc"] == 2_500_000 and row["monthly_cap"] == "2.5"
    assert "secret" not in row
    server_follows(cli_gateway, key.record.id)
    assert chat(cli_gateway, key.secret, "aria-sonnet-4.6") == 404
    assert chat(cli_gateway, key.secret, "aria-haiku-4.5") == 200

    cleared = as_json(
        modelgate(
            cli_gateway, "keys", "update", key.record.id, "--models", "", "--monthly-cap", "none", "--json"
        )
    )
    assert cleared["models"] == "(all of group)" and cleared["monthly_cap_uc"] is None and cleared["rpm"] == 5
    server_follows(cli_gateway, key.record.id)
    assert chat(cli_gateway, key.secret, "aria-sonnet-4.6") == 200

    missing = modelgate(cli_gateway, "keys", "update", "key_doesnotexist0000", "--rpm", "3", ok=False)
    assert "not found" in missing.stderr


def test_keys_rotate_with_and_without_grace(cli_gateway: GatewayServer) -> None:
    account = cli_gateway.account("cli-rotate")
    key = cli_gateway.key(account, "Basic")
    old = key.secret

    rotated = as_json(modelgate(cli_gateway, "keys", "rotate", key.record.id, "--grace", "600", "--json"))
    new = rotated["secret"]
    assert new.startswith("sk-cs4-") and new != old and rotated["id"] == key.record.id
    assert rotated["key"].endswith(new[-4:]) and rotated["previous_secret_valid_until"] is not None
    server_follows(cli_gateway, key.record.id)
    assert chat(cli_gateway, new) == 200
    assert chat(cli_gateway, old) == 200  # within the grace period

    final = as_json(modelgate(cli_gateway, "keys", "rotate", key.record.id, "--grace", "0", "--json"))
    assert final["previous_secret_valid_until"] is None
    server_follows(cli_gateway, key.record.id)
    assert chat(cli_gateway, final["secret"]) == 200
    assert chat(cli_gateway, new) == 401
    assert chat(cli_gateway, old) == 401


def test_usage_per_key_and_account_per_month(cli_gateway: GatewayServer) -> None:
    account = cli_gateway.account("cli-usage")
    first = cli_gateway.key(account, "Basic")
    second = cli_gateway.key(account, "Basic")
    for secret in (first.secret, first.secret, second.secret):
        assert chat(cli_gateway, secret) == 200

    per_key = as_json(modelgate(cli_gateway, "usage", "--key", first.record.id, "--json"))
    assert per_key["requests"] == 2 and per_key["charged_uc"] > 0
    assert per_key["input_tokens"] > 0 and per_key["output_tokens"] > 0
    assert per_key["by_model_uc"] == {"aria-haiku-4.5": per_key["charged_uc"]}
    month = per_key["month"]
    stored = cli_gateway.call(cli_gateway.services.usage.usage_summary(month, key_id=first.record.id))
    assert per_key["charged_uc"] == stored.charged_uc

    per_account = as_json(
        modelgate(cli_gateway, "usage", "--account", "cli-usage", "--month", month, "--json")
    )
    assert per_account["requests"] == 3 and per_account["month"] == month
    by_id = as_json(modelgate(cli_gateway, "usage", "--account", str(account.id), "--json"))
    assert by_id == per_account
    empty = as_json(modelgate(cli_gateway, "usage", "--account", "cli-usage", "--month", "2001-01", "--json"))
    assert empty["requests"] == 0 and empty["charged_uc"] == 0 and empty["charged"] == "0"

    both = modelgate(cli_gateway, "usage", "--account", "cli-usage", "--key", first.record.id, ok=False)
    assert "exactly one" in both.stderr
    assert (
        "YYYY-MM"
        in modelgate(cli_gateway, "usage", "--key", first.record.id, "--month", "2001", ok=False).stderr
    )
    assert "not found" in modelgate(cli_gateway, "usage", "--account", "nobody-here", ok=False).stderr


def test_cli_writes_are_in_the_audit_log_as_cli(cli_gateway: GatewayServer) -> None:
    from modelgate.storage.audit import AuditFilter

    account = cli_gateway.account("cli-audited")
    key = cli_gateway.key(account, "Pro")
    modelgate(cli_gateway, "keys", "update", key.record.id, "--rpm", "7", "--json")
    modelgate(cli_gateway, "keys", "revoke", key.record.id)
    entries = cli_gateway.call(
        cli_gateway.services.audit.audit_page(AuditFilter(target=f"key:{key.record.id}"), limit=10)
    )
    assert [(e.action, e.actor) for e in reversed(entries)] == [
        ("key.create", "cli"),
        ("key.update", "cli"),
        ("key.revoke", "cli"),
    ]
    assert entries[1].before is not None and entries[1].before["rpm"] != 7
    assert entries[1].after is not None and entries[1].after["rpm"] == 7
