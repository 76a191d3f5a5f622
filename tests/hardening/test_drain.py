"""While an instance drains it reports so and refuses new work in each endpoint's format."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.gateway_server import running_gateway


def test_draining_is_reported_and_new_requests_get_a_503_in_their_format(tmp_path: Path) -> None:
    with running_gateway(tmp_path / "data") as gateway:
        account = gateway.account("acme")
        basic = gateway.key(account, "Basic").secret
        nova = gateway.key(account, "Nova").secret

        async def begin() -> None:
            gateway.services.drain.begin(60)

        gateway.call(begin())
        health = httpx.get(f"{gateway.base_url}/health")
        assert health.status_code == 503 and health.json()["status"] == "draining"
        ready = httpx.get(f"{gateway.base_url}/readyz")
        assert ready.status_code == 503 and ready.json() == {"status": "draining"}
        assert httpx.get(f"{gateway.base_url}/healthz").status_code == 200  # still alive

        messages = httpx.post(
            f"{gateway.base_url}/v1/messages",
            json={
                "model": "aria-haiku-4.5",
                "max_tokens": 5,
                "messages": [{"role": "user", "content": "hi"}],
            },
            headers={"x-api-key": basic, "anthropic-version": "2023-06-01"},
        )
        assert messages.status_code == 503 and messages.headers["retry-after"] == "1"
        assert messages.json()["type"] == "error" and "shutting down" in messages.json()["error"]["message"]
        chat = httpx.post(
            f"{gateway.base_url}/v1/chat/completions",
            json={"model": "nova-5.5", "messages": [{"role": "user", "content": "hi"}]},
            headers={"authorization": f"Bearer {nova}"},
        )
        assert chat.status_code == 503 and chat.json()["error"]["code"] == "service_unavailable"
        assert gateway.call(gateway.services.ledger_store.pending_reservations()) == 0


def test_every_api_route_is_refused_while_draining_in_its_own_format(tmp_path: Path) -> None:
    """The model list and the stored-state endpoints pass the same admission as the model routes."""
    with running_gateway(tmp_path / "data") as gateway:
        account = gateway.account("acme")
        basic = gateway.key(account, "Basic").secret
        nova = gateway.key(account, "Nova").secret
        listed = httpx.get(f"{gateway.base_url}/v1/models", headers={"x-api-key": basic})
        assert listed.status_code == 200 and listed.json()["data"]

        async def begin() -> None:
            gateway.services.drain.begin(60)

        gateway.call(begin())
        anthropic_list = httpx.get(f"{gateway.base_url}/v1/models", headers={"x-api-key": basic})
        assert anthropic_list.status_code == 503 and anthropic_list.headers["retry-after"] == "1"
        assert anthropic_list.json()["type"] == "error"
        assert "shutting down" in anthropic_list.json()["error"]["message"]
        openai_one = httpx.get(
            f"{gateway.base_url}/v1/models/nova-5.5", headers={"authorization": f"Bearer {nova}"}
        )
        assert openai_one.status_code == 503 and openai_one.json()["error"]["code"] == "service_unavailable"
        stored = httpx.get(
            f"{gateway.base_url}/v1/responses/resp_123", headers={"authorization": f"Bearer {nova}"}
        )
        assert stored.status_code == 503 and stored.json()["error"]["code"] == "service_unavailable"
        assert stored.headers["connection"] == "close"
        assert gateway.services.inflight.in_flight == 0
