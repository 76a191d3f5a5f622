"""``LedgerStore`` on PostgreSQL: reserves, settles and releases group-committed
(``storage.postgres_ledger``), and the reservation figures."""

from __future__ import annotations

from modelgate.storage.base import LedgerObserver
from modelgate.storage.postgres_database import PostgresRepository
from modelgate.storage.records import Refusal, Reservation, ReserveRequest, Settlement, UsageRecord
from modelgate.storage.spend_windows import Window, WindowUse, first_counted, period_start


class PostgresLedger(PostgresRepository):
    async def reserve(self, request: ReserveRequest) -> Reservation | Refusal:
        return await self.database.ledger_batches.reserve(request)

    async def settle(self, usage: UsageRecord) -> Settlement:
        return await self.database.ledger_batches.finish(usage, charge=True)

    async def release(self, usage: UsageRecord) -> Settlement:
        return await self.database.ledger_batches.finish(usage, charge=False)

    async def expired_reservations(self, now: float, limit: int = 100) -> list[tuple[str, str, int, str]]:
        async with self._conn() as conn:
            rows = await conn.fetch(
                "SELECT request_id, key_id, account_id, month FROM reservations "
                "WHERE expires_at < $1 ORDER BY expires_at LIMIT $2",
                now,
                limit,
            )
        return [(r[0], r[1], r[2], r[3]) for r in rows]

    async def pending_reservation_page(self, after: str, limit: int) -> list[tuple[str, str, int, str]]:
        async with self._conn() as conn:
            rows = await conn.fetch(
                "SELECT request_id, key_id, account_id, month FROM reservations "
                "WHERE request_id > $1 ORDER BY request_id LIMIT $2",
                after,
                limit,
            )
        return [(r[0], r[1], r[2], r[3]) for r in rows]

    async def month_spend(self, key_id: str, month: str) -> tuple[int, int]:
        async with self._conn() as conn:
            row = await conn.fetchrow(
                "SELECT spent_uc, reserved_uc FROM key_month_spend WHERE key_id = $1 AND month = $2",
                key_id,
                month,
            )
        return (int(row[0]), int(row[1])) if row else (0, 0)

    async def window_use(self, subject: str, window: Window, now: float) -> WindowUse:
        row = None
        async with self._conn() as conn:
            row = await conn.fetchrow(
                "SELECT COALESCE(SUM(spent_uc), 0), COALESCE(SUM(reserved_uc), 0), "
                "MIN(CASE WHEN spent_uc + reserved_uc > 0 THEN start END) FROM spend_windows "
                "WHERE subject = $1 AND win = $2 AND start BETWEEN $3 AND $4",
                subject,
                window,
                first_counted(window, now),
                period_start(window, now),
            )
        assert row is not None  # an aggregate always answers one row
        return WindowUse.of(window, now, int(row[0]), int(row[1]), row[2])

    async def pending_reservations(self) -> int:
        async with self._conn() as conn:
            return int(await conn.fetchval("SELECT COUNT(*) FROM reservations"))

    async def reservation_stats(self) -> tuple[int, float | None]:
        async with self._conn() as conn:
            row = await conn.fetchrow("SELECT COUNT(*), MIN(created_at) FROM reservations")
        return int(row[0]), None if row[1] is None else float(row[1])

    def observe_ledger(self, observer: LedgerObserver | None) -> None:
        self.database.ledger_batches.observer = observer
        self.database.saves.observer = observer
