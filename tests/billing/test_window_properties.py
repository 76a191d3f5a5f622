"""The spend windows as a state machine against the real SqliteStore and PostgresStore: after any
sequence of reserves on two keys (one with 5 h and day caps, one without), settles (also
replayed), releases, sweeps, clock steps across hours, midnights and Mondays and cap changes on the
account's week, every window's spent + held equals an independent model's and never exceeds its
cap, and every hold ends exactly once."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from modelgate.clock import month_of
from modelgate.storage.base import (
    AccountCaps,
    NewKey,
    Refusal,
    Reservation,
    ReserveRequest,
    Store,
    UsageRecord,
)
from modelgate.storage.spend_windows import Window, account_subject, first_counted, key_subject, period_start
from tests.storage.engines import create_database, database_url, drop_database
from tests.whole_store import SqliteStore, open_store

T = TypeVar("T")
#: Sunday 2026-03-01 20:00 UTC: a midnight and a Monday a few steps away.
START = datetime(2026, 3, 1, 20, 0, tzinfo=UTC).timestamp()
CAPS: dict[Window, int] = {"5h": 30_000, "day": 50_000}
KEYS = ("key_windows", "key_plain")


class Windows(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="windows-"))
        self.loop = asyncio.new_event_loop()
        self.store = self.open_store()
        self.now = START
        self.run(self.store.migrate())
        self.account = self.run(self.store.create_account("acct", 10_000_000, START)).id
        self.week_cap: int | None = 80_000
        self.run(self.store.set_account_caps(self.account, AccountCaps(cap_week_uc=self.week_cap)))
        for key_id in KEYS:
            windowed = key_id == "key_windows"
            self.run(
                self.store.create_key(
                    NewKey(
                        id=key_id, account_id=self.account, name=key_id, group="Basic", rpm=60,
                        allowed_models=None, monthly_cap_uc=None, digest=os.urandom(32), prefix="sk-cs4-ab",
                        last4="abcd", cap_5h_uc=CAPS["5h"] if windowed else None,
                        cap_day_uc=CAPS["day"] if windowed else None,
                    ),
                    START,
                )
            )  # fmt: skip
        #: request id -> (key, made at, held); ended: request id -> (key, made at, charged).
        self.pending: dict[str, tuple[str, float, int]] = {}
        self.ended: dict[str, tuple[str, float, int]] = {}
        #: The holds made while the account had a week cap (only those count in its week).
        self.in_week: set[str] = set()
        #: An operator lowered the week's cap below what it counted (allowed; the bound is theirs).
        self.week_lowered = False
        self.counter = 0

    def open_store(self) -> Store:
        return SqliteStore(self.dir / "db.sqlite")

    def close_store(self) -> None:
        """Engine-specific cleanup after the store is closed."""

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        self.run(self.store.close())
        self.close_store()
        self.loop.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # the model ----------------------------------------------------------------------------------

    def counted(self, window: Window, keys: tuple[str, ...], at: float) -> int:
        """Held + charged by ``keys``' holds made in the rows the window counts at ``at`` (for the
        account's week, only holds made while it had a cap)."""
        first, last = first_counted(window, at), period_start(window, at)
        entries = list(self.pending.items()) + list(self.ended.items())
        return sum(
            a
            for rid, (k, made, a) in entries
            if k in keys
            and first <= period_start(window, made) <= last
            and (window != "week" or rid in self.in_week)
        )

    def free(self, key: str) -> int | None:
        """What the windows leave for a hold of ``key`` now (None: no window cap)."""
        lefts = []
        if key == "key_windows":
            lefts += [cap - self.counted(w, (key,), self.now) for w, cap in CAPS.items()]
        if self.week_cap is not None:
            lefts.append(self.week_cap - self.counted("week", KEYS, self.now))
        return min(lefts) if lefts else None

    # steps --------------------------------------------------------------------------------------

    @rule(key=st.sampled_from(KEYS), amount=st.integers(1, 20_000), floor=st.integers(1, 20_000))
    def reserve(self, key: str, amount: int, floor: int) -> None:
        self.counter += 1
        rid = f"req_{self.counter}"
        minimum = min(floor, amount)
        free = self.free(key)
        request = ReserveRequest(
            rid, key, self.account, month_of(self.now), amount, minimum, self.now, self.now + 10**9
        )
        outcome = self.run(self.store.reserve(request))
        if free is None or free >= minimum:
            assert isinstance(outcome, Reservation), (free, outcome)
            assert outcome.granted_uc == (amount if free is None else min(amount, free))
            self.pending[rid] = (key, self.now, outcome.granted_uc)
            if self.week_cap is not None:
                self.in_week.add(rid)
        else:
            assert isinstance(outcome, Refusal) and outcome.reason in ("cap_5h", "cap_day", "cap_week")

    def _usage(self, rid: str, charged: int) -> UsageRecord:
        key, made, _ = self.pending.get(rid) or self.ended[rid]
        return UsageRecord(rid, key, self.account, "messages", "aria-haiku-4.5", month_of(made), "ok", made,
                           self.now, charged_uc=charged)  # fmt: skip

    @precondition(lambda self: self.pending)
    @rule(data=st.data(), replay=st.booleans())
    def settle(self, data: st.DataObject, replay: bool) -> None:
        rid = data.draw(st.sampled_from(sorted(self.pending)))
        held = self.pending[rid][2]
        charge = data.draw(st.integers(0, held + 5_000))
        settled = self.run(self.store.settle(self._usage(rid, charge)))
        # Under a window cap never beyond the hold; otherwise as far as the (ample) balance goes.
        windowed = self.pending[rid][0] == "key_windows" or rid in self.in_week
        assert settled.applied and settled.charged_uc == (min(charge, held) if windowed else charge)
        key, made, _ = self.pending.pop(rid)
        self.ended[rid] = (key, made, settled.charged_uc)
        if replay:
            assert not self.run(self.store.settle(self._usage(rid, charge))).applied
            assert not self.run(self.store.release(self._usage(rid, 0))).applied

    @precondition(lambda self: self.pending)
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        rid = data.draw(st.sampled_from(sorted(self.pending)))
        assert self.run(self.store.release(self._usage(rid, 0))).applied
        key, made, _ = self.pending.pop(rid)
        self.ended[rid] = (key, made, 0)

    @rule(seconds=st.sampled_from([30.0, 299.0, 301.0, 3600.0, 4 * 3600.0, 5 * 3600.0, 86400.0]))
    def advance(self, seconds: float) -> None:
        self.now += seconds

    @rule(cap=st.one_of(st.none(), st.integers(0, 150_000)))
    def change_week_cap(self, cap: int | None) -> None:
        """An operator's change: lowering a cap below what is counted refuses further holds (it
        does not undo spend), so from then on the week's bound is not the ledger's to keep."""
        self.run(
            self.store.set_account_caps(self.account, AccountCaps(cap_week_uc=-1 if cap is None else cap))
        )
        if cap is not None and cap < self.counted("week", KEYS, self.now):
            self.week_lowered = True
        self.week_cap = cap

    # invariants ---------------------------------------------------------------------------------

    @invariant()
    def windows_match_the_model_and_stay_within_their_caps(self) -> None:
        subject = key_subject("key_windows")
        for window, cap in CAPS.items():
            use = self.run(self.store.window_use(subject, window, self.now))
            counted = self.counted(window, ("key_windows",), self.now)
            assert use.spent_uc + use.held_uc == counted <= cap
        if self.week_cap is not None:
            use = self.run(self.store.window_use(account_subject(self.account), "week", self.now))
            assert use.spent_uc + use.held_uc == self.counted("week", KEYS, self.now)
            if not self.week_lowered:
                assert use.spent_uc + use.held_uc <= self.week_cap

    @invariant()
    def every_hold_ends_once(self) -> None:
        account = self.run(self.store.get_account(self.account))
        assert account is not None and account.reserved_uc == sum(a for _, _, a in self.pending.values())
        assert self.run(self.store.pending_reservations()) == len(self.pending)
        assert account.balance_uc == 10_000_000 - sum(a for _, _, a in self.ended.values())


Windows.TestCase.settings = settings(max_examples=15, stateful_step_count=30, deadline=None)
TestWindows = Windows.TestCase


class PostgresWindows(Windows):
    """The same machine against the PostgreSQL engine, one fresh database per example."""

    def open_store(self) -> Store:
        self.url = self.run(create_database("windows"))
        return open_store(self.url)

    def close_store(self) -> None:
        self.run(drop_database(self.url))


def test_window_state_machine_on_postgresql() -> None:
    database_url()  # skipped (failed under CI) without a test PostgreSQL
    run_state_machine_as_test(
        PostgresWindows, settings=settings(max_examples=6, stateful_step_count=25, deadline=None)
    )
