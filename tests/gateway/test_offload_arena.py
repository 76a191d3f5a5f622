"""Bodies reach the body workers through arenas (``modelgate.offload``): files in memory kept
from job to job, one per worker. A body or result larger than the arena still goes through it
(the arena grows for the job and shrinks back); a worker killed mid-job fails that job with
``WorkerLost``, frees its arena and is replaced; a caller that goes away leaves its worker usable.

The functions given to the workers are module-level here (they are pickled by reference)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
import uvloop

from modelgate.offload import Offload, WorkerLost

KIB = 1024
Runner = Callable[[Coroutine[Any, Any, Any]], Any]


@pytest.fixture(params=["asyncio", "uvloop"])
def run_on(request: pytest.FixtureRequest) -> Runner:
    """Each test on asyncio's loop (the test gateways') and on uvloop (``modelgate serve``'s)."""
    return asyncio.run if request.param == "asyncio" else uvloop.run


ARENA_NAME = "modelgate-body-arena"


def digest(body: bytes) -> tuple[int, str]:
    return len(body), hashlib.sha256(body).hexdigest()


def reversed_body(body: bytes, tag: str) -> tuple[str, bytes, int]:
    return tag, body[::-1], len(body)


def arenas() -> list[os.stat_result]:
    """The arenas the calling process holds."""
    found = []
    for entry in Path("/proc/self/fd").iterdir():
        try:
            if ARENA_NAME in os.readlink(entry):
                found.append(entry.stat())
        except FileNotFoundError:  # the listing's own descriptor, closed meanwhile
            continue
    return found


def whose(body: bytes) -> tuple[int, int, int]:
    """The worker's pid, and the inode and size of the arena it holds."""
    (arena,) = arenas()
    return os.getpid(), arena.st_ino, arena.st_size


def sleep_then_len(body: bytes, seconds: float) -> int:
    time.sleep(seconds)
    return len(body)


def refuse(body: bytes) -> None:
    raise ValueError(f"refused {len(body)} bytes")


@pytest.fixture
def others() -> frozenset[int]:
    """The arenas this process held before the test (gateways of other tests sharing the process
    may hold some), which ``arenas_here`` leaves out."""
    return frozenset(arena.st_ino for arena in arenas())


def arenas_here(others: frozenset[int]) -> list[int]:
    """Sizes of the arenas this process holds that the test made."""
    return [arena.st_size for arena in arenas() if arena.st_ino not in others]


def test_the_arena_is_reused_from_job_to_job(run_on: Runner, others: frozenset[int]) -> None:
    async def run() -> list[tuple[int, int, int]]:
        work = Offload(1, arena_bytes=256 * KIB)
        try:
            seen = [await work.run_on_body(whose, os.urandom(100 * KIB)) for _ in range(4)]
            assert arenas_here(others) == [256 * KIB] and work.arena_bytes == 256 * KIB
            return seen
        finally:
            await work.stop()

    seen = run_on(run())
    assert len(set(seen)) == 1  # the same worker, the same arena, never grown
    assert arenas_here(others) == []  # stopped: its arena is gone


@pytest.mark.parametrize("arena", [0, 4 * KIB, 8 << 20])
def test_bodies_and_results_larger_than_the_arena_come_through_whole(
    arena: int, run_on: Runner, others: frozenset[int]
) -> None:
    body = os.urandom(3 << 20)  # also larger than what is copied on the loop itself

    async def run() -> None:
        work = Offload(1, arena_bytes=arena)
        try:
            assert await work.run_on_body(digest, body) == digest(body)
            assert await work.run_on_body(reversed_body, body, "x") == ("x", body[::-1], len(body))
            small = b"{}" * 10
            assert await work.run_on_body(reversed_body, small, "y") == ("y", small[::-1], 20)
            assert arenas_here(others) == [arena]  # grown for the jobs, given back after
            with pytest.raises(ValueError, match="refused 20 bytes"):
                await work.run_on_body(refuse, small)
            assert await work.run(sum, [1, 2, 3]) == 6
        finally:
            await work.stop()

    run_on(run())


def test_a_worker_killed_mid_job_fails_that_job_and_is_replaced(
    run_on: Runner, others: frozenset[int]
) -> None:
    async def run() -> None:
        work = Offload(1, arena_bytes=64 * KIB)
        try:
            (first,) = (await work.run_on_body(whose, b"x"))[:1]
            job = asyncio.ensure_future(work.run_on_body(sleep_then_len, b"y" * 1000, 30.0))
            while work.pending == 0:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.2)  # the worker has the job
            os.kill(first, signal.SIGKILL)
            with pytest.raises(WorkerLost):
                await asyncio.wait_for(job, 10)
            assert work.lost == 1 and work.pending == 0
            assert arenas_here(others) == []  # the dead worker's arena is freed
            (second,) = (await work.run_on_body(whose, b"z"))[:1]
            assert second != first and work.pids() == [second]
            assert arenas_here(others) == [64 * KIB]
        finally:
            await work.stop()

    run_on(run())


def test_a_worker_dead_while_idle_is_replaced_without_failing_a_job(run_on: Runner) -> None:
    async def run() -> None:
        work = Offload(1)
        try:
            first = (await work.run_on_body(whose, b"x"))[0]
            os.kill(first, signal.SIGKILL)
            for _ in range(200):
                if (
                    not Path(f"/proc/{first}").exists()
                    or "Z" in Path(f"/proc/{first}/stat").read_text().split()[2]
                ):
                    break
                await asyncio.sleep(0.01)
            second = (await work.run_on_body(whose, b"y"))[0]
            assert second != first and work.lost == 0
        finally:
            await work.stop()

    run_on(run())


def test_a_caller_gone_mid_job_leaves_its_worker_usable(run_on: Runner) -> None:
    async def run() -> None:
        work = Offload(1)
        try:
            first = (await work.run_on_body(whose, b"x"))[0]
            job = asyncio.ensure_future(work.run_on_body(sleep_then_len, b"y" * 5000, 0.3))
            await asyncio.sleep(0.1)
            job.cancel()
            with pytest.raises(asyncio.CancelledError):
                await job
            # The next job waits for the worker to finish the abandoned one, then runs there.
            assert (await work.run_on_body(whose, b"z"))[0] == first
            assert await work.run_on_body(digest, b"abc") == digest(b"abc")
            assert work.lost == 0
        finally:
            await work.stop()

    run_on(run())


def test_jobs_beyond_the_workers_wait_for_one(run_on: Runner) -> None:
    async def run() -> None:
        work = Offload(2)
        try:
            bodies = [os.urandom(50 * KIB + i) for i in range(8)]
            results = await asyncio.gather(*(work.run_on_body(digest, body) for body in bodies))
            assert results == [digest(body) for body in bodies]
            assert len(work.pids()) == 2 and work.pending == 0
        finally:
            await work.stop()

    run_on(run())


#: A request's buffers as the serving process makes them: the body joined from its chunks, then
#: a splice of it, both freed at the end; the page faults of 50 such requests.
_FAULTS_OF_REQUESTS = """
import resource, sys
from modelgate.offload.heap import keep_body_buffers
print(keep_body_buffers(int(sys.argv[1])))
chunks = [bytes([i]) * 65536 for i in range(16)]
def request():
    body = b"".join(chunks)
    spliced = b"".join([body[:10], b"x", body[11:]])
    return len(spliced)
for _ in range(5):
    request()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(50):
    request()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults_of_requests(arena: int) -> tuple[str, int]:
    ran = subprocess.run(
        [sys.executable, "-c", _FAULTS_OF_REQUESTS, str(arena)], capture_output=True, text=True, check=True
    )
    kept, faults = ran.stdout.split()
    return kept, int(faults)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the thresholds are glibc's malloc's")
def test_the_serving_process_keeps_body_buffers_in_its_heap() -> None:
    kept, faults = faults_of_requests(8 << 20)
    assert kept == "True" and faults < 50  # the same pages, request after request
    default, default_faults = faults_of_requests(0)  # glibc's own thresholds
    assert default == "False" and default_faults > 10 * max(faults, 1)


def test_stopping_mid_copy_waits_for_the_copy_and_ends_the_workers(
    run_on: Runner, others: frozenset[int]
) -> None:
    async def run() -> None:
        work = Offload(1, arena_bytes=64 * KIB)
        try:
            first = (await work.run_on_body(whose, b"x"))[0]
            job = asyncio.ensure_future(work.run_on_body(digest, os.urandom(64 << 20)))
            await asyncio.sleep(0.005)  # the 64 MiB copy into the arena is under way on a thread
        finally:
            await work.stop()
        with pytest.raises((asyncio.CancelledError, WorkerLost)):
            await job
        assert work.pids() == [] and arenas_here(others) == []
        for _ in range(500):  # killed, then reaped
            if not Path(f"/proc/{first}").exists():
                break
            await asyncio.sleep(0.01)
        assert not Path(f"/proc/{first}").exists()

    run_on(run())
