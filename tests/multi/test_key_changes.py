"""Revocation and rotation made on one instance (through the admin API) hold on every instance."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import redis

from modelgate.broadcast import CHANNEL
from tests.gateway_server import GatewayServer
from tests.multi.conftest import Cluster
from tests.polling import wait_until


def accepted(server: GatewayServer, secret: str) -> bool:
    response = httpx.get(f"{server.base_url}/v1/models", headers={"authorization": f"Bearer {secret}"})
    assert response.status_code in (200, 401), response.text
    return response.status_code == 200


def wait_for_all(servers: list[GatewayServer], secret: str, *, accepted_by_all: bool) -> None:
    """Poll until every server accepts (or every server refuses) ``secret``."""
    pending = list(servers)

    def done() -> bool:
        nonlocal pending
        pending = [s for s in pending if accepted(s, secret) != accepted_by_all]
        return not pending

    what = f"every instance {'accepting' if accepted_by_all else 'refusing'} the secret"
    wait_until(done, what, interval=0.02)


def admin(cluster: Cluster, index: int, token: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(
        f"{cluster[index].base_url}/admin/api{path}", json=body, headers={"authorization": f"Bearer {token}"}
    )
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_revoke_on_one_instance_reaches_the_others_by_the_broadcast(make_cluster: Any) -> None:
    with make_cluster() as cluster:
        operator = cluster.admin_token(0)
        account = cluster.account("acme", 10_000_000)
        key_id, secret = cluster.key(account, "Basic")
        _, bystander = cluster.key(account, "Basic")
        assert all(accepted(s, secret) for s in cluster.servers)
        # The other instances stop polling the database: from now on only the broadcast can tell
        # them about a change, so their refusing the key proves the broadcast carried it.
        for server in cluster.servers[1:]:
            server.call(server.services.keys.stop())
        client = redis.Redis.from_url(cluster.redis_url)
        # redis-py leaves Redis.pubsub() unannotated.
        listener = client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
        listener.subscribe(CHANNEL)
        try:
            admin(cluster, 0, operator, f"/keys/{key_id}/revoke", {})
            assert not accepted(cluster[0], secret)  # the instance that revoked: at once
            wait_for_all(cluster.servers[1:], secret, accepted_by_all=False)
            heard: list[str] = []

            def revocation_heard() -> bool:
                message = listener.get_message(timeout=0.1)  # the first one read is the subscribe ack
                if message is not None:
                    heard.append(orjson.loads(message["data"])["key_id"])
                return key_id in heard

            wait_until(revocation_heard, "the revocation on the broadcast channel")
        finally:
            listener.close()
            client.close()
        assert all(accepted(s, bystander) for s in cluster.servers)  # other keys untouched
        received = [s.services.key_broadcast.received for s in cluster.servers if s.services.key_broadcast]
        assert len(received) == 3 and all(n >= 1 for n in received)


def test_rotation_grace_is_honoured_on_every_instance(make_cluster: Any) -> None:
    with make_cluster() as cluster:
        operator = cluster.admin_token(1)
        account = cluster.account("acme", 10_000_000)
        key_id, old = cluster.key(account, "Pro")

        new = admin(cluster, 1, operator, f"/keys/{key_id}/rotate", {"grace_seconds": 600})["secret"]
        wait_for_all(cluster.servers, new, accepted_by_all=True)
        assert all(accepted(s, old) for s in cluster.servers)  # within the grace period
        cluster.clock.advance(601)  # the shared clock passes the end of the grace period
        assert not any(accepted(s, old) for s in cluster.servers)
        assert all(accepted(s, new) for s in cluster.servers)

        # Rotation without grace: an instance that knows the newest secret refuses the previous
        # one (one record carries both), so once every instance accepts it none accepts the old.
        newest = admin(cluster, 2, operator, f"/keys/{key_id}/rotate", {"grace_seconds": 0})["secret"]
        wait_for_all(cluster.servers, newest, accepted_by_all=True)
        assert not any(accepted(s, new) for s in cluster.servers)
