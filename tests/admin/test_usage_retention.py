"""``usage.retention_days`` seen through the admin API: once old records are deleted, the month's
summary still counts them (rollups), while the usage log, its total and its CSV show only the records
that remain."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import httpx

from modelgate.clock import month_of
from modelgate.storage import rollups
from tests.gateway_server import running_gateway

DAY = 86_400.0


def write_records(db: Path, key_id: str, account_id: int, starts: list[float]) -> None:
    with sqlite3.connect(db, timeout=30) as conn:
        conn.executemany(
            "INSERT INTO usage_records (request_id, key_id, account_id, endpoint, model, month, status, "
            "created_at, finished_at, input_tokens, output_tokens, charged_uc) "
            "VALUES (?, ?, ?, 'chat', 'aria-haiku-4.5', ?, 'ok', ?, ?, 10, 5, 100)",
            [(f"req_ret{i}", key_id, account_id, month_of(at), at, at + 1) for i, at in enumerate(starts)],
        )
        # Records written by hand reach the rollups by a rebuild (only the ledger's batches add to them).
        for statement in rollups.rebuild_statements("strftime('%Y-%m-%d', created_at, 'unixepoch')"):
            conn.execute(statement)


def test_retention_deletes_old_records_from_the_log_and_the_summary_keeps_them(tmp_path: Path) -> None:
    with running_gateway(tmp_path, usage={"retention_days": 7}) as gateway:
        account = gateway.account("retained", 10)
        key = gateway.key(account, "Basic")
        now = time.time()
        old = [now - 20 * DAY - n for n in range(5)]
        recent = [now - 60 - n for n in range(3)]
        write_records(tmp_path / "modelgate.db", key.record.id, account.id, old + recent)
        sweeper = gateway.services.usage_sweeper
        assert sweeper is not None and gateway.call(sweeper.sweep()) == 5

        token = gateway.call(gateway.management.create_admin_token(None))
        with httpx.Client(base_url=gateway.base_url + "/admin/api", timeout=10) as client:
            client.headers["authorization"] = f"Bearer {token}"
            log = client.get("/usage/records", params={"account_id": account.id}).json()
            assert {r["request_id"] for r in log["data"]} == {"req_ret5", "req_ret6", "req_ret7"}
            assert log["total"] == 3
            csv_rows = client.get("/usage/records.csv", params={"account_id": account.id}).text.splitlines()
            assert len(csv_rows) == 1 + 3
            months = {month_of(at) for at in old + recent}
            counted = sum(
                client.get("/usage", params={"account_id": account.id, "month": m}).json()["summary"][
                    "requests"
                ]
                for m in months
            )
            assert counted == 8
