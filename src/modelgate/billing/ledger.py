"""The request path's view of money: reserve a hold, then settle or release it exactly once.

``Ledger.reserve`` holds the worst case of a request (input bound at the dearest input rate plus
``max_tokens`` of output) against the key's monthly cap and the account's balance in one atomic
step (``storage.base.LedgerStore.reserve``); when less than the worst case but at least one output
token fits, the hold is smaller and ``Hold.max_tokens`` says how many output tokens it covers.

A ``Hold`` ends exactly once: ``settle`` charges the real cost of the reported usage (never more
than the hold, see the storage contract) and ``release`` frees it with nothing charged; either
writes the request's one usage record. A second call returns the first one's outcome and touches
nothing. Both run on the ``Settlements`` runner, shielded: a request cancelled while its settlement
is in flight (client gone, shutdown) still leaves exactly one usage record.

A settle or release the database does not take (unreachable, restarting, failing) never fails the
request: it is kept in the ``SettleJournal`` and retried until it lands (exactly once: keyed by the
hold's request id). The first attempt gets ``billing.settle_timeout_seconds``: a database that
neither takes nor refuses it by then (a PostgreSQL command or connect timeout is far longer) has
it kept and retried in the background, so a stream's last byte never waits on a stuck database
with nothing on disk. A settle cancelled mid-way (the event loop ending at a forced shutdown) is
journaled synchronously before the cancellation goes on. The caller gets the figures the settlement will have (``_provisional``).
``Ledger.holds`` names the holds this process is still responsible for (in flight, or kept in
the journal): its sweeper never releases them, whatever the clocks say.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol, TypeVar

from modelgate import ir
from modelgate.billing.pricing import affordable_output_tokens, bound_uc, cost_uc
from modelgate.billing.refusal import HoldRefused
from modelgate.billing.settle_journal import SettleJournal
from modelgate.catalogue import Model
from modelgate.clock import Clock, month_of
from modelgate.storage.base import LedgerStore, Refusal, ReserveRequest, Settlement, UsageRecord

T = TypeVar("T")
log = logging.getLogger("modelgate.billing")


class UsageStatus(StrEnum):
    """How a request ended, as its usage record says (docs/billing.md lists them)."""

    OK = "ok"
    #: The stream ended without the upstream's usage report (usage estimated).
    UPSTREAM_INCOMPLETE = "upstream_incomplete"
    #: The upstream broke after the first byte; the client got the format's in-band error.
    UPSTREAM_FAILED_MID_STREAM = "upstream_failed_mid_stream"
    #: The upstream itself sent an in-band error event.
    UPSTREAM_ERROR_IN_BAND = "upstream_error_in_band"
    CLIENT_DISCONNECTED = "client_disconnected"
    #: Cut by a shutdown after its grace (``lifecycle.Drain``).
    SHUTDOWN = "shutdown"
    CANCELLED = "cancelled"
    #: The gateway refused the request after reserving (e.g. not translatable for the upstream).
    REFUSED = "refused"
    GATEWAY_ERROR = "gateway_error"
    #: Released by the sweeper: the request's process died before it settled.
    ABANDONED = "abandoned"
    # No usable reply came: ``upstream_<error kind>`` (errors.ERROR_KINDS).
    UPSTREAM_INVALID_REQUEST = "upstream_invalid_request"
    UPSTREAM_AUTHENTICATION = "upstream_authentication"
    UPSTREAM_BILLING = "upstream_billing"
    UPSTREAM_PERMISSION = "upstream_permission"
    UPSTREAM_NOT_FOUND = "upstream_not_found"
    UPSTREAM_REQUEST_TOO_LARGE = "upstream_request_too_large"
    UPSTREAM_RATE_LIMIT = "upstream_rate_limit"
    UPSTREAM_API_ERROR = "upstream_api_error"
    UPSTREAM_UPSTREAM_ERROR = "upstream_upstream_error"
    UPSTREAM_UNAVAILABLE = "upstream_unavailable"
    UPSTREAM_TIMEOUT = "upstream_timeout"
    UPSTREAM_OVERLOADED = "upstream_overloaded"

    @classmethod
    def upstream(cls, kind: str) -> UsageStatus:
        """The status of a request whose upstream failed with this error kind."""
        try:
            return cls(f"upstream_{kind}")
        except ValueError:
            return cls.UPSTREAM_UPSTREAM_ERROR


class SpendWatch(Protocol):
    """Told every settlement's figures and every refused hold (alerts: ``alerts.monitor``). Must
    return at once and never raise: it runs on the request path."""

    def settled(self, key_id: str, account_id: int, month: str, settlement: Settlement) -> None: ...
    def refused(self, key_id: str, account_id: int, month: str, reason: str) -> None: ...


class Settlements:
    """Runs ledger settlements to completion even when the request that started one is cancelled."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Future[Any]] = set()

    async def run(self, operation: Awaitable[T]) -> T:
        task = asyncio.ensure_future(operation)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return await asyncio.shield(task)

    def start(self, operation: Awaitable[Any]) -> asyncio.Future[Any]:
        """Run ``operation`` without waiting for it; ``drain`` still waits for it."""
        task = asyncio.ensure_future(operation)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def drain(self) -> None:
        """Wait until every settlement started has ended. Waiting is all it does: when the wait
        itself is cancelled (a shutdown's deadline) the settlements go on, shielded as ever."""
        while self._tasks:
            await asyncio.wait(list(self._tasks))


@dataclass(frozen=True, slots=True)
class Purpose:
    """Who holds money and for what: recorded with the hold and in the usage record."""

    request_id: str
    key_id: str
    account_id: int
    endpoint: str
    model: Model
    #: Wall-clock start of the request; its UTC month is the month the hold counts against.
    started: float


class Hold:
    """Money held for one request; ends exactly once with ``settle`` or ``release``."""

    __slots__ = (
        "_clock",
        "_ended",
        "_journal",
        "_live",
        "_runner",
        "_store",
        "_timeout",
        "_watch",
        "balance_after_uc",
        "cap_remaining_after_uc",
        "granted_uc",
        "max_tokens",
        "on_end",
        "purpose",
    )

    def __init__(
        self,
        purpose: Purpose,
        *,
        granted_uc: int,
        max_tokens: int,
        balance_after_uc: int,
        cap_remaining_after_uc: int | None,
        store: LedgerStore,
        runner: Settlements,
        clock: Clock,
        journal: SettleJournal,
        live: set[str],
        settle_timeout: float = math.inf,
        watch: SpendWatch | None = None,
    ) -> None:
        self.purpose = purpose
        self.granted_uc = granted_uc
        #: Output tokens the hold covers (at most what the request asked for).
        self.max_tokens = max_tokens
        self.balance_after_uc = balance_after_uc
        self.cap_remaining_after_uc = cap_remaining_after_uc
        self._store = store
        self._runner = runner
        self._clock = clock
        self._journal = journal
        #: The request ids of this process's holds not ended yet (``Ledger.holds``).
        self._live = live
        live.add(purpose.request_id)
        #: Seconds the first attempt at the database gets before the settle is journaled instead.
        self._timeout = settle_timeout
        self._ended: asyncio.Future[Settlement] | None = None
        self._watch = watch
        #: Called once, as the hold ends, with the tokens the request used (0 when released): the
        #: request's limit ticket is settled with it (``gateway.limit_tickets``).
        self.on_end: Callable[[int], None] | None = None

    async def settle(self, usage: ir.Usage, status: UsageStatus) -> Settlement:
        """Charge what ``usage`` costs (capped by the hold) and free the rest."""
        return await self._end(usage, status, charge=True)

    async def release(self, status: UsageStatus) -> Settlement:
        """Free the hold; nothing is charged."""
        return await self._end(ir.Usage(), status, charge=False)

    async def _end(self, usage: ir.Usage, status: UsageStatus, *, charge: bool) -> Settlement:
        if self._ended is not None:
            return await asyncio.shield(self._ended)
        if self.on_end is not None:
            used = usage.input_tokens + usage.cache_creation_input_tokens + usage.cache_read_input_tokens
            self.on_end(used + usage.output_tokens if charge else 0)
        purpose = self.purpose
        record = UsageRecord(
            request_id=purpose.request_id,
            key_id=purpose.key_id,
            account_id=purpose.account_id,
            endpoint=purpose.endpoint,
            model=purpose.model.id,
            month=month_of(purpose.started),
            status=status.value,
            created_at=purpose.started,
            finished_at=self._clock.time(),
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_creation_tokens=usage.cache_creation_input_tokens,
            cache_read_tokens=usage.cache_read_input_tokens,
            charged_uc=cost_uc(usage, purpose.model.price) if charge else 0,
            cache_write_1h_tokens=min(usage.cache_write_1h_input_tokens, usage.cache_creation_input_tokens),
            web_search_requests=usage.web_search_requests,
        )
        # One task, tracked by the runner (a drain waits for it) and shielded from the caller.
        self._ended = self._runner.start(self._finish(record, charge))
        return await asyncio.shield(self._ended)

    async def _finish(self, record: UsageRecord, charge: bool) -> Settlement:
        write = self._store.settle(record) if charge else self._store.release(record)
        try:
            # asyncio.timeout, not wait_for: no extra task per settle (this runs in its own).
            async with asyncio.timeout(self._timeout if math.isfinite(self._timeout) else None):
                settlement = await write
        except asyncio.CancelledError:
            # Cancelled mid-way (the loop is ending): nothing may be awaited any more, so the
            # settle is journaled synchronously; a retry of one that did commit changes nothing.
            self._journal.keep_now(record, charge=charge)
            raise
        except Exception as exc:  # whatever the database or its driver raised: kept, not lost
            timed_out = isinstance(exc, TimeoutError)
            if timed_out:
                self._journal.timed_out_total += 1
            log.warning(
                "could not write the %s of %s (%s); kept and retried until it lands",
                "settle" if charge else "release",
                record.request_id,
                f"no answer within {self._timeout:g} s" if timed_out else str(exc) or type(exc).__name__,
            )
            await self._journal.keep(record, charge=charge)
            return self._provisional(record.charged_uc if charge else 0)
        else:
            if self._watch is not None:
                self._watch.settled(record.key_id, record.account_id, record.month, settlement)
            return settlement
        finally:
            self._live.discard(record.request_id)

    def _provisional(self, cost_uc: int) -> Settlement:
        """The figures of a settlement kept for later, as the ledger will apply it: the charge
        within the hold, and the hold's unused rest free again (for the response headers)."""
        charged = min(cost_uc, self.granted_uc)
        freed = self.granted_uc - charged
        cap = self.cap_remaining_after_uc
        return Settlement(True, charged, self.balance_after_uc + freed, None if cap is None else cap + freed)


class Ledger:
    def __init__(
        self,
        store: LedgerStore,
        runner: Settlements,
        clock: Clock,
        ttl_seconds: float,
        journal: SettleJournal | None = None,
        settle_timeout: float = math.inf,
    ) -> None:
        self._store = store
        self._runner = runner
        self._clock = clock
        self._ttl = ttl_seconds
        #: ``billing.settle_timeout_seconds``: the first attempt's time at the database.
        self.settle_timeout = settle_timeout
        #: Settles and releases the database did not take, retried until they land.
        self.journal = journal or SettleJournal(store)
        self._live: set[str] = set()
        #: Writes started by ``in_background`` that have not ended.
        self.background_pending = 0
        #: Told each settlement and refused hold (alerts), when set.
        self.watch: SpendWatch | None = None

    def holds(self, request_id: str) -> bool:
        """Whether this process still answers for the hold of ``request_id``: its request is in
        flight, or its settle waits in the journal. The sweeper never releases such a hold."""
        return request_id in self._live or request_id in self.journal

    async def reserve(
        self, purpose: Purpose, *, input_bound: int, max_tokens: int, web_searches: int = 0
    ) -> Hold | HoldRefused:
        """Hold the worst case of ``input_bound`` input and ``max_tokens`` output tokens and
        ``web_searches`` server web searches, or as much as is available down to input, searches
        and one output token; otherwise the refusal, with the figures of the hold it refused."""
        price = purpose.model.price
        amount = bound_uc(input_bound, max_tokens, price, web_searches)
        minimum = bound_uc(input_bound, min(1, max_tokens), price, web_searches)
        outcome = await self._store.reserve(
            ReserveRequest(
                request_id=purpose.request_id,
                key_id=purpose.key_id,
                account_id=purpose.account_id,
                month=month_of(purpose.started),
                amount_uc=amount,
                minimum_uc=minimum,
                now=purpose.started,
                expires_at=purpose.started + self._ttl,
                endpoint=purpose.endpoint,
                model=purpose.model.id,
            )
        )
        if isinstance(outcome, Refusal):
            if self.watch is not None:
                self.watch.refused(
                    purpose.key_id, purpose.account_id, month_of(purpose.started), outcome.reason
                )
            return HoldRefused(
                outcome.reason, outcome.available_uc, amount, minimum, input_bound, max_tokens, web_searches
            )
        return Hold(
            purpose,
            granted_uc=outcome.granted_uc,
            max_tokens=min(
                max_tokens, affordable_output_tokens(outcome.granted_uc, input_bound, price, web_searches)
            ),
            balance_after_uc=outcome.balance_after_uc,
            cap_remaining_after_uc=outcome.cap_remaining_after_uc,
            store=self._store,
            runner=self._runner,
            clock=self._clock,
            journal=self.journal,
            live=self._live,
            settle_timeout=self.settle_timeout,
            watch=self.watch,
        )

    def in_background(self, operation: Coroutine[Any, Any, Any], *, limit: int) -> bool:
        """Run a ledger write nobody waits for (a refusal's record) on the settlements runner,
        so a draining server still finishes it. At most ``limit`` such writes wait at once:
        past it the write is not started (False)."""
        if self.background_pending >= limit:
            operation.close()
            return False
        self.background_pending += 1
        self._runner.start(operation).add_done_callback(self._background_ended)
        return True

    def _background_ended(self, _: asyncio.Future[Any]) -> None:
        self.background_pending -= 1

    async def record_refusal(
        self,
        request_id: str,
        key_id: str,
        account_id: int,
        endpoint: str,
        model: str,
        status: str,
        started: float,
    ) -> bool:
        """Write the usage record of a request refused for its key (nothing held, nothing
        charged), through the same two ledger steps as any request: a hold of 0 µc released at
        once, so the record lands in the usage log with every engine's batching and rules. False
        when the ledger would not even hold 0 µc (an overdrawn account): no record then."""
        month = month_of(started)
        held = await self._store.reserve(
            ReserveRequest(
                request_id=request_id,
                key_id=key_id,
                account_id=account_id,
                month=month,
                amount_uc=0,
                minimum_uc=0,
                now=started,
                expires_at=started + self._ttl,
                endpoint=endpoint,
                model=model,
            )
        )
        if isinstance(held, Refusal):
            return False
        record = UsageRecord(
            request_id=request_id,
            key_id=key_id,
            account_id=account_id,
            endpoint=endpoint,
            model=model,
            month=month,
            status=status,
            created_at=started,
            finished_at=self._clock.time(),
        )
        await self._runner.run(self._store.release(record))
        return True
