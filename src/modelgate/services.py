"""Everything the request path uses, built once by the app factory and handed down.

No module-level mutable state: tests build as many independent gateways as they like.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from modelgate.alerts.delivery import Deliverer
from modelgate.alerts.monitor import AlertMonitor, AlertRepositories
from modelgate.auth import KeyView
from modelgate.billing.ledger import Ledger, Settlements
from modelgate.billing.settle_journal import SettleJournal
from modelgate.billing.sweeper import Sweeper
from modelgate.broadcast import KeyChangeBroadcast
from modelgate.catalogue import Catalogue
from modelgate.clock import Clock, SystemClock
from modelgate.config import ConfigError, Settings
from modelgate.keys import Digester
from modelgate.lifecycle import Drain
from modelgate.limits.account_view import AccountLimitsView
from modelgate.limits.edge import EdgeStats
from modelgate.limits.inflight import InFlightLimiter
from modelgate.limits.redis_tickets import RedisTickets
from modelgate.limits.stored_room import StoredRoom
from modelgate.limits.tickets import LocalTickets, TicketLimiter
from modelgate.liveconfig.live import LiveRouting
from modelgate.liveconfig.routing import RoutingBuilder
from modelgate.liveconfig.routing import deployments_of as deployments_of
from modelgate.liveconfig.routing import served_catalogue as served_catalogue
from modelgate.liveconfig.sealing import Sealer
from modelgate.offload import Offload, sweep_stale
from modelgate.retention import StateSweeper, UsageSweeper
from modelgate.secret_file import load_secret
from modelgate.storage import open_store
from modelgate.storage.audit import AuditStore
from modelgate.storage.base import AccountStore, AdminTokenStore, KeyStore, LedgerStore, UsageStore
from modelgate.storage.deferred_responses import DeferredResponses
from modelgate.storage.people import PeopleStore
from modelgate.storage.reports import UsageReports
from modelgate.storage.repositories import Database
from modelgate.storage.upstream_store import upstream_store
from modelgate.telemetry import Telemetry
from modelgate.telemetry.metrics import Metrics
from modelgate.telemetry.tracing import Tracing, TracingUnavailable
from modelgate.upstream.router import Router

log = logging.getLogger("modelgate")
T = TypeVar("T")


def build_telemetry(settings: Settings) -> Telemetry:
    otel = settings.otel
    tracing = None
    if otel.endpoint:
        try:
            tracing = Tracing(
                otel.endpoint,
                service_name=otel.service_name,
                sample_ratio=otel.sample_ratio,
                headers=otel.headers,
            )
        except TracingUnavailable as exc:
            raise ConfigError(str(exc)) from exc
    metrics = Metrics(per_key=settings.metrics.per_key)
    return Telemetry(metrics, tracing, request_log=settings.request_log)


@dataclass
class Services:
    settings: Settings
    clock: Clock
    catalogue: Catalogue
    #: Each consumer takes only the narrow repository below that it uses.
    #: The database itself: migrations, health, the connection pool.
    database: Database
    accounts: AccountStore
    #: API key records (``keys`` is the authentication view built on them).
    key_records: KeyStore
    tokens: AdminTokenStore
    #: People who sign in (OpenID Connect), their sessions, account members and invitations.
    people: PeopleStore
    #: Holds, settlements and their figures (``ledger`` is the billing logic built on them).
    ledger_store: LedgerStore
    usage: UsageStore
    reports: UsageReports
    #: Stored responses; a kept answer's write may still be in flight (``save_after``), and every
    #: call waits for its account's writes first.
    responses: DeferredResponses
    #: The audit log, the ledger's history and statements (``storage.audit``).
    audit: AuditStore
    keys: KeyView
    digester: Digester
    router: Router
    ledger: Ledger
    settlements: Settlements
    offload: Offload
    #: Accounts' stored byte counts, as recent as ``responses.room_check_max_age_seconds``.
    stored_room: StoredRoom
    #: Every rate limit of keys (``limits.tickets``): requests and tokens per minute, requests in
    #: flight; over the worker link with ``server.workers`` above 1, in Redis with ``redis_url``.
    tickets: TicketLimiter = field(default_factory=LocalTickets)
    inflight: InFlightLimiter = field(default_factory=lambda: InFlightLimiter(2048))
    #: Large bodies (above ``server.offload_body_bytes``) held in memory at once.
    large_bodies: InFlightLimiter = field(default_factory=lambda: InFlightLimiter(8))
    #: Graceful shutdown state (``modelgate.lifecycle``), set by the server on SIGTERM.
    drain: Drain = field(default_factory=Drain)
    #: Refusals made by the HTTP connection layer (``server.protocol``).
    edge: EdgeStats = field(default_factory=EdgeStats)
    #: Releases reservations abandoned by crashed requests (billing.sweeper); runs from ``start``.
    sweeper: Sweeper | None = None
    #: Deletes stored responses and conversations past ``responses.ttl_days`` (``retention``).
    state_sweeper: StateSweeper | None = None
    #: Deletes raw usage records past ``usage.retention_days`` (when set); runs from ``start``.
    usage_sweeper: UsageSweeper | None = None
    #: With ``redis_url``: key changes made here are announced to the other instances, and
    #: theirs refresh this instance's key view (docs/scale-out.md).
    key_broadcast: KeyChangeBroadcast | None = None
    #: Metrics, the request log and traces (``modelgate.telemetry``).
    telemetry: Telemetry = field(default_factory=Telemetry)
    #: This process's index among the workers of ``modelgate serve --workers N`` (None: one process).
    worker: int | None = None
    #: Providers, deployments, aliases and prices changed through the admin API, applied live
    #: (``modelgate.liveconfig``); set by ``build``.
    live: LiveRouting | None = None
    #: Alert webhooks (``[alerts]``): None when no webhook is configured (nothing on the request path).
    alerts: AlertMonitor | None = None
    #: Accounts' rate limits, claimed with every ticket of their keys (``limits.account_view``).
    account_limits: AccountLimitsView = field(default_factory=lambda: AccountLimitsView(None))

    @classmethod
    def build(
        cls, settings: Settings, *, clock: Clock | None = None, env: Mapping[str, str] | None = None
    ) -> Services:
        env = os.environ if env is None else env
        server = settings.server
        offload = Offload(
            server.body_workers,
            server.body_worker_niceness,
            server.body_arena_bytes,
            idle=server.body_worker_priority == "idle",
        )
        builder = RoutingBuilder(offload)
        catalogue, router, prints = builder.build(settings, env)
        store = open_store(
            settings.resolved_database_url,
            pool_size=settings.database_pool_size,
            batch_wait=settings.database_batch_wait_seconds,
        )
        secret = load_secret(settings)
        digester = Digester(secret)
        clock = clock or SystemClock()
        settlements = Settlements()
        telemetry = build_telemetry(settings)
        store.ledger.observe_ledger(telemetry.metrics)
        services = cls(
            settings=settings,
            clock=clock,
            catalogue=catalogue,
            database=store.database,
            accounts=store.accounts,
            key_records=store.keys,
            tokens=store.tokens,
            people=store.people,
            ledger_store=store.ledger,
            usage=store.usage,
            reports=store.reports,
            responses=(
                responses := DeferredResponses(store.responses, settings.responses.keep_batch_seconds)
            ),
            audit=store.audit,
            keys=KeyView(store.keys, digester),
            digester=digester,
            router=router,
            ledger=Ledger(
                store.ledger,
                settlements,
                clock,
                settings.billing.reservation_ttl_seconds,
                SettleJournal(
                    store.ledger,
                    settings.billing.settle_journal_dir or settings.data_dir / "settle-journal",
                ),
                settle_timeout=settings.billing.settle_timeout_seconds,
            ),
            settlements=settlements,
            offload=offload,
            stored_room=StoredRoom(responses, settings.responses.room_check_max_age_seconds),
            inflight=InFlightLimiter(settings.server.max_in_flight),
            large_bodies=InFlightLimiter(settings.server.max_large_bodies),
            # Redis (several instances): shared rate-limit buckets, falling back to the
            # in-process buckets per instance while Redis is unreachable; key-change broadcast.
            tickets=RedisTickets(
                settings.redis_url,
                lease=settings.billing.reservation_ttl_seconds,
                timeout=settings.redis_timeout_seconds,
            )
            if settings.redis_url
            else LocalTickets(),
            key_broadcast=KeyChangeBroadcast(settings.redis_url) if settings.redis_url else None,
            telemetry=telemetry,
            account_limits=AccountLimitsView(store.accounts),
        )
        services.live = LiveRouting(
            services,
            upstream_store(store.database),
            Sealer(secret),
            builder,
            interval=settings.admin.upstreams_refresh_seconds,
            env=env,
        )
        services.live.installed_at_start(router, prints)
        return services

    def build_alerts(self) -> None:
        """The alert monitor, when ``[[alerts.webhooks]]`` are configured (made on the loop)."""
        if self.settings.alerts.webhooks and self.alerts is None:
            self.alerts = AlertMonitor(
                self.settings.alerts,
                AlertRepositories(self.audit, self.accounts, self.key_records, self.ledger_store),
                self.keys.get,
                self.clock,
                Deliverer(self.settings.alerts),
                # Read through self.router at each scan: a reload installs a new router.
                upstreams=lambda: (
                    (f"{s.provider}/{s.upstream_model}", s.cooling_for, s.consecutive_failures)
                    for s in self.router.status()
                ),
            )

    def start_alerts(self) -> None:
        """Build, wire and start the alert monitor when ``[[alerts.webhooks]]`` are configured."""
        self.build_alerts()
        if self.alerts is not None:
            self.ledger.watch = self.alerts
            self.telemetry.metrics.collect_from(self.alerts.deliverer.collect)
            self.alerts.start()

    async def reload_alerts(self) -> None:
        """``[alerts]`` changed by a reload (SIGHUP): the monitor follows the running section; it is
        built on the first webhook, and keeps its delivery counters and pending deliveries after."""
        if self.alerts is None:
            self.start_alerts()
            return
        await self.alerts.reconfigure(self.settings.alerts)
        self.ledger.watch = self.alerts if self.alerts.enabled else None

    async def start(self) -> None:
        await self.database.migrate()
        if self.live is not None:
            await self.live.start()
        await self.keys.start(self.settings.keys.refresh_interval)
        if isinstance(self.tickets, RedisTickets):
            await self.tickets.start()
        await self.account_limits.start(self.settings.keys.refresh_interval)
        if self.key_broadcast is not None:
            self.keys.on_local_change = self.key_broadcast.publish_soon
            self.key_broadcast.start(self.keys.refresh)
        await self.ledger.journal.replay()
        if stale := await asyncio.to_thread(sweep_stale):
            log.warning("removed %d body file(s) left in shared memory by a process that died mid-job", stale)
        billing = self.settings.billing
        self.sweeper = Sweeper(
            self.ledger_store,
            self.clock,
            billing.sweep_interval_seconds,
            billing.reservation_ttl_seconds,
            spared=self.ledger.holds,
        )
        self.sweeper.start()
        self.start_alerts()
        responses = self.settings.responses
        if responses.store == "on":
            self.state_sweeper = StateSweeper(self.responses, self.clock, responses.sweep_interval_seconds)
            self.state_sweeper.start()
        usage = self.settings.usage
        if usage.retention_days > 0:
            self.usage_sweeper = UsageSweeper(
                self.usage,
                self.clock,
                usage.retention_days,
                usage.retention_interval_seconds,
                usage.retention_batch,
            )
            self.usage_sweeper.start()

    async def stop(self) -> None:
        if self.usage_sweeper is not None:
            await self.usage_sweeper.stop()
        if self.sweeper is not None:
            await self.sweeper.stop()
        if self.state_sweeper is not None:
            await self.state_sweeper.stop()
        await self.keys.stop()
        await self.settlements.drain()
        await self.responses.drain()  # answers sent whose stored response is still being written
        if self.alerts is not None:
            self.ledger.watch = None
            await self.alerts.stop()
        await self.ledger.journal.aclose()
        if self.live is not None:
            await self.live.stop()
        await self.router.aclose()
        if self.key_broadcast is not None:
            self.keys.on_local_change = None
            await self.key_broadcast.stop()
        await self.account_limits.stop()
        if isinstance(self.tickets, RedisTickets):
            await self.tickets.aclose()
        await self.offload.stop()
        await self.database.close()
        self.telemetry.shutdown()
