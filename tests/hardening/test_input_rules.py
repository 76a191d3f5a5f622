"""Strict input rules (issue #11): a field the gateway authorizes or bills on is never read two
ways, nesting is bounded, hostile shapes are 400s in the endpoint's format, and none of it spends
a credit or a rate-limit unit."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from modelgate.clock import month_of
from tests.gateway_server import GatewayServer, running_gateway

MESSAGES = {"x-api-key": "", "anthropic-version": "2023-06-01", "content-type": "application/json"}


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[GatewayServer]:
    with running_gateway(tmp_path / "data") as server:
        yield server


def post(gateway: GatewayServer, path: str, key: str, raw: bytes) -> httpx.Response:
    headers = {"content-type": "application/json"}
    if path.startswith("/v1/messages"):
        headers |= {"x-api-key": key, "anthropic-version": "2023-06-01"}
    else:
        headers["authorization"] = f"Bearer {key}"
    return httpx.post(gateway.base_url + path, content=raw, headers=headers, timeout=30)


def assert_nothing_spent(gateway: GatewayServer, account_id: int, balance: int) -> None:
    account = gateway.call(gateway.services.accounts.get_account(account_id))
    assert account is not None and account.balance_uc == balance and account.reserved_uc == 0
    month = month_of(gateway.services.clock.time())
    assert gateway.call(gateway.services.usage.usage_records(month, account_id=account_id)) == []


DUPLICATES = [
    ("/v1/messages", "Basic", b'{"model":"aria-haiku-4.5","model":"aria-opus-4.8","max_tokens":5,"messages":[]}', "model"),
    ("/v1/messages", "Basic", b'{"model":"aria-haiku-4.5","max_tokens":5,"max_tokens":900000,"messages":[]}', "max_tokens"),
    ("/v1/messages", "Basic", b'{"\\u006dodel":"aria-opus-4.8","model":"aria-haiku-4.5","max_tokens":5,"messages":[]}', "model"),
    ("/v1/chat/completions", "Nova", b'{"model":"nova-5.5","messages":[{"role":"user","content":"hi"}],"model":"nova-6-astra"}', "model"),
    ("/v1/chat/completions", "Nova", b'{"model":"nova-5.5","stream":true,"stream":false,"messages":[{"role":"user","content":"hi"}]}', "stream"),
    ("/v1/responses", "Nova", b'{"model":"nova-5.5","input":"hi","max_output_tokens":5,"max_output_tokens":99999}', "max_output_tokens"),
    ("/v1/messages/count_tokens", "Basic", b'{"model":"aria-haiku-4.5","model":"aria-opus-4.8","messages":[]}', "model"),
]  # fmt: skip


@pytest.mark.parametrize(("path", "group", "raw", "field"), DUPLICATES)
def test_a_duplicated_control_field_is_a_400_naming_it(
    gateway: GatewayServer, path: str, group: str, raw: bytes, field: str
) -> None:
    account = gateway.account("acme")
    key = gateway.key(account, group).secret
    response = post(gateway, path, key, raw)
    assert response.status_code == 400
    body = response.json()
    error = body["error"]
    assert field in error["message"] and "more than once" in error["message"]
    if path.startswith("/v1/messages"):
        assert body["type"] == "error"
    else:
        assert error["param"] == field
    assert_nothing_spent(gateway, account.id, account.balance_uc)


def nested(depth: int) -> Any:
    value: Any = {"type": "string"}
    for _ in range(depth):
        value = {"type": "object", "properties": {"x": value}}
    return value


@pytest.mark.parametrize("where", ["tool_schema", "tool_input", "tool_output"])
def test_nesting_past_the_limit_is_a_400(gateway: GatewayServer, where: str) -> None:
    account = gateway.account("acme")
    key = gateway.key(account, "Basic").secret
    deep = nested(200)
    body: dict[str, Any] = {
        "model": "aria-haiku-4.5",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "hi"}],
    }
    if where == "tool_schema":
        body["tools"] = [{"name": "t", "input_schema": deep}]
    elif where == "tool_input":
        body["messages"] = [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "t", "input": deep}],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]},
        ]
    else:
        body["messages"] = [
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [deep]}]}
        ]
    raw = json.dumps(body).encode()  # orjson itself refuses to write past 255 levels
    response = post(gateway, "/v1/messages", key, raw)
    assert response.status_code == 400 and "nested too deeply" in response.json()["error"]["message"]
    assert_nothing_spent(gateway, account.id, account.balance_uc)


def test_nesting_within_the_limit_is_served(gateway: GatewayServer) -> None:
    key = gateway.key(gateway.account("acme"), "Basic").secret
    body = {
        "model": "aria-haiku-4.5",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"name": "t", "input_schema": nested(60)}],
    }
    assert post(gateway, "/v1/messages", key, orjson.dumps(body)).status_code == 200


@pytest.mark.parametrize(
    "tools", [5, "web_search", {"type": "web_search"}, [5], [{"type": "namespace", "tools": 5}], None]
)
def test_hostile_tools_on_responses_are_answered_not_crashed(gateway: GatewayServer, tools: Any) -> None:
    account = gateway.account("acme")
    key = gateway.key(account, "Nova").secret
    raw = orjson.dumps({"model": "nova-5.5", "input": "hi", "max_output_tokens": 5, "tools": tools})
    response = post(gateway, "/v1/responses", key, raw)
    assert response.status_code < 500, response.text
    if response.status_code != 200:
        assert response.json()["error"]["type"] == "invalid_request_error"


def test_an_absurd_model_name_is_a_404_that_does_not_echo_it(gateway: GatewayServer) -> None:
    key = gateway.key(gateway.account("acme"), "Basic").secret
    name = "m" * 100_000
    raw = orjson.dumps({"model": name, "max_tokens": 5, "messages": []})
    response = post(gateway, "/v1/messages", key, raw)
    assert response.status_code == 404 and len(response.content) < 2_000
