"""Settles and releases the database could not take: kept until they land, exactly once.

A request whose answer was delivered must be charged even when its settle meets a database that
is restarting, unreachable or failing. ``Hold`` hands such a settle (or release) here instead of
failing the request: it is kept in memory and, when a journal directory is configured, appended to
this process's journal file and fsynced before the call returns, so before the answer's final
byte (``gateway.relay`` settles before it ends a stream). A background task tries the kept ones
again, with a backoff from ``RETRY_FIRST_SECONDS`` to ``RETRY_MAX_SECONDS``, until each lands.

Exactly once: a settle is keyed by its hold's request id and the ledger applies it only while the
reservation is pending (``storage.base``): a retry of a settle that did commit (its reply was
lost with the connection) finds no reservation and changes nothing, on both engines. While a
settle waits here, this process's sweeper spares its hold (``Ledger.holds``), so waiting never
turns a delivered answer into an ``abandoned`` one. A hold whose wait outlasts
``billing.reservation_ttl_seconds`` may be released by another instance's sweeper; the late
settle then changes nothing (that answer goes unbilled, and the log says so).

The journal file (``settles-<host>-<pid>-<random>.jsonl`` in the directory: containers sharing a
volume often share pids, so the name is never reused, and it is created with ``O_EXCL`` under a
temporary name, locked, then renamed into place) holds one JSON line per kept operation and one
per landed one. The process holds an exclusive ``flock`` on its own file. At start,
``replay`` adopts every file no live process holds (a process that died with settles waiting):
its operations not marked landed are kept again here and the file is removed. The file is emptied
whenever nothing waits. A journal line that cannot be written (a full disk) is logged, and the
operation stays kept in memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import logging
import os
import secrets
import socket
import threading
import typing
from pathlib import Path
from typing import Any

import orjson

from modelgate.storage.base import MAX_UC, LedgerStore, Settlement, UsageRecord

log = logging.getLogger("modelgate.billing")

#: The first pause before trying kept operations again, and the longest (doubling between).
RETRY_FIRST_SECONDS = 0.2
RETRY_MAX_SECONDS = 5.0
_PREFIX, _SUFFIX = "settles-", ".jsonl"


@dataclasses.dataclass(slots=True)
class _Kept:
    record: UsageRecord
    #: True: a settle (charge the usage); False: a release (charge nothing).
    charge: bool


class SettleJournal:
    def __init__(self, store: LedgerStore, directory: Path | None = None) -> None:
        self._store = store
        self._directory = directory
        self._kept: dict[str, _Kept] = {}
        self._fd: int | None = None
        #: The name of this process's own journal file, once opened.
        self._name: str | None = None
        #: Whether the file has lines (it is emptied once nothing waits).
        self._written = False
        self._file_lock = asyncio.Lock()
        #: Serialises the file's writes between the writer thread and ``keep_now`` (on the loop).
        self._io_lock = threading.Lock()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        #: Operations kept since start, and those of them that landed since (metrics).
        self.kept_total = 0
        self.landed_total = 0
        #: Settles kept because the database gave no answer within ``billing.settle_timeout_seconds``.
        self.timed_out_total = 0

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._kept

    @property
    def waiting(self) -> int:
        """Settles and releases kept now, not yet written to the database."""
        return len(self._kept)

    async def keep(self, record: UsageRecord, *, charge: bool) -> None:
        """Keep an operation the database did not take; returns once it is durable (journaled, when
        a directory is configured) and due to be retried."""
        self._kept[record.request_id] = _Kept(record, charge)
        self.kept_total += 1
        await self._append(_kept_line(record, charge))
        self._ensure_retrying()
        self._wake.set()

    def keep_now(self, record: UsageRecord, *, charge: bool) -> None:
        """``keep``, synchronously (for a settle being cancelled, which may not await): journaled
        and fsynced on the calling thread before it returns. Retried by the running retry task if
        any, else at ``aclose`` or by the next process to start (``replay``)."""
        self._kept[record.request_id] = _Kept(record, charge)
        self.kept_total += 1
        if self._directory is not None:
            try:
                self._write(_kept_line(record, charge))
            except OSError as exc:
                log.error("settle journal: cannot write (%s); %s kept in memory only", exc, record.request_id)
        self._wake.set()

    async def replay(self) -> int:
        """Adopt the journal files of processes that died with operations waiting (at start); the
        number adopted. They are retried like the ones this process keeps. An orphan file is
        removed only once its operations are fsynced in this process's own file (a crash between
        leaves them in one file or the other); a file that cannot be read or removed is logged
        and left, never stopping the start."""
        directory = self._directory
        if directory is None:
            return 0
        adopted = 0
        for path, file, waiting in await asyncio.to_thread(self._claim_orphans, directory):
            with file:  # holds the orphan's lock until it is removed or left
                fresh = {rid: kept for rid, kept in waiting.items() if rid not in self._kept}
                self._kept.update(fresh)
                lines = b"".join(_kept_line(k.record, k.charge) for k in fresh.values())
                try:
                    if lines:
                        async with self._file_lock:
                            await asyncio.to_thread(self._write, lines)
                    await asyncio.to_thread(path.unlink)
                except OSError as exc:
                    log.error(
                        "settle journal: %s left in place (%s); it is retried from memory", path.name, exc
                    )
                adopted += len(fresh)
        if adopted:
            log.warning("replaying %d settle(s) kept by a process that stopped", adopted)
            self._ensure_retrying()
            self._wake.set()
        return adopted

    async def aclose(self) -> None:
        """Stop retrying, try what waits once more (what still waits stays journaled)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._kept:
            await self._try_all()
        if self._kept:
            log.error(
                "%d settle(s) still wait for the database at shutdown; kept for the next start", self.waiting
            )
        if self._fd is not None:
            if not self._kept and self._name is not None and self._directory is not None:
                # Nothing waits: the file goes (names are never reused, so none would pile up).
                with contextlib.suppress(OSError):
                    (self._directory / self._name).unlink()
            os.close(self._fd)
            self._fd = None

    # retrying -------------------------------------------------------------------------------

    def _ensure_retrying(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._retry_until_landed())

    async def _retry_until_landed(self) -> None:
        pause = RETRY_FIRST_SECONDS
        while True:
            if not self._kept:
                self._wake.clear()
                await self._wake.wait()
                pause = RETRY_FIRST_SECONDS
            await asyncio.sleep(pause)
            landed_all = await self._try_all()
            pause = RETRY_FIRST_SECONDS if landed_all else min(pause * 2, RETRY_MAX_SECONDS)

    async def _try_all(self) -> bool:
        """Try every kept operation once (together: the store batches them); True when all landed."""
        waiting = list(self._kept.values())
        outcomes = await asyncio.gather(*(self._try(kept) for kept in waiting), return_exceptions=True)
        landed = [
            kept for kept, outcome in zip(waiting, outcomes, strict=True) if isinstance(outcome, Settlement)
        ]
        for kept in landed:
            if self._kept.get(kept.record.request_id) is kept:
                del self._kept[kept.record.request_id]
        self.landed_total += len(landed)
        if landed:
            log.warning("%d kept settle(s) written to the database; %d still wait", len(landed), self.waiting)
            await self._append(
                b"".join(orjson.dumps({"landed": k.record.request_id}) + b"\n" for k in landed)
            )
        return not self._kept

    async def _try(self, kept: _Kept) -> Settlement:
        record = kept.record
        outcome = await (self._store.settle(record) if kept.charge else self._store.release(record))
        if not outcome.applied:
            # Settled already (the first try committed, its reply was lost) or released by a
            # sweeper after the hold's TTL: either way exactly one outcome was recorded.
            log.warning("kept settle of %s found its hold ended already; nothing changed", record.request_id)
        return outcome

    # the file -------------------------------------------------------------------------------

    async def _append(self, data: bytes) -> None:
        if self._directory is None:
            return
        async with self._file_lock:
            try:
                await asyncio.to_thread(self._write, data)
            except OSError as exc:
                log.error(
                    "settle journal: cannot write (%s); %d settle(s) kept in memory only", exc, self.waiting
                )

    def _write(self, data: bytes) -> None:
        """Append ``data`` and fsync; or, when nothing waits any more, empty the file instead
        (decided under the lock: a line ``keep_now`` wrote meanwhile is never emptied away)."""
        with self._io_lock:
            fd = self._open()
            if not self._kept and self._written:
                os.ftruncate(fd, 0)
                self._written = False
            else:
                os.write(fd, data)
                self._written = True
            os.fsync(fd)

    def _open(self) -> int:
        """This process's own journal file, created on first use: a name no other process has or
        had (host, pid and random part), created exclusively and locked under a temporary name
        that ``replay`` does not look at, then renamed into place, so no other process can ever
        adopt it while it is being opened, and nothing is truncated."""
        if self._fd is None:
            directory = self._directory
            assert directory is not None
            directory.mkdir(parents=True, exist_ok=True)
            host = "".join(c if c.isalnum() or c in "-." else "_" for c in socket.gethostname())
            name = f"{_PREFIX}{host}-{os.getpid()}-{secrets.token_hex(6)}{_SUFFIX}"
            opening = directory / f".{name}.new"
            fd = os.open(opening, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new file: nobody else holds it
                os.rename(opening, directory / name)
            except OSError:
                os.close(fd)
                with contextlib.suppress(OSError):
                    opening.unlink()
                raise
            self._fd, self._name = fd, name
        return self._fd

    def _claim_orphans(self, directory: Path) -> list[tuple[Path, typing.BinaryIO, dict[str, _Kept]]]:
        """The journal files no live process holds, each open and locked by this process, with
        the operations in it not marked landed. Files in use, gone or unreadable are skipped."""
        try:
            paths = sorted(directory.glob(f"{_PREFIX}*{_SUFFIX}")) if directory.is_dir() else []
        except OSError as exc:
            log.error("settle journal: cannot list %s (%s); nothing replayed", directory, exc)
            return []
        claimed: list[tuple[Path, typing.BinaryIO, dict[str, _Kept]]] = []
        for path in paths:
            if path.name == self._name:
                continue
            try:
                file = open(path, "rb")  # noqa: SIM115 - closed by replay, after the unlink
            except FileNotFoundError:
                continue  # adopted by another process starting now
            except OSError as exc:
                log.error("settle journal: cannot open %s (%s); skipped", path.name, exc)
                continue
            try:
                fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                if os.stat(path).st_ino != os.fstat(file.fileno()).st_ino:
                    file.close()
                    continue
                claimed.append((path, file, _waiting_in(file.read(), path)))
            except (BlockingIOError, FileNotFoundError):
                file.close()  # a live process's journal, or adopted by another process just now
            except OSError as exc:
                file.close()
                log.error("settle journal: cannot read %s (%s); skipped", path.name, exc)
        return claimed


def _kept_line(record: UsageRecord, charge: bool) -> bytes:
    return orjson.dumps({"charge": charge, "record": dataclasses.asdict(record)}) + b"\n"


def _waiting_in(data: bytes, path: Path) -> dict[str, _Kept]:
    """The operations of a journal file not marked landed (a torn last line is skipped)."""
    kept: dict[str, _Kept] = {}
    for number, line in enumerate(data.splitlines(), 1):
        try:
            entry: dict[str, Any] = orjson.loads(line)
            if "landed" in entry:
                kept.pop(str(entry["landed"]), None)
                continue
            record = _record_of(entry["record"])
            kept[record.request_id] = _Kept(record, bool(entry["charge"]))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            log.error("settle journal %s line %d unreadable (%s); skipped", path.name, number, exc)
    return kept


#: The type of each field of a journaled ``UsageRecord``, and those without a default. A line that
#: does not match was not written by the journal: it is skipped, never retried for ever (or worse,
#: a negative charge crediting an account).
_FIELD_TYPES: dict[str, type] = typing.get_type_hints(UsageRecord)
_REQUIRED = {f.name for f in dataclasses.fields(UsageRecord) if f.default is dataclasses.MISSING}


def _record_of(fields: Any) -> UsageRecord:
    if not isinstance(fields, dict) or not _REQUIRED <= set(fields) <= set(_FIELD_TYPES):
        raise ValueError("not the fields of a usage record")
    for name, value in fields.items():
        kind = _FIELD_TYPES[name]
        allowed = (int, float) if kind is float else (kind,)
        if isinstance(value, bool) or not isinstance(value, allowed):
            raise ValueError(f"{name} is not a {kind.__name__}")
        if isinstance(value, int | float) and not 0 <= value <= MAX_UC:
            raise ValueError(f"{name} is out of range")
    return UsageRecord(**fields)
