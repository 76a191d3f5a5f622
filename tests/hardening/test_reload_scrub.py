"""A reloaded ``metrics.token`` is scrubbed from the logs like the one the server started with:
a real ``modelgate serve`` (one process, and the parent and workers of ``--workers 2``) logs
request lines (``server.access_log``) whose path carries the new token."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.hardening.process import GatewayProcess, write_config
from tests.hardening.test_reload import count_logged, hangup
from tests.polling import wait_until
from tests.workers.harness import WorkersGateway

FIRST = "metrics-token-at-start-" + "a" * 24
RELOADED = "metrics-token-reloaded-" + "b" * 24


@pytest.mark.parametrize("workers", [1, 2])
def test_a_reloaded_metrics_token_never_reaches_the_log(tmp_path: Path, workers: int) -> None:
    server = {"keep_alive_seconds": 120, "access_log": True, "workers": workers}
    gateway = (
        WorkersGateway(tmp_path, workers=2, server=server, metrics={"token": FIRST})
        if workers > 1
        else GatewayProcess(tmp_path, server=server, metrics={"token": FIRST})
    )
    info = 'log_level = "info"'  # the request lines are logged at info
    gateway.config.write_text(gateway.config.read_text().replace('log_level = "warning"', info))
    with gateway:
        gateway.start()
        write_config(gateway.config, gateway.port, server=server, metrics={"token": RELOADED})
        gateway.config.write_text(gateway.config.read_text().replace('log_level = "warning"', info))
        hangup(gateway)
        wait_until(lambda: count_logged(gateway, "warning", "reloaded") >= workers, "the reload")
        for secret in (FIRST, RELOADED):
            for _ in range(4):  # new connections: every worker is likely to log one
                assert httpx.get(f"{gateway.base_url}/{secret}").status_code == 404
        wait_until(lambda: gateway.log.read_text().count("uvicorn.access") >= 8, "the request lines")
        logged = gateway.log.read_text()
    assert FIRST not in logged
    assert RELOADED not in logged
