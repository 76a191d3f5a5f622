"""The in-process rate window keeps logs only for keys used in about the last window, and a refund
removes exactly the refunded admission."""

from __future__ import annotations

from modelgate.limits.rpm import PRUNE_PER_ADMIT, WINDOW_SECONDS, RollingWindowLimiter


def test_idle_keys_are_dropped_once_their_window_has_passed() -> None:
    limiter = RollingWindowLimiter()
    for n in range(5_000):
        assert limiter.admit_now(f"key-{n}", 10, 0.0).admitted
    assert len(limiter) == 5_000
    later = WINDOW_SECONDS + 1.0
    # One busy key keeps being admitted: each admission drops idle keys as it goes.
    for n in range(5_000 // PRUNE_PER_ADMIT + 1):
        limiter.admit_now("busy", 1_000_000, later + n * 1e-6)
    assert len(limiter) == 1


def test_a_key_inside_its_window_is_kept_and_still_limited() -> None:
    limiter = RollingWindowLimiter()
    assert limiter.admit_now("quiet", 1, 0.0).admitted
    for n in range(100):
        limiter.admit_now(f"other-{n}", 10, 30.0)
    refused = limiter.admit_now("quiet", 1, 31.0)
    assert not refused.admitted and refused.reset_after == WINDOW_SECONDS - 31.0


def test_refund_removes_one_admission_from_the_middle_of_the_window() -> None:
    limiter = RollingWindowLimiter()
    decisions = [limiter.admit_now("k", 5, float(t)) for t in range(5)]
    assert not limiter.admit_now("k", 5, 5.0).admitted
    limiter.refund_now("k", decisions[2])
    assert limiter.admit_now("k", 5, 5.0).admitted
    assert not limiter.admit_now("k", 5, 5.0).admitted
    # The oldest entry (t=0) is still there: room again only once it leaves the window.
    assert limiter.admit_now("k", 5, WINDOW_SECONDS + 0.5).admitted


def test_refund_of_an_admission_already_out_of_the_window_changes_nothing() -> None:
    limiter = RollingWindowLimiter()
    old = limiter.admit_now("k", 2, 0.0)
    limiter.admit_now("k", 2, WINDOW_SECONDS + 1.0)
    limiter.refund_now("k", old)
    assert limiter.admit_now("k", 2, WINDOW_SECONDS + 1.0).admitted
    assert not limiter.admit_now("k", 2, WINDOW_SECONDS + 1.0).admitted
