"""Noticing crossings: low balances, spend limits at 80 % and 100 %, deployments cooling down,
keys revoked or about to expire. Each alert is claimed in the database first
(``AuditStore.claim_alert``: event, subject and window unique), so it is sent once however many
workers and instances see the crossing.

The request path pays one comparison per settle (``settled``): the figures the settlement
returned against the account's threshold and the next level of the key's cap. Only when one is
crossed does a background check (``alerts.checks``) read the settled figures (holds excluded)
and claim the alert. Windows: ``balance.low`` once per account between two ledger entries (a
top-up re-arms it) and threshold; ``cap.threshold`` once per key, spend window, period, limit and
level; ``upstream.down`` once per deployment per ``upstream_down_window_seconds``;
``key.revoked`` once per revocation; ``key.expiring`` once per expiry date.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from modelgate.alerts.checks import Checks
from modelgate.alerts.config import AlertsConfig, Event
from modelgate.alerts.delivery import Deliverer
from modelgate.alerts.events import Alert
from modelgate.alerts.window_caps import REFUSED_WINDOW, check_windows
from modelgate.clock import Clock
from modelgate.periodic import cancel_and_wait
from modelgate.storage.audit import AuditStore
from modelgate.storage.base import AccountStore, KeyRecord, KeyStore, LedgerStore, Settlement
from modelgate.storage.spend_windows import Window

log = logging.getLogger("modelgate.alerts")
#: Entries kept in a memo of alerts already sent before it is emptied (the database's claims
#: are what decide; the memo only spares them a query).
MEMO_LIMIT = 100_000
#: A revocation older than this when first seen (the start of a process) is not news.
REVOKED_NEWS_SECONDS = 120.0


#: Deployments as the router reports them: (``provider/upstream-model``, seconds cooling, failures).
UpstreamStatus = Callable[[], Iterable[tuple[str, float, int]]]


@dataclass(frozen=True, slots=True)
class AlertRepositories:
    """The repositories the monitor reads: alert claims and the ledger's history (``audit``),
    balances and thresholds (``accounts``), key changes (``keys``), spend per key (``ledger``)."""

    audit: AuditStore
    accounts: AccountStore
    keys: KeyStore
    ledger: LedgerStore


@dataclass(frozen=True, slots=True)
class SpendLimit:
    """A spend window of a key: ``month`` today; other windows (a day, a week) pass theirs."""

    window: str
    period: str
    limit_uc: int


class AlertMonitor:
    def __init__(
        self,
        config: AlertsConfig,
        store: AlertRepositories,
        key_of: Callable[[str], KeyRecord | None],
        clock: Clock,
        deliverer: Deliverer,
        upstreams: UpstreamStatus | None = None,
    ) -> None:
        self.config = config
        self.upstreams = upstreams
        self.store = store
        self.key_of = key_of
        self.clock = clock
        self.deliverer = deliverer
        self.checks = Checks(config.recheck_seconds)
        #: Accounts' own thresholds (others: ``config.low_balance_uc``), refreshed by the scan.
        self.thresholds: dict[int, int] = {}
        #: Accounts' spend caps by window, of those that set one (``alerts.window_caps``), refreshed
        #: by the scan.
        self.account_caps: dict[int, tuple[int | None, ...]] = {}
        #: The cap levels already alerted, per key, window, period and limit.
        self._cap_done: dict[tuple[str, str, str, int], set[int]] = {}
        self._balance_window: dict[int, str] = {}
        self._expiring: dict[str, tuple[float, int]] = {}
        self._key_version = 0
        self._started = clock.time()
        self._task: asyncio.Task[None] | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.config.webhooks)

    # the request path: one comparison ---------------------------------------------------------

    def settled(self, key_id: str, account_id: int, month: str, settlement: Settlement) -> None:
        try:
            self._settled(key_id, account_id, month, settlement)
        except Exception:  # on the request path: an alert never fails a request
            log.warning("alert check after a settlement failed", exc_info=True)

    def _settled(self, key_id: str, account_id: int, month: str, settlement: Settlement) -> None:
        threshold = self.thresholds.get(account_id, self.config.low_balance_uc)
        if threshold is not None and settlement.balance_uc < threshold:
            self.checks.ask(f"account:{account_id}", lambda: self._check_balance(account_id))
        remaining = settlement.cap_remaining_uc
        if remaining is not None:
            key = self.key_of(key_id)
            cap = None if key is None else key.monthly_cap_uc
            if cap:
                self.spend_observed(key_id, account_id, SpendLimit("month", month, cap), cap - remaining)
        key = self.key_of(key_id)
        if account_id in self.account_caps or (key is not None and any(key.window_caps[:3])):
            self.checks.ask(f"key:{key_id}:windows", lambda: self._check_windows(key_id, account_id, None))

    def spend_observed(self, key_id: str, account_id: int, limit: SpendLimit, used_uc: int) -> None:
        """``used_uc`` (spent and held) of a key's spend window; checks when it reaches the next
        level not alerted yet."""
        done = self._cap_done.get((key_id, limit.window, limit.period, limit.limit_uc), set())
        level = next((lv for lv in self.config.cap_levels if lv not in done), None)
        if level is not None and used_uc * 100 >= limit.limit_uc * level:
            self.checks.ask(
                f"key:{key_id}:{limit.window}", lambda: self._check_cap(key_id, account_id, limit, False)
            )

    def refused(self, key_id: str, account_id: int, month: str, reason: str) -> None:
        """A hold refused for the key's cap: its 100 % level is reached (``refused``: true), even
        while part of the cap is only held by requests in flight."""
        try:
            self._refused(key_id, account_id, month, reason)
        except Exception:  # on the request path: an alert never fails a request
            log.warning("alert check after a refusal failed", exc_info=True)

    def _refused(self, key_id: str, account_id: int, month: str, reason: str) -> None:
        # Checked under subjects of their own: an ask for a subject whose check already waits is
        # dropped (that check reads the newer figures), so a settle's check, which knows nothing
        # was refused, would otherwise swallow the refusal's forced 100 % level.
        if reason == "monthly_cap":
            key = self.key_of(key_id)
            cap = None if key is None else key.monthly_cap_uc
            if cap:
                limit = SpendLimit("month", month, cap)
                self.checks.ask(
                    f"key:{key_id}:month:refused", lambda: self._check_cap(key_id, account_id, limit, True)
                )
        window = REFUSED_WINDOW.get(reason)
        if window is not None and (window != "month" or account_id in self.account_caps):
            self.checks.ask(
                f"key:{key_id}:windows:refused", lambda: self._check_windows(key_id, account_id, window)
            )
        elif reason == "balance" and self.thresholds.get(account_id, self.config.low_balance_uc) is not None:
            self.checks.ask(f"account:{account_id}", lambda: self._check_balance(account_id))

    def upstream_down(self, deployment: str, reason: str) -> None:
        """A deployment entered its cooldown (or every credential was refused)."""
        now = self.clock.time()
        window = str(math.floor(now / self.config.upstream_down_window_seconds))
        figures = {"deployment": deployment, "reason": reason}
        self.checks.ask(
            f"deployment:{deployment}",
            lambda: self._claim_and_send("upstream.down", f"deployment:{deployment}", window, figures),
        )

    # checks (background) ------------------------------------------------------------------------

    async def _claim_and_send(self, event: Event, subject: str, window: str, figures: dict[str, Any]) -> bool:
        now = self.clock.time()
        if not await self.store.audit.claim_alert(event, subject, window, now):
            return False
        self.deliverer.send(Alert(event, subject, window, now, figures))
        return True

    async def _check_balance(self, account_id: int) -> None:
        account = await self.store.accounts.get_account(account_id)
        if account is None:
            return
        threshold = (
            account.low_balance_uc if account.low_balance_uc is not None else self.config.low_balance_uc
        )
        if account.low_balance_uc is not None:
            self.thresholds[account_id] = account.low_balance_uc
        if threshold is None or account.balance_uc >= threshold:
            return
        latest = await self.store.audit.ledger_page(account_id, limit=1)
        window = f"ledger:{latest[0].id if latest else 0}:threshold:{threshold}"
        if self._balance_window.get(account_id) == window:
            return
        if len(self._balance_window) > MEMO_LIMIT:
            self._balance_window.clear()
        await self._claim_and_send(
            "balance.low",
            f"account:{account_id}",
            window,
            {
                "account_id": account_id,
                "balance_uc": account.balance_uc,
                "held_uc": account.reserved_uc,
                "available_uc": account.available_uc,
                "threshold_uc": threshold,
            },
        )
        self._balance_window[account_id] = window

    async def _check_cap(self, key_id: str, account_id: int, limit: SpendLimit, exhausted: bool) -> None:
        spent, held = await self.store.ledger.month_spend(key_id, limit.period)
        if len(self._cap_done) > MEMO_LIMIT:  # a memo only: the claims in the database decide
            self._cap_done.clear()
        done = self._cap_done.setdefault((key_id, limit.window, limit.period, limit.limit_uc), set())
        for level in self.config.cap_levels:
            reached = spent * 100 >= limit.limit_uc * level
            if level in done or not (reached or (exhausted and level == 100)):
                continue
            await self._claim_and_send(
                "cap.threshold",
                f"key:{key_id}",
                f"{limit.window}:{limit.period}:limit:{limit.limit_uc}:level:{level}",
                {
                    "key_id": key_id,
                    "account_id": account_id,
                    "window": limit.window,
                    "period": limit.period,
                    "level": level,
                    "limit_uc": limit.limit_uc,
                    "spent_uc": spent,
                    "held_uc": held,
                    "remaining_uc": max(0, limit.limit_uc - spent - held),
                    "refused": not reached,
                },
            )
            done.add(level)

    async def _check_windows(self, key_id: str, account_id: int, refused: Window | None) -> None:
        key = self.key_of(key_id)
        await check_windows(
            self.store.ledger,
            self._claim_and_send,
            key_id,
            account_id,
            key.window_caps[:3] if key is not None else (),
            self.account_caps.get(account_id, (None, None, None, None)),
            self.config.cap_levels,
            self.clock.time(),
            refused,
        )

    # the scan: thresholds, revocations, expiries --------------------------------------------

    def start(self) -> None:
        if self.enabled:
            self._task = asyncio.create_task(self._scan_forever(), name="modelgate-alerts-scan")

    async def _scan_forever(self) -> None:
        while True:
            try:
                await self.scan()
            except Exception:  # the next scan retries
                log.warning("alerts scan failed", exc_info=True)
            await asyncio.sleep(self.config.scan_interval_seconds)

    async def scan(self) -> None:
        await self._scan_upstreams()
        accounts = await self.store.accounts.list_accounts()
        self.thresholds = {a.id: a.low_balance_uc for a in accounts if a.low_balance_uc is not None}
        self.account_caps = {
            a.id: a.window_caps for a in accounts if any(c is not None for c in a.window_caps)
        }
        changed = await self.store.keys.keys_changed_since(self._key_version)
        now = self.clock.time()
        for record in changed:
            self._key_version = max(self._key_version, record.version)
            expires = record.expires_at
            if record.state == "active" and expires is not None:
                self._expiring[record.id] = (float(expires), record.account_id)
            else:
                self._expiring.pop(record.id, None)
            revoked = record.revoked_at
            if (
                record.state == "disabled"
                and revoked is not None
                and revoked >= self._started - REVOKED_NEWS_SECONDS
            ):
                await self._claim_and_send(
                    "key.revoked",
                    f"key:{record.id}",
                    f"revoked:{revoked!r}",
                    {"key_id": record.id, "account_id": record.account_id, "name": record.name},
                )
        ahead = self.config.key_expiring_days * 86400
        for key_id, (expires, account_id) in list(self._expiring.items()):
            if expires - ahead <= now < expires:
                await self._claim_and_send(
                    "key.expiring",
                    f"key:{key_id}",
                    f"expires:{expires!r}",
                    {"key_id": key_id, "account_id": account_id, "expires_in_seconds": round(expires - now)},
                )

    async def _scan_upstreams(self) -> None:
        """A deployment cooling down (failures, a retry-after, or its credentials refused) is
        ``upstream.down``, once per deployment per ``upstream_down_window_seconds`` while it lasts."""
        if self.upstreams is None:
            return
        now = self.clock.time()
        window = f"{self.config.upstream_down_window_seconds:g}s:{math.floor(now / self.config.upstream_down_window_seconds)}"
        seen: set[str] = set()
        for deployment, cooling_for, failures in self.upstreams():
            if cooling_for <= 0 or deployment in seen:
                continue
            seen.add(deployment)
            await self._claim_and_send(
                "upstream.down",
                f"deployment:{deployment}",
                window,
                {
                    "deployment": deployment,
                    "cooling_for_seconds": round(cooling_for, 1),
                    "consecutive_failures": failures,
                },
            )

    async def reconfigure(self, config: AlertsConfig) -> None:
        """A reload's ``[alerts]``: new alerts follow it at once (webhooks, thresholds, levels,
        windows, intervals); deliveries already under way end as they started. Without webhooks
        the scan stops, so no alert is claimed that nobody would receive."""
        self.config = config
        self.deliverer.reconfigure(config)
        self.checks.every = config.recheck_seconds
        self._cap_done.clear()  # a memo of levels: the database's claims still decide
        if not self.enabled:
            await cancel_and_wait(self._task)
            self._task = None
        elif self._task is None:
            self.start()

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        await self.checks.aclose()
        await self.deliverer.aclose()
