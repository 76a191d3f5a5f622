"""The body workers' settings (niceness, scheduling policy), and the body files older versions
left in shared memory, swept at start (the arenas that replaced them are in
tests/gateway/test_offload_arena.py)."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from modelgate import offload
from modelgate.config import ConfigError, load_settings
from modelgate.offload import Offload, sweep_stale


@pytest.fixture
def own_folder() -> Iterator[Path]:
    """Old body files of this test in a folder of its own: other tests' files stay untouched."""
    folder = Path(tempfile.mkdtemp(prefix="modelgate-offload-test-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_files_of_dead_processes_are_swept_and_live_ones_kept(own_folder: Path) -> None:
    old = own_folder / "modelgate-body-test-old"
    fresh = own_folder / "modelgate-body-test-fresh"
    try:
        old.write_bytes(b"left by a crash")
        fresh.write_bytes(b"a job in flight")
        long_ago = time.time() - offload.STALE_SECONDS - 60
        os.utime(old, (long_ago, long_ago))
        assert sweep_stale(folder=own_folder) == 1
        assert not old.exists() and fresh.exists()
    finally:
        old.unlink(missing_ok=True)
        fresh.unlink(missing_ok=True)


def test_body_workers_run_at_the_configured_niceness() -> None:
    """The serving process wins the CPU from its body workers (``server.body_worker_niceness``)."""
    mine = os.getpriority(os.PRIO_PROCESS, 0)

    async def run(niceness: int) -> int:
        work = Offload(1, niceness)
        try:
            return await work.run(os.getpriority, os.PRIO_PROCESS, 0)
        finally:
            await work.stop()

    assert asyncio.run(run(7)) == min(19, mine + 7)
    assert asyncio.run(run(0)) == mine


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's")
def test_body_workers_run_only_on_idle_cpu_time_unless_told_otherwise() -> None:
    """``server.body_worker_priority``: ``idle`` (the default) puts the workers under SCHED_IDLE,
    so a waking serving loop preempts them at once; ``niceness`` leaves them under the normal
    policy at their niceness. The serving process itself keeps its own policy."""
    mine = os.sched_getscheduler(0)

    async def policy(**idle: bool) -> tuple[int, int]:
        work = Offload(1, 5, **idle)
        try:
            return await work.run(os.sched_getscheduler, 0), await work.run(
                os.getpriority, os.PRIO_PROCESS, 0
            )
        finally:
            await work.stop()

    nice = min(19, os.getpriority(os.PRIO_PROCESS, 0) + 5)
    assert asyncio.run(policy()) == (os.SCHED_IDLE, nice)
    assert asyncio.run(policy(idle=False)) == (mine, nice)
    assert os.sched_getscheduler(0) == mine


def test_the_priority_is_a_setting_checked_at_load(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    assert load_settings(None, environ={}, data_dir=tmp_path).server.body_worker_priority == "idle"
    path.write_text('[server]\nbody_worker_priority = "niceness"\n')
    assert load_settings(path, environ={}, data_dir=tmp_path).server.body_worker_priority == "niceness"
    env = {"MODELGATE_SERVER__BODY_WORKER_PRIORITY": "niceness"}
    assert load_settings(None, environ=env, data_dir=tmp_path).server.body_worker_priority == "niceness"
    path.write_text('[server]\nbody_worker_priority = "realtime"\n')
    with pytest.raises(ConfigError, match="body_worker_priority"):
        load_settings(path, environ={}, data_dir=tmp_path)


def test_the_niceness_is_a_setting_checked_at_load(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[server]\nbody_worker_niceness = 4\n")
    assert load_settings(path, environ={}, data_dir=tmp_path).server.body_worker_niceness == 4
    env = {"MODELGATE_SERVER__BODY_WORKER_NICENESS": "12"}
    assert load_settings(None, environ=env, data_dir=tmp_path).server.body_worker_niceness == 12
    assert load_settings(None, environ={}, data_dir=tmp_path).server.body_worker_niceness == 10
    path.write_text("[server]\nbody_worker_niceness = 20\n")
    with pytest.raises(ConfigError, match="body_worker_niceness"):
        load_settings(path, environ={}, data_dir=tmp_path)


def test_the_arena_size_is_a_setting_checked_at_load(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[server]\nbody_arena_bytes = 1048576\n")
    assert load_settings(path, environ={}, data_dir=tmp_path).server.body_arena_bytes == 1 << 20
    env = {"MODELGATE_SERVER__BODY_ARENA_BYTES": "0"}
    assert load_settings(None, environ=env, data_dir=tmp_path).server.body_arena_bytes == 0
    assert load_settings(None, environ={}, data_dir=tmp_path).server.body_arena_bytes == 8 << 20
    for wrong in ("-1", str(2 << 30)):
        path.write_text(f"[server]\nbody_arena_bytes = {wrong}\n")
        with pytest.raises(ConfigError, match="body_arena_bytes"):
            load_settings(path, environ={}, data_dir=tmp_path)
