"""A worker that was starting when SIGHUP came (its reload handler not in place yet, so the
forwarded signal was ignored) still ends up serving the reloaded configuration: the parent
passes SIGHUP to it again once it reports ready. A real ``modelgate serve --workers 2``."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx

from tests.hardening.process import write_config
from tests.hardening.test_reload import ALIAS, alias_status
from tests.polling import wait_until
from tests.workers.harness import WorkersGateway


def spawned_workers(parent: int) -> set[int]:
    """The pids of the worker processes ``parent`` has started (multiprocessing's spawn)."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            command = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue  # ended meanwhile
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == parent and b"spawn_main" in command:
            found.add(int(entry))
    return found


def test_a_worker_starting_during_a_reload_serves_the_reloaded_configuration(tmp_path: Path) -> None:
    server = {"keep_alive_seconds": 120}
    gateway = WorkersGateway(tmp_path, workers=2, server=server)
    with gateway:
        seeded = gateway.seed()
        gateway.start()
        assert gateway.proc is not None
        parent = gateway.proc.pid
        pids = gateway.wait_for_workers()
        gateway.kill_worker(pids[1])
        # The parent restarts it: as soon as the new process exists (long before it serves),
        # the configuration changes and the parent gets SIGHUP.
        new: set[int] = wait_until(lambda: spawned_workers(parent) - set(pids.values()), "the restart")
        write_config(gateway.config, gateway.port, ALIAS, server={**server, "workers": 2})
        os.kill(parent, signal.SIGHUP)
        after = gateway.wait_for_workers()
        assert after[1] in new and after[0] == pids[0]

        def aliased_everywhere() -> bool:
            answers = gateway.on_each_worker(lambda client: alias_status(client, seeded.keys))
            return set(answers.values()) == {200}

        wait_until(aliased_everywhere, "the alias on every worker", interval=0.2)
        with httpx.Client(base_url=gateway.base_url, timeout=30) as client:
            assert alias_status(client, seeded.keys) == 200
