"""Admin tokens across three instances sharing PostgreSQL: a token revoked through one instance is
refused by every instance on its very next request; expiry holds everywhere; the coarse last-used
write happens once per interval whichever instances serve the requests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from tests.multi.conftest import Cluster


def _get(cluster: Cluster, index: int, token: str, path: str = "/me") -> httpx.Response:
    return httpx.get(
        f"{cluster[index].base_url}/admin/api{path}", headers={"authorization": f"Bearer {token}"}, timeout=10
    )


def _post(cluster: Cluster, index: int, token: str, path: str, body: Any = None) -> httpx.Response:
    return httpx.post(
        f"{cluster[index].base_url}/admin/api{path}",
        headers={"authorization": f"Bearer {token}"},
        json=body,
        timeout=10,
    )


def test_revocation_and_expiry_reach_every_instance_at_once(make_cluster: Callable[..., Any]) -> None:
    with make_cluster() as cluster:
        operator = cluster.admin_token(0)
        account = cluster.account("multi-tokens", 10**6)
        issued = _post(cluster, 0, operator, "/tokens", {"account_id": account.id, "expires_in_seconds": 600})
        assert issued.status_code == 201
        owner, owner_id = issued.json()["token"], issued.json()["id"]
        assert [_get(cluster, i, owner).status_code for i in range(3)] == [200, 200, 200]

        spare = _post(cluster, 2, operator, "/tokens", {"account_id": account.id}).json()
        revoked = _post(cluster, 1, operator, f"/tokens/{spare['id']}/revoke")
        assert revoked.status_code == 200 and revoked.json()["state"] == "revoked"
        # No refresh, no waiting: the very next request on every instance is refused.
        assert [_get(cluster, i, spare["token"]).status_code for i in range(3)] == [401, 401, 401]
        assert [_get(cluster, i, owner).status_code for i in range(3)] == [200, 200, 200]

        cluster.clock.advance(600)
        assert [_get(cluster, i, owner).status_code for i in range(3)] == [401, 401, 401]
        listed = {t["id"]: t for t in _get(cluster, 2, operator, "/tokens").json()["data"]}
        assert listed[owner_id]["state"] == "expired" and listed[spare["id"]]["state"] == "revoked"


def test_last_use_is_written_once_per_interval_across_instances(make_cluster: Callable[..., Any]) -> None:
    with make_cluster() as cluster:
        operator = cluster.admin_token(0)
        me = _get(cluster, 0, operator).json()["token_id"]

        def last_used() -> Any:
            tokens = _get(cluster, 1, operator, "/tokens").json()["data"]
            return next(t["last_used_at"] for t in tokens if t["id"] == me)

        first = last_used()
        assert first is not None
        for i in range(30):
            assert _get(cluster, i % 3, operator).status_code == 200
        cluster.clock.advance(59)
        assert _get(cluster, 2, operator).status_code == 200
        assert last_used() == first
        cluster.clock.advance(1)
        assert _get(cluster, 1, operator).status_code == 200
        assert last_used() != first
