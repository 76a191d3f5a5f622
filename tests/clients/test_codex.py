"""The real Codex CLI (``codex exec``) against the gateway with a Nova key: a plain answer and a
shell round trip, over HTTP and over the Responses WebSocket, on a passthrough route (an
``openai`` upstream) and on translated routes (an Anthropic-dialect upstream and a Chat-only one),
where Codex's hosted ``web_search`` tool cannot run as it is and must not stop the request; the
426 fallback to HTTP; Codex's built-in provider pointed at the gateway."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.clients.conftest import ROUTES, Clients
from tests.clients.harness import (
    FINAL_TEXT,
    SHELL_COMMAND,
    AgentTurn,
    Run,
    run_cli,
    tool_names,
    tool_output_seen,
)
from tests.conformance.conftest import usage_records
from tests.conformance.upstreams import Recorded, ReplayUpstream
from tests.fakes.searches import anthropic_search_stream
from tests.gateway_server import GatewayServer, running_gateway
from tests.loop_thread import LoopThread

#: Gateway model -> what its route is for Codex.
MODELS = {"nova-5.5": "passthrough", "nova-5.6-sol": "Anthropic-dialect", "nova-5.6-terra": "Chat-only"}


def codex(
    gateway: GatewayServer,
    binary: str,
    tmp_path: Path,
    secret: str,
    prompt: str,
    model: str,
    *,
    websockets: bool = False,
    builtin: bool = False,
) -> tuple[Run, str]:
    """Run ``codex exec`` with a custom provider aimed at the gateway; returns the run and the last
    message Codex wrote."""
    home, work = tmp_path / "codex-home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    if builtin:
        # Codex's own OpenAI provider aimed at the gateway: it always opens the WebSocket first.
        config = f'model = "{model}"\nopenai_base_url = "{gateway.base_url}/v1"\n'
    else:
        config = (
            f'model = "{model}"\n'
            'model_provider = "modelgate"\n'
            "[model_providers.modelgate]\n"
            'name = "modelgate"\n'
            f'base_url = "{gateway.base_url}/v1"\n'
            'env_key = "MODELGATE_API_KEY"\n'
            'wire_api = "responses"\n'
            f"supports_websockets = {str(websockets).lower()}\n"
            "request_max_retries = 0\n"
            "stream_max_retries = 0\n"
        )
    (home / "config.toml").write_text(config)
    last = tmp_path / "last-message.txt"
    argv = [
        "node",
        binary,
        "exec",
        "--skip-git-repo-check",
        "--dangerously-bypass-approvals-and-sandbox",
        "--output-last-message",
        str(last),
        prompt,
    ]
    env = {"HOME": str(tmp_path), "CODEX_HOME": str(home), "MODELGATE_API_KEY": secret}
    if builtin:
        # The built-in provider takes its key from Codex's own login, as a user gives it.
        login = subprocess.run(
            ["node", binary, "login", "--with-api-key"],
            input=secret,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert login.returncode == 0, login.stderr
    run = run_cli(argv, env=env, cwd=work)
    assert run.returncode == 0, (
        f"exit {run.returncode}\nstdout: {run.stdout[-3000:]}\nstderr: {run.stderr[-3000:]}"
    )
    return run, last.read_text().strip() if last.exists() else ""


def shell_call(body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Codex's shell tool as the request offers it, with arguments its schema takes."""
    names = tool_names(body)
    for name in ("exec_command", "shell_command", "shell"):
        if name in names:
            break
    else:
        raise AssertionError(f"no shell tool among {names}")
    if name == "shell":
        return name, {"command": ["bash", "-lc", SHELL_COMMAND]}
    key = "cmd" if name == "exec_command" else "command"
    return name, {key: SHELL_COMMAND}


@pytest.mark.parametrize("model", list(MODELS))
def test_a_plain_answer_over_http(clients: Clients, tmp_path: Path, model: str) -> None:
    secret, key_id = clients.key("Nova")
    _, last = codex(clients.gateway, clients.bins.codex, tmp_path, secret, "Say hello.", model)
    assert last == "ok"
    assert {r.model for r in clients.records(key_id)} == {model}
    assert {r.json()["model"] for r in clients.fake.requests} == {ROUTES[model][1]}


@pytest.mark.parametrize("model", list(MODELS))
def test_a_shell_round_trip_over_http(clients: Clients, tmp_path: Path, model: str) -> None:
    secret, key_id = clients.key("Nova")
    turn = AgentTurn(shell_call)
    clients.script.turn = turn
    prompt = f"Run the shell command `{SHELL_COMMAND}` and report what it printed."
    run, last = codex(clients.gateway, clients.bins.codex, tmp_path, secret, prompt, model)
    assert last == FINAL_TEXT, run.stderr[-2000:]
    assert turn.calls == 1
    assert any(tool_output_seen(r) for r in clients.fake.requests)
    assert {r.model for r in clients.records(key_id, count=2)} == {model}


@pytest.fixture(scope="module")
def unconfigured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    """A gateway as ``make serve`` starts it: no configuration, the simulator behind every model."""
    with running_gateway(tmp_path_factory.mktemp("unconfigured") / "data") as server:
        yield server


def test_an_unconfigured_gateway_answers_over_http(
    clients: Clients, unconfigured: GatewayServer, tmp_path: Path
) -> None:
    key = unconfigured.key(unconfigured.account("codex-sim-http"), "Nova")
    _, last = codex(unconfigured, clients.bins.codex, tmp_path, key.secret, "Say hello.", "nova-5.5")
    assert last.startswith("[simulator]")
    assert {r.model for r in usage_records(unconfigured, key.record.id)} == {"nova-5.5"}


@pytest.fixture(scope="module")
def searching(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[GatewayServer, ReplayUpstream]]:
    """A Nova model on an Anthropic-dialect upstream that plays back recorded answers."""
    with LoopThread("codex-search") as loop:
        replay = loop.start(ReplayUpstream())
        providers = [
            {"name": "simulator", "kind": "simulator"},
            {"name": "replay", "kind": "anthropic", "base_url": replay.base_url, "api_key_env": "UP_KEY"},
        ]
        with running_gateway(
            tmp_path_factory.mktemp("codex-search") / "data",
            env={"UP_KEY": "sk-upstream-search-0123456789"},
            providers=providers,
            deployments={"nova-5.6-sol": [{"provider": "replay", "upstream_model": "claude-up"}]},
            routing={"max_attempts": 1},
        ) as server:
            yield server, replay


def test_an_anthropic_web_search_reaches_codex(
    clients: Clients, searching: tuple[GatewayServer, ReplayUpstream], tmp_path: Path
) -> None:
    """Codex's hosted web_search runs as Anthropic's server tool; the search and the answer after
    it come back as Responses items Codex reads (a web_search_call, then the message)."""
    gateway, replay = searching
    replay.answers.append(Recorded(anthropic_search_stream()))
    key = gateway.key(gateway.account(f"codex-search-{time.monotonic_ns()}"), "Nova")
    _, last = codex(gateway, clients.bins.codex, tmp_path, key.secret, "What is modelgate?", "nova-5.6-sol")
    assert last == "Sources agree."  # the last message item: the cited text block
    (sent,) = [orjson.loads(body) for body in replay.bodies]
    assert {"type": "web_search_20250305", "name": "web_search", "max_uses": 10} in sent["tools"]
    assert {r.model for r in usage_records(gateway, key.record.id)} == {"nova-5.6-sol"}


def websocket_counts(gateway: GatewayServer) -> tuple[float, float]:
    """(upgrades accepted, upgrades refused with 426) so far, from the gateway's metrics."""
    exposition = httpx.get(f"{gateway.base_url}/metrics").text
    values = {}
    for line in exposition.splitlines():
        if line.startswith(
            ("modelgate_websocket_connections_accepted_total ", "modelgate_websocket_upgrades_refused_total{")
        ):
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    accepted = values["modelgate_websocket_connections_accepted_total"]
    refused = next(v for k, v in values.items() if 'status="426"' in k)
    return accepted, refused


@pytest.mark.parametrize("model", list(MODELS))
def test_a_shell_round_trip_over_a_websocket(clients: Clients, tmp_path: Path, model: str) -> None:
    secret, key_id = clients.key("Nova")
    turn = AgentTurn(shell_call)
    clients.script.turn = turn
    accepted, refused = websocket_counts(clients.gateway)
    prompt = f"Run the shell command `{SHELL_COMMAND}` and report what it printed."
    run, last = codex(clients.gateway, clients.bins.codex, tmp_path, secret, prompt, model, websockets=True)
    assert last == FINAL_TEXT, run.stderr[-2000:]
    assert turn.calls == 1 and any(tool_output_seen(r) for r in clients.fake.requests)
    assert websocket_counts(clients.gateway) == (accepted + 1, refused)  # one socket, no fallback
    assert {r.model for r in clients.records(key_id, count=2)} == {model}


def test_an_unconfigured_gateway_answers_over_a_websocket(
    clients: Clients, unconfigured: GatewayServer, tmp_path: Path
) -> None:
    key = unconfigured.key(unconfigured.account("codex-sim-ws"), "Nova")
    accepted, refused = websocket_counts(unconfigured)
    _, last = codex(
        unconfigured, clients.bins.codex, tmp_path, key.secret, "Say hello.", "nova-5.5", websockets=True
    )
    assert last.startswith("[simulator]")
    assert websocket_counts(unconfigured) == (accepted + 1, refused)
    # Codex's pre-warm (generate: false) is free: one usage record, for the answer.
    assert [r.model for r in usage_records(unconfigured, key.record.id)] == ["nova-5.5"]


def test_codexs_built_in_provider_answers_over_a_websocket(
    clients: Clients, unconfigured: GatewayServer, tmp_path: Path
) -> None:
    key = unconfigured.key(unconfigured.account("codex-builtin"), "Nova")
    accepted, _ = websocket_counts(unconfigured)
    _, last = codex(
        unconfigured, clients.bins.codex, tmp_path, key.secret, "Say hello.", "nova-5.5", builtin=True
    )
    assert last.startswith("[simulator]")
    assert websocket_counts(unconfigured)[0] > accepted


def test_with_websockets_off_codex_falls_back_to_http(clients: Clients, tmp_path: Path) -> None:
    with running_gateway(tmp_path / "data", responses={"websocket": False}) as gateway:
        key = gateway.key(gateway.account("codex-426"), "Nova")
        _, last = codex(
            gateway, clients.bins.codex, tmp_path, key.secret, "Say hello.", "nova-5.5", websockets=True
        )
        assert last.startswith("[simulator]")
        accepted, refused = websocket_counts(gateway)
        assert accepted == 0 and refused >= 1  # the upgrade got 426, the answer came over HTTP
        assert [r.model for r in usage_records(gateway, key.record.id)] == ["nova-5.5"]
