from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gateway.clients import SdkClients
from tests.gateway_server import GatewayServer, running_gateway
from tests.secret_scan import SCANNER, ScanningHandler

#: Folders whose files run longest (real ``modelgate serve`` processes, several gateways, CLI runs):
#: collected first, so that with pytest-xdist (``--dist loadfile`` hands files out in collection
#: order) no long file starts last while the other workers sit idle. Order inside stays as is.
LONG_FIRST = ("workers", "hardening", "multi", "resilience")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        parts = item.path.relative_to(Path(__file__).parent).parts
        return LONG_FIRST.index(parts[0]) if parts and parts[0] in LONG_FIRST else len(LONG_FIRST)

    items.sort(key=rank)  # stable: each folder keeps its own order


@pytest.fixture(scope="session", autouse=True)
def no_secret_in_logs_metrics_or_spans() -> Iterator[None]:
    """Across the whole run: every gateway log record (request records included, so the
    ``modelgate`` loggers run at INFO), metrics exposition and span is scanned for secrets
    (tests/secret_scan.py); the session ends in an error if one was seen."""
    handler = ScanningHandler(SCANNER)
    root = logging.getLogger()
    gateway_logs = logging.getLogger("modelgate")
    level = gateway_logs.level
    root.addHandler(handler)
    gateway_logs.setLevel(logging.INFO)
    try:
        yield
    finally:
        root.removeHandler(handler)
        gateway_logs.setLevel(level)
    assert not SCANNER.leaks, "secrets reached logs, metrics or spans:\n" + "\n".join(SCANNER.leaks[:20])


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
