"""The real Claude Code binary, unconfigured but for ``ANTHROPIC_BASE_URL`` and ``ANTHROPIC_API_KEY``,
against the gateway: a plain answer and a Bash round trip on its default model (a passthrough
route) and with ``--model sonnet`` / ``--model haiku`` (translated routes)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
from tests.gateway_server import GatewayServer, running_gateway

#: Claude Code's --model choice -> the gateway model its ids resolve to (catalogue claude_tiers).
MODELS = {None: "aria-opus-4.8", "sonnet": "aria-sonnet-4.6", "haiku": "aria-haiku-4.5"}


def _claude(
    gateway: GatewayServer,
    binary: str,
    tmp_path: Path,
    secret: str,
    prompt: str,
    model: str | None,
    *extra: str,
) -> Run:
    """Claude Code ``-p`` with nothing but the base URL and the key set (and no network noise)."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    argv = [binary, "-p", prompt, "--output-format", "json", *extra]
    if model is not None:
        argv += ["--model", model]
    env = {
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": gateway.base_url,
        "ANTHROPIC_API_KEY": secret,
        # No update checks, telemetry or error reports to hosts this machine cannot reach.
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
    }
    return run_cli(argv, env=env, cwd=work)


def _bash_call(body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    names = tool_names(body)
    assert "Bash" in names, names
    return "Bash", {"command": SHELL_COMMAND, "description": "Print the marker"}


def _answer(run: Run) -> str:
    assert run.returncode == 0, (
        f"exit {run.returncode}\nstdout: {run.stdout[-2000:]}\nstderr: {run.stderr[-2000:]}"
    )
    result = json.loads(run.stdout)
    assert result.get("is_error") is False, result
    return str(result["result"])


@pytest.mark.parametrize("model", list(MODELS), ids=lambda m: m or "default")
def test_a_plain_answer(clients: Clients, tmp_path: Path, model: str | None) -> None:
    secret, key_id = clients.key("Pro")
    answer = _answer(_claude(clients.gateway, clients.bins.claude, tmp_path, secret, "Say hello.", model))
    assert answer == "ok"
    records = clients.records(key_id)
    assert records and {r.model for r in records} == {MODELS[model]}
    upstream_model = ROUTES[MODELS[model]][1]
    assert {r.json()["model"] for r in clients.fake.requests if not r.path.endswith("count_tokens")} == {
        upstream_model
    }


@pytest.mark.parametrize("model", list(MODELS), ids=lambda m: m or "default")
def test_a_bash_round_trip(clients: Clients, tmp_path: Path, model: str | None) -> None:
    secret, key_id = clients.key("Pro")
    turn = AgentTurn(_bash_call)
    clients.script.turn = turn
    prompt = f"Run the shell command `{SHELL_COMMAND}` and report what it printed."
    answer = _answer(
        _claude(
            clients.gateway, clients.bins.claude, tmp_path, secret, prompt, model, "--allowedTools", "Bash"
        )
    )
    assert answer == FINAL_TEXT
    assert turn.calls == 1
    assert any(tool_output_seen(r) for r in clients.fake.requests)
    assert {r.model for r in clients.records(key_id, count=2)} == {MODELS[model]}


@pytest.fixture(scope="module")
def unconfigured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    """A gateway as ``make serve`` starts it: no configuration, the simulator behind every model."""
    with running_gateway(tmp_path_factory.mktemp("unconfigured") / "data") as server:
        yield server


@pytest.mark.parametrize("model", list(MODELS), ids=lambda m: m or "default")
def test_an_unconfigured_gateway_answers(
    clients: Clients, unconfigured: GatewayServer, tmp_path: Path, model: str | None
) -> None:
    key = unconfigured.key(unconfigured.account(f"cc-sim-{model}"), "Pro")
    answer = _answer(_claude(unconfigured, clients.bins.claude, tmp_path, key.secret, "Say hello.", model))
    assert answer.startswith("[simulator]")
    assert {r.model for r in usage_records(unconfigured, key.record.id)} == {MODELS[model]}
