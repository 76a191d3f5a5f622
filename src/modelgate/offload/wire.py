"""What the serving process and a body worker say to each other, and the worker's arena.

Each worker has a socket to the serving process and an arena: a file in memory (``memfd``) that
only the two of them hold. A job's body is written into the arena at offset 0 (one copy into
pages kept from job to job, so no fresh pages are faulted in and none are given back); the socket
carries only a small pickled ``Job`` naming the function, its other arguments and the body's
length. A large ``bytes`` result (a translated body) comes back the same way: the worker writes it
into its arena and the ``Reply`` holds an ``InArena`` marker in its place.

Messages are length-prefixed frames (an 8-byte little-endian length, then the payload).
"""

from __future__ import annotations

import os
import pickle
import socket
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing import reduction
from typing import Any

HEADER_BYTES = 8
#: ``bytes`` results larger than this come back through the arena instead of the socket.
ARENA_RESULT_BYTES = 64 << 10


@dataclass(frozen=True, slots=True)
class Job:
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    #: Length of the body written at offset 0 of the worker's arena (its first argument), or -1
    #: for a job without one (``Offload.run``).
    body_length: int


@dataclass(frozen=True, slots=True)
class InArena:
    """A ``bytes`` result left in the worker's arena."""

    offset: int
    length: int


@dataclass(frozen=True, slots=True)
class Reply:
    ok: bool
    #: The result (``InArena`` markers in place of large bytes), or the exception raised.
    value: Any


class ArenaFd:
    """An arena's file descriptor, handed to a worker as it is spawned (the spawn start method
    passes the descriptor itself to the child, as it does for sockets)."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self) -> tuple[Callable[..., ArenaFd], tuple[Any]]:
        return _arena_in_child, (reduction.DupFd(self.fd),)


def _arena_in_child(duplicate: Any) -> ArenaFd:
    return ArenaFd(duplicate.detach())


def new_arena() -> int:
    """A file in memory with no name (nothing to remove after a crash: its pages are freed when
    the last process holding it closes it); an unlinked temporary file where there is no memfd."""
    if hasattr(os, "memfd_create"):
        return os.memfd_create("modelgate-body-arena", os.MFD_CLOEXEC)
    fd, path = tempfile.mkstemp(prefix="modelgate-arena-")
    os.unlink(path)
    return fd


def read_arena(fd: int, length: int, offset: int) -> bytes:
    """``length`` bytes of the arena from ``offset`` (one ``pread``, which releases the GIL)."""
    data = os.pread(fd, length, offset)
    if len(data) == length:
        return data
    pieces = [data]  # a read is capped at about 2 GiB: the rest in further reads
    done = len(data)
    while done < length:
        piece = os.pread(fd, length - done, offset + done)
        if not piece:
            raise EOFError("the body arena is shorter than the job says")
        pieces.append(piece)
        done += len(piece)
    return b"".join(pieces)


def write_arena(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(HEADER_BYTES, "little") + payload


def dumps(value: Any) -> bytes:
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def loads(payload: bytes) -> Any:
    # The only peer is the other end of a socket pair this process made for its own worker.
    return pickle.loads(payload)  # noqa: S301


def receive(channel: socket.socket) -> bytes:
    """One frame from a blocking socket (the worker's side); ``EOFError`` when it is closed."""
    length = int.from_bytes(_exactly(channel, HEADER_BYTES), "little")
    return _exactly(channel, length)


def _exactly(channel: socket.socket, length: int) -> bytes:
    buffer = bytearray(length)
    view = memoryview(buffer)
    done = 0
    while done < length:
        count = channel.recv_into(view[done:])
        if count == 0:
            raise EOFError("the serving process closed the channel")
        done += count
    return bytes(buffer)
