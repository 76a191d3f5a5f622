"""The admin API and the dashboard are routes of the one route table: the same admission as the
API routes (draining, the in-flight cap) comes before their authentication, and every refusal the
table makes on their paths (405, 404, admission) is in the admin API's error shape."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.gateway_server import running_gateway
from tests.polling import wait_until


def _admin_error(response: httpx.Response, status: int, type_: str) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"error"} and body["error"]["type"] == type_, body
    message: str = body["error"]["message"]
    return message


def test_admin_routes_are_refused_while_draining_in_the_admin_shape(tmp_path: Path) -> None:
    with running_gateway(tmp_path / "data") as gateway:
        token = gateway.call(gateway.management.create_admin_token(None))
        auth = {"authorization": f"Bearer {token}"}
        assert httpx.get(f"{gateway.base_url}/admin/api/me", headers=auth).status_code == 200

        async def begin() -> None:
            gateway.services.drain.begin(60)

        gateway.call(begin())
        me = httpx.get(f"{gateway.base_url}/admin/api/me", headers=auth)
        assert "shutting down" in _admin_error(me, 503, "unavailable_error")
        assert me.headers["retry-after"] == "1"
        # Admission comes before authentication: no token is looked at while draining.
        anonymous = httpx.get(f"{gateway.base_url}/admin/api/keys")
        _admin_error(anonymous, 503, "unavailable_error")
        page = httpx.get(f"{gateway.base_url}/dashboard")
        _admin_error(page, 503, "unavailable_error")
        assert httpx.get(f"{gateway.base_url}/healthz").status_code == 200  # still alive
        assert gateway.services.inflight.in_flight == 0


def test_admin_routes_hold_an_in_flight_slot_and_are_refused_at_the_cap(tmp_path: Path) -> None:
    with running_gateway(tmp_path / "data", server={"max_in_flight": 1}) as gateway:
        token = gateway.call(gateway.management.create_admin_token(None))
        auth = {"authorization": f"Bearer {token}"}

        async def hold_the_only_slot() -> bool:
            return gateway.services.inflight.try_acquire()

        async def give_it_back() -> None:
            gateway.services.inflight.release()

        assert gateway.call(hold_the_only_slot())
        refused = httpx.get(f"{gateway.base_url}/admin/api/me", headers=auth)
        assert "requests in flight" in _admin_error(refused, 429, "rate_limit_error")
        assert refused.headers["retry-after"] == "1"
        gateway.call(give_it_back())
        served = httpx.get(f"{gateway.base_url}/admin/api/me", headers=auth)
        assert served.status_code == 200 and served.json()["scope"] == "operator"
        # Each admin request gave its slot back, the refused one included: after its answer was
        # sent, which the client may see first (so wait for the release, do not race it).
        wait_until(lambda: gateway.services.inflight.in_flight == 0, "the admin requests' slots given back")


def test_the_tables_own_refusals_on_admin_paths_are_in_the_admin_shape(tmp_path: Path) -> None:
    with running_gateway(tmp_path / "data") as gateway:
        token = gateway.call(gateway.management.create_admin_token(None))
        auth = {"authorization": f"Bearer {token}"}
        base = gateway.base_url
        wrong = httpx.put(f"{base}/admin/api/accounts", headers=auth)
        assert "PUT is not allowed" in _admin_error(wrong, 405, "method_not_allowed")
        assert wrong.headers["allow"] == "GET, POST"
        head = httpx.head(f"{base}/admin/api/me", headers=auth)
        assert head.status_code == 405 and head.headers["allow"] == "GET"
        templated = httpx.delete(f"{base}/admin/api/keys/key_x", headers=auth)
        _admin_error(templated, 405, "method_not_allowed")
        assert templated.headers["allow"] == "GET, PATCH"
        for path in ("/admin/api", "/admin/api/nothing/here", "/admin/api/keys/key_x/rotate/more"):
            missing = httpx.get(base + path, headers=auth)
            assert f"no admin endpoint GET {path}" == _admin_error(missing, 404, "not_found_error")
        posted = httpx.post(f"{base}/dashboard", headers=auth)
        _admin_error(posted, 405, "method_not_allowed")
        deep = httpx.get(f"{base}/dashboard/a/b.js")
        assert _admin_error(deep, 404, "not_found_error") == "no dashboard file at this path"
        # A path parameter of an admin route is one segment, colons included.
        provider = httpx.get(f"{base}/admin/api/keys/key:x", headers=auth)
        assert _admin_error(provider, 404, "not_found_error") != "no admin endpoint GET /admin/api/keys/key:x"
        # Unauthenticated, a known admin route is the admin API's 401 with its challenge.
        anonymous = httpx.get(f"{base}/admin/api/accounts")
        _admin_error(anonymous, 401, "authentication_error")
        assert anonymous.headers["www-authenticate"].startswith("Bearer")
