"""Upstream health bookkeeping: per-deployment cooldown and the router's retry budget.

Both are in-process and per router instance (each gateway instance learns upstream health on
its own; sharing it through Redis would add a dependency to the hot path for little gain).
All times come from the injected ``clock`` (monotonic seconds), so tests can drive them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass


@dataclass(slots=True)
class _State:
    consecutive_failures: int = 0
    #: Clock time before which the deployment is skipped (when anything else could serve).
    cooling_until: float = 0.0
    #: A request is probing the deployment after its cooldown; others keep skipping it until
    #: that probe reports, so a dead upstream sees one request per cooldown, not a stampede.
    probing: bool = False


class DeploymentHealth:
    """Circuit breaker per deployment: closed -> (N consecutive failures) -> open for
    ``cooldown`` seconds -> half-open (one probe) -> closed on success, open again on failure.

    ``hold`` on a failure (an upstream ``retry-after``) opens the breaker for that long even
    below the failure threshold.
    """

    def __init__(self, *, cooldown: float, failures_to_cooldown: int, clock: Callable[[], float]) -> None:
        self._cooldown = cooldown
        self._threshold = failures_to_cooldown
        self._clock = clock
        self._states: dict[Hashable, _State] = {}

    def available(self, key: Hashable) -> bool:
        state = self._states.get(key)
        if state is None:
            return True
        if self._clock() < state.cooling_until:
            return False
        return not (state.probing and state.consecutive_failures >= self._threshold)

    def available_at(self, key: Hashable) -> float:
        """When the deployment stops cooling (in the past if it is not cooling)."""
        state = self._states.get(key)
        return state.cooling_until if state is not None else -math.inf

    def begin(self, key: Hashable) -> None:
        """An attempt is about to use ``key``; it becomes the probe if the breaker is half-open."""
        state = self._states.get(key)
        if state is not None and state.consecutive_failures >= self._threshold:
            state.probing = True

    def succeeded(self, key: Hashable) -> None:
        self._states.pop(key, None)

    def failed(self, key: Hashable, *, hold: float | None = None) -> None:
        state = self._states.setdefault(key, _State())
        state.consecutive_failures += 1
        state.probing = False
        now = self._clock()
        if state.consecutive_failures >= self._threshold:
            state.cooling_until = max(state.cooling_until, now + self._cooldown)
        if hold is not None and hold > 0:
            state.cooling_until = max(state.cooling_until, now + hold)

    def abandoned(self, key: Hashable) -> None:
        """The attempt ended without a verdict (cancelled): let another request probe."""
        state = self._states.get(key)
        if state is not None:
            state.probing = False

    def consecutive_failures(self, key: Hashable) -> int:
        state = self._states.get(key)
        return state.consecutive_failures if state is not None else 0


class RetryBudget:
    """Finagle-style retry budget (a token bucket whose deposits expire).

    Each first attempt deposits ``ratio`` tokens; each retry withdraws one. Deposits and
    withdrawals are counted in one-second slots over a sliding ``window``; a constant reserve of
    ``min_per_second * window`` tokens lets low-traffic routes retry at all. Invariant: over any
    window, retries <= ratio * first attempts + reserve (up to slot granularity).
    """

    def __init__(
        self, *, ratio: float, min_per_second: float, window: float, clock: Callable[[], float]
    ) -> None:
        self._ratio = ratio
        self._reserve = min_per_second * window
        self._slots = max(1, math.ceil(window))
        self._clock = clock
        # Ring of [second, deposits, withdrawals]; a slot is reset when its second is reused.
        self._ring: list[list[int]] = [[-1, 0, 0] for _ in range(self._slots)]

    def _slot(self) -> list[int]:
        second = math.floor(self._clock())
        slot = self._ring[second % self._slots]
        if slot[0] != second:
            slot[0], slot[1], slot[2] = second, 0, 0
        return slot

    def _totals(self) -> tuple[int, int]:
        oldest = math.floor(self._clock()) - self._slots + 1
        deposits = withdrawals = 0
        for second, dep, wd in self._ring:
            if second >= oldest:
                deposits += dep
                withdrawals += wd
        return deposits, withdrawals

    def deposit(self) -> None:
        self._slot()[1] += 1

    def try_withdraw(self) -> bool:
        deposits, withdrawals = self._totals()
        if self._ratio * deposits + self._reserve - withdrawals < 1.0:
            return False
        self._slot()[2] += 1
        return True

    def balance(self) -> float:
        deposits, withdrawals = self._totals()
        return self._ratio * deposits + self._reserve - withdrawals
