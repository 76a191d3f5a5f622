"""A body worker process: jobs from its socket, bodies and large results through its arena
(``offload.wire``), one job at a time, until the serving process closes the socket."""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import socket
from typing import Any

from modelgate.offload.wire import (
    ARENA_RESULT_BYTES,
    ArenaFd,
    InArena,
    Job,
    Reply,
    dumps,
    frame,
    loads,
    read_arena,
    receive,
    write_arena,
)

#: A full collection after the first job and then after this many; the two younger generations
#: after every other job.
FULL_COLLECTION_JOBS = 64


def run_when_idle() -> None:
    """Run this process only on CPU time nothing else wants (Linux ``SCHED_IDLE``): a task that
    wakes (the serving loop, with a request to answer) preempts it at once. Where there is no such
    policy, the niceness alone applies."""
    policy = getattr(os, "SCHED_IDLE", None)
    if policy is not None:
        with contextlib.suppress(OSError):
            os.sched_setscheduler(0, policy, os.sched_param(0))


def serve(channel: socket.socket, arena: ArenaFd, niceness: int, arena_bytes: int, idle: bool) -> None:
    """The worker's whole life: set up, then answer jobs until the channel closes."""
    # A SIGHUP to the process group (a reload, a closed terminal) or a ^C is the server's to
    # handle: it ends the workers by closing their channels.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if niceness:
        with contextlib.suppress(OSError):
            os.nice(niceness)
    if idle:
        run_when_idle()
    if arena_bytes:
        with contextlib.suppress(OSError):  # the pages up front, so no job waits for them
            os.posix_fallocate(arena.fd, 0, arena_bytes)
    # No collection in the middle of a job: parsing a large body creates thousands of containers,
    # which set off collections that walk them (and every older object) while they are all still
    # alive. A parsed body holds no cycles, so reference counting frees it when the job ends; what
    # the job left is collected after its answer is sent, off the request's time.
    gc.disable()
    jobs = 0
    while True:
        try:
            job: Job = loads(receive(channel))
        except EOFError:
            return
        channel.sendall(frame(_answer(job, arena.fd)))
        jobs += 1
        if jobs == 1 or jobs % FULL_COLLECTION_JOBS == 0:
            # What survives a full collection is kept out of the next ones (the modules the first
            # job imported, caches): a full collection over them took 16 ms.
            gc.collect()
            gc.freeze()
        else:
            gc.collect(1)


def _answer(job: Job, arena: int) -> bytes:
    try:
        if job.body_length >= 0:
            value = job.fn(read_arena(arena, job.body_length, 0), *job.args)
        else:
            value = job.fn(*job.args)
        # The body was copied out of the arena above: its results may take its place.
        reply = Reply(True, _into_arena(value, arena))
    except Exception as exc:  # the caller's to handle: re-raised in the serving process
        reply = Reply(False, exc)
    try:
        return dumps(reply)
    except Exception as exc:  # a result or an exception that does not pickle
        return dumps(Reply(False, RuntimeError(f"a body worker's answer could not be sent back: {exc!r}")))


def _into_arena(value: Any, arena: int) -> Any:
    """``value`` with each large ``bytes`` (itself or an item of a tuple) written into the arena
    one after another and replaced by its ``InArena`` marker."""
    offset = 0

    def placed(item: Any) -> Any:
        nonlocal offset
        if type(item) is not bytes or len(item) <= ARENA_RESULT_BYTES:
            return item
        write_arena(arena, item, offset)
        marker = InArena(offset, len(item))
        offset += len(item)
        return marker

    if type(value) is tuple:
        return tuple(placed(item) for item in value)
    return placed(value)
