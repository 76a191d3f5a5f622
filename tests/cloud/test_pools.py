"""Credential pools: three credentials, one refused by the upstream and one throttled.

For every kind: every request succeeds; the refused credential is tried once, then stays out and
is reported on ``/health`` (by where it is configured, never its value); the throttled one rests
for its ``retry-after``, is reported as cooling down meanwhile, and serves again afterwards.
Assertions are on which credential each upstream request carried and in what order.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.cloud.harness import (
    AWS_KEYS,
    AZURE_DEPLOYMENT,
    AZURE_KEYS,
    BEDROCK_MODEL,
    ENV,
    VERTEX_MODEL,
    azure_provider,
    bedrock_provider,
    start_clouds,
    vertex_provider,
)
from tests.cloud.sdk import Format, turn
from tests.conformance.conftest import issue_key
from tests.fakes.bedrock import CloudRequest
from tests.fakes.upstream import FakeUpstream, Fault, RecordedRequest, Reply
from tests.gateway_server import GatewayServer, running_gateway
from tests.loop_thread import LoopThread
from tests.resilience.harness import capture_logs

ANTHROPIC_KEYS = [f"sk-ant-api03-POOL{i}anthropicSECRET0123456789abcdefXYZ" for i in range(3)]


#: How long the throttled credential is told to rest: longer than the first six requests take even
#: on a loaded machine (they must all meet it resting), short enough to wait out.
REST_SECONDS = 4


class Throttle:
    """Answers the credential ``throttled`` with one 429 + ``retry-after: REST_SECONDS``,
    ``refused`` with 401, everything else with a reply."""

    def __init__(
        self, throttled: str, credential_of: Callable[[RecordedRequest], str], refused: str | None = None
    ) -> None:
        self.throttled = throttled
        self.refused = refused
        self.credential_of = credential_of
        self.done = False

    def __call__(self, request: RecordedRequest) -> Reply | Fault:
        credential = self.credential_of(request)
        if credential == self.refused:  # the clouds refuse by themselves; a plain upstream here
            return Fault.status(401, message="invalid x-api-key")
        if credential == self.throttled and not self.done:
            self.done = True
            return Fault.status(429, retry_after=REST_SECONDS)
        return Reply()


def _health(gateway: GatewayServer) -> list[dict[str, Any]]:
    """The credentials out of rotation, from /health's details (an operator token's view)."""
    token = gateway.call(gateway.management.create_admin_token(None))
    headers = {"authorization": f"Bearer {token}"}
    body = httpx.get(f"{gateway.base_url}/health", headers=headers).json()
    checks: list[dict[str, Any]] = body["checks"]["unhealthy_credentials"]
    return checks


@pytest.mark.parametrize("kind", ["anthropic", "bedrock", "vertex", "azure-openai"])
def test_a_refused_and_a_throttled_credential_never_fail_a_request(tmp_path: Path, kind: str) -> None:
    with LoopThread("fake-upstreams") as fakes, capture_logs() as logs:
        clouds = start_clouds(fakes, tmp_path, accounts=3)
        fmt: Format = "chat" if kind == "azure-openai" else "messages"
        env = dict(ENV)
        fake: FakeUpstream
        if kind == "anthropic":
            env.update({f"ANT_{i}": key for i, key in enumerate(ANTHROPIC_KEYS)})
            credentials = ANTHROPIC_KEYS
            script = Throttle(
                credentials[2], lambda r: r.headers.get("x-api-key", ""), refused=credentials[1]
            )
            fake = fakes.start(FakeUpstream(script))
            provider = {
                "name": "pool",
                "kind": "anthropic",
                "base_url": fake.base_url,
                "api_key_env": ["ANT_0", "ANT_1", "ANT_2"],
            }
            upstream, labels = "claude-up", [f"api_key_env[{i}]" for i in range(3)]
        elif kind == "bedrock":
            fake = clouds.bedrock
            clouds.bedrock.revoke(AWS_KEYS[1].access_key_id)
            credentials = [k.access_key_id for k in AWS_KEYS]
            script = Throttle(credentials[2], lambda r: r.credential if isinstance(r, CloudRequest) else "")
            clouds.bedrock._decide = script
            provider = bedrock_provider("pool", clouds.bedrock, keys=3)
            upstream, labels = BEDROCK_MODEL, [f"aws_credentials[{i}]" for i in range(3)]
        elif kind == "vertex":
            fake = clouds.vertex
            credentials = list(clouds.vertex.accounts)
            clouds.vertex.forbidden.add(credentials[1])
            script = Throttle(credentials[2], lambda r: r.credential if isinstance(r, CloudRequest) else "")
            clouds.vertex._decide = script
            provider = vertex_provider("pool", clouds.vertex, clouds.credential_files)
            upstream, labels = VERTEX_MODEL, [f"credentials_file[{i}]" for i in range(3)]
        else:
            fake = clouds.azure
            credentials = AZURE_KEYS
            clouds.azure.api_keys.discard(AZURE_KEYS[1])
            script = Throttle(AZURE_KEYS[2], lambda r: r.credential if isinstance(r, CloudRequest) else "")
            clouds.azure._decide = script
            provider = azure_provider("pool", clouds.azure, keys=3)
            upstream, labels = AZURE_DEPLOYMENT, [f"api_key_env[{i}]" for i in range(3)]
        model = "nova-5.5" if fmt == "chat" else "aria-sonnet-4.6"
        with running_gateway(
            tmp_path / "data",
            env=env,
            providers=[provider],
            deployments={model: [{"provider": "pool", "upstream_model": upstream}]},
            default_provider="",
            unrouted="hide",
            routing={"max_attempts": 1, "affinity": "off"},  # round-robin order asserted below
        ) as gateway:
            secret, _ = issue_key(gateway, "Nova" if fmt == "chat" else "Pro")

            def run(n: int) -> list[str]:
                texts = [turn(fmt, gateway.base_url, secret, model, stream=i % 2 == 1).text for i in range(n)]
                return texts

            assert run(6) == ["Hello from the fake upstream."] * 6
            tried = _tried(fake, kind)
            # Round robin from the first credential: request 2 met the refused one, then the
            # throttled one, then was served by the first; later ones skip both while they rest.
            assert tried[:4] == [credentials[0], credentials[1], credentials[2], credentials[0]]
            assert tried.count(credentials[1]) == 1 and tried.count(credentials[2]) == 1
            assert len(tried) == 8
            report = {(c["credential"], c["status"]) for c in _health(gateway)}
            assert report == {(labels[1], "refused"), (labels[2], "cooling_down")}
            deadline = time.monotonic() + REST_SECONDS + 15
            while (labels[2], "cooling_down") in {(c["credential"], c["status"]) for c in _health(gateway)}:
                assert time.monotonic() < deadline, "the throttled credential never came back"
                time.sleep(0.1)
            before = len(_tried(fake, kind))
            assert run(6) == ["Hello from the fake upstream."] * 6
            later = _tried(fake, kind)[before:]
            assert credentials[2] in later, "the rested credential serves again"
            assert credentials[1] not in later, "the refused credential stays out"
            health = httpx.get(f"{gateway.base_url}/health").text
    assert [(c, s) for c, s in report] and all(c not in health for c in credentials)
    refusals = {line for line in logs if "refused credential" in line}  # one record, seen by two loggers
    assert len(refusals) == 1 and labels[1] in refusals.pop()
    assert not any(c in line for line in logs for c in credentials if c.startswith(("sk-", "3f9c")))


def _tried(fake: FakeUpstream, kind: str) -> list[str]:
    if kind == "anthropic":
        return [r.headers.get("x-api-key", "") for r in fake.requests]
    return [r.credential if isinstance(r, CloudRequest) else "" for r in fake.requests]
