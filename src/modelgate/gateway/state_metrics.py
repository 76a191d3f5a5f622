"""Metrics read from state the gateway already keeps, when Prometheus scrapes (nothing on the
request path): limits and queues, the drain, the ledger's pending holds and the sweeper, the rate
limiter's fallbacks, the key cache's age, the database connection pool, deployment health, the
upstream connection pools, session affinity and account balances.

The database readings (pending reservations and the oldest one's age, account balances) are
database-wide: every instance reports the same values. They are read once per scrape with a
short timeout; an unreachable database shows as ``modelgate_database_up 0``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable

from prometheus_client.core import Metric

from modelgate import __version__
from modelgate.limits.redis_tickets import RedisTickets
from modelgate.limits.stored_room import MAX_ACCOUNTS
from modelgate.limits.tickets import LocalTickets
from modelgate.services import Services
from modelgate.storage.base import StorageError
from modelgate.telemetry.metrics import counter, gauge, labelled_counter, labelled_gauge

#: Seconds a scrape waits for the database before reporting it down.
DATABASE_TIMEOUT = 2.0


class StateMetrics:
    def __init__(self, services: Services) -> None:
        self._services = services
        self._database_up = True
        self._reservations: tuple[int, float | None] | None = None
        self._balances: list[tuple[int, int]] = []

    async def refresh(self) -> None:
        """Read the database-wide values (before each scrape)."""
        services = self._services
        try:
            async with asyncio.timeout(DATABASE_TIMEOUT):
                self._reservations = await services.ledger_store.reservation_stats()
                if services.settings.metrics.account_balances:
                    accounts = await services.accounts.list_accounts()
                    self._balances = [(a.id, a.available_uc) for a in accounts]
            self._database_up = True
        except (StorageError, TimeoutError):
            self._database_up = False
            self._reservations = None

    def collect(self) -> Iterable[Metric]:
        services = self._services
        yield labelled_gauge(
            "modelgate_build_info", "The running version.", ("version",), [((__version__,), 1)]
        )
        yield gauge(
            "modelgate_in_flight_requests",
            "Model requests in flight on this instance.",
            services.inflight.in_flight,
        )
        yield gauge(
            "modelgate_in_flight_limit", "server.max_in_flight of this instance.", services.inflight.limit
        )
        yield gauge("modelgate_open_streams", "Streams being relayed now.", services.telemetry.open_streams)
        yield gauge(
            "modelgate_large_bodies_in_flight",
            "Large request bodies (above server.offload_body_bytes) held now.",
            services.large_bodies.in_flight,
        )
        edge = services.edge
        yield gauge(
            "modelgate_connection_cap",
            "Open connections this process accepts (server.max_connections, fitted to the open-file limit).",
            edge.connection_cap,
        )
        refusals: dict[tuple[str, ...], float] = {
            ("in_flight",): services.inflight.refused,
            ("large_bodies",): services.large_bodies.refused,
            ("connections",): edge.connections_refused,
            ("head_timeout",): edge.head_timeouts,
            ("body_timeout",): edge.body_timeouts,
            ("malformed_http",): edge.malformed_requests,
        }
        yield labelled_counter(
            "modelgate_protective_refusals",
            "Requests and connections refused by a protective limit or timeout, by reason.",
            ("reason",),
            refusals,
        )
        yield counter("modelgate_offload_jobs", "Jobs handed to the body workers.", services.offload.jobs)
        yield gauge(
            "modelgate_offload_pending", "Body-worker jobs running or waiting now.", services.offload.pending
        )
        yield counter(
            "modelgate_offload_workers_lost",
            "Body workers that ended while they had a job (the job's request got a 503).",
            services.offload.lost,
        )
        yield gauge(
            "modelgate_offload_arena_bytes",
            "Shared memory the running body workers keep between jobs (server.body_arena_bytes each).",
            services.offload.arena_bytes,
        )
        yield gauge(
            "modelgate_draining",
            "1 while the instance drains for shutdown.",
            1 if services.drain.active else 0,
        )
        sweeper = services.sweeper
        yield counter(
            "modelgate_sweeper_releases",
            "Reservations released by this instance's sweeper (their request's process died).",
            sweeper.released if sweeper is not None else 0,
        )
        journal = services.ledger.journal
        yield gauge(
            "modelgate_settles_waiting",
            "Settles and releases the database did not take, kept and retried until they land.",
            journal.waiting,
        )
        yield counter(
            "modelgate_settles_kept",
            "Settles and releases kept for a retry because the database did not take them.",
            journal.kept_total,
        )
        yield counter(
            "modelgate_settles_landed",
            "Kept settles and releases written to the database by a retry.",
            journal.landed_total,
        )
        yield counter(
            "modelgate_settles_timed_out",
            "Settles kept for a retry because the database gave no answer within the settle timeout.",
            journal.timed_out_total,
        )
        yield gauge(
            "modelgate_settle_timeout_seconds",
            "billing.settle_timeout_seconds: a settle's first attempt at the database.",
            services.ledger.settle_timeout,
        )
        limiter = services.tickets
        if isinstance(limiter, RedisTickets):
            yield counter(
                "modelgate_rate_limiter_fallbacks",
                "Rate-limit decisions made in-process because Redis was unreachable.",
                limiter.fallback_decisions,
            )
            yield gauge(
                "modelgate_rate_limiter_degraded",
                "1 while Redis is unreachable.",
                1 if limiter.degraded else 0,
            )
        refreshed = services.keys.refreshed_at
        if refreshed is not None:
            yield gauge(
                "modelgate_key_cache_age_seconds",
                "Seconds since the key cache last read the database.",
                time.monotonic() - refreshed,
            )
        yield gauge("modelgate_key_cache_keys", "Keys held by this instance's key cache.", len(services.keys))
        if isinstance(services.tickets, LocalTickets):
            yield gauge(
                "modelgate_rate_window_keys",
                "Keys with an in-process rate window (those used in about the last minute).",
                len(services.tickets),
            )
        yield counter(
            "modelgate_usage_records_deleted",
            "Usage records deleted past usage.retention_days by this instance.",
            0 if services.usage_sweeper is None else services.usage_sweeper.deleted,
        )
        yield gauge(
            "modelgate_stored_room_accounts",
            f"Accounts whose stored byte count this instance remembers (at most {MAX_ACCOUNTS:,}).",
            services.stored_room.remembered,
        )
        deferred = services.responses
        yield gauge(
            "modelgate_responses_saves_in_flight",
            "Stored Responses answers sent whose write has not ended yet (this instance).",
            deferred.in_flight,
        )
        yield labelled_counter(
            "modelgate_responses_saves_after_answer",
            "Stored Responses writes that ended after their answer was sent, by outcome.",
            ("outcome",),
            {("kept",): deferred.kept, ("refused",): deferred.refused, ("failed",): deferred.failed},
        )
        yield from self._deployments()
        yield from self._upstream_connections()
        yield from self._affinity()
        yield gauge(
            "modelgate_database_up", "1 when the last scrape could read the database.", int(self._database_up)
        )
        pool = services.database.connections()
        if pool is not None:
            yield labelled_gauge(
                "modelgate_database_connections",
                "This instance's open database connections, by state (PostgreSQL).",
                ("state",),
                [(("in_use",), pool.in_use), (("idle",), pool.idle)],
            )
            yield gauge(
                "modelgate_database_connections_limit",
                "database_pool_size: the most database connections this instance opens (PostgreSQL).",
                pool.limit,
            )
        if self._reservations is not None:
            count, oldest = self._reservations
            yield gauge(
                "modelgate_reservations_pending", "Holds not yet settled or released (database-wide).", count
            )
            age = max(0.0, services.clock.time() - oldest) if oldest is not None else 0.0
            yield gauge("modelgate_reservation_oldest_age_seconds", "Age of the oldest pending hold.", age)
        if services.settings.metrics.account_balances and self._database_up:
            yield labelled_gauge(
                "modelgate_account_available_microcredits",
                "Each account's balance minus its holds, in micro-credits.",
                ("account_id",),
                (((str(account_id),), available) for account_id, available in self._balances),
            )

    def _deployments(self) -> Iterable[Metric]:
        seen: dict[tuple[str, str], tuple[float, int]] = {}
        for status in self._services.router.status():
            seen[(status.provider, status.upstream_model)] = (status.cooling_for, status.consecutive_failures)
        labels = ("provider", "deployment")
        yield labelled_gauge(
            "modelgate_deployment_cooling",
            "1 while a deployment cools down after failures (requests avoid it).",
            labels,
            ((key, 1 if cooling > 0 else 0) for key, (cooling, _) in seen.items()),
        )
        yield labelled_gauge(
            "modelgate_deployment_cooldown_seconds",
            "Seconds until a cooling deployment is tried again.",
            labels,
            ((key, cooling) for key, (cooling, _) in seen.items()),
        )
        yield labelled_gauge(
            "modelgate_deployment_consecutive_failures",
            "Failures of a deployment since its last success.",
            labels,
            ((key, failures) for key, (_, failures) in seen.items()),
        )

    def _upstream_connections(self) -> Iterable[Metric]:
        counts = self._services.router.connection_counts()
        yield labelled_gauge(
            "modelgate_upstream_connections",
            "This process's connections to each provider, by state: busy (at most the provider's "
            "max_concurrency) or idle (kept alive for the next request).",
            ("provider", "state"),
            (
                ((name, state), value)
                for name, each in counts.items()
                for state, value in (("busy", each.busy), ("idle", each.idle))
            ),
        )
        yield labelled_gauge(
            "modelgate_upstream_connection_waiting",
            "Requests waiting for room in a provider's connection pool (max_concurrency reached); "
            "each waits at most timeouts.connect.",
            ("provider",),
            (((name,), each.waiting) for name, each in counts.items()),
        )

    def _affinity(self) -> Iterable[Metric]:
        table = self._services.router.affinity
        if table is None:  # routing.affinity = "off"
            return
        counts = table.counts
        yield labelled_counter(
            "modelgate_affinity",
            "Routed requests with a session key: served by their pin (hit), by a new pin (miss), or "
            "by something else than their pin after a failure (repinned).",
            ("result",),
            {("hit",): counts.hit, ("miss",): counts.miss, ("repinned",): counts.repinned},
        )
        yield gauge(
            "modelgate_affinity_sessions",
            "Session pins held by this instance (at most routing.affinity_max_sessions).",
            len(table),
        )
        yield labelled_counter(
            "modelgate_affinity_dropped",
            "Session pins dropped: idle for routing.affinity_ttl_seconds (expired) or the least "
            "recently used beyond routing.affinity_max_sessions (evicted).",
            ("reason",),
            {("expired",): counts.expired, ("evicted",): counts.evicted},
        )


def install(services: Services) -> None:
    """Register the scrape-time readers once per gateway."""
    telemetry = services.telemetry
    if telemetry.state_readers_installed:
        return
    state = StateMetrics(services)
    telemetry.metrics.collect_from(state.collect)
    telemetry.before_scrape.append(state.refresh)
    telemetry.state_readers_installed = True
