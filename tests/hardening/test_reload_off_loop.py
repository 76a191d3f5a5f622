"""A SIGHUP reload never stalls the serving loop: a new Bedrock provider whose credentials come
from the container credentials endpoint (an HTTP call botocore makes synchronously) is resolved
while the gateway keeps answering. A real ``modelgate serve`` process; the credentials endpoint
is a fake HTTP server on loopback that holds its answer until the test has been answered."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import httpx
import pytest
from aiohttp import web

from tests.hardening.process import GatewayProcess, run, write_config
from tests.hardening.test_reload import ALIAS, count_logged, hangup
from tests.polling import wait_until

SERVER = {"keep_alive_seconds": 120}
BEDROCK = (
    '[[providers]]\nname = "simulator"\nkind = "simulator"\n\n'
    '[[providers]]\nname = "aws"\nkind = "bedrock"\nregion = "us-east-1"\n'
)
CREDENTIALS = {
    "AccessKeyId": "AKIAFAKERELOADTEST01",
    "SecretAccessKey": "fake-secret-access-key-for-the-reload-test",
    "Token": "fake-session-token-for-the-reload-test",
    "Expiration": "2099-01-01T00:00:00Z",
}


class CredentialsEndpoint:
    """The ECS/EKS container credentials endpoint: every request waits for ``gate``."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.arrived = asyncio.Event()
        self.requests = 0
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def answer(self, request: web.Request) -> web.Response:
        self.requests += 1
        self.arrived.set()
        await self.gate.wait()
        return web.json_response(CREDENTIALS)

    async def __aenter__(self) -> CredentialsEndpoint:
        app = web.Application()
        app.router.add_get("/credentials", self.answer)
        self.runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=0.1, access_log=None)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}/credentials"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.runner is not None
        await self.runner.cleanup()


def test_a_reload_resolving_cloud_credentials_does_not_stop_the_gateway_answering(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in list(os.environ):  # the standard AWS chain finds only the container endpoint
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))

    async def scenario() -> int:
        async with CredentialsEndpoint() as endpoint:
            monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", endpoint.url)
            gateway = GatewayProcess(tmp_path / "gw", server=SERVER)
            with gateway:
                await asyncio.to_thread(gateway.start)
                write_config(gateway.config, gateway.port, ALIAS + BEDROCK, server=SERVER)
                hangup(gateway)
                await asyncio.wait_for(endpoint.arrived.wait(), timeout=60)
                # The reload now waits for the credentials; the gateway answers meanwhile.
                async with httpx.AsyncClient(base_url=gateway.base_url, timeout=60) as client:
                    status = (await client.get("/healthz")).status_code
                # Answered while botocore's first request still waits (a blocked loop answers
                # only after botocore gave up on it and on its retries).
                assert (status, endpoint.requests) == (200, 1)
                endpoint.gate.set()
                reloaded = await asyncio.to_thread(
                    wait_until, lambda: count_logged(gateway, "warning", "reloaded"), "the reload"
                )
            return reloaded

    assert run(scenario()) == 1  # then the reload, with the provider's credentials, is applied
