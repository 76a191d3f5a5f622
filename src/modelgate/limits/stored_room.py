"""Whether an account still has room for a stored Responses answer, asked before anything is spent.

A request that asks to be stored is refused (``stored_state_limit_reached``) when its account's
stored byte count is at ``responses.max_account_bytes``. Reading that count for every request is a
database round trip per request (on PostgreSQL 14 % of a stored Responses request's CPU, gateway
and database together, in ``make bench-ab --store postgresql``), so each instance remembers each
account's count for up to ``responses.room_check_max_age_seconds`` and adds what it stores itself
(kept answers, and conversations created or added to through ``/v1/conversations``):

- a count that says "full" is always read again before the request is refused, so nobody is refused
  on an old count (an account that deleted responses meanwhile is let through at once);
- a count that says "room" may be that old: another instance may have filled the account
  meanwhile. Such a request is answered and its answer is not kept (``x-modelgate-stored: false``),
  as already happens when concurrent requests fill an account; the save itself checks the limit
  exactly (``storage.responses``), so the limit is never passed.

``0`` reads the count for every request.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from modelgate.storage.responses import ResponseStore

#: Accounts remembered at most; past it, the expired counts are dropped (all, if none has expired).
MAX_ACCOUNTS = 10_000


class StoredRoom:
    def __init__(
        self,
        store: ResponseStore,
        max_age: float,
        now: Callable[[], float] = time.monotonic,
        max_accounts: int = MAX_ACCOUNTS,
    ) -> None:
        self._store = store
        self._max_age = max_age
        self._now = now
        self._max_accounts = max_accounts
        #: account id -> (stored bytes, monotonic time of the read)
        self._counts: dict[int, tuple[int, float]] = {}

    async def used(self, account_id: int, *, fresh: bool = False) -> int:
        """The account's stored bytes: read now when ``fresh``, else at most ``max_age`` old."""
        now = self._now()
        if not fresh:
            known = self._counts.get(account_id)
            if known is not None and now - known[1] < self._max_age:
                return known[0]
        used = await self._store.state_bytes(account_id)
        if self._max_age > 0:
            self._remember(account_id, used, now)
        return used

    @property
    def remembered(self) -> int:
        """Accounts whose count is remembered now."""
        return len(self._counts)

    def surely_fits(self, account_id: int, size: int, limit: int) -> bool:
        """Whether ``size`` more bytes fit under ``limit`` by a count remembered now (no read: an
        account not remembered, or remembered too long ago, is not known to have room)."""
        known = self._counts.get(account_id)
        return known is not None and self._now() - known[1] < self._max_age and known[0] + size <= limit

    def kept(self, account_id: int, size: int) -> None:
        """This instance stored ``size`` more bytes for the account."""
        known = self._counts.get(account_id)
        if known is not None:
            self._counts[account_id] = (known[0] + size, known[1])

    def _remember(self, account_id: int, used: int, now: float) -> None:
        if len(self._counts) >= self._max_accounts and account_id not in self._counts:
            live = {a: c for a, c in self._counts.items() if now - c[1] < self._max_age}
            self._counts = live if len(live) < self._max_accounts else {}
        self._counts[account_id] = (used, now)
