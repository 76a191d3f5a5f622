"""The rate limits of accounts, as this process knows them: ``KeyLimits`` by account id.

Admission adds an account's claims (subject ``"a:<id>"``) to every ticket of its keys
(``gateway.limit_tickets``), so it must know the account's limits without a database read per
request. This view holds only the accounts that have a limit set (``AccountStore.limited_accounts``)
and reads them again every ``interval`` seconds (``keys.refresh_interval``, at least
``MIN_INTERVAL``) and at once after a change made through this process. A change made elsewhere
(another instance, a worker, the CLI) applies within one interval. An account without limits costs
a request one dict lookup.
"""

from __future__ import annotations

import logging

from modelgate.limits.key_limits import KeyLimits
from modelgate.periodic import Periodic
from modelgate.storage.base import Account, AccountStore

log = logging.getLogger("modelgate.limits")

#: The view is read again at most this often (a cheap query, but one per process).
MIN_INTERVAL = 1.0


def limits_of(account: Account) -> KeyLimits:
    return KeyLimits(tpm=account.tpm, max_concurrency=account.max_concurrency, rpm=account.rpm)


class AccountLimitsView:
    def __init__(self, accounts: AccountStore | None) -> None:
        self._accounts = accounts
        self._limits: dict[int, KeyLimits] = {}
        self._periodic: Periodic | None = None

    def get(self, account_id: int) -> KeyLimits | None:
        """The account's limits, or None when it has none."""
        return self._limits.get(account_id)

    def __len__(self) -> int:
        return len(self._limits)

    async def refresh(self) -> None:
        if self._accounts is None:
            return
        found = await self._accounts.limited_accounts()
        self._limits = {account.id: limits_of(account) for account in found}

    def changed(self, account: Account) -> None:
        """A change this process made: applied at once, without waiting for the next read."""
        limits = limits_of(account)
        if limits.empty:
            self._limits.pop(account.id, None)
        else:
            self._limits[account.id] = limits

    async def start(self, interval: float) -> None:
        await self.refresh()
        self._periodic = Periodic("account-limits", self.refresh, max(interval, MIN_INTERVAL), log)
        self._periodic.start()

    async def stop(self) -> None:
        if self._periodic is not None:
            await self._periodic.stop()
