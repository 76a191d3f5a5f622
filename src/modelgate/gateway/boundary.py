"""What any failure of a request is as a refusal: the one translation, used where a request's
answer is rendered (the route table's boundary in ``server.app``; the model pipeline's, which
records the refusal with its usage before the answer goes out; the guarded API routes').

A ``GatewayError`` is already one; a storage failure is a retryable 503 (the database is down or
unreachable, not a bug), and so is a body worker that ended under a request (killed, out of
memory); anything else is a bug, logged with its traceback, and a 500 that says
only that the request id identifies it in the logs.
"""

from __future__ import annotations

import logging

from modelgate import errors
from modelgate.offload import WorkerLost
from modelgate.storage.base import StorageError

log = logging.getLogger("modelgate.request")


def refusal_of(exc: Exception) -> errors.GatewayError:
    """``exc`` as the refusal to answer with (logged unless it is one already)."""
    if isinstance(exc, errors.GatewayError):
        return exc
    if isinstance(exc, WorkerLost):
        log.warning("a body worker ended during a request: %s", exc)
        return errors.Unavailable(
            "the worker reading this request's body ended unexpectedly; retry the request"
        )
    if isinstance(exc, StorageError):
        log.warning("storage unavailable: %s", exc)
        return errors.Unavailable("the gateway's database is unavailable; retry shortly")
    log.error("request failed with an unexpected error", exc_info=exc)
    return errors.InternalError("internal error; the request id identifies it in the logs")
