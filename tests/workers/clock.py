"""A clock that every process of a test gateway shares: the time is read from a file the test
writes, so worker processes see one simulated wall clock (as ``ManualClock`` does in-process)."""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any

_DOUBLE = struct.Struct("d")


class FileClock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "_fd": None}  # each process opens the file itself

    def time(self) -> float:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDONLY)
        return float(_DOUBLE.unpack(os.pread(self._fd, _DOUBLE.size, 0))[0])

    def steady(self) -> float:
        return self.time()  # the tests' simulated time never steps back

    def set(self, timestamp: float) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.pwrite(fd, _DOUBLE.pack(timestamp), 0)
        finally:
            os.close(fd)

    def advance(self, seconds: float) -> None:
        self.set(self.time() + seconds)
