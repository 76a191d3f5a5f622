"""The audit log, the ledger, statement figures and alert claims: one contract for SQLite and
PostgreSQL. Audited writes commit their entry with the change (a failed change leaves no
entry); the log refuses UPDATE and DELETE in the database itself."""

from __future__ import annotations

import asyncio
import dataclasses

import asyncpg
import pytest

from modelgate.audit import describe
from modelgate.audit.actor import Actor, acting, draft
from modelgate.storage.audit import AuditFilter
from modelgate.storage.base import Conflict, KeyControls, Store
from tests.storage.conftest import StoreFactory
from tests.storage.test_contract import MONTH, NOW, hold, new_key, usage_of
from tests.whole_store import PostgresStore, SqliteStore

JULY = NOW + 40 * 86400  # 2026-07-07: after MONTH


async def test_audited_writes_commit_their_entries_with_the_change(store: Store) -> None:
    with acting(Actor("tok_test", "req_1", "192.0.2.7")):
        account = await store.create_account(
            "audited", 0, NOW, audit=draft("account.create", describe.account, NOW)
        )
        topped = await store.top_up(
            account.id, 5, "invoice 1042", NOW + 1,
            audit=draft("account.topup", describe.account, NOW + 1, before=account, detail={"amount_uc": 5, "note": "invoice 1042"}),
        )  # fmt: skip
        key = await store.create_key(
            new_key(account), NOW + 2, audit=draft("key.create", describe.key, NOW + 2)
        )
        await store.update_key(
            key.id, KeyControls(rpm=9), NOW + 3, audit=draft("key.update", describe.key, NOW + 3, before=key)
        )
        await store.revoke_key(key.id, NOW + 4, audit=draft("key.revoke", describe.key, NOW + 4, before=key))
        await store.revoke_key(key.id, NOW + 5, audit=draft("key.revoke", describe.key, NOW + 5, before=key))
        await store.create_admin_token(
            "tok_audited",
            b"d" * 32,
            account.id,
            NOW + 6,
            audit=draft("token.create", describe.token, NOW + 6),
        )
        await store.revoke_admin_token(
            "tok_audited", NOW + 7, audit=draft("token.revoke", describe.token, NOW + 7)
        )
        await store.revoke_admin_token(
            "tok_audited", NOW + 8, audit=draft("token.revoke", describe.token, NOW + 8)
        )
        # A change that fails leaves no entry.
        with pytest.raises(Conflict):
            await store.adjust(
                account.id, -10**9, "too much", NOW + 9,
                audit=draft("account.adjust", describe.account, NOW + 9, before=topped),
            )  # fmt: skip
    entries = await store.audit_page(AuditFilter(account_id=account.id), limit=100)
    assert [e.action for e in reversed(entries)] == [
        "account.create", "account.topup", "key.create", "key.update", "key.revoke", "token.create", "token.revoke",
    ]  # fmt: skip
    assert all(e.actor == "tok_test" and e.request_id == "req_1" and e.client == "192.0.2.7" for e in entries)
    assert entries == sorted(entries, key=lambda e: -e.id)
    for entry in entries:
        assert "digest" not in str(entry.before) + str(entry.after)
    topup = entries[-2]
    assert topup.before is not None and topup.after is not None
    assert (topup.before["balance_uc"], topup.after["balance_uc"], topup.after["note"]) == (
        0,
        5,
        "invoice 1042",
    )
    # Filters and keyset pages.
    assert [e.action for e in await store.audit_page(AuditFilter(action="key.update"), limit=10)] == [
        "key.update"
    ]
    assert len(await store.audit_page(AuditFilter(target=f"key:{key.id}"), limit=10)) == 3
    assert await store.audit_page(AuditFilter(account_id=account.id, since=NOW + 7.5), limit=10) == []
    assert len(await store.audit_page(AuditFilter(account_id=account.id, until=NOW + 2), limit=10)) == 2
    older = await store.audit_page(AuditFilter(account_id=account.id), limit=100, before_id=entries[2].id)
    assert older == entries[3:]


async def test_the_log_refuses_update_and_delete(store: Store) -> None:
    await store.create_account("logged", 0, NOW, audit=draft("account.create", describe.account, NOW))
    if isinstance(store, SqliteStore):
        db = store.database.db()
        for statement in ("UPDATE audit_log SET actor = 'x'", "DELETE FROM audit_log"):
            with pytest.raises(Exception, match="append-only"):
                db.execute(statement)
    else:
        assert isinstance(store, PostgresStore)
        connection = await asyncpg.connect(store.url)
        try:
            for statement in (
                "UPDATE audit_log SET actor = 'x'",
                "DELETE FROM audit_log",
                "TRUNCATE audit_log",
            ):
                with pytest.raises(asyncpg.PostgresError, match="append-only"):
                    await connection.execute(statement)
        finally:
            await connection.close()
    assert len(await store.audit_page(AuditFilter(), limit=10)) == 1


async def test_ledger_and_statement_figures_balance(store: Store) -> None:
    account = await store.create_account("stated", 1_000, NOW)
    key = await store.create_key(new_key(account), NOW)
    await store.top_up(account.id, 500, "may", NOW + 1)
    request = hold(key, 300)
    await store.reserve(request)
    await store.settle(usage_of(request, 120))
    await store.adjust(account.id, -7, "fix", NOW + 2)
    await store.top_up(account.id, 40, "july", JULY)
    july = dataclasses.replace(hold(key, 100, now=JULY), month="2026-07")
    await store.reserve(july)
    await store.settle(usage_of(july, 30))
    still_held = dataclasses.replace(hold(key, 11, now=JULY), month="2026-07")
    await store.reserve(still_held)
    entries = await store.ledger_page(account.id, limit=10)
    assert [(e.kind, e.amount_uc, e.note) for e in entries] == [
        ("topup", 40, "july"), ("adjustment", -7, "fix"), ("topup", 500, "may"), ("topup", 1_000, "initial"),
    ]  # fmt: skip
    assert await store.ledger_page(account.id, limit=10, before_id=entries[1].id) == entries[2:]
    may_start, june_start, july_start, aug_start = (
        1_777_593_600.0,
        1_780_272_000.0,
        1_782_864_000.0,
        1_785_542_400.0,
    )
    may = await store.statement_figures(account.id, may_start, june_start, MONTH)
    assert (may.top_ups_before_uc, may.usage_before_uc, may.top_ups_uc, may.usage_uc, may.adjustments_uc, may.requests) == (
        0, 0, 1_500, 120, -7, 1,
    )  # fmt: skip
    july_figures = await store.statement_figures(account.id, july_start, aug_start, "2026-07")
    opening = (
        july_figures.top_ups_before_uc + july_figures.adjustments_before_uc - july_figures.usage_before_uc
    )
    assert opening == 1_500 - 120 - 7
    closing = opening + july_figures.top_ups_uc - july_figures.usage_uc + july_figures.adjustments_uc
    assert closing == july_figures.balance_uc == 1_500 - 120 - 7 + 40 - 30
    assert july_figures.reserved_uc == 11
    # Retention (usage.retention_days) deletes the raw records; the statements stay as they were.
    assert await store.delete_usage_before(JULY + 10, 1_000) == 2
    assert await store.statement_figures(account.id, may_start, june_start, MONTH) == may
    assert await store.statement_figures(account.id, july_start, aug_start, "2026-07") == july_figures


async def test_an_alert_is_claimed_once_across_instances(engine: StoreFactory) -> None:
    store, other = await engine(), await engine()
    claims = await asyncio.gather(
        *(s.claim_alert("cap.threshold", "key:k", "month:2026-05:80", NOW) for s in [store, other] * 20)
    )
    assert claims.count(True) == 1
    assert await store.claim_alert("cap.threshold", "key:k", "month:2026-05:100", NOW) is True
