"""Requests per minute over an exact rolling 60-second window (sliding log): the ``rpm`` buckets
of ``limits.tickets.BucketStore`` (in one process, and in the supervisor of ``--workers``).

Each key keeps the admission times of its last ``limit`` requests. A request at ``now`` is
admitted when fewer than ``limit`` admissions lie in ``(now - 60, now]``; otherwise it is refused
with the wait until the oldest of them leaves the window. Refused requests are not logged, so
they consume no units. Memory is O(limit) per key active in the last window: keys are kept in
order of last use, and every admission drops up to ``PRUNE_PER_ADMIT`` least recently used keys
whose whole log has left the window (an idle key's log would refuse nothing), so idle keys cost
nothing however many there are.

Times are the caller's ``clock.steady()``: seconds that never step, so a wall-clock step moves no
window. Times from several processes (``limits.shared_tickets``, ``limits.redis_tickets``) agree only as
well as those processes' clocks did when each started; an admission stamped more than
``AHEAD_TOLERANCE`` ahead of ``now`` (another process's clock is ahead, or was set ahead when it
started) counts as made ``now``, so no disagreement between clocks can lock a key for longer than
one window.
"""

from __future__ import annotations

import bisect
import math
from collections import OrderedDict, deque
from dataclasses import dataclass

WINDOW_SECONDS = 60.0
#: How far ahead of ``now`` an admission's time may be and still count as given (clocks of
#: processes started at different moments differ by their wall clocks' error then).
AHEAD_TOLERANCE = 1.0
#: Idle keys examined (and dropped when their log is out of the window) per admission: more than
#: one, so pruning outpaces the arrival of new keys.
PRUNE_PER_ADMIT = 2


@dataclass(frozen=True, slots=True)
class Decision:
    admitted: bool
    limit: int
    remaining: int
    #: Seconds until the window has room for one more request (0 when it has room now).
    reset_after: float
    #: Identifies the admission for ``refund_now`` (None when refused).
    token: str | float | None = None

    @property
    def retry_after(self) -> int:
        """Whole seconds, rounded up, at least 1: sleeping this long is enough to be admitted."""
        return max(1, math.ceil(self.reset_after))


class RollingWindowLimiter:
    """The requests-per-minute logs of one process: exact for that process. ``refusal`` then
    ``take_now`` (with nothing in between) is ``admit_now`` split in two, so an admission can
    check every bucket it needs before taking from any (``limits.tickets``)."""

    def __init__(self, window: float = WINDOW_SECONDS) -> None:
        self._window = window
        #: Least recently admitted first (``admit_now`` moves a key to the end).
        self._log: OrderedDict[str, deque[float]] = OrderedDict()

    def __len__(self) -> int:
        """Keys holding a log (at most those used in about the last window, see ``_prune``)."""
        return len(self._log)

    def admit_now(self, key_id: str, limit: int, now: float) -> Decision:
        refused = self.refusal(key_id, limit, now)
        if refused is not None:
            return refused
        remaining, reset_after = self.take_now(key_id, limit, now)
        return Decision(True, limit, remaining, reset_after, token=now)

    def refusal(self, key_id: str, limit: int, now: float) -> Decision | None:
        """The refusal of one more request at ``now``, or None when it fits (the log is trimmed
        to the window on the way: that changes no decision)."""
        log = self._log.get(key_id)
        if log is None:
            log = self._log[key_id] = deque()
        else:
            self._log.move_to_end(key_id)
        horizon = now - self._window
        self._prune(horizon)
        while log and log[0] <= horizon:
            log.popleft()
        if log and log[-1] > now + AHEAD_TOLERANCE:
            _restamp_ahead(log, now)
        if len(log) >= limit:
            # Admission needs fewer than `limit` entries in the window, so the entry at
            # len - limit must leave it (after a lowered limit, older ones go first).
            return Decision(False, limit, 0, self.seconds_until_out(log[len(log) - limit], now))
        return None

    def take_now(self, key_id: str, limit: int, now: float) -> tuple[int, float]:
        """Log one request at ``now``; only right after ``refusal`` said it fits. Returns what
        is left in the window and the seconds until its oldest entry leaves."""
        log = self._log.get(key_id)
        if log is None:
            log = self._log[key_id] = deque()
        if log and now < log[-1]:
            # Times from several processes (``limits.shared_tickets``) may arrive slightly out
            # of order: keep the log sorted, so trimming from the left stays exact.
            bisect.insort(log, now)
        else:
            log.append(now)
        return limit - len(log), max(log[0] + self._window - now, 0.0)

    def refund_now(self, key_id: str, decision: Decision) -> None:
        log = self._log.get(key_id)
        if log is not None and decision.admitted and isinstance(decision.token, float):
            _remove_recent(log, decision.token)

    def _prune(self, horizon: float) -> None:
        """Drop up to ``PRUNE_PER_ADMIT`` least recently used keys whose log is out of the window
        (the newest key, being admitted, always has a newer entry or none yet)."""
        for _ in range(PRUNE_PER_ADMIT):
            if len(self._log) < 2:
                return
            oldest_key, oldest = next(iter(self._log.items()))
            if oldest and oldest[-1] > horizon:
                return
            del self._log[oldest_key]

    def seconds_until_out(self, entry: float, now: float) -> float:
        """Seconds until ``entry`` leaves the window, such that sleeping ``ceil`` of it is enough
        by the very float arithmetic ``admit_now`` will use then: ``entry + window - now`` can
        round down by an ulp onto a whole number, and a ``retry-after`` one ulp short would be
        refused again. Then the wait is nudged just above that whole number."""
        wait = entry + self._window - now
        while entry > (now + max(1, math.ceil(wait))) - self._window:
            wait = math.nextafter(float(max(1, math.ceil(wait))), math.inf)
        return max(wait, 0.0)


def _restamp_ahead(log: deque[float], now: float) -> None:
    """Admissions stamped beyond ``now + AHEAD_TOLERANCE`` count as made ``now`` (the log stays
    sorted: they are its newest entries)."""
    ahead = 0
    while log and log[-1] > now + AHEAD_TOLERANCE:
        log.pop()
        ahead += 1
    insert_at = bisect.bisect_right(log, now)
    for _ in range(ahead):
        log.insert(insert_at, now)


def _remove_recent(log: deque[float], token: float) -> None:
    """Remove one entry equal to ``token``, searching from the newest end: a refund follows its
    admission by moments, so the entry is found after a few steps, not a scan of the window.
    Equal timestamps are interchangeable: removing any one of them is the same window."""
    if log and log[-1] == token:
        log.pop()
        return
    for offset, entry in enumerate(reversed(log)):
        if entry == token:
            del log[len(log) - 1 - offset]
            return
        if entry < token:  # sorted: it is not there (already out of the window)
            return
