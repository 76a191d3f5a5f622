"""Cache tokens reported by real-dialect upstreams (a byte-exact fake on loopback) are priced at
the model's cache rates, whole and streamed, and the record carries every token kind."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from modelgate.billing.pricing import cost_uc
from modelgate.catalogue import build_catalogue
from modelgate.ir import Usage
from tests.billing.helpers import Seen, send, wait_for_record
from tests.billing.wired import gateway_over_fakes
from tests.fakes.upstream import FakeUpstream, Reply
from tests.gateway_server import GatewayServer

REPLY = Reply(text="Cached answer here.", input_tokens=120, output_tokens=9, cache_read_tokens=5000)
SONNET = build_catalogue().models["aria-sonnet-4.6"].price


@pytest.fixture(scope="module")
def wired(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    deployments = {"aria-sonnet-4.6": "fake-anthropic", "aria-sonnet-5": "fake-openai"}
    fake = FakeUpstream(default=REPLY)
    with gateway_over_fakes(tmp_path_factory.mktemp("cache") / "data", deployments, anthropic=fake) as server:
        yield server


@pytest.mark.parametrize("fmt", ["messages", "chat"])
@pytest.mark.parametrize("model", ["aria-sonnet-4.6", "aria-sonnet-5"])
@pytest.mark.parametrize("stream", [False, True])
def test_cache_reads_are_priced_at_the_cache_rate(
    wired: GatewayServer, fmt: str, model: str, stream: bool
) -> None:
    issued = wired.key(wired.account(f"cache-{fmt}-{model}-{stream}"), "Pro", rpm=1000)

    async def run() -> Seen:
        async with httpx.AsyncClient(base_url=wired.base_url, timeout=30) as client:
            return await send(client, fmt, issued.secret, model, max_tokens=50, stream=stream)

    seen = asyncio.run(run())
    assert seen.status == 200
    (record,) = wait_for_record(wired, seen.request_id, issued.record.id)
    assert (record.input_tokens, record.cache_read_tokens, record.output_tokens) == (120, 5000, 9)
    price = wired.services.catalogue.models[model].price
    assert price == SONNET  # both sonnets: 3 / 15 / 3.75 / 0.3 credits per million tokens
    expected = cost_uc(Usage(input_tokens=120, output_tokens=9, cache_read_input_tokens=5000), price)
    # 120×3 + 9×15 + 5000×0.3 = 360 + 135 + 1500 µc: cache reads at a tenth of the input price.
    assert record.charged_uc == expected == 1995
