"""SIGHUP reloads the configuration file (issue #28 item 3): 100 streams open across the signal
all end with their format's final event; the live part of the new file applies (a catalogue
alias); a file that fails validation leaves the running configuration serving and is logged. A
real ``modelgate serve`` process group each time, single and with two workers; the signal goes
to the whole group, as a closed terminal sends it."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import httpx
import orjson

from modelgate.cli.context import Options, with_management
from modelgate.config import load_settings
from modelgate.server.reload import compare
from tests.hardening.process import GatewayProcess, run, write_config
from tests.hardening.test_shutdown import headers, stream_one
from tests.polling import wait_until
from tests.workers.harness import WorkersGateway

#: 200 words at 20 tokens a second: each stream runs for about ten seconds.
SLOW = {"tokens_per_second": 20.0, "reply_words": 200}
ALIAS = '[catalogue.aliases]\n"reload-alias" = "nova-5.5"\n'
STREAMS = 100


def log_lines(gateway: GatewayProcess) -> list[dict[str, Any]]:
    lines = []
    for raw in gateway.log.read_text(errors="replace").splitlines():
        if raw.startswith("{"):
            lines.append(orjson.loads(raw))
    return lines


def count_logged(gateway: GatewayProcess, level: str, words: str) -> int:
    return sum(1 for line in log_lines(gateway) if line["level"] == level and words in line["msg"])


def hangup(gateway: GatewayProcess) -> None:
    assert gateway.proc is not None
    os.killpg(gateway.proc.pid, signal.SIGHUP)


def alias_status(client: httpx.Client, keys: dict[str, str]) -> int:
    body = {"model": "reload-alias", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    return client.post("/v1/chat/completions", json=body, headers=headers("chat", keys)).status_code


def reload_under_streams(gateway: GatewayProcess, keys: dict[str, str], servers: int) -> list[str]:
    """Open ``STREAMS`` streams, reload a good file then a bad one while they run; the endings."""

    def alias_everywhere() -> set[int]:
        if isinstance(gateway, WorkersGateway):
            return set(gateway.on_each_worker(lambda client: alias_status(client, keys)).values())
        with httpx.Client(base_url=gateway.base_url, timeout=30) as client:
            return {alias_status(client, keys)}

    async def scenario() -> list[str]:
        limits = httpx.Limits(max_connections=STREAMS + 10, max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=gateway.base_url, limits=limits, timeout=120) as client:
            started: asyncio.Queue[str] = asyncio.Queue()
            formats = ("messages", "chat", "responses")
            streams = [
                asyncio.create_task(stream_one(client, formats[i % 3], keys, started)) for i in range(STREAMS)
            ]
            for _ in range(STREAMS):  # every stream is under way before the signal
                await asyncio.wait_for(started.get(), timeout=120)
            assert await asyncio.to_thread(alias_everywhere) == {404}

            sections = gateway_sections(gateway)
            write_config(gateway.config, gateway.port, ALIAS, server=sections["server"], simulator=SLOW)
            hangup(gateway)
            await asyncio.to_thread(
                wait_until,
                lambda: count_logged(gateway, "warning", "reloaded") >= servers,
                "the reload",
                timeout=60,
            )
            assert await asyncio.to_thread(alias_everywhere) == {200}

            gateway.config.write_text(gateway.config.read_text() + "\nthis is [not toml\n")
            hangup(gateway)
            await asyncio.to_thread(
                wait_until, lambda: count_logged(gateway, "error", "reload of"), "the refusal", timeout=60
            )
            # Still serving, with the running configuration (the alias stays).
            assert await asyncio.to_thread(alias_everywhere) == {200}
            results = await asyncio.gather(*streams)
        return [ending for _, ending in results]

    return list(run(scenario()))


def gateway_sections(gateway: GatewayProcess) -> dict[str, dict[str, Any]]:
    server: dict[str, Any] = {"keep_alive_seconds": 120}
    if isinstance(gateway, WorkersGateway):
        server["workers"] = gateway.workers
    return {"server": server, "simulator": SLOW}


def test_sighup_reloads_a_single_process_without_cutting_a_stream(tmp_path: Path) -> None:
    gateway = GatewayProcess(tmp_path, server={"keep_alive_seconds": 120}, simulator=SLOW)
    with gateway:
        seeded = gateway.seed()
        gateway.start()
        endings = reload_under_streams(gateway, seeded.keys, servers=1)
        assert endings == ["final"] * STREAMS, endings
        assert gateway.proc is not None and gateway.proc.poll() is None
        refusals = [line for line in log_lines(gateway) if line["level"] == "error"]
        assert "not toml" not in str(refusals) and "still serving" in refusals[0]["msg"], refusals
        assert str(gateway.config) in refusals[0]["msg"]
        applied = next(line["msg"] for line in log_lines(gateway) if "reloaded" in line["msg"])
        assert "applied: catalogue" in applied, applied


def test_sighup_reaches_every_worker_and_the_parent_survives(tmp_path: Path) -> None:
    gateway = WorkersGateway(tmp_path, workers=2, server={"keep_alive_seconds": 120}, simulator=SLOW)
    with gateway:
        seeded = gateway.seed()
        gateway.start()
        pids = gateway.wait_for_workers()
        endings = reload_under_streams(gateway, seeded.keys, servers=2)
        assert endings == ["final"] * STREAMS, endings
        assert gateway.proc is not None and gateway.proc.poll() is None
        assert gateway.wait_for_workers() == pids  # the same workers: nothing restarted


def test_a_setting_that_needs_a_restart_is_named_and_kept(tmp_path: Path) -> None:
    gateway = GatewayProcess(tmp_path, server={"keep_alive_seconds": 120})
    with gateway:
        seeded = gateway.seed()
        admin = with_management(
            Options(gateway.config, gateway.data_dir), lambda m: m.issue_admin_token(None, name="reload")
        ).secret
        gateway.start()

        def new_key_status() -> int:
            body = {"account_id": seeded.account_id, "group": "Nova", "allowed_models": ["reload-alias"]}
            headers = {"authorization": f"Bearer {admin}"}
            return httpx.post(f"{gateway.base_url}/admin/api/keys", json=body, headers=headers).status_code

        assert new_key_status() == 400  # no such model yet
        server = {"keep_alive_seconds": 120, "header_timeout_seconds": 3}
        write_config(gateway.config, gateway.port, ALIAS, server=server)
        hangup(gateway)
        line: str = wait_until(
            lambda: next((str(x["msg"]) for x in log_lines(gateway) if "reloaded" in x["msg"]), ""),
            "the reload",
        )
        assert "applied: catalogue" in line
        assert "needs a restart (running value kept): server.header_timeout_seconds" in line
        with httpx.Client(base_url=gateway.base_url, timeout=30) as client:
            assert alias_status(client, seeded.keys) == 200
        assert new_key_status() == 201  # the admin API checks new keys against the new catalogue


def test_live_keys_are_taken_and_the_others_kept_at_their_running_value() -> None:
    running = load_settings(environ={})
    new = load_settings(
        environ={},
        log_level="debug",
        server={"port": 9999, "max_in_flight": 7, "header_timeout_seconds": 3},
        catalogue={"aliases": {"reload-alias": "nova-5.5"}},
    )
    changes = compare(running, new)
    assert changes.applied == ["catalogue", "log_level", "server.max_in_flight"]
    assert changes.ignored == ["server.header_timeout_seconds", "server.port"]
    assert changes.routing
    effective = changes.settings
    assert (effective.log_level, effective.server.max_in_flight) == ("debug", 7)
    assert (effective.server.port, effective.server.header_timeout_seconds) == (8080, 10.0)
    assert effective.catalogue == {"aliases": {"reload-alias": "nova-5.5"}}
    assert compare(running, load_settings(environ={})).applied == []
