"""Running work that grows with a request body in worker processes, never on the event loop
(``Offload``, in ``offload.pool``).

A body never crosses a pipe: each worker has an arena, a file in memory shared with the serving
process and reused from job to job, and the body is copied into it once (``offload.wire``). Before
arenas, a body went through a new file on the ``/dev/shm`` tmpfs per job; ``sweep_stale`` removes
such files left by a process of an older version that died mid-job.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from pathlib import Path

from modelgate.offload.pool import ARENA_BYTES, WORKER_NICENESS, Offload, WorkerLost

__all__ = ["ARENA_BYTES", "STALE_SECONDS", "WORKER_NICENESS", "Offload", "WorkerLost", "sweep_stale"]

#: A body file older than this is no job's: a process that died mid-job left it.
STALE_SECONDS = 3600.0

# Where older versions wrote their body files (mkstemp, mode 0600, as in any temporary directory).
_SHARED_DIR = Path("/dev/shm")  # noqa: S108


def sweep_stale(now: float | None = None, folder: Path | None = None) -> int:
    """Remove body files left in shared memory by processes that died mid-job; how many were
    removed."""
    if folder is None:
        writable = _SHARED_DIR.is_dir()
        folder = _SHARED_DIR if writable else Path(tempfile.gettempdir())
    cutoff = (time.time() if now is None else now) - STALE_SECONDS
    removed = 0
    for entry in folder.glob("modelgate-body-*"):
        with contextlib.suppress(OSError):
            if entry.stat().st_mtime < cutoff:
                entry.unlink()
                removed += 1
    return removed
