"""A change through the admin API reaches every worker of ``modelgate serve --workers 2``; a stream
that started before it ends on the route it started with; SIGHUP reloads with API entries
stored: a good file is applied under them, a bad one changes nothing. The credential given
through the API appears in no answer and no log line. Real processes, fake upstreams on loopback."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.fakes.upstream import FakeUpstream, Fault, Reply
from tests.hardening.process import write_config
from tests.hardening.test_reload import count_logged, hangup
from tests.hardening.test_shutdown import ask, headers, stream_ending
from tests.loop_thread import LoopThread
from tests.polling import wait_until
from tests.secret_scan import SCANNER
from tests.workers.harness import WorkersGateway

SECRET = "sk-ant-workers-credential-" + "w" * 24
SCANNER.register(SECRET)
SLOW_STREAM = Reply(text=" ".join(["old"] * 40), chunks=20, event_delay=0.1)
SERVER = {"keep_alive_seconds": 120}


def file_upstreams(held_url: str, alias: str = "") -> str:
    """``nova-5.5`` on a file provider whose answers are held; everything else on the simulator."""
    return (
        alias
        + '[[providers]]\nname = "simulator"\nkind = "simulator"\n\n'
        + f'[[providers]]\nname = "file-compat"\nkind = "openai-compatible"\nbase_url = "{held_url}"\n\n'
        + '[[deployments."nova-5.5"]]\nprovider = "file-compat"\nupstream_model = "chat-old"\n'
    )


def haiku(client: httpx.Client, keys: dict[str, str], model: str = "aria-haiku-4.5") -> str:
    body = {"model": model, "max_tokens": 20, "messages": [{"role": "user", "content": "who answers?"}]}
    response = client.post(
        "/v1/chat/completions", json=body, headers={"authorization": f"Bearer {keys['Basic']}"}
    )
    assert response.status_code == 200, response.text
    return str(response.json()["choices"][0]["message"]["content"])


def operator(gateway: WorkersGateway) -> httpx.Client:
    return httpx.Client(
        base_url=gateway.base_url + "/admin/api", headers=gateway.operator_headers(), timeout=30
    )


def test_a_change_reaches_every_worker_and_a_stream_in_flight_ends_on_its_route(tmp_path: Path) -> None:
    gate = asyncio.Event()
    with LoopThread("workers-upstreams") as fakes:
        held = fakes.start(FakeUpstream(default=Fault.held(gate, SLOW_STREAM)))
        fresh = fakes.start(FakeUpstream(default=Reply(text="from the api provider")))
        gateway = WorkersGateway(tmp_path, workers=2, extra=file_upstreams(held.base_url), server=SERVER)
        with gateway:
            seeded = gateway.seed()
            gateway.start()
            steps(gateway, seeded.keys, held, fresh, lambda: fakes.loop.call_soon_threadsafe(gate.set))
            assert SECRET not in gateway.log.read_text(errors="replace")


def steps(
    gateway: WorkersGateway,
    keys: dict[str, str],
    held: FakeUpstream,
    fresh: FakeUpstream,
    release: Callable[[], object],
) -> None:
    answers = gateway.on_each_worker(lambda client: haiku(client, keys))
    assert all("from the api provider" not in a for a in answers.values())
    # A stream on nova-5.5 starts on the file's provider and waits there.
    path, body = ask("chat", stream=True, max_tokens=400)
    ending: list[str] = []

    def run_stream() -> None:
        with (
            httpx.Client(base_url=gateway.base_url, timeout=120) as streamer,
            streamer.stream("POST", path, json=body, headers=headers("chat", keys)) as response,
        ):
            assert response.status_code == 200
            ending.append(stream_ending("chat", response.read()))

    thread = threading.Thread(target=run_stream)
    thread.start()
    wait_until(lambda: held.count >= 1, "the stream reaching its upstream")
    seen: list[str] = []
    with operator(gateway) as api:
        made = api.post(
            "/providers",
            json={"name": "api-ant", "kind": "anthropic", "base_url": fresh.base_url, "api_key": SECRET},
        )
        seen.append(made.text)
        assert made.status_code == 201, made.text
        for model in ("aria-haiku-4.5", "nova-5.5"):
            routed = api.put(
                f"/models/{model}/deployments",
                json={"deployments": [{"provider": "api-ant", "upstream_model": "claude-new"}]},
            )
            seen.append(routed.text)
            assert routed.status_code == 200, routed.text
        # Every worker routes the next requests through the new provider.
        wait_until(
            lambda: (
                set(gateway.on_each_worker(lambda client: haiku(client, keys)).values())
                == {"from the api provider"}
            ),
            "every worker routing aria-haiku-4.5 to the provider added through the API",
        )
        # The stream that started before the change still ends on its own route.
        release()
        thread.join(timeout=120)
        assert ending == ["final"]
        assert held.count == 1
        assert fresh.requests and all(r.headers.get("x-api-key") == SECRET for r in fresh.requests)
        # SIGHUP with a good file (a new alias): applied, the API's entries still win.
        alias = '[catalogue.aliases]\n"file-alias" = "aria-haiku-4.5"\n'
        write_config(
            gateway.config,
            gateway.port,
            file_upstreams(held.base_url, alias),
            server={**SERVER, "workers": 2},
        )
        hangup(gateway)
        wait_until(lambda: count_logged(gateway, "warning", "reloaded") >= 2, "both workers reloading")
        answers = gateway.on_each_worker(lambda client: haiku(client, keys, "file-alias"))
        assert set(answers.values()) == {"from the api provider"}
        # SIGHUP with a bad file: refused, nothing changes.
        gateway.config.write_text("this is [not toml")
        hangup(gateway)
        wait_until(lambda: count_logged(gateway, "error", "reload of") >= 1, "the bad reload refused")
        answers = gateway.on_each_worker(lambda client: haiku(client, keys, "file-alias"))
        assert set(answers.values()) == {"from the api provider"}
        listed = api.get("/providers")
        seen.append(listed.text)
        assert {p["name"]: p["source"] for p in listed.json()["data"]} == {
            "simulator": "file",
            "file-compat": "file",
            "api-ant": "api",
        }
    for text in seen:
        assert SECRET not in text
