"""`modelgate accounts forget-responses`: an operator erases an account's stored responses and
conversations (a privacy request) on the running gateway's database; other accounts keep theirs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import openai
import pytest
from tests.gateway.clients import SdkClients
from tests.gateway_server import GatewayServer
from tests.state.conftest import SIMULATED


def test_forgetting_an_account_erases_its_state_only(gateway: GatewayServer, sdk: SdkClients) -> None:
    mine = sdk.openai(gateway.base_url, gateway.key(gateway.account("forget-me"), "Nova").secret)
    kept = sdk.openai(gateway.base_url, gateway.key(gateway.account("keep-me"), "Nova").secret)
    response = mine.responses.create(model=SIMULATED, input="Forget this.")
    conversation = mine.conversations.create()
    other = kept.responses.create(model=SIMULATED, input="Keep this.")

    env = {**os.environ, "MODELGATE_SECRET": gateway.settings.secret or ""}
    done = subprocess.run(
        [sys.executable, "-m", "modelgate", "accounts", "forget-responses", "forget-me",
         "--data-dir", str(gateway.settings.data_dir), "--json"],
        capture_output=True, text=True, check=True, env=env,
    )  # fmt: skip
    assert json.loads(done.stdout) == {"account": "forget-me", "deleted": 2}
    with pytest.raises(openai.NotFoundError):
        mine.responses.retrieve(response.id)
    with pytest.raises(openai.NotFoundError):
        mine.conversations.retrieve(conversation.id)
    assert kept.responses.retrieve(other.id).id == other.id
