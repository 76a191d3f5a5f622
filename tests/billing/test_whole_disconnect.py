"""A client that leaves a non-streamed request after the upstream accepted it (its headers came,
the body had not): the upstream request is cancelled and the input is billed, as for a stream cut
before its first token."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from aiohttp import web

from modelgate.clock import month_of
from tests.gateway_server import running_gateway


class SlowBodyUpstream:
    """Answers /v1/messages with 200 headers at once and holds the body back; notes the hang-up."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self.hung_up_at: float | None = None
        self._ready = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()
        self._ready.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)

        async def handle(request: web.Request) -> web.StreamResponse:
            await request.read()
            response = web.StreamResponse(status=200, headers={"content-type": "application/json"})
            await response.prepare(request)
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                self.hung_up_at = time.monotonic()
                raise
            return response

        async def start() -> None:
            app = web.Application(handler_args={"handler_cancellation": True})
            app.router.add_post("/v1/messages", handle)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            self.port = runner.addresses[0][1]
            self._ready.set()

        self.loop.run_until_complete(start())
        self.loop.run_forever()


@pytest.fixture
def slow_upstream() -> Iterator[SlowBodyUpstream]:
    yield SlowBodyUpstream()


def test_whole_request_abandoned_after_the_headers_bills_the_input(
    tmp_path: Path, slow_upstream: SlowBodyUpstream
) -> None:
    providers = [
        {
            "name": "slow",
            "kind": "anthropic",
            "base_url": f"http://127.0.0.1:{slow_upstream.port}",
            "api_key_env": "SLOW_KEY",
        }
    ]
    deployments = {"aria-haiku-4.5": [{"provider": "slow", "upstream_model": "claude-haiku-4-5"}]}
    with running_gateway(
        tmp_path / "d",
        env={"SLOW_KEY": "sk-slow-test"},
        providers=providers,
        deployments=deployments,
        default_provider="",
        unrouted="hide",
    ) as gateway:
        issued = gateway.key(gateway.account("acme"), "Basic")
        body = {
            "model": "aria-haiku-4.5",
            "max_tokens": 64,
            "messages": [{"role": "user", "content": "count to ten"}],
        }
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(
                f"{gateway.base_url}/v1/messages",
                json=body,
                timeout=0.5,
                headers={"x-api-key": issued.secret, "anthropic-version": "2023-06-01"},
            )
        gave_up = time.monotonic()
        deadline = gave_up + 3
        while slow_upstream.hung_up_at is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert slow_upstream.hung_up_at is not None and slow_upstream.hung_up_at - gave_up < 1.0
        records: list = []
        while not records and time.monotonic() < deadline:
            records = gateway.call(
                gateway.services.store.usage_records(month_of(time.time()), key_id=issued.record.id)
            )
            time.sleep(0.02)
        (record,) = records
        assert record.status == "client_disconnected"
        assert record.input_tokens == 3 and record.output_tokens == 0  # "count to ten", estimated
        assert record.charged_uc == 3  # 3 input tokens x 1 µc (aria-haiku-4.5 input price)
        assert gateway.call(gateway.services.store.pending_reservations()) == 0
