"""Admission tickets shared by every gateway instance through Redis.

The same buckets as ``limits.tickets`` (requests per minute and tokens per minute over an exact
rolling 60-second window, requests in flight), kept in Redis: one Lua script (``_TAKE``) reads
every bucket a request claims (its key's and its account's) and, only if all fit, takes from all of
them, atomically, so N instances admitting at once cannot overshoot; a second script (``_END``)
settles or refunds a ticket. Times are the ``now`` the gateway passes (its steady clock), never
Redis's, so an injected clock drives the shared buckets exactly as it drives the in-process ones.
The calls of one event-loop turn travel to Redis together (``limits.redis_batch``).

Buckets: ``rpm`` a sorted set of ticket ids scored by admission time (refusals log nothing; an
admission stamped more than ``AHEAD_TOLERANCE`` ahead counts as made now, as in ``limits.rpm``);
``tpm`` the same sorted set, each ticket's tokens in a hash beside it (``:a``) and their sum in a
counter (``:t``) that the trim keeps exact; ``concurrency`` a sorted set of ticket ids scored by the
end of their lease: a slot is freed by its ticket's end, or, when the instance holding it died,
when its lease (``billing.reservation_ttl_seconds``, the hold's own) runs out. All of a ticket's
keys live on one Redis (a standalone server or a primary), as the script needs them together.

Redis is never in the money path, and a dead or slow Redis must not fail or slow requests:

- every call has a short timeout (``timeout``, default 1 s, covering the wait for a pooled
  connection too) and no retries; a refused connection fails at once, a hung Redis costs the
  requests in flight at that moment at most the timeout, once.
- after a failure the limiter stops asking Redis for ``cooldown`` seconds (circuit breaker), then
  lets one request probe it while the others stay local;
- meanwhile each instance admits through its in-process ``BucketStore``, which enforces the full
  limits *per instance*: while Redis is down a cluster of N instances admits up to N x each limit.
  A ticket ends where it was taken.
- An end Redis could not take (the ticket was taken there, then Redis went away) is kept, up to
  ``MAX_PENDING_ENDS``, and sent again once Redis answers: slots come back and tokens are settled
  after an outage, not only when their lease or window runs out.
- When Redis answers again it is used again; admissions made locally during the outage are not
  copied into it, so for one window after recovery the cluster may still exceed the limits (by at
  most what the instances admitted locally), then it is exact again.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from modelgate.limits.key_limits import Claim, Resource, Standing
from modelgate.limits.redis_batch import ScriptBatches
from modelgate.limits.rpm import AHEAD_TOLERANCE, WINDOW_SECONDS, RollingWindowLimiter
from modelgate.limits.tickets import BucketStore, Refused, Ticket

log = logging.getLogger("modelgate.limits")

# KEYS: one bucket per claim. ARGV: now, horizon (now - window), window in ms, ticket id,
# now + AHEAD_TOLERANCE, lease end, lease in ms; then per claim: resource, limit, amount, minimum.
# Times travel as strings and are handed to Redis as the strings they came in: Lua would print
# numbers with 14 significant digits and lose the sub-millisecond part of an epoch time. Scores
# come back as Redis prints them; the waits are computed in Python, exactly as in-process.
_TAKE = """
local n = #KEYS
local grant = -1
local counts = {}
for i = 1, n do
    local at = 4 * i + 4
    local kind = ARGV[at]
    local limit = tonumber(ARGV[at + 1])
    local amount = tonumber(ARGV[at + 2])
    local minimum = tonumber(ARGV[at + 3])
    local key = KEYS[i]
    if kind == 'rpm' then
        redis.call('ZREMRANGEBYSCORE', key, '-inf', ARGV[2])
        local ahead = redis.call('ZRANGEBYSCORE', key, '(' .. ARGV[5], '+inf')
        for _, member in ipairs(ahead) do
            redis.call('ZADD', key, ARGV[1], member)
        end
        local count = redis.call('ZCARD', key)
        if count >= limit then
            local entry = redis.call('ZRANGE', key, count - limit, count - limit, 'WITHSCORES')
            return {0, i, entry[2]}
        end
        counts[i] = count
    elseif kind == 'tpm' then
        local amounts = key .. ':a'
        local gone = redis.call('ZRANGEBYSCORE', key, '-inf', ARGV[2])
        if #gone > 0 then
            local freed = 0
            for _, member in ipairs(gone) do
                freed = freed + tonumber(redis.call('HGET', amounts, member) or '0')
                redis.call('HDEL', amounts, member)
            end
            redis.call('ZREMRANGEBYSCORE', key, '-inf', ARGV[2])
            redis.call('DECRBY', key .. ':t', freed)
        end
        local total = tonumber(redis.call('GET', key .. ':t') or '0')
        local room = limit - total
        if room < minimum then
            if minimum > limit then
                return {0, i, 'inf'}
            end
            local entries = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
            for j = 1, #entries, 2 do
                total = total - tonumber(redis.call('HGET', amounts, entries[j]) or '0')
                if total + minimum <= limit then
                    return {0, i, entries[j + 1]}
                end
            end
            return {0, i, ARGV[1]}
        end
        local g = math.min(amount, room)
        if grant < 0 or g < grant then
            grant = g
        end
        counts[i] = total
    else
        redis.call('ZREMRANGEBYSCORE', key, '-inf', ARGV[1])
        local count = redis.call('ZCARD', key)
        if count + amount > limit then
            return {0, i, ''}
        end
        counts[i] = count
    end
end
if grant < 0 then
    grant = 0
end
local out = {1, grant}
for i = 1, n do
    local at = 4 * i + 4
    local kind = ARGV[at]
    local limit = tonumber(ARGV[at + 1])
    local key = KEYS[i]
    if kind == 'rpm' then
        redis.call('ZADD', key, ARGV[1], ARGV[4])
        redis.call('PEXPIRE', key, ARGV[3])
        local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
        out[#out + 1] = limit - counts[i] - 1
        out[#out + 1] = oldest[2]
    elseif kind == 'tpm' then
        redis.call('ZADD', key, ARGV[1], ARGV[4])
        redis.call('HSET', key .. ':a', ARGV[4], grant)
        local total = redis.call('INCRBY', key .. ':t', grant)
        redis.call('PEXPIRE', key, ARGV[3])
        redis.call('PEXPIRE', key .. ':a', ARGV[3])
        redis.call('PEXPIRE', key .. ':t', ARGV[3])
        local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
        out[#out + 1] = limit - total
        out[#out + 1] = oldest[2]
    else
        redis.call('ZADD', key, ARGV[6], ARGV[4])
        redis.call('PEXPIRE', key, ARGV[7])
        out[#out + 1] = limit - counts[i] - 1
        out[#out + 1] = ''
    end
end
return out
"""

# KEYS: the ticket's buckets. ARGV: ticket id, tokens kept (-1: refund everything), then the
# resource of each key. A settle keeps request units; only a refund takes them back.
_END = """
local id = ARGV[1]
local kept = tonumber(ARGV[2])
for i = 1, #KEYS do
    local kind = ARGV[i + 2]
    local key = KEYS[i]
    if kind == 'tpm' then
        if redis.call('ZSCORE', key, id) then
            local amounts = key .. ':a'
            local old = tonumber(redis.call('HGET', amounts, id) or '0')
            local new = 0
            if kept > 0 then
                new = math.min(kept, old)
            end
            if new ~= old then
                redis.call('HSET', amounts, id, new)
                redis.call('DECRBY', key .. ':t', old - new)
            end
        end
    elseif kind == 'concurrency' or kept < 0 then
        redis.call('ZREM', key, id)
    end
end
return 1
"""
#: Ends kept for sending again after Redis failed them (beyond this the oldest are dropped: their
#: tokens leave with the window, their slots with their lease).
MAX_PENDING_ENDS = 10_000
#: ``kept`` of an end that refunds the ticket.
REFUND = -1
#: Where a Redis ticket's buckets are: (resource, key) per claim.
_Held = tuple[tuple[str, str], ...]


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


class RedisTickets:
    """``TicketLimiter`` on Redis, with this process's own buckets while Redis is away."""

    def __init__(
        self,
        url: str,
        *,
        window: float = WINDOW_SECONDS,
        timeout: float = 1.0,
        cooldown: float = 1.0,
        lease: float = 1800.0,
        prefix: str = "modelgate:",
    ) -> None:
        self._redis = redis_client(url, timeout)
        #: Tickets taken in one loop turn go to Redis as one write (``limits.redis_batch``).
        self._takes = ScriptBatches(self._redis.connection_pool, _TAKE, timeout)
        self._ends = ScriptBatches(self._redis.connection_pool, _END, timeout)
        self._window = window
        self._timeout = timeout
        self._cooldown = cooldown
        self._lease = lease
        self._prefix = prefix
        #: The per-instance fallback.
        self.local = BucketStore(window)
        #: ``seconds_until_out`` for a request log's wait, as the in-process log computes it.
        self._waits = RollingWindowLimiter(window)
        # Circuit breaker on the monotonic clock (the gateway clock may be a test's manual one).
        self._open_until: float | None = None
        self._probing = False
        #: Decisions taken locally because Redis was unreachable (for health and tests).
        self.fallback_decisions = 0
        #: Ends on their way to Redis, and those Redis failed, to be sent again.
        self._sending: set[asyncio.Task[None]] = set()
        self._failed_ends: list[tuple[_Held, str, int]] = []

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
        """Load the scripts once, so the first burst of requests does not each meet NOSCRIPT.

        A Redis that is down now is not an error: requests fall back until it answers."""
        try:
            async with asyncio.timeout(self._timeout):
                await self._redis.script_load(_TAKE)
                await self._redis.script_load(_END)
        except (RedisError, OSError, TimeoutError) as exc:
            self._trip(exc)

    async def take(self, claims: tuple[Claim, ...], now: float, ticket_id: str) -> Ticket | Refused:
        if self._may_ask_redis():
            try:
                outcome = await self._take_shared(claims, now, ticket_id)
            except (RedisError, OSError, TimeoutError) as exc:
                self._trip(exc)
            else:
                self._recovered()
                return outcome
        self.fallback_decisions += 1
        return self.local.admit(claims, now, ticket_id)

    async def _take_shared(self, claims: tuple[Claim, ...], now: float, ticket_id: str) -> Ticket | Refused:
        held = tuple((c.resource.value, f"{self._prefix}{c.resource.value}:{c.subject}") for c in claims)
        args: list[str | int] = [
            repr(now),
            repr(now - self._window),
            math.ceil(self._window * 1000) + 1000,
            ticket_id,
            repr(now + AHEAD_TOLERANCE),
            repr(now + self._lease),
            math.ceil(self._lease * 1000),
        ]
        for claim in claims:
            args += [claim.resource.value, claim.limit, claim.amount, claim.minimum]
        reply = await self._takes.call([key for _, key in held], args)
        if not reply[0]:
            return self._refused(claims[int(reply[1]) - 1], reply[2], now)
        tokens = int(reply[1])
        standing: list[Standing] = []
        for index, claim in enumerate(claims):
            remaining, oldest = reply[2 + 2 * index], reply[3 + 2 * index]
            reset = max(float(oldest) + self._window - now, 0.0) if oldest else 0.0
            taken = tokens if claim.resource is Resource.TPM else 1
            standing.append(
                Standing(claim.resource, claim.subject, claim.limit, int(remaining), reset, taken)
            )
        units: list[tuple[str, float | str]] = [
            (c.subject, ticket_id) for c in claims if c.resource is Resource.RPM
        ]
        holds = any(c.resource is not Resource.RPM for c in claims)
        metered = any(c.resource is Resource.TPM for c in claims)
        return Ticket(
            ticket_id,
            tokens=tokens,
            units=units,
            standing=tuple(standing),
            remote=held,
            holds=holds,
            metered=metered,
        )

    def _refused(self, claim: Claim, raw: bytes | str, now: float) -> Refused:
        text = raw.decode() if isinstance(raw, bytes) else str(raw)
        if claim.resource is Resource.CONCURRENCY:
            return Refused(claim.resource, claim.subject, claim.limit, 1.0)
        if text == "inf":
            return Refused(claim.resource, claim.subject, claim.limit, math.inf)
        entry = float(text)
        if claim.resource is Resource.RPM:
            wait = self._waits.seconds_until_out(entry, now)
        else:
            wait = max(entry + self._window - now + 1e-6, 0.0)
        return Refused(claim.resource, claim.subject, claim.limit, wait)

    def settle(self, ticket: Ticket, used_tokens: int) -> None:
        if ticket.ended:
            return
        if not isinstance(ticket.remote, tuple):  # taken locally (Redis was away)
            self.local.settle(ticket, used_tokens)
            return
        ticket.ended = True
        held = tuple(h for h in ticket.remote if h[0] != Resource.RPM)
        if held:  # a ticket of request units alone: nothing to settle
            self._end(held, ticket.id, max(0, min(used_tokens, ticket.tokens)))

    def refund(self, ticket: Ticket) -> None:
        if ticket.ended:
            return
        if not isinstance(ticket.remote, tuple):
            self.local.refund(ticket)
            return
        ticket.ended = True
        self._end(ticket.remote, ticket.id, REFUND)

    def _end(self, held: _Held, ticket_id: str, kept: int) -> None:
        task = asyncio.get_running_loop().create_task(self._send_end(held, ticket_id, kept))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send_end(self, held: _Held, ticket_id: str, kept: int) -> None:
        try:
            await self._ends.call([key for _, key in held], [ticket_id, kept, *(kind for kind, _ in held)])
        except (RedisError, OSError, TimeoutError) as exc:
            self._trip(exc)
            self._failed_ends.append((held, ticket_id, kept))
            del self._failed_ends[:-MAX_PENDING_ENDS]

    def _trip(self, exc: BaseException) -> None:
        if self._open_until is None:
            log.warning(
                "Redis unreachable (%s); rate limits fall back to each instance's own buckets "
                "(the cluster may admit up to N x each limit) until it answers again",
                str(exc) or type(exc).__name__,
            )
        self._open_until = time.monotonic() + self._cooldown
        self._probing = False

    def _recovered(self) -> None:
        if self._open_until is not None:
            log.warning("Redis answers again; rate limits are shared across instances again")
        self._open_until = None
        self._probing = False
        if self._failed_ends:
            failed, self._failed_ends = self._failed_ends, []
            for held, ticket_id, kept in failed:
                self._end(held, ticket_id, kept)

    async def ping(self) -> None:
        """Raises when Redis does not answer (``/health``); the breaker is left alone."""
        async with asyncio.timeout(self._timeout):
            await self._redis.ping()

    async def ended(self) -> None:
        """Wait for the ends on their way to Redis (each waits at most the timeout)."""
        if self._sending:
            await asyncio.gather(*self._sending, return_exceptions=True)

    async def aclose(self) -> None:
        await self.ended()
        await self._takes.aclose()
        await self._ends.aclose()
        await self._redis.aclose()
