from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gateway.clients import SdkClients
from tests.gateway_server import GatewayServer, running_gateway


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[GatewayServer]:
    """A gateway on loopback with the simulator upstream and a fresh SQLite database."""
    with running_gateway(tmp_path / "data") as server:
        yield server


@pytest.fixture
def sdk() -> Iterator[SdkClients]:
    """Official SDK clients for this test (``sdk.anthropic(url, key)``, ``sdk.openai(url, key)``),
    closed when it ends."""
    with SdkClients() as clients:
        yield clients
