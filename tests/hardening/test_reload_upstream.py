"""A SIGHUP reload never closes connections an exchange still uses: streams and token counts
that were waiting for their upstream's first byte when the signal came all end normally, with
the upstream's whole answer. A real ``modelgate serve`` process; the upstream is a fake HTTP
server on loopback that holds every answer until the reload is done, then streams slowly (a
router closed under it would cut the stream: its provider's HTTP client closed)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from tests.fakes.upstream import FakeUpstream, Fault, Reply
from tests.hardening.process import GatewayProcess, Seeded, run, write_config
from tests.hardening.test_reload import ALIAS, count_logged, hangup
from tests.hardening.test_shutdown import ask, headers, stream_ending
from tests.polling import wait_until

STREAMS = 4
KEY_ENV = "MODELGATE_TEST_FAKE_ANTHROPIC_KEY"
#: Twenty events a quarter second apart: each stream outlives the reload by seconds.
SLOW_STREAM = Reply(text=" ".join(["word"] * 40), chunks=20, event_delay=0.25)
SERVER = {"keep_alive_seconds": 120}


def upstreams(base_url: str) -> str:
    """Chat (``nova-5.5``) on an OpenAI-compatible provider, Messages (``aria-haiku-4.5``, token
    counts included) on an Anthropic one: both the fake; the other models on the simulator."""
    return (
        '[[providers]]\nname = "simulator"\nkind = "simulator"\n\n'
        f'[[providers]]\nname = "fake-compat"\nkind = "openai-compatible"\nbase_url = "{base_url}"\n\n'
        f'[[providers]]\nname = "fake-anthropic"\nkind = "anthropic"\nbase_url = "{base_url}"\n'
        f'api_key_env = "{KEY_ENV}"\n\n'
        '[[deployments."nova-5.5"]]\nprovider = "fake-compat"\nupstream_model = "chat-fake"\n\n'
        '[[deployments."aria-haiku-4.5"]]\nprovider = "fake-anthropic"\nupstream_model = "claude-fake"\n'
    )


async def chat_stream(client: httpx.AsyncClient, keys: dict[str, str]) -> str:
    path, body = ask("chat", stream=True, max_tokens=400)
    async with client.stream("POST", path, json=body, headers=headers("chat", keys)) as response:
        assert response.status_code == 200
        return stream_ending("chat", await response.aread())


async def count(client: httpx.AsyncClient, keys: dict[str, str]) -> httpx.Response:
    body = {"model": "aria-haiku-4.5", "messages": [{"role": "user", "content": "count me"}]}
    return await client.post("/v1/messages/count_tokens", json=body, headers=headers("messages", keys))


def test_a_reload_keeps_the_old_router_open_until_its_last_exchange_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, "fake-anthropic-key-for-the-reload-test")

    async def scenario() -> tuple[list[str], httpx.Response, int]:
        gate = asyncio.Event()
        async with FakeUpstream(default=Fault.held(gate, SLOW_STREAM)) as fake:
            extra = upstreams(fake.base_url)
            gateway = GatewayProcess(tmp_path, extra, server=SERVER)
            with gateway:
                seeded: Seeded = await asyncio.to_thread(gateway.seed)
                await asyncio.to_thread(gateway.start)
                limits = httpx.Limits(max_connections=STREAMS + 5, max_keepalive_connections=0)
                async with httpx.AsyncClient(base_url=gateway.base_url, limits=limits, timeout=120) as client:
                    streams = [asyncio.create_task(chat_stream(client, seeded.keys)) for _ in range(STREAMS)]
                    counted = asyncio.create_task(count(client, seeded.keys))
                    while fake.count < STREAMS + 1:  # every exchange reached the upstream, unanswered
                        await asyncio.sleep(0.01)
                    write_config(gateway.config, gateway.port, ALIAS + extra, server=SERVER)
                    hangup(gateway)
                    await asyncio.to_thread(
                        wait_until, lambda: count_logged(gateway, "warning", "reloaded"), "the reload"
                    )
                    gate.set()  # only now does the upstream answer, through the replaced router
                    endings = list(await asyncio.gather(*streams))
                    counted_reply = await counted
                assert gateway.proc is not None and gateway.proc.poll() is None
                failed = sum(1 for line in gateway.log.read_text().splitlines() if "mid_stream" in line)
            return endings, counted_reply, failed

    endings, counted, failed = run(scenario())
    assert endings == ["final"] * STREAMS, endings
    assert counted.status_code == 200, counted.text
    assert counted.json() == {"input_tokens": SLOW_STREAM.input_tokens}
    assert failed == 0
