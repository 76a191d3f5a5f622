"""Session affinity through the real gateway: fake upstreams on loopback record which credential
(``x-api-key`` / ``authorization``) and which deployment served each turn of each conversation,
sent by the official SDKs turn after turn, the sessions interleaved (as round-robin would
scatter them).

- A pool of four credentials and seven sessions (round-robin would move each one every turn);
  Messages with Claude Code's session header, Messages without any session identifier (the
  prefix fingerprint), Responses with ``prompt_cache_key``: every turn of a session carries the
  same credential, and the sessions spread over the pool.
- A credential that starts refusing mid-run: no client request fails, its sessions move to
  another credential and stay there (``modelgate_affinity_total{result="repinned"}``).
- Two deployments of one model: sessions stay on theirs; when one starts failing, its sessions
  fail over within their request and stay on the other one.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest

from tests.conformance.conftest import issue_key
from tests.fakes.upstream import FakeUpstream, Fault, RecordedRequest, Reply
from tests.gateway.clients import anthropic_client, openai_client
from tests.gateway_server import GatewayServer, running_gateway
from tests.loop_thread import LoopThread

KEYS = [f"sk-ant-api03-AFFINITY{i}poolSECRET0123456789abcdefXYZ" for i in range(4)]
SESSIONS = 7
TURNS = 4
#: Over 1 KB, so that with ``offload`` every body is a large one.
CLAUDE_MD = (
    "<system-reminder>CLAUDE.md:\n" + "- run the tests before committing.\n" * 30 + "</system-reminder>"
)
INSTRUCTIONS = "You are a coding agent. " * 60
SYSTEM = [
    {"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}},
    {"type": "text", "text": "Tools: Bash, Read, Edit.", "cache_control": {"type": "ephemeral"}},
]
Mode = Literal["claude-header", "prefix", "prompt_cache_key"]


class Upstream:
    """Answers every request, except those carrying a credential in ``refused`` (401) or sent to
    a deployment in ``failing`` (503)."""

    def __init__(self) -> None:
        self.refused: set[str] = set()
        self.failing: set[str] = set()

    def __call__(self, request: RecordedRequest) -> Reply | Fault:
        if credential_of(request) in self.refused:
            return Fault.status(401, message="invalid x-api-key")
        if request.json().get("model") in self.failing:
            return Fault.status(503)
        return Reply(text="Noted.")


def credential_of(request: RecordedRequest) -> str:
    return request.headers.get("x-api-key") or request.headers.get("authorization", "").removeprefix(
        "Bearer "
    )


def session_of(request: RecordedRequest) -> int:
    found = re.search(r"task number (\d+)", request.body.decode())
    assert found, "every upstream request carries its session's first turn"
    return int(found.group(1))


@dataclass
class Setup:
    gateway: GatewayServer
    fake: FakeUpstream
    upstream: Upstream
    secret: str
    #: A key of the group served on /v1/responses.
    nova_secret: str


@contextmanager
def gateway_with_pool(tmp_path: Path, *, offload: bool = False) -> Iterator[Setup]:
    """``offload``: every body is analysed in a worker process (``server.offload_body_bytes``
    at its minimum), so the session key comes from the worker's hint."""
    upstream = Upstream()
    with LoopThread("fake-upstream") as fakes:
        fake = fakes.start(FakeUpstream(upstream))
        env = {f"POOL_{i}": key for i, key in enumerate(KEYS)}
        pool = [f"POOL_{i}" for i in range(4)]
        providers = [
            {"name": "pool", "kind": "anthropic", "base_url": fake.base_url, "api_key_env": pool},
            {"name": "opool", "kind": "openai", "base_url": fake.base_url, "api_key_env": pool},
            {"name": "east", "kind": "anthropic", "base_url": fake.base_url, "api_key_env": "POOL_0"},
            {"name": "west", "kind": "anthropic", "base_url": fake.base_url, "api_key_env": "POOL_1"},
        ]
        deployments = {
            "aria-sonnet-4.6": [{"provider": "pool", "upstream_model": "claude-pool"}],
            "nova-5.5": [{"provider": "opool", "upstream_model": "gpt-pool"}],
            "aria-haiku-4.5": [
                {"provider": "east", "upstream_model": "claude-east"},
                {"provider": "west", "upstream_model": "claude-west"},
            ],
        }
        with running_gateway(
            tmp_path / "data",
            env=env,
            providers=providers,
            deployments=deployments,
            default_provider="",
            unrouted="hide",
            routing={"failures_to_cooldown": 1, "cooldown": 60},
            server={"offload_body_bytes": 1024} if offload else {},
        ) as gateway:
            secret, _ = issue_key(gateway, "Pro")
            nova_secret, _ = issue_key(gateway, "Nova")
            yield Setup(gateway, fake, upstream, secret, nova_secret)


class Conversations:
    """``SESSIONS`` growing conversations sent turn by turn through an SDK, interleaved."""

    def __init__(self, setup: Setup, mode: Mode, model: str) -> None:
        self.setup = setup
        self.mode = mode
        self.model = model
        self.history: list[list[Any]] = [[] for _ in range(SESSIONS)]

    def turn(self, session: int) -> str:
        base_url, secret = self.setup.gateway.base_url, self.setup.secret
        history = self.history[session]
        question = f"task number {session}: step {len(history) // 2}" if history else f"task number {session}"
        if self.mode == "prompt_cache_key":
            history.append({"role": "user", "content": question})
            with openai_client(base_url, self.setup.nova_secret) as oai:
                response = oai.responses.create(
                    model=self.model, instructions=INSTRUCTIONS, input=history,
                    prompt_cache_key=f"thread-{session}",
                )  # fmt: skip
            history.append({"role": "assistant", "content": response.output_text})
            return response.output_text
        history.append(
            {
                "role": "user",
                "content": [{"type": "text", "text": CLAUDE_MD}, {"type": "text", "text": question}],
            }
        )
        headers = (
            {"x-claude-code-session-id": f"cc-session-{session}"} if self.mode == "claude-header" else {}
        )
        with anthropic_client(base_url, secret, header="x-api-key") as ant:
            message = ant.messages.create(
                model=self.model,
                max_tokens=100,
                system=SYSTEM,  # type: ignore[arg-type]
                messages=history,
                extra_headers=headers,
            )
        text = "".join(b.text for b in message.content if b.type == "text")
        history.append({"role": "assistant", "content": text})
        return text

    def round(self) -> list[str]:
        return [self.turn(s) for s in range(SESSIONS)]


def served(fake: FakeUpstream, start: int = 0, refused: frozenset[str] = frozenset()) -> dict[int, list[str]]:
    """Per session, the credential of each upstream request since ``start`` (refusals left out)."""
    by_session: dict[int, list[str]] = defaultdict(list)
    for request in fake.requests[start:]:
        if credential_of(request) not in refused:
            by_session[session_of(request)].append(credential_of(request))
    return by_session


def affinity_count(gateway: GatewayServer, result: str) -> float:
    text = httpx.get(f"{gateway.base_url}/metrics").text
    found = re.search(rf'^modelgate_affinity_total{{result="{result}"}} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


@pytest.mark.parametrize(
    ("mode", "model", "offload"),
    [
        ("claude-header", "aria-sonnet-4.6", False),
        ("prefix", "aria-sonnet-4.6", False),
        ("prefix", "aria-sonnet-4.6", True),
        ("prompt_cache_key", "nova-5.5", False),
        ("prompt_cache_key", "nova-5.5", True),
    ],
)
def test_sessions_keep_their_pool_credential_and_spread_over_the_pool(
    tmp_path: Path, mode: Mode, model: str, offload: bool
) -> None:
    with gateway_with_pool(tmp_path, offload=offload) as setup:
        talk = Conversations(setup, mode, model)
        for _ in range(TURNS):
            assert talk.round() == ["Noted."] * SESSIONS
        by_session = served(setup.fake)
        assert sorted(by_session) == list(range(SESSIONS))
        for session, credentials in by_session.items():
            assert len(credentials) == TURNS and len(set(credentials)) == 1, (session, credentials)
        assert len({c[0] for c in by_session.values()}) >= 2  # sessions are spread, not all on one
        assert affinity_count(setup.gateway, "miss") == SESSIONS
        assert affinity_count(setup.gateway, "hit") == SESSIONS * (TURNS - 1)


def test_a_credential_refusing_mid_run_fails_no_request_and_its_sessions_repin(tmp_path: Path) -> None:
    with gateway_with_pool(tmp_path) as setup:
        talk = Conversations(setup, "claude-header", "aria-sonnet-4.6")
        for _ in range(2):
            assert talk.round() == ["Noted."] * SESSIONS
        before = served(setup.fake)
        victim = before[0][0]
        moved = [s for s, credentials in before.items() if credentials[0] == victim]
        setup.upstream.refused.add(victim)
        start = setup.fake.count
        for _ in range(2):
            assert talk.round() == ["Noted."] * SESSIONS  # no client request failed
        after = served(setup.fake, start, frozenset({victim}))
        for session in range(SESSIONS):
            credentials = after[session]
            assert len(credentials) == 2 and len(set(credentials)) == 1, (session, credentials)
            if session in moved:
                assert credentials[0] != victim  # re-pinned, and stays on its new credential
            else:
                assert credentials[0] == before[session][0]  # untouched sessions did not move
        refused_tries = [r for r in setup.fake.requests[start:] if credential_of(r) == victim]
        assert len(refused_tries) == 1  # met once, then out of rotation for everyone
        assert affinity_count(setup.gateway, "repinned") == len(moved)


def test_two_deployments_keep_their_sessions_and_failures_move_them(tmp_path: Path) -> None:
    with gateway_with_pool(tmp_path) as setup:
        talk = Conversations(setup, "prefix", "aria-haiku-4.5")
        for _ in range(2):
            assert talk.round() == ["Noted."] * SESSIONS

        def deployments(start: int = 0) -> dict[int, list[str]]:
            out: dict[int, list[str]] = defaultdict(list)
            for request in setup.fake.requests[start:]:
                if request.json()["model"] not in setup.upstream.failing:
                    out[session_of(request)].append(request.json()["model"])
            return out

        before = deployments()
        assert all(len(set(models)) == 1 for models in before.values())
        assert {m[0] for m in before.values()} == {"claude-east", "claude-west"}
        setup.upstream.failing.add("claude-west")
        start = setup.fake.count
        for _ in range(2):
            assert talk.round() == ["Noted."] * SESSIONS
        after = deployments(start)
        assert all(models == ["claude-east", "claude-east"] for models in after.values())
        west_tries = [r for r in setup.fake.requests[start:] if r.json()["model"] == "claude-west"]
        assert len(west_tries) == 1  # the cooling deployment is not chosen again because of a pin
