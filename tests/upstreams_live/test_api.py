"""Providers, deployments, aliases and prices through the admin API, against a real gateway on
loopback with fake upstreams: a change is used by the very next request, an invalid one changes
nothing, credentials are write-only and sealed at rest, and deletion refuses a routed provider."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.upstream import FakeUpstream, Fault, Reply
from tests.gateway_server import GatewayServer, running_gateway
from tests.loop_thread import LoopThread
from tests.secret_scan import SCANNER

#: The upstream credential given through the API: it must never come back.
SECRET = "sk-ant-live-credential-" + "q" * 24
SCANNER.register(SECRET)


@pytest.fixture
def fakes() -> Iterator[tuple[FakeUpstream, FakeUpstream]]:
    loop = LoopThread("live-upstreams")
    try:
        yield (
            loop.start(FakeUpstream(default=Reply(text="from the fake"))),
            loop.start(FakeUpstream(default=Fault.echo_key(401))),
        )
    finally:
        loop.close()


class Api:
    def __init__(self, gateway: GatewayServer) -> None:
        self.gateway = gateway
        token = gateway.call(gateway.management.create_admin_token(None))
        self.headers = {"authorization": f"Bearer {token}"}
        self.client = httpx.Client(base_url=gateway.base_url + "/admin/api", timeout=30)
        self.seen: list[str] = []

    def call(
        self, method: str, path: str, json: Any = None, headers: dict[str, str] | None = None
    ) -> httpx.Response:
        response = self.client.request(method, path, json=json, headers=headers or self.headers)
        self.seen.append(response.text)
        return response

    def ok(self, method: str, path: str, json: Any = None, status: int = 200) -> Any:
        response = self.call(method, path, json)
        assert response.status_code == status, response.text
        return response.json()

    def no_secret_seen(self) -> None:
        for text in self.seen:
            assert SECRET not in text and SECRET[-12:] not in text


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[GatewayServer]:
    with running_gateway(tmp_path / "data") as server:
        yield server


@pytest.fixture
def api(gateway: GatewayServer) -> Iterator[Api]:
    caller = Api(gateway)
    try:
        yield caller
    finally:
        caller.client.close()
        caller.no_secret_seen()


def chat(gateway: GatewayServer, secret: str, model: str = "aria-haiku-4.5") -> httpx.Response:
    return httpx.post(
        f"{gateway.base_url}/v1/chat/completions",
        headers={"authorization": f"Bearer {secret}"},
        json={"model": model, "max_tokens": 50, "messages": [{"role": "user", "content": "hello"}]},
        timeout=30,
    )


def test_a_provider_added_through_the_api_serves_the_next_request(
    api: Api, gateway: GatewayServer, fakes: tuple[FakeUpstream, FakeUpstream], tmp_path: Path
) -> None:
    good, _ = fakes
    account = gateway.account("acme")
    key = gateway.key(account, "Basic").secret
    before = chat(gateway, key)
    assert before.status_code == 200 and good.count == 0  # the simulator serves it
    created = api.ok(
        "POST",
        "/providers",
        {"name": "fake-ant", "kind": "anthropic", "base_url": good.base_url, "api_key": SECRET},
        status=201,
    )
    assert created["source"] == "api" and created["config"]["api_key"]["hint"] == "…" + SECRET[-4:]
    assert "api_key_env" not in created["config"]
    routed = api.ok(
        "PUT",
        "/models/aria-haiku-4.5/deployments",
        {"deployments": [{"provider": "fake-ant", "upstream_model": "claude-fake", "weight": 1}]},
    )
    assert routed == {
        "model": "aria-haiku-4.5",
        "source": "api",
        "deployments": [{"provider": "fake-ant", "upstream_model": "claude-fake", "weight": 1}],
    }
    after = chat(gateway, key)
    assert after.status_code == 200, after.text
    assert after.json()["choices"][0]["message"]["content"] == "from the fake"
    assert good.count == 1
    sent = good.requests[0]
    assert sent.headers["x-api-key"] == SECRET and sent.json()["model"] == "claude-fake"
    listed = api.ok("GET", "/providers")
    (entry,) = [p for p in listed["data"] if p["name"] == "fake-ant"]
    assert entry["routes"] == [{"model": "aria-haiku-4.5", "upstream_model": "claude-fake", "weight": 1}]
    assert entry["health"]["attempts"] == 1 and entry["health"]["errors"] == 0
    # A PATCH without a key keeps the stored one; the hint and its time stay.
    patched = api.ok("PATCH", "/providers/fake-ant", {"max_concurrency": 7})
    assert (
        patched["config"]["max_concurrency"] == 7
        and patched["config"]["api_key"] == created["config"]["api_key"]
    )
    assert chat(gateway, key).status_code == 200 and good.requests[-1].headers["x-api-key"] == SECRET
    # The test button speaks the provider's dialect with its credentials.
    tried = api.ok("POST", "/providers/fake-ant/test", {})
    assert tried["ok"] is True and tried["status"] == 200 and tried["error"] is None
    assert [d["dialect"] for d in tried["dialects"]] == ["messages"]
    # The audit log has each change, by this token, with the key's hint only.
    audit = api.call("GET", "/audit?action=upstream.create")
    assert audit.status_code == 200, audit.text
    assert "provider:fake-ant" in audit.text and "…" + SECRET[-4:] in audit.text
    by_target = api.ok("GET", "/audit?target=provider:fake-ant")["data"]
    assert {e["action"] for e in by_target} >= {"upstream.create", "upstream.amend"}
    # At rest the credential is sealed: not in the database's files (WAL included).
    files = list((tmp_path / "data").glob("modelgate.db*"))
    assert files
    for path in files:
        assert SECRET.encode() not in path.read_bytes()
    with sqlite3.connect(tmp_path / "data" / "modelgate.db") as db:
        (sealed,) = db.execute("SELECT sealed FROM upstream_entries WHERE name = 'fake-ant'").fetchone()
    assert sealed and SECRET.encode() not in sealed
    api.no_secret_seen()


def test_an_invalid_change_changes_nothing(
    api: Api, gateway: GatewayServer, fakes: tuple[FakeUpstream, FakeUpstream]
) -> None:
    good, _ = fakes
    generation = api.ok("GET", "/providers")["generation"]
    refusals = [
        ("POST", "/providers", {"name": "x", "kind": "nonsense"}, "kind"),
        ("POST", "/providers", {"name": "x", "kind": "anthropic", "base_url": good.base_url}, "api_key_env"),
        ("POST", "/providers", {"name": "x", "kind": "openai", "api_key": ""}, "api_key"),
        (
            "POST",
            "/providers",
            {"name": "x", "kind": "openai", "api_key": SECRET, "api_key_env": "K"},
            "api_key",
        ),
        ("POST", "/providers", {"name": "bad name!", "kind": "simulator"}, "name"),
        (
            "PUT",
            "/models/aria-haiku-4.5/deployments",
            {"deployments": [{"provider": "ghost", "upstream_model": "m"}]},
            "ghost",
        ),
        ("PUT", "/models/aria-haiku-4.5/deployments", {"deployments": []}, "deployments"),
        ("PUT", "/models/aria-haiku-4.5/price", {"input": -1}, "input"),
        ("PUT", "/models/aria-haiku-4.5/price", {"input": "0.0000001"}, "decimal"),
        (
            "PUT",
            "/models/aria-haiku-4.5/price",
            {"input": 1, "effective_from": "2001-01-01T00:00:00Z"},
            "past",
        ),
        ("PUT", "/aliases/fast", {"target": "no-such-model"}, "target"),
    ]
    for method, path, body, word in refusals:
        response = api.call(method, path, body)
        assert response.status_code == 400, (path, body, response.text)
        assert word in response.json()["error"]["message"], response.text
    assert api.call("PUT", "/aliases/aria-haiku-4.5", {"target": "aria-opus-5"}).status_code == 409
    assert api.call("GET", "/models/no-such-model/deployments").status_code == 404
    assert api.ok("GET", "/providers")["generation"] == generation
    assert [p["name"] for p in api.ok("GET", "/providers")["data"]] == ["simulator"]
    # An account's token is refused every upstream endpoint.
    owner = gateway.call(gateway.management.create_admin_token(gateway.account("acme")))
    for method, path in (("GET", "/providers"), ("POST", "/providers"), ("GET", "/aliases")):
        refused = api.call(method, path, {}, headers={"authorization": f"Bearer {owner}"})
        assert refused.status_code == 403, refused.text


def test_a_routed_provider_is_not_deleted_and_an_unrouted_one_is(
    api: Api, gateway: GatewayServer, fakes: tuple[FakeUpstream, FakeUpstream]
) -> None:
    good, bad = fakes
    api.ok(
        "POST",
        "/providers",
        {"name": "p1", "kind": "anthropic", "base_url": good.base_url, "api_key": SECRET},
        201,
    )
    api.ok(
        "PUT", "/models/aria-opus-5/deployments", {"deployments": [{"provider": "p1", "upstream_model": "m"}]}
    )
    refused = api.call("DELETE", "/providers/p1")
    assert refused.status_code == 409 and "aria-opus-5" in refused.text
    assert api.call("DELETE", "/providers/simulator").status_code == 409  # the file's
    api.ok("DELETE", "/models/aria-opus-5/deployments")
    assert api.ok("DELETE", "/providers/p1") == {"deleted": "p1", "now": None}
    assert api.call("GET", "/providers/p1").status_code == 404
    # A provider whose upstream refuses the key: the test says so, without the key.
    api.ok(
        "POST",
        "/providers",
        {"name": "p2", "kind": "anthropic", "base_url": bad.base_url, "api_key": SECRET},
        201,
    )
    tried = api.ok("POST", "/providers/p2/test", {"model": "claude-x"})
    assert tried["ok"] is False and tried["status"] == 401 and tried["error"]
    assert SECRET not in tried["error"]
    api.no_secret_seen()


def test_aliases_through_the_api(api: Api, gateway: GatewayServer) -> None:
    key = gateway.key(gateway.account("acme"), "Basic").secret
    assert chat(gateway, key, model="fast").status_code == 404
    api.ok("PUT", "/aliases/fast", {"target": "aria-haiku-4.5"})
    answered = chat(gateway, key, model="fast")
    assert answered.status_code == 200 and answered.json()["model"] in ("fast", "aria-haiku-4.5")
    assert {"alias": "fast", "target": "aria-haiku-4.5", "source": "api"} in api.ok("GET", "/aliases")["data"]
    assert api.call("DELETE", "/aliases/opus").status_code == 409  # the catalogue's
    api.ok("DELETE", "/aliases/fast")
    assert chat(gateway, key, model="fast").status_code == 404


def test_every_hostile_upstream_body_of_the_fuzzer_is_a_4xx_and_changes_nothing(
    api: Api, gateway: GatewayServer
) -> None:
    from tests.fuzz.hostile import ADMIN_BODIES, ADMIN_PATHS

    upstream = ("/providers", "/models/", "/aliases")
    bodies = [(m, p, b) for m, p, b in ADMIN_BODIES if any(part in p for part in upstream)]
    paths = [p for p in ADMIN_PATHS if any(part in p for part in upstream)]
    assert len(bodies) > 40 and paths
    for method, path, body in bodies:
        for raw in (body, "{" + "[" * 300):
            sent = api.client.request(
                method,
                path.removeprefix("/admin/api"),
                content=raw if isinstance(raw, str) else None,
                json=None if isinstance(raw, str) else raw,
                headers={**api.headers, "content-type": "application/json"},
            )
            assert 400 <= sent.status_code < 500, (method, path, body, sent.text)
            assert sent.json()["error"]["message"]
    for path in paths:
        sent = api.client.get(path.removeprefix("/admin/api"), headers=api.headers)
        assert sent.status_code < 500, (path, sent.text)
    stored = gateway.call(gateway.services.live.store.snapshot())  # type: ignore[union-attr]
    assert stored.generation == 0 and not stored.entries and not stored.prices


def test_a_change_keeps_the_providers_it_did_not_touch_with_their_cooldowns(
    api: Api, gateway: GatewayServer, fakes: tuple[FakeUpstream, FakeUpstream]
) -> None:
    _, refusing = fakes
    api.ok(
        "POST",
        "/providers",
        {"name": "p-bad", "kind": "anthropic", "base_url": refusing.base_url, "api_key": SECRET},
        201,
    )
    api.ok(
        "PUT",
        "/models/aria-opus-5/deployments",
        {"deployments": [{"provider": "p-bad", "upstream_model": "m"}]},
    )
    key = gateway.key(gateway.account("acme"), "Basic").secret
    assert chat(gateway, key, model="aria-opus-5").status_code >= 400  # our key refused: it cools down
    router = gateway.services.router
    provider = router.providers["p-bad"]

    def cooling() -> float:
        return max(s.cooling_for for s in gateway.services.router.status() if s.provider == "p-bad")

    assert cooling() > 0
    # An unrelated change: a new router, the same provider object, the cooldown kept.
    api.ok("PUT", "/aliases/fast", {"target": "aria-haiku-4.5"})
    assert gateway.services.router is not router
    assert gateway.services.router.providers["p-bad"] is provider
    assert cooling() > 0
    assert api.ok("GET", "/providers/p-bad")["health"]["cooling_down"] is True
    # A change to the provider itself rebuilds it (new settings, new connections).
    api.ok("PATCH", "/providers/p-bad", {"max_concurrency": 3})
    assert gateway.services.router.providers["p-bad"] is not provider
