"""Running the real coding CLIs against a gateway: where the binaries are, a home of their own for
each run, and an upstream script that plays one agent turn with a shell-tool round trip.

The binaries come from ``scripts/clients.sh`` (pinned by ``clients/package-lock.json`` and cached
per lock file; ``MODELGATE_CLIENTS=latest`` takes the newest published versions instead, as
``make clients-latest`` does). Each run gets an empty ``HOME``/``CODEX_HOME`` and working folder,
no standard input, the environment reduced to what the CLI needs, its own process group (ended on
any exit) and a bounded wait.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from tests.fakes.upstream import RecordedRequest, Reply, Step

ROOT = Path(__file__).resolve().parents[2]
#: A bound on one CLI run (a hang is a failure, not a measurement).
RUN_TIMEOUT = 180.0
#: The shell command the scripted upstream asks for, and what only its output holds (the command
#: line itself does not contain the marker, so seeing it proves the command ran).
SHELL_COMMAND = "echo modelgate-$((6*7))-marker"
MARKER = "modelgate-42-marker"
FINAL_TEXT = "The command printed the marker."


@dataclass(frozen=True)
class Binaries:
    claude: str
    codex: str


@cache
def binaries() -> Binaries:
    """The CLI binaries, installed by ``scripts/clients.sh`` when not already cached."""
    which = "latest" if os.environ.get("MODELGATE_CLIENTS") == "latest" else "paths"
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "clients.sh"), which],
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    if done.returncode != 0:
        raise RuntimeError(f"scripts/clients.sh {which} failed:\n{done.stderr}")
    found = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    return Binaries(found["CLAUDE"], found["CODEX"])


@dataclass(frozen=True)
class Run:
    returncode: int
    stdout: str
    stderr: str


def run_cli(argv: Sequence[str], *, env: Mapping[str, str], cwd: Path) -> Run:
    """Run a CLI in its own process group, no stdin, a minimal environment; the group is ended
    whatever happens."""
    base = {k: os.environ[k] for k in ("PATH", "LANG", "TZ") if k in os.environ}
    proc = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env={**base, **env},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=RUN_TIMEOUT)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return Run(proc.returncode, stdout, stderr)


def _texts(value: Any) -> list[str]:
    """Every string inside a JSON value (message content of any format)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _texts(v)]
    if isinstance(value, list):
        return [t for v in value for t in _texts(v)]
    return []


def tool_output_seen(request: RecordedRequest) -> bool:
    """The request carries the shell command's output back (a tool result holding the marker
    printed by the command, not only the command line we asked for)."""
    body = request.json()
    turns = body.get("messages") or body.get("input") or []
    results = [
        turn
        for turn in turns
        if isinstance(turn, dict)
        and (
            turn.get("role") == "tool"
            or turn.get("type") == "function_call_output"
            or (
                turn.get("role") == "user"
                and isinstance(turn.get("content"), list)
                and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in turn["content"])
            )
        )
    ]
    return any(MARKER in text for text in _texts(results))


def asks_for_the_round_trip(request: RecordedRequest) -> bool:
    """The agent's own turn: the request offers tools and its prompt asks for the marker command."""
    body = request.json()
    return bool(body.get("tools")) and SHELL_COMMAND in " ".join(
        _texts(body.get("messages") or body.get("input"))
    )


def tool_names(body: dict[str, Any]) -> list[str]:
    """Names of the function tools a request offers, in any of the three formats."""
    names: list[str] = []
    for tool in body.get("tools") or []:
        name = tool.get("name") or (tool.get("function") or {}).get("name")
        if isinstance(name, str):
            names.append(name)
    return names


class AgentTurn:
    """The upstream's half of one agent turn: asked to run the marker command, it calls the
    client's shell tool (``tool``: name and arguments built from the offered tools); given the
    command's output, it answers ``FINAL_TEXT``; anything else (titles, quota probes, summaries)
    gets a plain answer."""

    def __init__(self, tool: Any) -> None:
        self.tool = tool
        self.calls = 0

    def __call__(self, request: RecordedRequest) -> Step:
        if request.path.endswith("/count_tokens"):
            return Reply()
        if tool_output_seen(request):
            return Reply(text=FINAL_TEXT)
        if asks_for_the_round_trip(request):
            self.calls += 1
            name, arguments = self.tool(request.json())
            return Reply.tool_call(name, arguments)
        return Reply(text="ok")
