"""Large bodies cross to the body workers through files in shared memory (``offload``): none is
left behind by a caller cancelled mid-write, by a pool that cannot take the job, or (swept at
start) by a process that died mid-job."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from modelgate import offload
from modelgate.config import ConfigError, load_settings
from modelgate.offload import Offload, sweep_stale

#: Where the body files go: shared memory, or the temporary directory where there is none.
SHARED = Path(offload._shared_dir() or tempfile.gettempdir())


@pytest.fixture(autouse=True)
def own_folder(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The body files of this test in a folder of its own inside the shared one: gateways of
    other tests running at the same time (pytest-xdist) write and remove theirs beside it."""
    folder = Path(tempfile.mkdtemp(prefix="modelgate-offload-test-", dir=SHARED))
    monkeypatch.setattr(offload, "_SHARED_DIR", folder)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def body_files() -> set[Path]:
    return set(Path(offload._shared_dir() or "/nonexistent").glob("modelgate-body-*"))


def test_a_caller_cancelled_mid_write_leaves_no_file() -> None:
    before = body_files()

    async def run() -> None:
        work = Offload(1)
        job = asyncio.ensure_future(work.run_on_body(len, b"x" * (256 << 20)))
        await asyncio.sleep(0.01)  # the write of 256 MiB is under way on its thread
        job.cancel()
        with pytest.raises(asyncio.CancelledError):
            await job
        for _ in range(500):  # the thread ends its write, then its file goes
            if body_files() <= before:
                break
            await asyncio.sleep(0.02)
        await work.stop()

    asyncio.run(run())
    assert body_files() <= before


def test_a_pool_that_cannot_take_the_job_leaves_no_file() -> None:
    before = body_files()

    async def run() -> None:
        work = Offload(1)
        broken = ProcessPoolExecutor(1)
        broken.shutdown()
        work._pool = broken  # as after a worker was killed: submit raises
        with pytest.raises(RuntimeError):
            await work.run_on_body(len, b"y" * 4096)
        assert work.pending == 0

    asyncio.run(run())
    assert body_files() <= before


def test_files_of_dead_processes_are_swept_and_live_ones_kept(own_folder: Path) -> None:
    old = own_folder / "modelgate-body-test-old"
    fresh = own_folder / "modelgate-body-test-fresh"
    try:
        old.write_bytes(b"left by a crash")
        fresh.write_bytes(b"a job in flight")
        long_ago = time.time() - offload.STALE_SECONDS - 60
        os.utime(old, (long_ago, long_ago))
        assert sweep_stale() >= 1
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
