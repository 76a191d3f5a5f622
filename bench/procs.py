"""Processes under test: start them pinned to a core, wait for them, read their CPU time and RSS.

CPU time is the sum over the process tree of every thread's ``/proc/<pid>/task/<tid>/schedstat``
run time (nanoseconds, so short windows of light load are measured exactly); RSS is the sum of
``VmRSS`` over the tree (a peer proxy may fork workers).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pinned(cmd: Sequence[str], core: int | str) -> list[str]:
    if shutil.which("taskset") is None:
        raise SystemExit("bench: taskset (util-linux) is required to pin processes to cores")
    return ["taskset", "-c", str(core), *cmd]


class Proc:
    """A child process in its own process group, its output kept in a log file."""

    def __init__(
        self, name: str, cmd: Sequence[str], *, env: Mapping[str, str] | None = None, log: Path
    ) -> None:
        self.name = name
        self.log = log
        log.parent.mkdir(parents=True, exist_ok=True)
        self._out = log.open("wb")
        self.popen = subprocess.Popen(
            list(cmd),
            env=dict(env) if env is not None else None,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def wait_http(self, url: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise SystemExit(f"bench: {self.name} exited during start-up:\n{self.tail()}")
            try:
                with urllib.request.urlopen(url, timeout=2):
                    return
            except OSError as exc:
                # An HTTP error status still means the server answers.
                if getattr(exc, "code", None):
                    return
                time.sleep(0.1)
        raise SystemExit(f"bench: {self.name} did not answer {url} within {timeout:.0f}s:\n{self.tail()}")

    def wait_workers(self, url: str, workers: int, timeout: float) -> None:
        """Until each of ``workers`` serving processes has answered ``/health`` (new connections)."""
        seen: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(seen) < workers:
            if time.monotonic() > deadline:
                raise SystemExit(f"bench: {self.name}: only workers {sorted(seen)} answered:\n{self.tail()}")
            with (
                contextlib.suppress(OSError, ValueError, KeyError),
                urllib.request.urlopen(url, timeout=2) as reply,
            ):
                seen.add(int(json.loads(reply.read())["worker"]["index"]))
            time.sleep(0.02)

    def stop(self) -> None:
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(5)
        self._out.close()


def _children() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rfind(b")") + 2 :].split()[1])
        out.setdefault(ppid, []).append(int(entry))
    return out


def tree(pid: int) -> list[int]:
    children = _children()
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, ()))
    return out


def backends(postmaster: int, database: str) -> list[int]:
    """PostgreSQL's server processes connected to ``database`` (their title names it:
    ``postgres: <user> <database> <client> <state>``)."""
    out = []
    for pid in _children().get(postmaster, ()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                title = f.read().replace(b"\0", b" ").split()
        except OSError:
            continue
        if len(title) > 2 and title[0] == b"postgres:" and title[2] == database.encode():
            out.append(pid)
    return out


def cpu_ns(pids: Sequence[int]) -> int:
    total = 0
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                    total += int(f.read().split()[0])
            except (OSError, IndexError, ValueError):
                continue
    return total


def reaped_children_ns(pid: int) -> int:
    """CPU time of ``pid``'s children that have exited and been reaped (``cutime + cstime``):
    short-lived processes (PostgreSQL's autovacuum workers, a restarted gateway worker) that a
    sum over the live tree would miss. Clock-tick resolution."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return 0
    ticks = int(fields[13]) + int(fields[14])  # cutime, cstime (fields 16 and 17 of stat)
    return ticks * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def tree_cpu_ns(pid: int) -> int:
    """CPU of a process, its live descendants and its reaped children."""
    return cpu_ns(tree(pid)) + reaped_children_ns(pid)


def rss_kib(pids: Sequence[int]) -> int:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status", "rb") as f:
                for line in f:
                    if line.startswith(b"VmRSS:"):
                        total += int(line.split()[1])
                        break
        except OSError:
            continue
    return total
