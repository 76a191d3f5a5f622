"""Refused requests in the usage log: a request refused for its key with 402 (balance or monthly
cap), 404 (a model the key may not use or that does not exist, a stored response or conversation
it names that does not exist) or 429 (its rate limit, or the
instance's large-body slots) gets a usage record with status ``refused_<HTTP status>``, 0 tokens
and 0 µc, so owners see in the dashboard what their clients were refused, and the error-rate view
counts it.

Not recorded: a 401 (no key, or one that is not ours: there is no account to show it to), refusals
before the key is known (the instance's in-flight limit, draining), and other statuses (a 400 is a
client bug better read in the request log). Every refusal is still counted in the metrics and has
its request log line. A refusal costs two batched ledger steps (a hold of 0 µc, released), written
after the answer, so a client hammering past its rate limit writes one record per refused request
but never waits for it; at most ``billing.max_pending_refusal_records`` such writes wait at once
(past it the refusal is counted in ``modelgate_refusal_records_dropped`` instead), and a failure to
write one is logged, never turned into another error.
"""

from __future__ import annotations

import logging

from modelgate.services import Services
from modelgate.storage.base import StorageError
from modelgate.telemetry.record import RequestRecord

log = logging.getLogger("modelgate.requests")

#: HTTP statuses of refusals that are recorded in the usage log (for a known key).
RECORDED = frozenset({402, 404, 429})
#: The usage record's model when the request named none the gateway serves.
NO_MODEL = "unknown"


def status_of(http_status: int) -> str:
    return f"refused_{http_status}"


def record_refusal(services: Services, record: RequestRecord, started: float, http_status: int) -> None:
    """Write the usage record of a refused request when it belongs in the usage log (above), in
    the background: the refusal is answered at once (a client hammering past its limit waits for
    no database write), and the write runs on the ledger's settlements runner, which a draining
    server waits for. A cancelled request can therefore never skip its own end for this write."""
    if http_status not in RECORDED or not record.key_id or record.account_id is None:
        return
    started_write = services.ledger.in_background(
        _write(
            services,
            record.request_id,
            record.key_id,
            record.account_id,
            record.endpoint,
            record.model or NO_MODEL,
            status_of(http_status),
            started,
        ),
        limit=services.settings.billing.max_pending_refusal_records,
    )
    if not started_write:
        services.telemetry.metrics.refusal_record_dropped()


async def _write(
    services: Services,
    request_id: str,
    key_id: str,
    account_id: int,
    endpoint: str,
    model: str,
    status: str,
    started: float,
) -> None:
    try:
        await services.ledger.record_refusal(request_id, key_id, account_id, endpoint, model, status, started)
    except StorageError as exc:
        log.warning("could not record a refused request in the usage log: %s", exc)
    except Exception:  # a record is bookkeeping: it never becomes another failure
        log.exception("could not record a refused request in the usage log")
