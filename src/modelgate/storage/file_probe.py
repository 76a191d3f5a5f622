"""Is the SQLite file the server writes still the database, and is there room to write?

SQLite keeps writing through its open descriptor when the file is deleted or replaced under a
running server: every answer, charge and key change then lands in a file nobody will ever open
again, and ``/health`` would still say "ok". A full disk fails writes one by one. ``FileProbe``
notices both:

- the file's identity (device and inode) is taken when the store opens it; a later check that
  finds no file, or another file, at the path reports it (``problem``) and refuses every write
  (``check_writable``) with ``DatabaseFileProblem``, a ``StorageError``, until the restart:
  requests are answered 503 in their wire format instead of being served and lost;
- free space on the database's filesystem below ``min_free_bytes`` (``database_min_free_bytes``)
  is reported, and new holds are refused (``check_room``) while settlements of requests already
  under way still write, so what was delivered is still charged.

On the request path a check that found all well is trusted for ``RECHECK_SECONDS`` (two system
calls per request were measurable in the benchmark); a problem is never trusted away, and
``/health`` (``problem`` and the database's ping) always looks afresh. So a deleted file or a full disk is refused at most
that long after it happened, and at once after ``/health`` saw it (a deleted file stays reported).

``/health`` answers 503 while either lasts; the reason, which names the file, is for operators
only (the operator's ``/health`` view and the log), never the public view. ``refuse_a_new_database_beside_a_deleted_one``
keeps the CLI from silently creating an empty database where a running server's was deleted.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from modelgate.storage.base import StorageError

#: Default for ``database_min_free_bytes``.
DEFAULT_MIN_FREE_BYTES = 16 * 1024 * 1024
_DOCS = "docs/operations.md#the-database-file"
#: Seconds a check that found all well is trusted on the request path (writes, new holds).
RECHECK_SECONDS = 0.25
log = logging.getLogger("modelgate.storage")


class DatabaseFileProblem(StorageError):
    """The database file is gone, replaced, or its disk is full: ``reason`` says which and what
    to do (for the log and operators), ``code`` says which in a word."""

    def __init__(self, reason: str, code: str = "database_unavailable") -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code


def _deleted_descriptor(path: Path) -> str | None:
    """``/proc/self/fd/N`` still open on the deleted ``path`` (where its data can be copied from)."""
    target = f"{path} (deleted)"
    try:
        for fd in os.listdir("/proc/self/fd"):
            try:
                if os.readlink(f"/proc/self/fd/{fd}") == target:
                    return f"/proc/{os.getpid()}/fd/{fd}"
            except OSError:
                continue
    except OSError:
        return None
    return None


class FileProbe:
    """Checks before writes, holds and pings. Cheap while all is well (one ``stat``); a deleted or
    replaced file is a problem until the restart (``_stuck``): found once, logged once, and
    every later check answers from memory (no ``stat``, no listing of ``/proc/self/fd``)."""

    __slots__ = ("_file_ok_until", "_identity", "_room_ok_until", "_stuck", "min_free_bytes", "path")

    def __init__(self, path: Path, min_free_bytes: int = DEFAULT_MIN_FREE_BYTES) -> None:
        self.path = path.absolute()
        self.min_free_bytes = min_free_bytes
        self._identity: tuple[int, int] | None = None
        #: (code, reason) of a deleted or replaced file, kept until the restart.
        self._stuck: tuple[str, str] | None = None
        #: Monotonic times until which the last good file / file-and-room check is trusted.
        self._file_ok_until = 0.0
        self._room_ok_until = 0.0

    def opened(self) -> None:
        """The store just opened (or created) the file: its identity is the one every later check
        compares with, so a file deleted before the first write is noticed too."""
        if self._identity is not None:
            return
        try:
            stat = os.stat(self.path)
        except OSError:
            return  # examined again at the next opening
        self._identity = (stat.st_dev, stat.st_ino)

    def _file_problem(self) -> DatabaseFileProblem | None:
        if self._stuck is not None:  # a new exception each time: a raised one keeps its traceback
            return DatabaseFileProblem(self._stuck[1], self._stuck[0])
        if self._identity is None:
            return None  # not opened yet: the first connection creates it
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            where = _deleted_descriptor(self.path)
            rescue = f"; its data is still readable at {where} until this process exits" if where else ""
            return self._stick(
                "database_file_deleted",
                f"the database file {self.path} was deleted while the gateway had it open{rescue}: "
                f"writes are refused so none is lost in the deleted file. Restore the file from a "
                f"backup, then restart ({_DOCS})",
            )
        except OSError as exc:
            reason = f"the database file {self.path} cannot be examined: {exc.strerror}"
            return DatabaseFileProblem(reason, "database_file_unreadable")
        if (stat.st_dev, stat.st_ino) != self._identity:
            return self._stick(
                "database_file_replaced",
                f"the database file {self.path} was replaced by another file while the gateway had it "
                f"open: writes are refused so none goes to the old one. Restart to serve the new file "
                f"({_DOCS})",
            )
        return None

    def _stick(self, code: str, reason: str) -> DatabaseFileProblem:
        self._stuck = (code, reason)
        log.error("%s", reason)
        return DatabaseFileProblem(reason, code)

    def _room_problem(self) -> DatabaseFileProblem | None:
        if not self.min_free_bytes:
            return None
        try:
            fs = os.statvfs(self.path.parent)
        except OSError:
            return None
        free = fs.f_bavail * fs.f_frsize
        if free >= self.min_free_bytes:
            return None
        return DatabaseFileProblem(
            f"the disk holding {self.path.parent} is full ({free} bytes free, fewer than "
            f"database_min_free_bytes = {self.min_free_bytes}): new requests are refused until "
            f"space is freed; requests under way are still charged ({_DOCS})",
            "disk_full",
        )

    def problem(self) -> str | None:
        """Why the database cannot take writes now (None: it can)."""
        found = self._file_problem() or self._room_problem()
        return None if found is None else found.reason

    def check_writable(self) -> None:
        """Before every write transaction: refuse writes to a deleted or replaced file."""
        now = time.monotonic()
        if self._stuck is None and now < self._file_ok_until:
            return
        found = self._file_problem()
        if found is not None:
            raise found
        self._file_ok_until = now + RECHECK_SECONDS

    def check_room(self, *, fresh: bool = False) -> None:
        """Before a new hold: refuse it as well when the disk is full. ``fresh``: look again even
        if a recent check found all well (the health check's ping)."""
        now = time.monotonic()
        if not fresh and self._stuck is None and now < self._room_ok_until:
            return
        found = self._file_problem() or self._room_problem()
        if found is not None:
            raise found
        self._room_ok_until = self._file_ok_until = now + RECHECK_SECONDS


def holders_of_deleted(path: Path) -> list[int]:
    """Processes (readable by this user) with ``path`` open although it was deleted."""
    target = f"{path.absolute()} (deleted)"
    found = []
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                    found.append(int(pid))
                    break
            except OSError:
                continue
    return found


def refuse_a_new_database_beside_a_deleted_one(url: str) -> None:
    """StorageError when ``url`` is a SQLite file that does not exist while a process (a running
    server) still has it open deleted: opening it would create an empty database beside it."""
    if not url.startswith("sqlite:///"):
        return
    path = Path(url.removeprefix("sqlite:///"))
    if path.exists():
        return
    holders = holders_of_deleted(path)
    if holders:
        raise StorageError(
            f"{path} does not exist, but process {', '.join(map(str, holders))} still has it open: it "
            f"was deleted under a running gateway. Not creating an empty database in its place; stop "
            f"the gateway after copying its data out, restore the file, then retry ({_DOCS})"
        )


def set_min_free_bytes(store: object, min_free_bytes: int) -> None:
    """Apply ``database_min_free_bytes`` to ``store``'s probe (stores without a file have none)."""
    probe = getattr(store, "file_probe", None)
    if isinstance(probe, FileProbe):
        probe.min_free_bytes = min_free_bytes
