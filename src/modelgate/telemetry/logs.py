"""Logs: one JSON object per line (``log_format = "json"``, the default when stderr is not a
terminal) or readable text, and one request record per model request at its end.

Every line carries ``ts`` (UTC, ISO 8601 with milliseconds), ``level``, ``logger`` and ``msg``;
a line logged while a request is served (an upstream failure, a storage error, a traceback) also
carries the ``request_id`` the client saw in its ``request-id`` header. The request record (logger ``modelgate.requests``, ``msg`` "request") adds the fields in
``REQUEST_FIELDS`` (docs/operations.md describes each). Request and response bodies are never
logged, nor are keys, tokens or upstream secrets: the record is built from ids, counts and
outcomes only. Every other line (uvicorn's access log with its request targets, tracebacks) is
scrubbed as it is written (``scrub``): the values of query parameters that carry credentials or
names (``SECRET_PARAMETERS``), anything shaped like a key or admin token, and the secrets the
process was configured with (``metrics.token``, the HMAC secret) become ``[redacted]``.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from typing import Any, Literal, TextIO

import orjson

from modelgate.telemetry.gathered import Gathered
from modelgate.telemetry.record import RequestRecord

LogFormat = Literal["json", "text"]

#: The request record's fields, in the order they are written.
REQUEST_FIELDS = (
    "request_id",
    "endpoint",
    "transport",
    "model",
    "stream",
    "status",
    "outcome",
    "error_type",
    "error_code",
    "key_id",
    "account_id",
    "group",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "web_search_requests",
    "charged_uc",
    "usage_status",
    "total_ms",
    "ttft_ms",
    "upstream_ms",
    "provider",
    "deployment",
    "attempts",
    "dropped_tools",
)

#: Query parameters whose values never reach a log line: credentials sent in a URL, ``q`` (admin
#: searches by account or key name), and the sign-in's one-time values (``invite`` links, the
#: provider's ``code`` and ``state``).
SECRET_PARAMETERS = (
    "key",
    "token",
    "api_key",
    "api-key",
    "apikey",
    "access_token",
    "auth",
    "password",
    "q",
    "invite",
    "code",
    "state",
)
_PARAMETER = re.compile(
    r"([?&;](?:" + "|".join(re.escape(p) for p in SECRET_PARAMETERS) + r")=)[^&;#\s\"']*", re.IGNORECASE
)
#: Keys and admin tokens (``keys``), and what commonly looks like a provider's key.
_KEY_SHAPED = re.compile(r"(?:sk-cs4-|mg-op-|mg-acct-|mg-inv-|\b(?:sk|rk|pk)-)[A-Za-z0-9_\-]{16,}")
REDACTED = "[redacted]"
#: Configured secrets shorter than this are not scrubbed (they would match ordinary text).
MIN_SECRET = 12


class Scrubber:
    """Removes credentials from a log line (see the module docstring)."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        self._secrets: frozenset[str] = frozenset()
        self._known: re.Pattern[str] | None = None
        self.learn(secrets)

    def learn(self, secrets: Iterable[str | None]) -> None:
        """Scrub ``secrets`` too from now on (a reload's new tokens; the old ones stay scrubbed)."""
        known = self._secrets | {s for s in secrets if s and len(s) >= MIN_SECRET}
        if known == self._secrets:
            return
        self._secrets = known
        # Longest first, so a secret containing another is removed whole; swapped in one step.
        ordered = sorted(known, key=len, reverse=True)
        self._known = re.compile("|".join(re.escape(s) for s in ordered))

    def __call__(self, text: str) -> str:
        if self._known is not None:
            text = self._known.sub(REDACTED, text)
        if "=" in text:
            text = _PARAMETER.sub(r"\1" + REDACTED, text)
        if "-" in text:
            text = _KEY_SHAPED.sub(REDACTED, text)
        return text


request_log = logging.getLogger("modelgate.requests")
#: The id of the request being served (each request runs in a task, with a context, of its own):
#: every line logged while serving it carries the ``request_id`` its client saw.
CURRENT_REQUEST: ContextVar[str | None] = ContextVar("modelgate_request_id", default=None)


def request_id_of(record: logging.LogRecord) -> str | None:
    given = getattr(record, "request_id", None)
    return given if given is not None else CURRENT_REQUEST.get()


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


def request_fields(record: RequestRecord) -> dict[str, Any]:
    """The request record of ``record`` (``REQUEST_FIELDS``; absent values are null)."""
    return {
        "request_id": record.request_id,
        "endpoint": record.endpoint,
        "transport": record.transport,
        "model": record.model or None,
        "stream": record.stream,
        "status": record.status,
        "outcome": record.outcome,
        "error_type": record.error_type,
        "error_code": record.error_code,
        "key_id": record.key_id or None,
        "account_id": record.account_id,
        "group": record.group or None,
        "input_tokens": record.input_tokens,
        "output_tokens": record.output_tokens,
        "cache_read_tokens": record.cache_read_tokens,
        "cache_write_tokens": record.cache_write_tokens,
        "web_search_requests": record.web_search_requests,
        "charged_uc": record.charged_uc,
        "usage_status": record.usage_status,
        "total_ms": _ms(record.seconds),
        "ttft_ms": _ms(record.ttft),
        "upstream_ms": _ms(record.upstream_seconds) if record.attempts else None,
        "provider": record.provider or None,
        "deployment": record.deployment or None,
        "attempts": record.attempts,
        "dropped_tools": record.dropped_tools,
    }


def log_request(record: RequestRecord) -> None:
    if request_log.isEnabledFor(logging.INFO):
        request_log.info("request", extra={"fields": request_fields(record)})


_SECOND: list[Any] = [-1, ""]  # the last second formatted, and its text (one strftime a second)


def _timestamp(created: float) -> str:
    seconds = int(created)
    if _SECOND[0] != seconds:
        _SECOND[0], _SECOND[1] = seconds, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    return f"{_SECOND[1]}.{int((created - seconds) * 1000):03d}Z"


class RequestLineWriter:
    """Writes request records as JSON lines straight to a stream, buffered like nginx's
    ``access_log … buffer= flush=``: lines are written when ``FLUSH_LINES`` wait or
    ``FLUSH_SECONDS`` after the first of them, and at shutdown (``flush``).

    ``modelgate serve`` uses it for the request record in JSON format: the same line the logging
    path writes (``JsonFormatter``), without a ``LogRecord``, handler dispatch and a write and
    flush per request (measured with bench/ab.py: a write per request cost 2-4 % of a core at
    3,000 requests/s). The lines are made at the flush, all in one loop, from the records and
    their end times kept until then (a record is final once its request ended): made one by one
    between requests each cost about three times as much CPU (measured in the gateway). A
    process killed with SIGKILL loses at most the last ``FLUSH_SECONDS``.
    """

    FLUSH_LINES = 128
    FLUSH_SECONDS = 0.25

    def __init__(self, stream: TextIO, *, worker: int | None = None) -> None:
        self._stream = stream
        #: What every line has before its time stamp, and between it and the request's fields
        #: (the worker's index too, ``server.workers``), as ``JsonFormatter`` orders them.
        self._after_ts = b'","level":"info","logger":' + orjson.dumps(request_log.name) + b',"msg":"request",'
        if worker is not None:
            self._after_ts += b'"worker":' + orjson.dumps(worker) + b","
        #: The records waiting for the flush, each with the time its request ended.
        self._pending: Gathered[tuple[float, RequestRecord]] = Gathered(
            self._write, self.FLUSH_LINES, self.FLUSH_SECONDS
        )

    def __call__(self, record: RequestRecord) -> None:
        self._pending.add((time.time(), record))

    def _lines(self, pending: list[tuple[float, RequestRecord]]) -> bytes:
        """Each record's line: the fixed head, its time stamp, then its fields' object without
        the opening brace (no second dict per line)."""
        after_ts, dumps, newline = self._after_ts, orjson.dumps, orjson.OPT_APPEND_NEWLINE
        parts: list[bytes] = []
        for ended, record in pending:
            parts += (
                b'{"ts":"',
                _timestamp(ended).encode(),
                after_ts,
                dumps(request_fields(record), option=newline)[1:],
            )
        return b"".join(parts)

    def flush(self) -> None:
        self._pending.flush()

    def _write(self, pending: list[tuple[float, RequestRecord]]) -> None:
        try:
            self._stream.write(self._lines(pending).decode())
            self._stream.flush()
        except (OSError, ValueError):  # stderr closed or gone: logging must never fail a request
            pass


class JsonFormatter(logging.Formatter):
    """One JSON object per record; ``extra={"fields": {...}}`` and ``extra={"request_id": ...}``
    become top-level fields. The message and a traceback pass through ``scrub``."""

    def __init__(self, scrub: Scrubber | None = None) -> None:
        super().__init__()
        self._scrub = scrub or Scrubber()

    @property
    def scrubber(self) -> Scrubber:
        return self._scrub

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": _timestamp(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": self._scrub(record.getMessage()),
        }
        worker = getattr(record, "worker", None)
        if worker is not None:
            out["worker"] = worker
        request_id = request_id_of(record)
        if request_id is not None:
            out["request_id"] = request_id
        fields: Mapping[str, Any] | None = getattr(record, "fields", None)
        if fields:
            out.update(fields)
        if record.exc_info:
            out["exc"] = self._scrub(self.formatException(record.exc_info))
        return orjson.dumps(out, default=str).decode()


class TextFormatter(logging.Formatter):
    """``time level logger: message``, then the fields as ``name=value`` (nulls left out); the
    line passes through ``scrub``."""

    def __init__(self, scrub: Scrubber | None = None) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")
        self._scrub = scrub or Scrubber()

    @property
    def scrubber(self) -> Scrubber:
        return self._scrub

    def format(self, record: logging.LogRecord) -> str:
        line = self._scrub(super().format(record))
        extra = []
        worker = getattr(record, "worker", None)
        if worker is not None:
            extra.append(f"worker={worker}")
        fields: Mapping[str, Any] | None = getattr(record, "fields", None)
        request_id = request_id_of(record)
        if request_id is not None and not fields:
            extra.append(f"request_id={request_id}")
        if fields:
            extra.extend(f"{name}={value}" for name, value in fields.items() if value is not None)
        if not extra:
            return line
        head, newline, rest = line.partition("\n")  # a traceback stays below the fields
        return f"{head} {' '.join(extra)}{newline}{rest}"


class _WorkerTag(logging.Filter):
    def __init__(self, worker: int) -> None:
        super().__init__()
        self._worker = worker

    def filter(self, record: logging.LogRecord) -> bool:
        record.worker = self._worker
        return True


def scrub_also(secrets: Iterable[str | None]) -> None:
    """Scrub ``secrets`` from every line from now on (the handler ``configure_logging`` set up;
    a reload's new ``metrics.token``)."""
    for handler in logging.getLogger().handlers:
        formatter = handler.formatter
        if isinstance(formatter, JsonFormatter | TextFormatter):
            formatter.scrubber.learn(secrets)


def default_format() -> LogFormat:
    return "text" if sys.stderr.isatty() else "json"


def configure_logging(
    level: str,
    fmt: LogFormat | None,
    *,
    requests: bool,
    worker: int | None = None,
    secrets: Iterable[str | None] = (),
) -> Callable[[RequestRecord], None] | None:
    """Every log line to stderr in ``fmt``; the request record on or off (``request_log``).
    Returns the request-record writer to use instead of the logging path (JSON), or None. With
    ``worker`` (one of the processes of ``server.workers``) every line carries its index.
    ``secrets`` (configured tokens and secrets) are scrubbed from every line, as keys are."""
    json_lines = (fmt or default_format()) == "json"
    handler = logging.StreamHandler(sys.stderr)
    scrub = Scrubber(secrets)
    handler.setFormatter(JsonFormatter(scrub) if json_lines else TextFormatter(scrub))
    if worker is not None:
        handler.addFilter(_WorkerTag(worker))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    request_log.setLevel(logging.INFO if requests else logging.WARNING)
    request_log.disabled = not requests
    return RequestLineWriter(sys.stderr, worker=worker) if requests and json_lines else None
