"""``make bench-affinity``: how much of a coding agent's prompt is read from the upstream's prompt
cache with session affinity, and with each request routed alone (docs/bench.md).

Claude-Code-shaped sessions (16 sessions of 8 growing turns: a 6 KB system prompt in three
blocks, two with cache breakpoints, four tools, a first user turn holding a CLAUDE.md reminder,
tool results growing the conversation, the breakpoint on the newest user message) go through the
real gateway to ``bench.cache_upstream``, a fake upstream with a prompt cache per credential and
per upstream model. For Messages and Responses, through one provider with a pool of four
credentials and through two deployments of one model, with session identifiers (Claude Code's
``x-claude-code-session-id``; Codex's ``session_id`` and ``prompt_cache_key``) and without any
(the prefix fingerprint); beside each, the same sessions through a gateway with
``[routing] affinity = "off"`` (round-robin credentials, weighted random deployments). Sessions
run concurrently, turn by turn. Then a credential of the pool starts refusing after turn 4: no
client request may fail, and its sessions re-pin.

Printed: the share of prompt tokens read from cache (cache reads / all prompt tokens) and the
prompt's cost in input-token units (Messages: input 1, cache write 1.25, cache read 0.1;
Responses: uncached 1, cached 0.1), and what deriving a session key costs in-process.
Acceptance (issue #29): share ≥ 0.85 with identifiers, ≥ 0.75 without; exits 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.affinity_sessions import SYSTEM, TOOLS, Figures, Session
from bench.cache_upstream import CachingUpstream
from bench.procs import Proc, free_port, pinned
from bench.targets import GATEWAY_CORE
from modelgate.upstream.affinity import AffinityTable
from modelgate.upstream.affinity_key import session_key
from modelgate.upstream.base import Deployment

SESSIONS = 16
TURNS = 8
REFUSE_AFTER_TURN = 4
POOL_KEYS = {f"BENCH_POOL_{i}": f"sk-bench-pool-{i}-0123456789abcdef" for i in range(4)}
PAIR_KEYS = {"BENCH_EAST": "sk-bench-east-0123456789abcdef", "BENCH_WEST": "sk-bench-west-0123456789abcdef"}
#: (format, upstreams) -> gateway model id.
MODELS = {
    ("messages", "pool"): "aria-sonnet-4.6",
    ("messages", "pair"): "aria-haiku-4.5",
    ("responses", "pool"): "nova-5.5",
    ("responses", "pair"): "nova-5.6-sol",
}
UPSTREAMS = {"pool": "pool of 4 credentials", "pair": "2 deployments, 1 model"}
#: (gateway, session identifiers sent) in the order run; "off" is the baseline of each group.
SCENARIOS = (("off", True), ("session", True), ("session", False), ("session-2", True), ("session-2", False))
ROUTING = {"session": "affinity", "session-2": "affinity, 2 inst"}
BASELINE = {"pool": "round-robin", "pair": "weighted random"}
SHARE_FLOOR = {True: 0.85, False: 0.75}

CONFIG = """\
log_level = "warning"
default_provider = ""
unrouted = "hide"

[server]
host = "127.0.0.1"
port = {port}
access_log = false
workers = {workers}

[routing]
affinity = "{affinity}"

[[providers]]
name = "ant-pool"
kind = "anthropic"
base_url = "{upstream}"
api_key_env = {pool}

[[providers]]
name = "oai-pool"
kind = "openai"
base_url = "{upstream}"
api_key_env = {pool}

[[providers]]
name = "ant-east"
kind = "anthropic"
base_url = "{upstream}"
api_key_env = "BENCH_EAST"

[[providers]]
name = "ant-west"
kind = "anthropic"
base_url = "{upstream}"
api_key_env = "BENCH_WEST"

[[providers]]
name = "oai-east"
kind = "openai"
base_url = "{upstream}"
api_key_env = "BENCH_EAST"

[[providers]]
name = "oai-west"
kind = "openai"
base_url = "{upstream}"
api_key_env = "BENCH_WEST"

[deployments]
"aria-sonnet-4.6" = [{{ provider = "ant-pool", upstream_model = "claude-pool" }}]
"aria-haiku-4.5" = [
  {{ provider = "ant-east", upstream_model = "claude-pair" }},
  {{ provider = "ant-west", upstream_model = "claude-pair" }},
]
"nova-5.5" = [{{ provider = "oai-pool", upstream_model = "gpt-pool" }}]
"nova-5.6-sol" = [
  {{ provider = "oai-east", upstream_model = "gpt-pair" }},
  {{ provider = "oai-west", upstream_model = "gpt-pair" }},
]
"""

# --- running -----------------------------------------------------------------------------------


@dataclass
class Gateway:
    affinity: str
    proc: Proc
    base_url: str
    keys: dict[str, str]


def _cli(args: list[str], config: Path, data_dir: Path, env: dict[str, str]) -> dict[str, Any]:
    cmd = [
        sys.executable,
        "-m",
        "modelgate",
        *args,
        "--config",
        str(config),
        "--data-dir",
        str(data_dir),
        "--json",
    ]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"bench: `modelgate {' '.join(args)}` failed:\n{done.stdout}{done.stderr}")
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def start_gateway(affinity: str, upstream: str, workdir: Path, workers: int = 1) -> Gateway:
    """A gateway with ``[routing] affinity`` as given; ``workers`` serving processes, each with
    its own pins (as separate instances would have), the kernel spreading connections."""
    port = free_port()
    name = f"{affinity}-{workers}w"
    config = workdir / f"affinity-{name}.toml"
    data_dir = workdir / f"affinity-{name}-data"
    pool = json.dumps(list(POOL_KEYS))
    text = CONFIG.format(port=port, affinity=affinity, upstream=upstream, pool=pool, workers=workers)
    config.write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELGATE_")}
    env |= POOL_KEYS | PAIR_KEYS
    _cli(["accounts", "create", "bench", "--credits", "1000000000"], config, data_dir, env)
    keys = {}
    for fmt, group in (("messages", "Pro"), ("responses", "Nova")):
        issued = _cli(
            ["keys", "create", "--account", "bench", "--group", group, "--rpm", "100000000"],
            config,
            data_dir,
            env,
        )
        keys[fmt] = str(issued["secret"])
    cmd = [
        sys.executable,
        "-m",
        "modelgate",
        "serve",
        "--config",
        str(config),
        "--data-dir",
        str(data_dir),
        "--no-bootstrap",
    ]
    proc = Proc(f"gateway-{name}", pinned(cmd, GATEWAY_CORE), env=env, log=workdir / f"affinity-{name}.log")
    base_url = f"http://127.0.0.1:{port}"
    proc.wait_http(f"{base_url}/healthz", 30)
    if workers > 1:
        proc.wait_workers(f"{base_url}/health", workers, 60)
    return Gateway(name, proc, base_url, keys)


async def run_sessions(
    client: httpx.AsyncClient,
    gateway: Gateway,
    fmt: str,
    upstreams: str,
    identifiers: bool,
    between_turns: Callable[[int], Any] | None = None,
) -> Figures:
    model = MODELS[(fmt, upstreams)]
    sessions = [Session(n, fmt, identifiers) for n in range(SESSIONS)]
    figures = Figures()
    secret = gateway.keys[fmt]
    auth = (
        {"x-api-key": secret, "anthropic-version": "2023-06-01"}
        if fmt == "messages"
        else {"authorization": f"Bearer {secret}"}
    )

    async def one(session: Session, turn: int) -> None:
        path, body, headers = session.request(turn, model)
        reply = await client.post(gateway.base_url + path, json=body, headers={**auth, **headers})
        if reply.status_code != 200:
            figures.failed += 1
            print(
                f"  {fmt} session {session.number} turn {turn}: HTTP {reply.status_code} {reply.text[:200]}"
            )
            session.history.pop()
            return
        data = reply.json()
        figures.add(fmt, data["usage"])
        session.answered(data)

    for turn in range(TURNS):
        if between_turns is not None:
            await between_turns(turn)
        await asyncio.gather(*(one(s, turn) for s in sessions))
    return figures


def affinity_counts(base_url: str) -> dict[str, float]:
    text = httpx.get(f"{base_url}/metrics").text
    return {
        m[0]: float(m[1])
        for m in re.findall(r'^modelgate_affinity_total\{result="(\w+)"\} (\S+)$', text, re.M)
    }


def key_cost_us() -> dict[str, float]:
    """In-process microseconds: a session key from a header, from the prefix of a Claude-Code-shaped
    body of 16 turns, and one pin lookup + update in a full table of 100,000 sessions."""
    session = Session(0, "messages", False)
    body: dict[str, Any] = {}
    for turn in range(16):
        _, body, _ = session.request(turn, "m")
        session.answered({"content": [{"type": "text", "text": "ok"}]})
    header = {"x-claude-code-session-id": "0f5c2a4e-0000-4000-8000-000000000000"}

    def per_call(fn: Callable[[], object], n: int = 20000) -> float:
        start = time.perf_counter()
        for _ in range(n):
            fn()
        return (time.perf_counter() - start) / n * 1e6

    table = AffinityTable(600.0, 100_000, time.monotonic)
    dep = Deployment("p", "m")
    for i in range(100_000):
        table.served("m", i.to_bytes(16, "big"), None, dep, "k")
    key = (5).to_bytes(16, "big")
    return {
        "header key": per_call(lambda: session_key("key-id", header, body)),
        "prefix key": per_call(lambda: session_key("key-id", {}, body)),
        "pin lookup + update": per_call(lambda: table.served("m", key, table.get("m", key), dep, "k")),
    }


async def main_async(args: argparse.Namespace) -> int:
    upstream = CachingUpstream()
    await upstream.start()
    rows: list[tuple[str, str, str, str, Figures]] = []
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="modelgate-affinity-") as tmp:
        work = Path(tmp)
        gateways = {
            "off": start_gateway("off", upstream.base_url, work),
            "session": start_gateway("session", upstream.base_url, work),
            "session-2": start_gateway("session", upstream.base_url, work, workers=2),
        }
        try:
            async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=64)) as client:
                for fmt in args.formats:
                    for upstreams in ("pool", "pair"):
                        for name, identifiers in SCENARIOS:
                            upstream.reset()
                            figures = await run_sessions(client, gateways[name], fmt, upstreams, identifiers)
                            routing = ROUTING[name] if name != "off" else BASELINE[upstreams]
                            ids = "n/a" if name == "off" else "with" if identifiers else "none"
                            rows.append((fmt, UPSTREAMS[upstreams], ids, routing, figures))
                            if figures.failed:
                                problems.append(
                                    f"{fmt} {upstreams} {routing}: {figures.failed} requests failed"
                                )
                            floor = SHARE_FLOOR[identifiers]
                            if name != "off" and figures.share < floor:
                                problems.append(
                                    f"{fmt} {upstreams} {routing} {ids}: share {figures.share:.3f} < {floor}"
                                )
                print_rows(rows)
                print()
                await refusing_credential(client, gateways, upstream, problems)
        finally:
            for gateway in gateways.values():
                gateway.proc.stop()
            await upstream.stop()
    print()
    print("session key and pin, in-process (µs per request):")
    for what, us in key_cost_us().items():
        print(f"  {what:<22} {us:7.2f}")
    print()
    if problems:
        print("acceptance: FAILED")
        for problem in problems:
            print(f"  - {problem}")
        return 1
    print("acceptance: ok (share >= 0.85 with session identifiers, >= 0.75 without; no request failed)")
    return 0


def print_rows(rows: list[tuple[str, str, str, str, Figures]]) -> None:
    print(f"affinity benchmark: {SESSIONS} sessions x {TURNS} turns, system prompt {len(json.dumps(SYSTEM)) / 1024:.1f} KB "
          f"(2 cache breakpoints), {len(TOOLS)} tools; cost in input-token units")  # fmt: skip
    head = f"{'format':<10} {'upstreams':<22} {'session ids':<12} {'routing':<16} {'read share':>10} {'cost':>10} {'vs off':>7} {'failed':>6}"
    print(head)
    print("-" * len(head))
    baseline = 0.0
    for fmt, upstreams, ids, routing, f in rows:
        if ids == "n/a":
            baseline = f.cost
        ratio = f.cost / baseline if baseline else 1.0
        print(
            f"{fmt:<10} {upstreams:<22} {ids:<12} {routing:<16} {f.share:>10.3f} {f.cost:>10.0f} {ratio:>7.2f} {f.failed:>6}"
        )


async def refusing_credential(
    client: httpx.AsyncClient, gateways: dict[str, Gateway], upstream: CachingUpstream, problems: list[str]
) -> None:
    victim = POOL_KEYS["BENCH_POOL_1"]

    async def refuse(turn: int) -> None:
        if turn == REFUSE_AFTER_TURN:
            upstream.refused.add(victim)

    print(
        f"a pool credential refusing (401) from turn {REFUSE_AFTER_TURN + 1} on, Messages, with session ids:"
    )
    for name in ("session", "session-2", "off"):
        upstream.reset()
        # With 2 workers each counts its own re-pins; the main port answers for one of them.
        before = affinity_counts(gateways[name].base_url)
        figures = await run_sessions(client, gateways[name], "messages", "pool", True, refuse)
        after = affinity_counts(gateways[name].base_url)
        moved = after.get("repinned", 0) - before.get("repinned", 0)
        routing = ROUTING.get(name, "round-robin")
        turns = SESSIONS * REFUSE_AFTER_TURN
        early, late = upstream.served[:turns], upstream.served[turns:]
        on_victim = {s for c, s in early if c == victim}
        stayed = all(len({c for c, s in late if s == n}) == 1 for n in range(SESSIONS))
        note = ""
        if name == "session":
            note = f", sessions on it: {len(on_victim)}, re-pinned: {moved:.0f}"
        if name != "off":
            note += f", each session on one credential after: {stayed}"
        print(
            f"  {routing:<16} read share {figures.share:.3f}, cost {figures.cost:.0f}, "
            f"failed requests {figures.failed}{note}"
        )
        if figures.failed:
            problems.append(f"refusing credential, {routing}: {figures.failed} client requests failed")
        if name == "session" and moved != len(on_victim):
            problems.append("refusing credential: its sessions did not re-pin once each")
        if name != "off" and not stayed:
            problems.append(f"refusing credential, {routing}: a session moved between credentials after")


def main() -> None:
    parser = argparse.ArgumentParser(description="session affinity vs prompt caches (docs/bench.md)")
    parser.add_argument(
        "--formats", nargs="+", choices=["messages", "responses"], default=["messages", "responses"]
    )
    sys.exit(asyncio.run(main_async(parser.parse_args())))


if __name__ == "__main__":
    main()
