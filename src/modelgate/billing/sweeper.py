"""Releasing reservations abandoned by crashed or lost requests.

Rule: a reservation still pending ``billing.reservation_ttl_seconds`` after it was made belongs
to a request that will never settle it: its process crashed, or it was lost between reserve and
settle. The request path guarantees settle-or-release for every request it serves, shielded from
cancellation (and kept until it lands when the database fails: ``billing.settle_journal``), so
only a dead process leaves a hold behind. Such a hold would block the account's balance and the
key's cap for ever, so the sweeper releases it: nothing is charged (the gateway cannot know what
the upstream did, and the client got no complete answer), and the usage record says
``"abandoned"``.

A hold's age is never read from a wall clock: the ``expires_at`` stored with it was computed by
the wall clock of whichever process reserved it, and either clock may have stepped since (two
hours forward would make every live hold look expired). Instead each sweeper measures the age
itself, on its own steady clock (``clock.steady``): a pending reservation is released once this
sweeper has seen it pending, sweep after sweep, for the whole TTL. Each sweep lists every pending
reservation (``batch`` at a time, keyset paging), so every hold's age starts at the first sweep
after it was made, however many there are. Holds this process still answers for (its request in flight, its
settle waiting in the journal: ``Ledger.holds``) are never released by it, whatever the clocks say.
The price: after a restart, holds left by the crashed process are released one TTL after the new
sweeper first sees them rather than at their stored expiry.

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
from collections.abc import Callable

from modelgate.billing.ledger import UsageStatus
from modelgate.clock import Clock
from modelgate.periodic import Periodic
from modelgate.storage.base import LedgerStore, UsageRecord

log = logging.getLogger("modelgate.billing")

ABANDONED: str = UsageStatus.ABANDONED.value
#: Placeholders: releasing records the endpoint, model and start time stored with the hold.
UNKNOWN = "unknown"


class Sweeper:
    def __init__(
        self,
        store: LedgerStore,
        clock: Clock,
        interval: float,
        ttl: float,
        *,
        spared: Callable[[str], bool] = lambda _: False,
        batch: int = 1000,
    ) -> None:
        self._store = store
        self._clock = clock
        self._ttl = ttl
        self._spared = spared
        self._batch = batch
        self._loop = Periodic("reservation sweep", self.sweep, interval, log)
        #: Pending reservations this sweeper has seen, and when (steady clock) it first saw each.
        self._seen: dict[str, float] = {}
        #: Reservations this sweeper released, since start (metrics).
        self.released = 0

    async def sweep(self) -> int:
        """Release every reservation this sweeper has seen pending for the TTL; the number this
        call released."""
        pending = await self._list_pending()
        steady, now = self._clock.steady(), self._clock.time()
        # The new ages are settled before anything is released: a release that fails leaves
        # every hold's age as it was, never restarted.
        self._seen = seen = {
            request_id: self._seen.get(request_id, steady)
            for request_id, _, _, _ in pending
            if not self._spared(request_id)
        }
        released = 0
        for request_id, key_id, account_id, month in pending:
            first = seen.get(request_id)
            if first is None or steady - first < self._ttl:
                continue
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
            del seen[request_id]
            if outcome.applied:
                released += 1
                self.released += 1
                log.warning("released abandoned reservation %s of key %s", request_id, key_id)
        return released

    async def _list_pending(self) -> list[tuple[str, str, int, str]]:
        """Every pending reservation, ``batch`` at a time (keyset paging on the request id)."""
        pending: list[tuple[str, str, int, str]] = []
        after = ""
        while True:
            page = await self._store.pending_reservation_page(after, self._batch)
            pending.extend(page)
            if len(page) < self._batch:
                return pending
            after = page[-1][0]

    def start(self) -> None:
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()
