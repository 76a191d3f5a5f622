"""Releasing reservations abandoned by crashed or lost requests.

Rule: a reservation still pending ``billing.reservation_ttl_seconds`` after it was made belongs
to a request that will never settle it: its process crashed, or it was lost between reserve and
settle. The request path guarantees settle-or-release for every request it serves, shielded from
cancellation, so only a dead process leaves a hold behind. Such a hold would block the account's
balance and the key's cap for ever, so the sweeper releases it: nothing is charged (the gateway
cannot know what the upstream did, and the client got no complete answer), and the usage record
says ``"abandoned"``.

The TTL must exceed the longest request the gateway serves (upstream timeouts bound it). A
request that somehow outlives it is not charged either: its late settle finds the reservation no
longer pending and changes nothing, so the ledger stays exact (never a double charge, never an
overshoot), at the price of that one request going unbilled.

Several instances may sweep the same database at once: release is conditional on the
reservation being ``pending`` in one transaction (see ``storage.base``), so exactly one of them
(or the request's own late settle) applies and writes the usage record.
"""

from __future__ import annotations

import logging

from modelgate.billing.ledger import UsageStatus
from modelgate.clock import Clock
from modelgate.periodic import Periodic
from modelgate.storage.base import LedgerStore, UsageRecord

log = logging.getLogger("modelgate.billing")

ABANDONED: str = UsageStatus.ABANDONED.value
#: Placeholders: releasing records the endpoint, model and start time stored with the hold.
UNKNOWN = "unknown"


class Sweeper:
    def __init__(self, store: LedgerStore, clock: Clock, interval: float, batch: int = 100) -> None:
        self._store = store
        self._clock = clock
        self._batch = batch
        self._loop = Periodic("reservation sweep", self.sweep, interval, log)
        #: Reservations this sweeper released, since start (metrics).
        self.released = 0

    async def sweep(self) -> int:
        """Release every reservation expired now; the number this call released."""
        released = 0
        while True:
            now = self._clock.time()
            expired = await self._store.expired_reservations(now, self._batch)
            for request_id, key_id, account_id, month in expired:
                outcome = await self._store.release(
                    UsageRecord(
                        request_id=request_id,
                        key_id=key_id,
                        account_id=account_id,
                        endpoint=UNKNOWN,
                        model=UNKNOWN,
                        month=month,
                        status=ABANDONED,
                        created_at=now,
                        finished_at=now,
                    )
                )
                if outcome.applied:
                    released += 1
                    self.released += 1
                    log.warning("released abandoned reservation %s of key %s", request_id, key_id)
            if len(expired) < self._batch:
                return released

    def start(self) -> None:
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()
