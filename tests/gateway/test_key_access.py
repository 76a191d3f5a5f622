"""A key's expiry and address ranges against a real gateway: an expired key is a 401 and a key
used from outside its ranges a 403, each in the wire format of the endpoint called (Messages,
Chat Completions, Responses, count_tokens, ``/v1/key``, the Responses WebSocket upgrade); the
client address behind ``server.trusted_proxies`` comes from ``X-Forwarded-For``, and from any
other peer the header is ignored. Set through the admin API, as an operator would.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.gateway_server import GatewayServer, ManualClock, running_gateway

NOW = datetime(2026, 11, 15, 12, 0, tzinfo=UTC).timestamp()
_names = itertools.count(1)
HELLO = [{"role": "user", "content": "hi"}]


def messages(secret: str, extra: dict[str, Any] | None = None) -> tuple[str, dict[str, Any], dict[str, Any]]:
    headers = {"x-api-key": secret, "anthropic-version": "2023-06-01", **(extra or {})}
    return "/v1/messages", headers, {"model": "aria-haiku-4.5", "max_tokens": 16, "messages": HELLO}


def count_tokens(
    secret: str, extra: dict[str, str] | None = None
) -> tuple[str, dict[str, str], dict[str, Any]]:
    headers = {"x-api-key": secret, "anthropic-version": "2023-06-01", **(extra or {})}
    return "/v1/messages/count_tokens", headers, {"model": "aria-haiku-4.5", "messages": HELLO}


def chat(secret: str, extra: dict[str, Any] | None = None) -> tuple[str, dict[str, Any], dict[str, Any]]:
    headers = {"authorization": f"Bearer {secret}", **(extra or {})}
    return "/v1/chat/completions", headers, {"model": "aria-haiku-4.5", "max_tokens": 16, "messages": HELLO}


def responses(secret: str, extra: dict[str, Any] | None = None) -> tuple[str, dict[str, Any], dict[str, Any]]:
    headers = {"authorization": f"Bearer {secret}", **(extra or {})}
    return "/v1/responses", headers, {"model": "nova-5.5", "input": "hi", "max_output_tokens": 16}


def send(http: httpx.Client, request: tuple[str, dict[str, Any], dict[str, Any]]) -> httpx.Response:
    path, headers, body = request
    return http.post(path, headers=headers, json=body)


def assert_messages_error(response: httpx.Response, status: int, kind: str, words: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == kind, body
    assert words in body["error"]["message"], body


def assert_openai_error(response: httpx.Response, status: int, code: str, words: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code and words in error["message"], error
    assert "param" in error and isinstance(error["type"], str)


def refusals(http: httpx.Client, reason: str) -> float:
    """``modelgate_key_access_refusals_total`` for ``reason``, as /metrics shows it."""
    for line in http.get("/metrics").text.splitlines():
        if line.startswith(f'modelgate_key_access_refusals_total{{reason="{reason}"}}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


class Operator:
    """The admin API with an operator token: keys made and changed as an operator would."""

    def __init__(self, gw: GatewayServer, http: httpx.Client) -> None:
        self.http = http
        self.token = gw.call(gw.management.create_admin_token(None))
        self.account_id = gw.account(f"access-{next(_names)}", 50).id

    def call(self, method: str, path: str, body: Any, status: int = 200) -> Any:
        response = self.http.request(
            method, "/admin/api" + path, headers={"authorization": f"Bearer {self.token}"}, json=body
        )
        assert response.status_code == status, response.text
        return response.json()

    def key(self, group: str, **fields: Any) -> tuple[str, str]:
        made = self.call("POST", "/keys", {"account_id": self.account_id, "group": group, **fields}, 201)
        return made["id"], made["secret"]


@pytest.fixture(scope="module")
def clock() -> ManualClock:
    return ManualClock(NOW)


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory, clock: ManualClock) -> Iterator[GatewayServer]:
    with running_gateway(tmp_path_factory.mktemp("access") / "data", clock=clock) as server:
        yield server


@pytest.fixture(scope="module")
def http(gw: GatewayServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gw.base_url, timeout=10) as client:
        yield client


@pytest.fixture(scope="module")
def op(gw: GatewayServer, http: httpx.Client) -> Operator:
    return Operator(gw, http)


def test_a_key_is_refused_from_its_expiry_on_in_every_format(
    gw: GatewayServer, http: httpx.Client, op: Operator, clock: ManualClock
) -> None:
    at = datetime.fromtimestamp(clock.time() + 3600, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    _, aria = op.key("Basic", expires_at=at, rpm=1000)
    nova_id, nova = op.key("Nova", expires_at=at, rpm=1000)
    assert op.call("GET", f"/keys/{nova_id}", None)["expires_at"] == at
    for request in (messages(aria), count_tokens(aria), chat(aria), responses(nova)):
        assert send(http, request).status_code == 200
    assert http.get("/v1/key", headers={"authorization": f"Bearer {aria}"}).json()["expires_at"] == at
    charged_before = gw.call(gw.services.usage.usage_summary("2026-11")).charged_uc

    clock.advance(3600)
    assert_messages_error(send(http, messages(aria)), 401, "authentication_error", f"expired at {at}")
    assert_messages_error(send(http, count_tokens(aria)), 401, "authentication_error", "expired")
    assert_openai_error(send(http, chat(aria)), 401, "key_expired", f"expired at {at}")
    assert_openai_error(send(http, responses(nova)), 401, "key_expired", "expired")
    assert_openai_error(
        http.get("/v1/key", headers={"authorization": f"Bearer {aria}"}), 401, "key_expired", "expired"
    )
    assert_openai_error(
        http.get("/v1/models", headers={"authorization": f"Bearer {nova}"}), 401, "key_expired", "expired"
    )
    upgrade = http.get(
        "/v1/responses",
        headers={
            "authorization": f"Bearer {nova}",
            "connection": "upgrade",
            "upgrade": "websocket",
            "sec-websocket-version": "13",
            "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==",
        },
    )
    assert_openai_error(upgrade, 401, "key_expired", "expired")
    assert gw.call(gw.services.usage.usage_summary("2026-11")).charged_uc == charged_before
    assert op.call("GET", f"/keys/{nova_id}", None)["expired"] is True
    assert refusals(http, "expired") == 7

    # An operator extends it: served again; clearing the expiry makes it last.
    later = datetime.fromtimestamp(clock.time() + 86400, UTC).strftime("%Y-%m-%dT%H:%M:%S+00:00")
    op.call("PATCH", f"/keys/{nova_id}", {"expires_at": later})
    gw.refresh_keys()
    assert send(http, responses(nova)).status_code == 200
    cleared = op.call("PATCH", f"/keys/{nova_id}", {"expires_at": None})
    assert cleared["expires_at"] is None and cleared["expired"] is False


def test_expiry_is_refused_when_it_is_not_rfc_3339(op: Operator) -> None:
    for value in (
        "tomorrow",
        "2027-01-31",
        "2027-01-31T00:00:00",
        "2027-02-30T00:00:00Z",
        "1e10",
        "9999-12-31T00:00:00Z",
    ):
        refused = op.call(
            "POST", "/keys", {"account_id": op.account_id, "group": "Basic", "expires_at": value}, 400
        )
        assert "expires_at" in refused["error"]["message"]


def test_allowed_ips_are_checked_against_the_socket_address(
    gw: GatewayServer, http: httpx.Client, op: Operator
) -> None:
    inside_id, inside = op.key("Basic", allowed_ips=["127.0.0.0/8", "::1"])
    made = op.call("GET", f"/keys/{inside_id}", None)
    assert made["allowed_ips"] == ["127.0.0.0/8", "::1/128"]
    outside_id, outside = op.key("Nova", allowed_ips=["203.0.113.0/24"])
    assert send(http, messages(inside)).status_code == 200
    assert send(http, chat(inside)).status_code == 200
    # No proxy is trusted here, so a forged X-Forwarded-For changes nothing either way.
    forged = {"x-forwarded-for": "203.0.113.9"}
    assert_openai_error(send(http, responses(outside, forged)), 403, "address_not_allowed", "127.0.0.1")
    assert_openai_error(send(http, chat(outside)), 403, "address_not_allowed", "127.0.0.1")
    assert send(http, messages(inside, {"x-forwarded-for": "198.51.100.1"})).status_code == 200
    nova_refused = http.get("/v1/key", headers={"x-api-key": outside})
    assert_messages_error(nova_refused, 403, "permission_error", "may not be used from 127.0.0.1")
    assert refusals(http, "address") == 3
    # Lifting the restriction (an empty list) lets it in.
    assert op.call("PATCH", f"/keys/{outside_id}", {"allowed_ips": []})["allowed_ips"] is None
    gw.refresh_keys()
    assert send(http, responses(outside)).status_code == 200


def test_bad_ranges_are_refused_with_a_400(op: Operator) -> None:
    for ranges in (["300.1.1.1/8"], ["10.0.0.0/33"], ["not-an-ip"], [""], ["10.0.0.0/8"] * 257 + ["x"], [5]):
        body = {"account_id": op.account_id, "group": "Basic", "allowed_ips": ranges}
        refused = op.call("POST", "/keys", body, 400)
        assert refused["error"]["type"] == "invalid_request_error"
    too_many = [f"10.{i // 256}.{i % 256}.0/24" for i in range(300)]
    op.call("POST", "/keys", {"account_id": op.account_id, "group": "Basic", "allowed_ips": too_many}, 400)
    every_v6 = op.call(
        "POST", "/keys", {"account_id": op.account_id, "group": "Basic", "allowed_ips": ["::/0"]}, 201
    )
    assert every_v6["allowed_ips"] == ["::/0"]


def test_behind_a_trusted_proxy_the_forwarded_address_counts(tmp_path: Path) -> None:
    proxies = {"trusted_proxies": ["127.0.0.1/32", "10.0.0.0/8"]}
    with running_gateway(tmp_path / "data", server=proxies) as gw, httpx.Client(base_url=gw.base_url) as http:
        op = Operator(gw, http)
        _, office = op.key("Basic", allowed_ips=["203.0.113.0/24"])
        _, local = op.key("Basic", allowed_ips=["127.0.0.1/32"])
        # The client, then a trusted inner proxy: the right-most untrusted address is the client.
        for chain in ("203.0.113.7", "198.51.100.1, 203.0.113.7", "203.0.113.7, 10.1.2.3"):
            assert send(http, chat(office, {"x-forwarded-for": chain})).status_code == 200, chain
        two_headers = http.post(
            "/v1/chat/completions",
            headers=[
                ("authorization", f"Bearer {office}"),
                ("x-forwarded-for", "198.51.100.1"),
                ("x-forwarded-for", "203.0.113.8"),
            ],
            json=chat(office)[2],
        )
        assert two_headers.status_code == 200
        # The client's own claim left of a real address does not count.
        spoofed = send(http, chat(office, {"x-forwarded-for": "203.0.113.7, 198.51.100.1"}))
        assert_openai_error(spoofed, 403, "address_not_allowed", "198.51.100.1")
        for garbage in (
            "not-an-ip",
            "203.0.113.7,x",
            "203.0.113.7,,",
            "1.2.3.4.5",
            "\u00b2".encode(),
            "x" * 5000,
        ):
            refused = send(http, chat(office, {"x-forwarded-for": garbage}))
            assert refused.status_code == 403, (garbage, refused.text)
        # Without the header the proxy itself is the client.
        assert send(http, chat(local)).status_code == 200
        assert send(http, chat(office)).status_code == 403
        assert send(http, messages(office, {"x-forwarded-for": "203.0.113.200"})).status_code == 200
