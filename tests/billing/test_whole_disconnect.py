"""A client that leaves a non-streamed request after the upstream accepted it (its headers came,
the body had not): the upstream request is cancelled and the input is billed, as for a stream cut
before its first token."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from aiohttp import web

from tests.billing.helpers import records_of
from tests.gateway_server import running_gateway
from tests.loop_thread import LoopThread
from tests.polling import wait_until

#: How long the upstream holds the body back: far longer than the client waits (0.5 s), so the
#: handler ends before that only when the gateway hangs up on it.
BODY_HELD_FOR = 30.0


class SlowBodyUpstream:
    """Answers /v1/messages with 200 headers at once and never sends the body; notes whether the
    gateway hung up on it (its handler is cancelled) or the body wait ended some other way."""

    def __init__(self) -> None:
        self.port = 0
        #: Resolved when the handler ends: True if the gateway hung up, False if the hold ran out.
        self.hung_up: concurrent.futures.Future[bool] = concurrent.futures.Future()
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/messages", self._handle)
        # handler_cancellation: a client disconnect cancels the handler, which is how we see it.
        self._runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=0.1, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(status=200, headers={"content-type": "application/json"})
        await response.prepare(request)
        try:
            await asyncio.sleep(BODY_HELD_FOR)
        except asyncio.CancelledError:
            self.hung_up.set_result(True)
            raise
        self.hung_up.set_result(False)
        return response


@pytest.fixture
def slow_upstream() -> Iterator[SlowBodyUpstream]:
    with LoopThread("slow-upstream") as loop:
        yield loop.start(SlowBodyUpstream())


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
        # The gateway hung up on the upstream: its handler was cancelled while the body was held
        # back, long before the hold ran out (the client's read timeout ended the request).
        assert slow_upstream.hung_up.result(timeout=BODY_HELD_FOR) is True
        (record,) = wait_until(lambda: records_of(gateway, issued.record.id), "the request's settlement")
        assert record.status == "client_disconnected"
        assert record.input_tokens == 3 and record.output_tokens == 0  # "count to ten", estimated
        assert record.charged_uc == 3  # 3 input tokens x 1 µc (aria-haiku-4.5 input price)
        assert gateway.call(gateway.services.ledger_store.pending_reservations()) == 0
