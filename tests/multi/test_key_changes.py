"""Revocation and rotation made on one instance (through the admin API) hold on every instance."""

from __future__ import annotations

import time
from typing import Any

import httpx
import orjson
import redis

from modelgate.broadcast import CHANNEL
from tests.gateway_server import GatewayServer
from tests.multi.conftest import Cluster


def accepted(server: GatewayServer, secret: str) -> bool:
    response = httpx.get(f"{server.base_url}/v1/models", headers={"authorization": f"Bearer {secret}"})
    assert response.status_code in (200, 401), response.text
    return response.status_code == 200


def seconds_until_refused(
    servers: list[GatewayServer], secret: str, started: float, limit: float = 5.0
) -> float:
    """Wall seconds from ``started`` until every server refuses ``secret`` (polling every 10 ms)."""
    pending = list(servers)
    while pending and time.monotonic() - started < limit:
        pending = [s for s in pending if accepted(s, secret)]
        if pending:
            time.sleep(0.01)
    assert not pending, "still accepted after the limit"
    return time.monotonic() - started


def admin(cluster: Cluster, index: int, token: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(
        f"{cluster[index].base_url}/admin/api{path}", json=body, headers={"authorization": f"Bearer {token}"}
    )
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_revoke_on_one_instance_is_refused_on_the_others_within_a_second(make_cluster: Any) -> None:
    # The longest poll interval allowed (1 s): what makes the others refuse at once is the broadcast.
    with make_cluster(keys={"refresh_interval": 1.0}) as cluster:
        operator = cluster.admin_token(0)
        account = cluster.account("acme", 10_000_000)
        key_id, secret = cluster.key(account, "Basic")
        _, bystander = cluster.key(account, "Basic")
        assert all(accepted(s, secret) for s in cluster.servers)
        listener = redis.Redis.from_url(cluster.redis_url).pubsub(ignore_subscribe_messages=True)
        listener.subscribe(CHANNEL)
        try:
            started = time.monotonic()
            admin(cluster, 0, operator, f"/keys/{key_id}/revoke", {})
            assert not accepted(cluster[0], secret)  # the instance that revoked: at once
            elapsed = seconds_until_refused(cluster.servers[1:], secret, started)
            assert elapsed <= 1.0, f"revocation took {elapsed:.3f} s to reach every instance"
            heard: list[str] = []
            until = time.monotonic() + 2.0
            while key_id not in heard and time.monotonic() < until:
                message = listener.get_message(timeout=0.1)  # the first one read is the subscribe ack
                if message is not None:
                    heard.append(orjson.loads(message["data"])["key_id"])
            assert key_id in heard
        finally:
            listener.close()
        assert all(accepted(s, bystander) for s in cluster.servers)  # other keys untouched
        received = [s.services.key_broadcast.received for s in cluster.servers if s.services.key_broadcast]
        assert len(received) == 3 and all(n >= 1 for n in received)


def test_rotation_grace_is_honoured_on_every_instance(make_cluster: Any) -> None:
    with make_cluster() as cluster:
        operator = cluster.admin_token(1)
        account = cluster.account("acme", 10_000_000)
        key_id, old = cluster.key(account, "Pro")

        started = time.monotonic()
        new = admin(cluster, 1, operator, f"/keys/{key_id}/rotate", {"grace_seconds": 600})["secret"]
        deadline = started + 1.0
        while not all(accepted(s, new) for s in cluster.servers):
            assert time.monotonic() < deadline, "the new secret did not reach every instance within 1 s"
            time.sleep(0.01)
        assert all(accepted(s, old) for s in cluster.servers)  # within the grace period
        cluster.clock.advance(601)  # the shared clock passes the end of the grace period
        assert not any(accepted(s, old) for s in cluster.servers)
        assert all(accepted(s, new) for s in cluster.servers)

        # Rotation without grace: the previous secret stops everywhere within a second.
        started = time.monotonic()
        newest = admin(cluster, 2, operator, f"/keys/{key_id}/rotate", {"grace_seconds": 0})["secret"]
        assert seconds_until_refused(cluster.servers, new, started) <= 1.0
        assert all(accepted(s, newest) for s in cluster.servers)
