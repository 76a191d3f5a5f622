"""`modelgate tokens create`: an operator who lost the first-start token can mint another."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx

from tests.gateway_server import GatewayServer


def _cli(gateway: GatewayServer, *args: str) -> dict[str, object]:
    env = {**os.environ, "MODELGATE_SECRET": gateway.settings.secret or ""}
    done = subprocess.run(
        [sys.executable, "-m", "modelgate", *args, "--data-dir", str(gateway.settings.data_dir), "--json"],
        capture_output=True, text=True, check=True, env=env,
    )  # fmt: skip
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_cli_tokens_work_on_the_running_admin_api(gateway: GatewayServer) -> None:
    mine = gateway.account("mine")
    other = gateway.account("other")
    gateway.key(other, "Basic")
    operator = _cli(gateway, "tokens", "create")
    scoped = _cli(gateway, "tokens", "create", "--account", "mine")
    assert str(operator["token"]).startswith("mg-op-") and operator["scope"] == "operator"
    assert str(scoped["token"]).startswith("mg-acct-") and scoped["account_id"] == mine.id

    def get(token: object, path: str) -> httpx.Response:
        return httpx.get(f"{gateway.base_url}/admin/api{path}", headers={"authorization": f"Bearer {token}"})

    assert get(operator["token"], "/accounts").status_code == 200
    assert {a["name"] for a in get(operator["token"], "/accounts").json()["data"]} == {"mine", "other"}
    assert get(scoped["token"], "/accounts").status_code == 403
    assert get(scoped["token"], f"/accounts/{other.id}").status_code == 404
    assert get(scoped["token"], "/keys").json()["data"] == []
