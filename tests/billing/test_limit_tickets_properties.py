"""The ticket buckets (``limits.tickets``) against a plain model of the rules, on random sequences
of admissions, settlements and refunds: a claim is admitted exactly when every bucket has room
for its minimum (requests first), elastic grants are the room left, no rolling 60 s window ever
holds more requests or tokens than the limits, in-flight never exceeds the concurrency limit, a
refund gives the request unit back and a settle keeps it, and ending a ticket twice changes
nothing."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from modelgate.limits.key_limits import Claim, KeyLimits, Resource
from modelgate.limits.tickets import BucketStore, Refused, Ticket

TPM = st.integers(1, 5000)
STEP = st.tuples(
    st.floats(0, 30),  # seconds since the previous step
    st.sampled_from(["take", "settle", "refund", "settle-again"]),
    st.integers(0, 3000),  # worst-case tokens asked
    st.integers(0, 3000),  # tokens really used (settle)
    st.integers(0, 50),  # which live ticket
)


@settings(max_examples=300, deadline=None)
@given(TPM, st.integers(1, 6), st.integers(1, 12), st.lists(STEP, max_size=120))
def test_buckets_follow_the_rules(
    tpm: int, concurrency: int, rpm: int, steps: list[tuple[float, str, int, int, int]]
) -> None:
    store = BucketStore()
    limits = KeyLimits(tpm=tpm, max_concurrency=concurrency, rpm=rpm)
    # The model: (admission time, tokens counted) per ticket, the admission times of the request
    # units kept, and the live tickets.
    counted: dict[str, tuple[float, int]] = {}
    units: dict[str, float] = {}
    live: list[Ticket] = []
    now = 1000.0
    for n, (dt, action, asked, used, pick) in enumerate(steps):
        now += dt
        if action == "take" or not live:
            least = min(asked, 1 + asked // 2)
            in_window = sum(t for at, t in counted.values() if now - 60 < at <= now)
            room = tpm - in_window
            requests = sum(1 for at in units.values() if now - 60 < at <= now)
            outcome = store.admit(limits.claims("k:a", asked, least), now, f"t{n}")
            if requests >= rpm:  # requests are claimed first
                assert isinstance(outcome, Refused) and outcome.resource is Resource.RPM
                later = now + outcome.retry_after
                assert sum(1 for at in units.values() if later - 60 < at <= now) < rpm
                continue
            if room >= least and len(live) >= concurrency:
                assert isinstance(outcome, Refused) and outcome.resource is Resource.CONCURRENCY
                continue
            if room < least:  # tpm is claimed first, so it is the one named
                assert isinstance(outcome, Refused) and outcome.resource is Resource.TPM
                if least > tpm:
                    assert math.isinf(outcome.wait)
                else:  # after the wait the window has room for the minimum
                    later = now + outcome.retry_after
                    assert sum(t for at, t in counted.values() if later - 60 < at <= later) + least <= tpm
                continue
            assert isinstance(outcome, Ticket)
            assert outcome.tokens == min(asked, room)
            counted[outcome.id] = (now, outcome.tokens)
            units[outcome.id] = now
            live.append(outcome)
        else:
            ticket = live[pick % len(live)]
            if action == "refund":
                store.refund(ticket)
                counted[ticket.id] = (counted[ticket.id][0], 0)
                del units[ticket.id]
            else:
                store.settle(ticket, used)
                counted[ticket.id] = (counted[ticket.id][0], min(used, ticket.tokens))
            if action == "settle-again":
                store.settle(ticket, ticket.tokens)  # a second end: nothing changes
            live.remove(ticket)
        assert store.in_flight("k:a") == len(live) <= concurrency
        window = sum(t for at, t in counted.values() if now - 60 < at <= now)
        assert store.tokens_in_window("k:a", now) == window <= tpm
        assert sum(1 for at in units.values() if now - 60 < at <= now) <= rpm


@given(st.lists(st.integers(1, 10), min_size=1, max_size=30), st.integers(1, 20))
def test_a_refused_claim_takes_nothing_from_any_bucket(asks: list[int], tpm: int) -> None:
    """Atomic: the key's tpm bucket has room but its account's concurrency does not (or the
    reverse): neither bucket changes."""
    store = BucketStore()
    key, account = KeyLimits(tpm=tpm), KeyLimits(max_concurrency=1)
    held = store.admit(account.claims("a:1", 1, 1), 0.0, "first")
    assert isinstance(held, Ticket)
    for i, ask in enumerate(asks):
        claims = (*key.claims("k:a", ask, ask), *account.claims("a:1", ask, ask))
        assert isinstance(store.admit(claims, 1.0 + i, f"t{i}"), Refused)
        assert store.tokens_in_window("k:a", 1.0 + i) == 0
        assert store.in_flight("a:1") == 1


def test_claims_of_no_limits_are_empty() -> None:
    assert KeyLimits().claims("k:a", 100, 1) == ()
    assert KeyLimits(rpm=5).claims("k:a", 100, 1) == (Claim("k:a", Resource.RPM, 5, 1, 1),)
    assert KeyLimits(tpm=10).claims("k:a", 100, 1) == (Claim("k:a", Resource.TPM, 10, 100, 1),)
