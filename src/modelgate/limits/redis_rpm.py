"""Per-key requests per minute shared by every gateway instance through Redis.

The same exact rolling 60-second window as ``limits.rpm`` (admitted when fewer than ``limit``
admissions lie in ``(now - 60, now]``; refused with the wait until the entry at ``len - limit``
leaves the window; refusals log nothing), kept in one sorted set per key: members are admissions,
scores their times. Times are the ``now`` the gateway passes (its steady clock), never Redis's, so
an injected clock drives the shared window exactly as it drives the in-process one. One Lua script
trims, counts and admits atomically, so N instances admitting at once cannot overshoot. The
admissions of one event-loop turn travel to Redis together (``limits.redis_batch``).

Redis is never in the money path, and a dead or slow Redis must not fail or slow requests:

- every call has a short timeout (``timeout``, default 1 s, covering the wait for a pooled
  connection too) and no retries; a refused connection fails at once, a hung Redis costs the
  requests in flight at that moment at most the timeout, once. (Not much shorter: under a burst
  on a busy host, waiting for the event loop and a pooled connection counts against it, and a
  healthy Redis taken for a dead one would loosen the limits for nothing.)
- after a failure the limiter stops asking Redis for ``cooldown`` seconds (circuit breaker), then
  lets one request probe it while the others stay local;
- meanwhile each instance admits through its in-process ``RollingWindowLimiter``, which enforces
  the full limit *per instance*: while Redis is down a cluster of N instances admits up to N × the
  limit per window. Admissions made through Redis are recorded in the local log too, so each
  instance's local window already holds its own recent admissions when an outage begins.
- When Redis answers again it is used again; admissions made locally during the outage are not
  copied into it, so for one window after recovery the cluster may still exceed the limit (by at
  most what the instances admitted locally), then it is exact again.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from modelgate.limits.redis_batch import ScriptBatches
from modelgate.limits.rpm import AHEAD_TOLERANCE, WINDOW_SECONDS, Decision, RollingWindowLimiter

log = logging.getLogger("modelgate.limits")

# KEYS[1]: the key's log. ARGV: now, horizon (now - window), window, limit, member, and
# now + AHEAD_TOLERANCE (admissions stamped beyond it count as made now: ``limits.rpm``).
# Times travel as strings and are handed to Redis as the strings they came in: Lua would print
# numbers with 14 significant digits and lose the sub-millisecond part of an epoch time.
_ADMIT = """
local now = tonumber(ARGV[1])
local window = tonumber(ARGV[3])
local limit = tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[2])
local ahead = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. ARGV[6], '+inf')
for _, member in ipairs(ahead) do
    redis.call('ZADD', KEYS[1], ARGV[1], member)
end
local count = redis.call('ZCARD', KEYS[1])
if count >= limit then
    local entry = redis.call('ZRANGE', KEYS[1], count - limit, count - limit, 'WITHSCORES')
    return {0, 0, entry[2]}
end
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[5])
redis.call('PEXPIRE', KEYS[1], math.ceil(window * 1000) + 1000)
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {1, limit - count - 1, oldest[2]}
"""
# The script returns scores as Redis prints them (full double precision), never arithmetic done
# in Lua: tostring() keeps 14 significant digits, and a retry-after computed from a rounded wait
# can come out one second short. The wait is computed here exactly as limits/rpm.py does.


#: Connections per instance; a request waits for a free one at most the call's timeout.
MAX_CONNECTIONS = 16


def redis_client(url: str, timeout: float | None) -> aioredis.Redis:
    """A client that fails fast: short connect/read timeouts, no retries. Its pool blocks (up to
    the timeout) when all connections are busy instead of failing at once, so a burst of requests
    on a healthy Redis is not mistaken for an outage."""
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=MAX_CONNECTIONS,
        timeout=timeout,
        socket_timeout=timeout,
        socket_connect_timeout=timeout if timeout is not None else 1.0,
        retry=Retry(NoBackoff(), 0),
    )
    return aioredis.Redis.from_pool(pool)


class RedisRateLimiter:
    def __init__(
        self,
        url: str,
        *,
        window: float = WINDOW_SECONDS,
        timeout: float = 1.0,
        cooldown: float = 1.0,
        prefix: str = "modelgate:rpm:",
    ) -> None:
        self._redis = redis_client(url, timeout)
        #: Admissions of one loop turn go to Redis as one write (``limits.redis_batch``).
        self._admissions = ScriptBatches(self._redis.connection_pool, _ADMIT, timeout)
        self._window = window
        self._timeout = timeout
        self._cooldown = cooldown
        self._prefix = prefix
        #: The per-instance fallback; also mirrors this instance's admissions through Redis.
        self.local = RollingWindowLimiter(window)
        # Circuit breaker on the monotonic clock (the gateway clock may be a test's manual one).
        self._open_until: float | None = None
        self._probing = False
        #: Decisions taken locally because Redis was unreachable (for health and tests).
        self.fallback_decisions = 0

    @property
    def degraded(self) -> bool:
        """True while Redis is considered down and admissions are per instance."""
        return self._open_until is not None

    def _may_ask_redis(self) -> bool:
        if self._open_until is None:
            return True
        if self._probing or time.monotonic() < self._open_until:
            return False
        self._probing = True  # half-open: this request probes, the others stay local
        return True

    async def start(self) -> None:
        """Load the script once, so the first burst of requests does not each meet NOSCRIPT.

        A Redis that is down now is not an error: requests fall back until it answers."""
        try:
            async with asyncio.timeout(self._timeout):
                await self._redis.script_load(_ADMIT)
        except (RedisError, OSError, TimeoutError) as exc:
            self._trip(exc)

    async def admit(self, key_id: str, limit: int, now: float) -> Decision:
        if self._may_ask_redis():
            try:
                decision = await self._admit_shared(key_id, limit, now)
            except (RedisError, OSError, TimeoutError) as exc:
                self._trip(exc)
            else:
                self._recovered()
                if decision.admitted:
                    # The local shadow window (used while Redis is down) records the admission
                    # under the same timestamp, so a refund finds it again.
                    self.local.admit_now(key_id, limit, now)
                return decision
        self.fallback_decisions += 1
        return self.local.admit_now(key_id, limit, now)

    async def _admit_shared(self, key_id: str, limit: int, now: float) -> Decision:
        member = f"{now!r}:{secrets.token_hex(6)}"
        args: list[str | int] = [
            repr(now),
            repr(now - self._window),
            repr(self._window),
            limit,
            member,
            repr(now + AHEAD_TOLERANCE),
        ]
        admitted, remaining, score = await self._admissions.call([self._prefix + key_id], args)
        entry = float(score)
        if not admitted:
            return Decision(False, limit, 0, self.local.seconds_until_out(entry, now))
        return Decision(True, limit, int(remaining), max(entry + self._window - now, 0.0), token=member)

    async def refund(self, key_id: str, decision: Decision) -> None:
        if not decision.admitted:
            return
        self.local.refund_now(key_id, Decision(True, decision.limit, 0, 0.0, token=_score_of(decision.token)))
        if isinstance(decision.token, str):
            try:
                async with asyncio.timeout(self._timeout):
                    await self._redis.zrem(self._prefix + key_id, decision.token)
            except (RedisError, OSError, TimeoutError) as exc:  # the unit ages out within the window
                log.warning("could not refund a rate-limit unit: %s", str(exc) or type(exc).__name__)

    def _trip(self, exc: BaseException) -> None:
        if self._open_until is None:
            log.warning(
                "Redis unreachable (%s); rate limits fall back to each instance's own window "
                "(the cluster may admit up to N x the limit) until it answers again",
                str(exc) or type(exc).__name__,
            )
        self._open_until = time.monotonic() + self._cooldown
        self._probing = False

    def _recovered(self) -> None:
        if self._open_until is not None:
            log.warning("Redis answers again; rate limits are shared across instances again")
        self._open_until = None
        self._probing = False

    async def ping(self) -> None:
        """Raises when Redis does not answer (``/health``); the breaker is left alone."""
        async with asyncio.timeout(self._timeout):
            await self._redis.ping()

    async def aclose(self) -> None:
        await self._admissions.aclose()
        await self._redis.aclose()


def _score_of(token: str | float | None) -> float | None:
    """The admission time inside a Redis member (``"<now>:<random>"``) or a local token."""
    if isinstance(token, str):
        return float(token.partition(":")[0])
    return token
