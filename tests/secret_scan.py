"""The whole suite's check that no secret reaches a log line, a metric or a span (issue 12).

Every log record any gateway in the test process emits (JSON and text renderings alike), every
metrics exposition a test gateway serves when it stops, every span the trace tests receive and
the log file of every ``modelgate serve`` subprocess pass through ``scan``. A secret is anything
shaped like a modelgate key or admin token (with a valid checksum), and every HMAC secret and
upstream credential a test gateway was configured with (``register``). The session fails at its
end if any was seen (tests/conftest.py).
"""

from __future__ import annotations

import logging
import re
import threading

from modelgate.keys import is_well_formed_admin_token, is_well_formed_key
from modelgate.telemetry.logs import JsonFormatter, TextFormatter

SHAPED = re.compile(r"(?:sk-cs4-|mg-op-|mg-acct-)[0-9A-Za-z]{38}")
#: Configured secrets shorter than this are not scanned for (they would match ordinary text).
MIN_SECRET = 12


class Scanner:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._secrets: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        self.leaks: list[str] = []
        self.scanned = 0

    def register(self, *secrets: str | None) -> None:
        """Secrets that must never appear (HMAC secrets, upstream keys)."""
        with self._lock:
            added = {s for s in secrets if s and len(s) >= MIN_SECRET} - self._secrets
            if added:
                self._secrets |= added
                escaped = sorted((re.escape(s) for s in self._secrets), key=len, reverse=True)
                self._pattern = re.compile("|".join(escaped))

    def scan(self, text: str, where: str) -> None:
        found = [m for m in SHAPED.findall(text) if is_well_formed_key(m) or is_well_formed_admin_token(m)]
        pattern = self._pattern
        if pattern is not None:
            found.extend(pattern.findall(text))
        with self._lock:
            self.scanned += 1
            if found:
                self.leaks.append(f"{where}: {sorted(set(found))[0][:12]}… in {text[:300]!r}")


SCANNER = Scanner()


class ScanningHandler(logging.Handler):
    """Renders each record both ways the gateway can log it, and scans the result."""

    def __init__(self, scanner: Scanner) -> None:
        super().__init__(logging.DEBUG)
        self._scanner = scanner
        self._json = JsonFormatter()
        self._text = TextFormatter()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            rendered = self._json.format(record) + "\n" + self._text.format(record)
        except Exception:  # a record that cannot be formatted is not ours to judge
            return
        self._scanner.scan(rendered, f"log {record.name}")
