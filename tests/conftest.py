from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gateway_server import GatewayServer, running_gateway


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[GatewayServer]:
    """A gateway on loopback with the simulator upstream and a fresh SQLite database."""
    with running_gateway(tmp_path / "data") as server:
        yield server
