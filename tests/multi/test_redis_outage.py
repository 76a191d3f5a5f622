"""Redis goes away mid-run: no 5xx, money exact, rate limits per instance, then shared again.

The outage lasts a dozen rounds (about 5 s of wall time) instead of the 30 s of the issue: what
happens during it is driven by states, not by its length. Every state is reached within the first seconds and then
repeats: the hung phase (SIGSTOP: calls time out, the breaker opens), the dead phase (connection
refused: every probe each second fails at once, the subscription keeps resubscribing), and the
simulated clock moves a whole window per round so each round is a fresh per-instance window. A
longer outage would only repeat those rounds.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

import httpx

from modelgate.clock import month_of
from modelgate.gateway import headers as hdr
from modelgate.limits.redis_tickets import RedisTickets
from tests.multi.conftest import NOW, Cluster, RedisProcess, cluster_of, post_chat, run
from tests.polling import wait_until
from tests.whole_store import whole_store

LIMIT = 30
#: Rounds of traffic while Redis is dead, 0.3 s apart (about 5 s of outage in all).
OUTAGE_ROUNDS = 12


def limiter(cluster: Cluster, index: int) -> RedisTickets:
    tickets = cluster[index].services.tickets
    assert isinstance(tickets, RedisTickets)
    return tickets


class Traffic:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.statuses: Counter[int] = Counter()
        self.charged_by_headers = 0
        self.ok = 0

    def burst(self, secret: str, requests: int) -> int:
        """``requests`` at once, round robin over the instances; how many were admitted."""

        async def go() -> list[httpx.Response]:
            async with httpx.AsyncClient() as client:
                return await asyncio.gather(
                    *(post_chat(client, self.cluster[i % 3], secret, 16) for i in range(requests))
                )

        responses = run(go())
        for response in responses:
            self.statuses[response.status_code] += 1
            if response.status_code == 200:
                self.ok += 1
                self.charged_by_headers += int(response.headers[hdr.CHARGED])
        return sum(1 for r in responses if r.status_code == 200)


def test_redis_outage_degrades_to_per_instance_limits_keeps_money_exact_and_recovers(
    tmp_path: Path, private_redis: RedisProcess
) -> None:
    with cluster_of(tmp_path, private_redis.url) as cluster:
        account = cluster.account("outage", 1_000_000_000)
        key_id, secret = cluster.key(account, "Basic", rpm=LIMIT)
        _, probe = cluster.key(account, "Basic", rpm=1_000_000)
        traffic = Traffic(cluster)

        # Redis up: the window is shared, the cluster admits the limit once.
        assert traffic.burst(secret, 4 * LIMIT) == LIMIT

        # Redis hangs: calls time out, every instance falls back to its own full window.
        cluster.clock.advance(61)
        private_redis.freeze()
        assert traffic.burst(secret, 4 * LIMIT) == 3 * LIMIT  # documented: up to N x the limit
        assert all(limiter(cluster, i).degraded for i in range(3))

        # Redis dead (connection refused) for a while; traffic goes on, a fresh window per round.
        private_redis.kill()
        for _ in range(OUTAGE_ROUNDS):
            cluster.clock.advance(61)
            assert traffic.burst(secret, 4 * LIMIT) == 3 * LIMIT
            time.sleep(0.3)  # wall time for the breakers' probes to come due and fail
        assert all(limiter(cluster, i).fallback_decisions >= OUTAGE_ROUNDS * LIMIT for i in range(3))

        # Redis returns (empty): each instance's breaker lets a probe through within a second.
        private_redis.start()

        def back_on_redis() -> bool:
            traffic.burst(probe, 3)
            return not any(limiter(cluster, i).degraded for i in range(3))

        wait_until(back_on_redis, "the limiters going back to Redis", interval=0.2)
        cluster.clock.advance(61)
        assert traffic.burst(secret, 4 * LIMIT) == LIMIT  # shared and exact again

        # The key-change subscription came back too: a change on instance 0 is heard by the others.
        broadcasts = [b for i in range(3) if (b := cluster[i].services.key_broadcast) is not None]
        assert len(broadcasts) == 3
        before = [b.received for b in broadcasts]
        record = cluster[0].services.keys.get(key_id)
        assert record is not None

        def heard_again() -> bool:
            cluster[0].call(broadcasts[0].publish(record))
            time.sleep(0.1)  # the message's way through Redis to the other instances
            return all(broadcasts[i].received > before[i] for i in (1, 2))

        wait_until(heard_again, "the broadcast resuming", interval=0.1)

        # Never a 5xx; refusals only for the rate limit.
        assert set(traffic.statuses) <= {200, 429}, traffic.statuses
        # Money never depended on Redis: exact.
        for index in range(3):  # the refusals' records, written after their answers
            cluster[index].call(cluster[index].services.settlements.drain())
        server = cluster[1]
        store = whole_store(server.services)
        current = server.call(store.get_account(account.id))
        assert month_of(cluster.clock.time()) == month_of(NOW)  # minutes passed, not a month
        every = server.call(store.usage_records(month_of(NOW), account_id=account.id, limit=100_000))
        # Refusals (429) are in the usage log at 0 µc; the served requests are the rest.
        assert all(u.charged_uc == 0 for u in every if u.status == "refused_429")
        usage = [u for u in every if u.status != "refused_429"]
        assert current is not None and current.reserved_uc == 0
        assert server.call(store.pending_reservations()) == 0
        assert len(usage) == traffic.ok
        assert current.balance_uc == server.call(store.topups_total(account.id)) - sum(
            u.charged_uc for u in usage
        )
        assert traffic.charged_by_headers == sum(u.charged_uc for u in usage)
