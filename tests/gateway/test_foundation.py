"""Issue 2: the walking skeleton, judged by the official SDKs against a real gateway on loopback."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
from anthropic.types import MessageParam
from openai.types.chat import ChatCompletionMessageParam

from modelgate.catalogue import build_catalogue
from modelgate.clock import month_of
from modelgate.storage.sqlite_database import SqliteDatabase
from tests.gateway.clients import SdkClients
from tests.gateway_server import GatewayServer, running_gateway
from tests.whole_store import whole_store

CATALOGUE = build_catalogue()
ARIA = sorted(m.id for m in CATALOGUE.in_family("aria"))
NOVA = sorted(m.id for m in CATALOGUE.in_family("nova"))
CLAUDE_HELLO: list[MessageParam] = [{"role": "user", "content": "Hello there gateway"}]
GPT_HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Hello there gateway"}]


def test_models_list_per_group_returns_exactly_the_allowed_ids(
    gateway: GatewayServer, sdk: SdkClients
) -> None:
    account = gateway.account("acme")
    basic = gateway.key(account, "Basic").secret
    pro = gateway.key(account, "Pro").secret
    nova = gateway.key(account, "Nova").secret
    restricted = gateway.key(account, "Pro", models=["sonnet", "aria-haiku-4.5"]).secret

    assert sorted(m.id for m in sdk.anthropic(gateway.base_url, basic).models.list()) == ARIA
    assert (
        sorted(m.id for m in sdk.anthropic(gateway.base_url, pro, header="x-api-key").models.list()) == ARIA
    )
    assert sorted(m.id for m in sdk.openai(gateway.base_url, nova).models.list()) == NOVA
    assert sorted(m.id for m in sdk.openai(gateway.base_url, restricted).models.list()) == [
        "aria-haiku-4.5",
        "aria-sonnet-4.6",
    ]
    # Aliases are never catalogue entries.
    listed = {m.id for m in sdk.openai(gateway.base_url, basic).models.list()}
    assert not listed & {"opus", "sonnet", "haiku"}


def test_models_listing_carries_the_union_shape(gateway: GatewayServer, sdk: SdkClients) -> None:
    key = gateway.key(gateway.account("acme"), "Basic").secret
    body = httpx.get(f"{gateway.base_url}/v1/models", headers={"x-api-key": key}).json()
    assert body["object"] == "list" and body["has_more"] is False
    assert body["first_id"] == body["data"][0]["id"] and body["last_id"] == body["data"][-1]["id"]
    haiku = next(m for m in body["data"] if m["id"] == "aria-haiku-4.5")
    assert haiku["context_length"] == 200000 and haiku["max_output_tokens"] == 8192
    assert {"object", "type", "display_name", "created", "created_at", "owned_by"} <= set(haiku)
    one = sdk.anthropic(gateway.base_url, key).models.retrieve("aria-haiku-4.5")
    assert one.id == "aria-haiku-4.5"
    with pytest.raises(anthropic.NotFoundError):
        sdk.anthropic(gateway.base_url, key).models.retrieve("nova-5.5")


@pytest.mark.parametrize("header", ["bearer", "x-api-key"])
@pytest.mark.parametrize("version", ["2023-06-01", "2026-10-21"])
def test_messages_create_with_each_auth_header_and_version(
    gateway: GatewayServer, header: str, version: str, sdk: SdkClients
) -> None:
    key = gateway.key(gateway.account("acme"), "Pro").secret
    client = sdk.anthropic(gateway.base_url, key, header=header, version=version)
    message = client.messages.create(model="aria-haiku-4.5", max_tokens=200, messages=CLAUDE_HELLO)
    assert message.id.startswith("msg_") and message.type == "message" and message.role == "assistant"
    assert message.model == "aria-haiku-4.5"
    assert message.stop_reason == "end_turn"
    block = message.content[0]
    assert block.type == "text"
    text = block.text
    assert text.startswith("[simulator] You said: Hello there gateway.")
    assert message.usage.input_tokens == 3  # "Hello", "there", "gateway"
    assert message.usage.output_tokens == len(re.findall(r"\w+|[^\w\s]", text))
    # Deterministic: the same prompt gets the same reply.
    again = client.messages.create(model="aria-haiku-4.5", max_tokens=200, messages=CLAUDE_HELLO)
    assert again.content == [block]
    assert message._request_id and message._request_id.startswith("req_")


def test_chat_completions_create_returns_the_simulator_reply(gateway: GatewayServer, sdk: SdkClients) -> None:
    account = gateway.account("acme")
    for group, model in (("Nova", "nova-5.6-sol"), ("Basic", "aria-sonnet-5")):
        key = gateway.key(account, group).secret
        completion = sdk.openai(gateway.base_url, key).chat.completions.create(
            model=model,
            messages=[{"role": "system", "content": "Be brief."}, *GPT_HELLO],
        )
        assert completion.id.startswith("chatcmpl-") and completion.object == "chat.completion"
        assert completion.model == model
        choice = completion.choices[0]
        assert choice.finish_reason == "stop"
        assert choice.message.content and choice.message.content.startswith(
            "[simulator] You said: Hello there"
        )
        usage = completion.usage
        assert usage is not None and usage.prompt_tokens == 6  # "Be brief." + "Hello there gateway"
        assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_authentication_errors(gateway: GatewayServer, sdk: SdkClients) -> None:
    account = gateway.account("acme")
    issued = gateway.key(account, "Basic")
    url = gateway.base_url
    # A well-formed key nobody issued, a typo (checksum), and a revoked key.
    from modelgate.keys import new_api_key

    typo = issued.secret[:-1] + ("A" if issued.secret[-1] != "A" else "B")
    for secret in (new_api_key(), typo):
        with pytest.raises(anthropic.AuthenticationError):
            sdk.anthropic(url, secret).messages.create(model="haiku", max_tokens=10, messages=CLAUDE_HELLO)
        with pytest.raises(openai.AuthenticationError):
            sdk.openai(url, secret).chat.completions.create(model="haiku", messages=GPT_HELLO)
    gateway.call(gateway.management.revoke_key(issued.record))
    gateway.refresh_keys()
    with pytest.raises(anthropic.AuthenticationError, match="revoked"):
        sdk.anthropic(url, issued.secret).messages.create(model="haiku", max_tokens=10, messages=CLAUDE_HELLO)
    # Missing key, and a bearer token that is not a gateway key (ALPHA_AUTH_TOKEN / OAuth).
    missing = httpx.post(f"{url}/v1/messages", json={}, headers={"anthropic-version": "2023-06-01"})
    assert missing.status_code == 401 and missing.json()["error"]["type"] == "authentication_error"
    oauth = httpx.post(
        f"{url}/v1/chat/completions", json={}, headers={"authorization": "Bearer sk-ant-oat01-xyz"}
    )
    assert oauth.status_code == 401 and "x-api-key" in oauth.json()["error"]["message"]
    assert oauth.json()["error"]["code"] == "invalid_api_key"


def test_group_and_model_rules(gateway: GatewayServer, sdk: SdkClients) -> None:
    account = gateway.account("acme")
    nova = gateway.key(account, "Nova").secret
    only_sonnet = gateway.key(account, "Basic", models=["aria-sonnet-4.6"]).secret
    url = gateway.base_url
    with pytest.raises(anthropic.PermissionDeniedError, match="/v1/chat/completions"):
        sdk.anthropic(url, nova).messages.create(model="nova-5.5", max_tokens=10, messages=CLAUDE_HELLO)
    with pytest.raises(openai.PermissionDeniedError, match="/v1/messages"):
        sdk.openai(url, only_sonnet).responses.create(model="aria-sonnet-4.6", input="hi")
    # Outside the key's list, of the other family, or unknown: 404 with the same message.
    for model in ("aria-opus-4.8", "nova-5.5", "no-such-model"):
        with pytest.raises(anthropic.NotFoundError, match=f"model {model} is not available for this key"):
            sdk.anthropic(url, only_sonnet).messages.create(model=model, max_tokens=10, messages=CLAUDE_HELLO)
    with pytest.raises(openai.NotFoundError) as caught:
        sdk.openai(url, nova).chat.completions.create(model="aria-haiku-4.5", messages=GPT_HELLO)
    assert caught.value.code == "model_not_found"


def test_alias_resolves_before_the_allowed_models_check(gateway: GatewayServer, sdk: SdkClients) -> None:
    key = gateway.key(gateway.account("acme"), "Basic", models=["aria-sonnet-4.6"]).secret
    message = sdk.anthropic(gateway.base_url, key).messages.create(
        model="sonnet", max_tokens=50, messages=CLAUDE_HELLO
    )
    assert message.model == "aria-sonnet-4.6"
    completion = sdk.openai(gateway.base_url, key).chat.completions.create(model="sonnet", messages=GPT_HELLO)
    assert completion.model == "aria-sonnet-4.6"
    with pytest.raises(anthropic.NotFoundError):
        sdk.anthropic(gateway.base_url, key).messages.create(
            model="haiku", max_tokens=5, messages=CLAUDE_HELLO
        )
    gateway.call(gateway.services.settlements.drain())  # a refusal is recorded after its answer
    records = gateway.call(gateway.services.usage.usage_records(month_of(time.time())))
    # The refusal is in the usage log too, under no model name of the client's.
    assert {(r.model, r.status) for r in records} == {("aria-sonnet-4.6", "ok"), ("unknown", "refused_404")}


def test_bad_requests(gateway: GatewayServer, sdk: SdkClients) -> None:
    key = gateway.key(gateway.account("acme"), "Basic").secret
    url = gateway.base_url
    client = sdk.anthropic(url, key)
    with pytest.raises(anthropic.BadRequestError, match="max_tokens"):  # the SDK's own types insist on it
        client.post("/v1/messages", cast_to=object, body={"model": "haiku", "messages": CLAUDE_HELLO})
    no_version = httpx.post(
        f"{url}/v1/messages",
        headers={"x-api-key": key},
        json={"model": "haiku", "max_tokens": 5, "messages": CLAUDE_HELLO},
    )
    assert no_version.status_code == 400 and "anthropic-version" in no_version.json()["error"]["message"]
    bad_version = httpx.post(
        f"{url}/v1/messages",
        headers={"x-api-key": key, "alpha-version": "1999-01-01"},
        json={"model": "haiku", "max_tokens": 5, "messages": CLAUDE_HELLO},
    )
    assert bad_version.status_code == 400 and "alpha-version" in bad_version.json()["error"]["message"]
    bad_json = httpx.post(
        f"{url}/v1/messages",
        headers={"x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json"},
        content=b'{"model": "haiku",',
    )
    assert bad_json.status_code == 400 and bad_json.json()["type"] == "error"
    assert bad_json.json()["error"]["type"] == "invalid_request_error"
    assert bad_json.json()["request_id"] == bad_json.headers["request-id"]
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.openai(url, key).chat.completions.create(model="haiku", messages=[])
    assert caught.value.param == "messages"
    # The SDK raises on a missing version header too.
    # The SDK removes a default header given as Omit() but types default_headers as str values.
    no_version_header: dict[str, str] = {"anthropic-version": anthropic.Omit()}  # type: ignore[dict-item]
    raw = anthropic.Anthropic(base_url=url, api_key=key, max_retries=0, default_headers=no_version_header)
    with raw, pytest.raises(anthropic.BadRequestError, match="anthropic-version"):
        raw.messages.create(model="haiku", max_tokens=5, messages=CLAUDE_HELLO)


def test_max_tokens_is_clamped_to_the_model_maximum(gateway: GatewayServer) -> None:
    key = gateway.key(gateway.account("acme"), "Basic").secret
    response = httpx.post(
        f"{gateway.base_url}/v1/messages",
        headers={"x-api-key": key, "anthropic-version": "2023-06-01"},
        json={"model": "aria-haiku-4.5", "max_tokens": 64000, "messages": CLAUDE_HELLO},
    )
    assert response.status_code == 200
    assert response.headers["x-modelgate-max-tokens-clamped"] == "64000->8192; reason=model_limit"


def test_body_limit_and_request_ids(tmp_path: Path) -> None:
    with running_gateway(tmp_path / "d", server={"max_body_bytes": 4096}) as gateway:
        key = gateway.key(gateway.account("acme"), "Basic").secret
        big = {"model": "haiku", "max_tokens": 5, "messages": [{"role": "user", "content": "x" * 5000}]}
        response = httpx.post(
            f"{gateway.base_url}/v1/messages",
            json=big,
            headers={"x-api-key": key, "anthropic-version": "2023-06-01"},
        )
        assert response.status_code == 413 and response.json()["error"]["type"] == "request_too_large"

        def chunks() -> Iterator[bytes]:  # chunked upload: no content-length to check up front
            for _ in range(10):
                yield b"x" * 1000

        chunked = httpx.post(
            f"{gateway.base_url}/v1/chat/completions",
            content=chunks(),
            headers={"authorization": f"Bearer {key}"},
        )
        assert chunked.status_code == 413 and chunked.json()["error"]["code"] == "request_too_large"
        for path in ("/healthz", "/health", "/v1/models", "/v1/nope"):
            r = httpx.get(gateway.base_url + path, headers={"x-api-key": key})
            assert r.status_code in (200, 404)
        nope = httpx.get(f"{gateway.base_url}/v1/nope", headers={"authorization": f"Bearer {key}"})
        assert nope.status_code == 404 and nope.headers["x-request-id"].startswith("req_")


def test_health_endpoints(gateway: GatewayServer, sdk: SdkClients) -> None:
    key = gateway.key(gateway.account("acme"), "Basic").secret
    healthz = httpx.get(f"{gateway.base_url}/healthz")
    assert healthz.status_code == 200 and healthz.json()["status"] == "ok"
    operator = gateway.call(gateway.management.create_admin_token(None))
    health = httpx.get(f"{gateway.base_url}/health", headers={"authorization": f"Bearer {operator}"}).json()
    assert health["status"] == "ok" and health["checks"]["database"]["status"] == "ok"
    assert health["checks"]["upstreams"] == [
        {"name": "simulator", "kind": "simulator", "note": "built-in simulator, not a real model"}
    ]
    assert "secret" not in httpx.get(f"{gateway.base_url}/health").text
    assert httpx.head(f"{gateway.base_url}/").status_code == 200
    # Database gone: /health says so with 503; /healthz still answers without touching it.
    store = whole_store(gateway.services)
    assert isinstance(store.database, SqliteDatabase)
    # The path first: a background task (the key refresh) reconnecting between the two steps
    # would otherwise open the old file again.
    store.database.path = Path("/proc/no-such-dir/db.sqlite")
    gateway.call(store.close())
    store.database._executor = ThreadPoolExecutor(1)
    down = httpx.get(f"{gateway.base_url}/health")
    assert down.status_code == 503 and down.json()["components"]["database"] == "down"
    assert httpx.get(f"{gateway.base_url}/healthz").status_code == 200
    # Model requests get a retryable 503 in their own format, not a 500.
    with pytest.raises(anthropic.InternalServerError) as caught:
        sdk.anthropic(gateway.base_url, key).messages.create(
            model="haiku", max_tokens=5, messages=CLAUDE_HELLO
        )
    assert caught.value.status_code == 503 and "database is unavailable" in caught.value.message
    with pytest.raises(openai.InternalServerError) as failed:
        sdk.openai(gateway.base_url, key).chat.completions.create(model="haiku", messages=GPT_HELLO)
    assert failed.value.status_code == 503 and failed.value.code == "service_unavailable"


def test_database_holds_no_key_secret(gateway: GatewayServer) -> None:
    account = gateway.account("acme")
    secrets = [gateway.key(account, g).secret for g in ("Basic", "Pro", "Nova")]
    rotated = gateway.call(gateway.management.rotate_key(gateway.key(account, "Basic").record, 60))
    secrets.append(rotated.secret)
    admin = gateway.call(gateway.management.create_admin_token(None))
    db = Path(gateway.settings.resolved_database_url.removeprefix("sqlite:///"))
    with sqlite3.connect(db) as conn:
        dump = "\n".join(conn.iterdump())
    raw = b"".join(p.read_bytes() for p in db.parent.glob("modelgate.db*"))
    for secret in [*secrets, admin]:
        assert secret not in dump
        assert secret.encode() not in raw
        assert secret[7:].encode() not in raw  # not even without the prefix


def test_cli_revocation_is_honoured_by_the_running_server_after_its_key_refresh(
    gateway: GatewayServer,
    sdk: SdkClients,
) -> None:
    data_dir = gateway.settings.data_dir
    env_args = ["--data-dir", str(data_dir)]
    cli = [sys.executable, "-m", "modelgate"]
    created = subprocess.run(
        [*cli, "accounts", "create", "cli-acct", "--credits", "5", *env_args, "--json"],
        capture_output=True,
        text=True,
        check=True,
        env=_cli_env(gateway),
    )
    assert '"balance_uc": 5000000' in created.stdout
    made = subprocess.run(
        [*cli, "keys", "create", "--account", "cli-acct", "--group", "Basic", "--json", *env_args],
        capture_output=True,
        text=True,
        check=True,
        env=_cli_env(gateway),
    )
    import json

    issued = json.loads(made.stdout)
    client = sdk.anthropic(gateway.base_url, issued["secret"])
    # The running server learns of keys the CLI made through its key view's own refresh.
    created_record = gateway.call(gateway.services.key_records.get_key(issued["id"]))
    assert created_record is not None
    gateway.wait_for_key_version(issued["id"], created_record.version)
    client.messages.create(model="haiku", max_tokens=5, messages=CLAUDE_HELLO)
    subprocess.run(
        [*cli, "keys", "revoke", issued["id"], *env_args],
        check=True,
        capture_output=True,
        env=_cli_env(gateway),
    )
    revoked = gateway.call(gateway.services.key_records.get_key(issued["id"]))
    assert revoked is not None and revoked.state == "disabled"
    gateway.wait_for_key_version(issued["id"], revoked.version)
    # Refused on the first request after the refresh that loaded the revocation.
    with pytest.raises(anthropic.AuthenticationError):
        client.messages.create(model="haiku", max_tokens=5, messages=CLAUDE_HELLO)
    listed = subprocess.run(
        [*cli, "keys", "list", "--account", "cli-acct", *env_args],
        capture_output=True,
        text=True,
        check=True,
        env=_cli_env(gateway),
    )
    assert "disabled" in listed.stdout and issued["secret"] not in listed.stdout


def _cli_env(gateway: GatewayServer) -> dict[str, str]:
    import os

    return {**os.environ, "MODELGATE_SECRET": gateway.settings.secret or "", "COLUMNS": "200"}
