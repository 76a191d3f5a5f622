"""A key's own rules on the Responses WebSocket: the upgrade is refused as HTTP (tests/gateway/
test_key_access.py), and a key given a past expiry or ranges that exclude the client while its
socket is open is refused on its next ``response.create``, in the OpenAI error shape, costing
nothing."""

from __future__ import annotations

from modelgate.storage.base import KeyRecord
from tests.websocket.conftest import SIMULATED, Suite, completed, open_socket, refused


def _changed(
    suite: Suite, key_id: str, *, expires_at: float | None = None, allowed_ips: list[str] | None = None
) -> None:
    gateway = suite.gateway
    record: KeyRecord = gateway.call(gateway.management.key(key_id))
    updated = gateway.call(
        gateway.management.update_key(record, expires_at=expires_at, allowed_ips=allowed_ips)
    )
    gateway.wait_for_key_version(key_id, updated.version)


def test_a_key_expired_mid_connection_is_refused_on_its_next_message(suite: Suite) -> None:
    secret, key_id, _ = suite.key()
    with open_socket(suite.gateway, secret) as socket:
        completed(socket, model=SIMULATED, input="before", store=False)
        _changed(suite, key_id, expires_at=1_000_000_000.0)
        error = refused(socket, model=SIMULATED, input="after", store=False)
    assert error["status"] == 401 and error["error"]["code"] == "key_expired", error
    assert "expired at 2001-09-09T01:46:40Z" in error["error"]["message"]
    assert len(suite.usage(key_id)) == 1


def test_ranges_that_exclude_the_client_refuse_its_next_message(suite: Suite) -> None:
    secret, key_id, _ = suite.key(allowed_ips=["127.0.0.0/8"])
    with open_socket(suite.gateway, secret) as socket:
        completed(socket, model=SIMULATED, input="inside", store=False)
        _changed(suite, key_id, allowed_ips=["203.0.113.0/24"])
        error = refused(socket, model=SIMULATED, input="outside", store=False)
    assert error["status"] == 403 and error["error"]["code"] == "address_not_allowed", error
    assert len(suite.usage(key_id)) == 1
