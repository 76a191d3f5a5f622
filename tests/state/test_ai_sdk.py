"""The Vercel AI SDK (``ai`` + ``@ai-sdk/openai``, the default ``openai(id)`` provider: the
Responses API with ``store`` left at true) runs ``generateText`` and ``streamText`` with a tool on a
translated route. The model writes text before it calls the tool, so step 2 sends that message
back as an ``item_reference`` (the case that used to fail with 400, and silently stop streams).

The SDK is installed by this test from the pinned ``tests/state/ai_sdk/package-lock.json`` with
``npm ci`` into ``tests/state/ai_sdk/node_modules`` (gitignored), and run with Node. Without Node
the test is skipped, saying so.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from tests.gateway.clients import SdkClients
from tests.gateway_server import running_gateway
from tests.state.conftest import BEFORE_CALL, FINAL, TRANSLATED, UPSTREAM_KEY, Stateful

PROJECT = Path(__file__).parent / "ai_sdk"
TIMEOUT = 300.0


def _run(command: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run in its own process group; on a timeout the whole group is killed."""
    process = subprocess.Popen(
        command, cwd=PROJECT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    try:
        out, err = process.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise
    return subprocess.CompletedProcess(command, process.returncode, out, err)


@pytest.fixture(scope="module")
def ai_sdk() -> Iterator[Path]:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip(
            "Node.js and npm are not installed: the Vercel AI SDK test needs them (apt-get install nodejs npm)"
        )
    installed = PROJECT / "node_modules" / ".package-lock.json"
    lock = PROJECT / "package-lock.json"
    if not installed.exists() or installed.stat().st_mtime < lock.stat().st_mtime:
        done = _run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"])
        assert done.returncode == 0, done.stderr.decode(errors="replace")
    yield Path(node)


def test_generate_and_stream_text_run_a_tool_loop_on_a_translated_route(
    stateful: Stateful, ai_sdk: Path, sdk: SdkClients
) -> None:
    secret, key_id = stateful.key()
    env = {**os.environ, "MODELGATE_BASE_URL": stateful.gateway.base_url, "MODELGATE_KEY": secret}
    done = _run([str(ai_sdk), "run.mjs", TRANSLATED], env)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    result: dict[str, Any] = orjson.loads(done.stdout.splitlines()[-1])

    assert "streamError" not in result
    assert result["executed"] == ["Paris", "Paris"]  # the tool ran once per run
    for run in (result["generate"], result["stream"]):
        assert run["steps"] == 2 and run["toolCalls"] == ["get_weather"]
        assert run["toolResults"] == ["Sunny in Paris"]
        assert run["text"] == FINAL
    assert result["stream"]["deltas"].endswith(FINAL)

    # Step 2 of each run referred to step 1's text by item_reference: the gateway resolved it from
    # what it stored, so the stored input of step 2 holds step 1's message under its own id.
    client = sdk.openai(stateful.gateway.base_url, secret)
    for run in (result["generate"], result["stream"]):
        first, second = run["responseIds"]
        said = next(i for i in client.responses.retrieve(first).output if i.type == "message")
        listed = client.responses.input_items.list(second, order="asc").data
        replayed: list[Any] = [i.to_dict() for i in listed if i.id == said.id]
        assert replayed and replayed[0]["content"][0]["text"] == BEFORE_CALL
    assert len(stateful.usage(key_id, 4)) == 4


def test_without_stored_responses_the_same_run_fails_on_its_item_reference(
    stateful: Stateful, ai_sdk: Path, tmp_path: Path
) -> None:
    """The same script against a gateway that keeps nothing: step 2's ``item_reference`` is a
    clear 400, which is what every translated route did before the gateway kept state."""
    provider = {
        "name": "anthropic",
        "kind": "anthropic",
        "base_url": stateful.fake.base_url,
        "api_key_env": "K",
    }
    with running_gateway(
        tmp_path / "data",
        env={"K": UPSTREAM_KEY},
        providers=[provider],
        deployments={TRANSLATED: [{"provider": "anthropic", "upstream_model": "claude-fake"}]},
        default_provider="",
        unrouted="hide",
        responses={"store": "off"},
    ) as gateway:
        account = gateway.account("ai-sdk-off")
        secret = gateway.key(account, "Nova", rpm=1000).secret
        env = {**os.environ, "MODELGATE_BASE_URL": gateway.base_url, "MODELGATE_KEY": secret}
        done = _run([str(ai_sdk), "run.mjs", TRANSLATED], env)
    assert done.returncode != 0
    assert b"item_reference is not supported" in done.stderr
