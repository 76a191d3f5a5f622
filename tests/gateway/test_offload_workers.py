"""Body workers as processes: each is started from a thread while the loop keeps serving, and
the jobs that wait for it get it once it is up; a worker runs each job without automatic garbage
collections (a large body's parse would set them off again and again while its containers are
all alive) and collects what a job left once its answer is sent: cyclic garbage of one job is
gone by the next.

The functions given to the workers are module-level (pickled by reference); ``_WATCHED`` lives in
the worker's own copy of this module."""

from __future__ import annotations

import asyncio
import gc
import os
import threading
import weakref

from modelgate.offload import Offload

_WATCHED: list[weakref.ref[_Node]] = []


class _Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


def leave_cycles(body: bytes, count: int) -> bool:
    """Leaves ``count`` cycles behind, watching one; says whether collections were automatic."""
    nodes = [_Node() for _ in range(count)]
    _WATCHED.append(weakref.ref(nodes[0]))
    return gc.isenabled()


def watched_alive(body: bytes) -> tuple[list[bool], bool]:
    """Whether each watched cycle is still alive, and whether the collector keeps what survived
    a full collection out of the next ones (``gc.freeze``)."""
    return [ref() is not None for ref in _WATCHED], gc.get_freeze_count() > 0


def test_a_jobs_cycles_are_collected_after_it_without_collections_during_it() -> None:
    async def run() -> tuple[list[bool], tuple[list[bool], bool]]:
        work = Offload(1, arena_bytes=0)
        try:
            automatic = [await work.run_on_body(leave_cycles, b"{}", 20_000) for _ in range(3)]
            return automatic, await work.run_on_body(watched_alive, b"{}")
        finally:
            await work.stop()

    automatic, (alive, frozen) = asyncio.run(run())
    assert automatic == [False, False, False]
    assert alive == [False, False, False]
    assert frozen


def pid_of(body: bytes) -> int:
    return os.getpid()


def test_workers_start_while_the_loop_serves_and_take_the_jobs_waiting() -> None:
    async def run() -> tuple[int, list[int], list[int]]:
        work = Offload(2, arena_bytes=0)
        try:
            jobs = [asyncio.ensure_future(work.run_on_body(pid_of, b"{}")) for _ in range(5)]
            turns = 0  # loop turns taken by others before any worker was up
            while not work.pids():
                turns += 1
                await asyncio.sleep(0)
            return turns, await asyncio.gather(*jobs), work.pids()
        finally:
            await work.stop()

    turns, ran_in, workers = asyncio.run(run())
    assert turns >= 3  # started on the loop, the first job's step held it until the process was up
    assert sorted(set(ran_in)) == sorted(workers) and len(workers) == 2


def length(body: bytes) -> int:
    return len(body)


def test_large_copies_run_on_threads_at_the_workers_lower_priority() -> None:
    """A body above what is copied on the loop itself goes into the arena from a thread whose
    priority is lowered as the workers' is, so the loop wins the core from it."""

    def nice(thread: int) -> int:
        return os.getpriority(os.PRIO_PROCESS, thread)

    async def run() -> tuple[list[int], int]:
        work = Offload(1, niceness=7, arena_bytes=0)
        try:
            body = os.urandom(3 << 20)
            assert await work.run_on_body(length, body) == len(body)
            copiers = [t for t in threading.enumerate() if t.name.startswith("modelgate-body-copy")]
            return [nice(t.native_id) for t in copiers if t.native_id is not None], nice(
                threading.get_native_id()
            )
        finally:
            await work.stop()

    copiers, loop_thread = asyncio.run(run())
    assert copiers and all(n == min(19, loop_thread + 7) for n in copiers)
    assert nice(threading.get_native_id()) == loop_thread  # the serving thread keeps its own
