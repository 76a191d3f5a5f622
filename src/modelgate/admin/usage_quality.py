"""``GET /usage/quality``: error rate and latency per UTC day, read from the usage log.

Every request that reached a key's usage log counts: served ones (``ok``), those that failed
(``upstream_*``, ``gateway_error``, ``client_disconnected``, ...) and those the gateway refused for
the key (``refused_402``, ``refused_404``, ``refused_429``; see ``gateway.refusals``). Per day:
``requests``, ``errors`` (every status but ``ok``), ``refused`` (the ``refused_*`` part of them),
``error_rate`` (errors / requests) and the latency (``finished_at - created_at``, whole request
including a stream's last byte) of the served requests: ``p50_ms``, ``p95_ms``, ``max_ms`` (null on
a day without one). The same filters as the usage log (key, model, endpoint, status, date range;
no range: every record). At most ``admin.csv_max_rows`` records are read; more is a 400 that
asks for a narrower filter, as the CSV export does.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from modelgate.admin.auth import Principal
from modelgate.admin.context import AdminContext
from modelgate.admin.http import bad_request, json_response
from modelgate.admin.usage import CSV_BATCH, UsageEndpoints
from modelgate.storage.base import UsageRecord
from modelgate.storage.reports import UsageCursor

REFUSED_PREFIX = "refused_"


@dataclass(slots=True)
class _Day:
    requests: int = 0
    errors: int = 0
    refused: int = 0
    latencies_ms: list[float] = field(default_factory=list)

    def add(self, record: UsageRecord) -> None:
        self.requests += 1
        if record.status == "ok":
            self.latencies_ms.append(max(0.0, (record.finished_at - record.created_at) * 1000))
            return
        self.errors += 1
        if record.status.startswith(REFUSED_PREFIX):
            self.refused += 1

    def view(self, day: str) -> dict[str, Any]:
        ordered = sorted(self.latencies_ms)
        return {
            "day": day,
            "requests": self.requests,
            "errors": self.errors,
            "refused": self.refused,
            "error_rate": round(self.errors / self.requests, 4) if self.requests else 0.0,
            "p50_ms": _percentile(ordered, 0.50),
            "p95_ms": _percentile(ordered, 0.95),
            "max_ms": round(ordered[-1], 1) if ordered else None,
        }


def _percentile(ordered: list[float], share: float) -> float | None:
    """Nearest-rank percentile (a figure that was really seen), to 0.1 ms."""
    if not ordered:
        return None
    return round(ordered[max(0, math.ceil(share * len(ordered)) - 1)], 1)


class QualityEndpoints:
    def __init__(self, context: AdminContext, usage: UsageEndpoints) -> None:
        self.context = context
        self.usage = usage

    async def daily(self, request: Request, principal: Principal) -> Response:
        where = await self.usage.filter_of(request, principal)
        store = self.context.reports
        limit = self.context.settings.admin.csv_max_rows
        total = await store.usage_count(where)
        if total > limit:
            raise bad_request(
                f"{total} records match; the error and latency view reads at most {limit} "
                "(admin.csv_max_rows): narrow the filter"
            )
        days: dict[str, _Day] = defaultdict(_Day)
        after: UsageCursor | None = None
        while True:
            page = await store.usage_page(where, limit=CSV_BATCH, after=after)
            for record in page.records:
                days[datetime.fromtimestamp(record.created_at, UTC).strftime("%Y-%m-%d")].add(record)
            if page.next is None:
                break
            after = page.next
        data = [days[day].view(day) for day in sorted(days)]
        overall = _Day()
        for day in days.values():
            overall.requests += day.requests
            overall.errors += day.errors
            overall.refused += day.refused
            overall.latencies_ms.extend(day.latencies_ms)
        return json_response({"data": data, "total": overall.view("all")})
