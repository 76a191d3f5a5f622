"""Shared pieces of the resilience tests: provider configurations pointing at fake upstreams,
and a log capture that sees every logger the gateway uses.

The gateway runs in its thread (tests/gateway_server.py); the fakes run in another thread with
their own loop (``tests.loop_thread.LoopThread``), so a test (the third thread) drives real SDK
clients against both, and nothing but the network sits between them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.fakes import FakeUpstream, Reply
from tests.fakes.upstream import Step

#: Upstream credentials: long, distinctive, and shaped like the real ones.
ANTHROPIC_KEY = "sk-ant-api03-RESILIENCEanthropicSECRET0123456789abcdefXYZ"
OPENAI_KEY = "sk-proj-RESILIENCEopenaiSECRET0123456789abcdefXYZ"
ENV = {"ANTHROPIC_TEST_KEY": ANTHROPIC_KEY, "OPENAI_TEST_KEY": OPENAI_KEY}
SECRETS = (ANTHROPIC_KEY, OPENAI_KEY)

#: Timeouts short enough that every timeout case finishes in well under a second per attempt.
FAST_TIMEOUTS = {"connect": 1.0, "first_byte": 0.4, "idle": 0.4, "total": 20.0}
#: Retries without waiting, and no cooldown carried from one test into the next.
QUICK_ROUTING = {
    "max_attempts": 2,
    "backoff_base": 0.001,
    "backoff_max": 0.005,
    "cooldown": 0.0,
    "retry_budget_min_per_second": 1000.0,
}


def rescript(fake: FakeUpstream, *steps: Step, default: Step | None = None) -> None:
    """Replace a fake's script between requests (no request is in flight when tests call it)."""
    assert fake._script is not None
    fake._script.clear()
    fake._script.extend(steps)
    fake.default = default if default is not None else Reply()
    fake.requests.clear()


def anthropic_provider(name: str, base_url: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "kind": "anthropic",
        "base_url": base_url,
        "api_key_env": "ANTHROPIC_TEST_KEY",
        "timeouts": FAST_TIMEOUTS,
        **extra,
    }


def openai_provider(name: str, base_url: str, kind: str = "openai", **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "kind": kind,
        "base_url": base_url,
        "api_key_env": "OPENAI_TEST_KEY",
        "timeouts": FAST_TIMEOUTS,
        **extra,
    }


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self._lock_lines = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info:
            text += "\n" + logging.Formatter().formatException(record.exc_info)
        with self._lock_lines:
            self.lines.append(f"{record.name}: {text}")


#: Every logger a gateway process writes to (uvicorn's do not propagate to the root logger).
LOGGERS = ("", "modelgate", "uvicorn", "uvicorn.error", "uvicorn.access", "aiohttp", "asyncio")


@contextmanager
def capture_logs() -> Iterator[list[str]]:
    """All records at DEBUG and above from every logger in ``LOGGERS``, formatted."""
    handler = _Collect()
    saved: list[tuple[logging.Logger, int]] = []
    for name in LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, logger.level))
        logger.setLevel(logging.DEBUG)
        logger.addHandler(handler)
    try:
        yield handler.lines
    finally:
        for logger, level in saved:
            logger.removeHandler(handler)
            logger.setLevel(level)
