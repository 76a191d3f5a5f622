"""Delivering alerts: signed POSTs, retried with exponential backoff, bounded.

At most ``alerts.queue_size`` deliveries are pending in a process at once (waiting, sending or
waiting to retry); a new one beyond that is dropped and counted, never queued without bound. A
delivery is given up after ``alerts.max_attempts`` attempts. Any 2xx is success; anything else,
or no answer within ``alerts.timeout_seconds``, is a failed attempt. Counters are read by the
metrics page (``collect``).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Iterable

import httpx
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from modelgate.alerts.config import AlertsConfig, WebhookConfig
from modelgate.alerts.events import SIGNATURE_HEADER, Alert, body_for, signature

log = logging.getLogger("modelgate.alerts")
#: Deliveries sending at once.
CONCURRENCY = 8


class Deliverer:
    def __init__(self, config: AlertsConfig, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.config = config
        self._client = httpx.AsyncClient(timeout=config.timeout_seconds, transport=transport)
        self._tasks: set[asyncio.Task[None]] = set()
        self._sending = asyncio.Semaphore(CONCURRENCY)
        self.delivered: Counter[str] = Counter()
        self.failed_attempts: Counter[str] = Counter()
        self.given_up: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()

    def reconfigure(self, config: AlertsConfig) -> None:
        """New deliveries follow ``config`` (webhooks, attempts, backoff, timeout); those under way
        keep the webhook they started with."""
        self.config = config
        self._client.timeout = httpx.Timeout(config.timeout_seconds)

    @property
    def pending(self) -> int:
        return len(self._tasks)

    def send(self, alert: Alert) -> None:
        """Deliver ``alert`` to every webhook that takes its event, in the background."""
        for webhook in self.config.webhooks:
            if alert.event not in webhook.events:
                continue
            if len(self._tasks) >= self.config.queue_size:
                self.dropped[alert.event] += 1
                log.warning(
                    "alert %s for %s dropped: %d deliveries pending",
                    alert.event,
                    alert.subject,
                    len(self._tasks),
                )
                continue
            task = asyncio.get_running_loop().create_task(self._deliver(alert, webhook))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _deliver(self, alert: Alert, webhook: WebhookConfig) -> None:
        body = body_for(alert, webhook)
        headers = {
            "content-type": "application/json",
            SIGNATURE_HEADER: signature(body, webhook.secret),
            "user-agent": "modelgate-alerts",
        }
        delay = self.config.backoff_seconds
        for attempt in range(1, self.config.max_attempts + 1):
            try:
                async with self._sending:
                    response = await self._client.post(webhook.url, content=body, headers=headers)
                if 200 <= response.status_code < 300:
                    self.delivered[alert.event] += 1
                    return
                reason = f"HTTP {response.status_code}"
            except httpx.HTTPError as exc:
                reason = type(exc).__name__
            self.failed_attempts[alert.event] += 1
            if attempt == self.config.max_attempts:
                break
            log.info(
                "alert %s attempt %d failed (%s); retrying in %.1f s", alert.event, attempt, reason, delay
            )
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.config.max_backoff_seconds)
        self.given_up[alert.event] += 1
        log.warning(
            "alert %s for %s given up after %d attempts", alert.event, alert.subject, self.config.max_attempts
        )

    def collect(self) -> Iterable[Metric]:
        families = (
            ("modelgate_alert_deliveries", "Alert webhooks delivered (2xx), by event.", self.delivered),
            (
                "modelgate_alert_failures",
                "Alert delivery attempts that failed (non-2xx or no answer), by event.",
                self.failed_attempts,
            ),
            (
                "modelgate_alert_given_up",
                "Alert deliveries given up after alerts.max_attempts, by event.",
                self.given_up,
            ),
            (
                "modelgate_alert_drops",
                "Alerts dropped: alerts.queue_size deliveries were pending, by event.",
                self.dropped,
            ),
        )
        for name, text, counts in families:
            family = CounterMetricFamily(name, text, labels=["event"])
            for event, value in sorted(counts.items()):
                family.add_metric([event], value)
            yield family
        yield GaugeMetricFamily(
            "modelgate_alert_pending", "Alert deliveries pending in this process.", value=len(self._tasks)
        )

    async def aclose(self, grace: float = 2.0) -> None:
        """Give pending deliveries ``grace`` seconds, then cancel the rest."""
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=grace)
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._client.aclose()
