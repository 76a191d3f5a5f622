"""Key changes (revocation, rotation, new limits) announced to every gateway instance via Redis.

The database stays the authority: a message only says "key K changed at version V", and a
listener answers it by refreshing its key view from the database. So a lost, late or duplicated
message costs at most a refresh, and the view's own polling (every ``keys.refresh_interval``,
default 0.25 s, plus a full reload every 30 s) still honours every change within a second when
Redis is down. The broadcast makes a change made on one instance (admin API, dashboard) visible on
the others as soon as it commits.

Publishing is fire-and-forget after the write committed: a Redis failure is logged, never
surfaced to the operator's request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Awaitable, Callable

import orjson
from redis.exceptions import RedisError

from modelgate.limits.redis_tickets import redis_client
from modelgate.periodic import cancel_and_wait
from modelgate.storage.base import KeyRecord

log = logging.getLogger("modelgate.broadcast")
CHANNEL = "modelgate:key-changes"
#: Wait before resubscribing after the subscription broke (Redis restarting, network).
RESUBSCRIBE_SECONDS = 1.0


class KeyChangeBroadcast:
    def __init__(self, url: str, *, channel: str = CHANNEL, timeout: float = 1.0) -> None:
        self._publisher = redis_client(url, timeout)
        # The subscriber waits for messages indefinitely; only connecting has a deadline.
        self._subscriber = redis_client(url, None)
        self._channel = channel
        self._timeout = timeout
        self.instance = secrets.token_hex(6)
        self._pending: set[asyncio.Task[bool]] = set()
        self._task: asyncio.Task[None] | None = None
        #: Messages heard (for tests and health).
        self.received = 0

    async def publish(self, record: KeyRecord) -> bool:
        """Announce a committed change; False (logged) when Redis could not take it."""
        payload = orjson.dumps({"key_id": record.id, "version": record.version, "from": self.instance})
        try:
            async with asyncio.timeout(self._timeout):
                await self._publisher.publish(self._channel, payload)
        except (RedisError, OSError, TimeoutError) as exc:
            log.warning(
                "could not broadcast the change of key %s (%s); polling will carry it", record.id, exc
            )
            return False
        return True

    def publish_soon(self, record: KeyRecord) -> None:
        """``publish`` without waiting: for synchronous callers such as ``KeyView.apply``."""
        task = asyncio.get_running_loop().create_task(self.publish(record))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    def start(self, on_change: Callable[[], Awaitable[None]]) -> None:
        """Listen in the background; ``on_change`` runs for every message and after (re)subscribing."""
        if self._task is None:
            self._task = asyncio.create_task(self._listen(on_change), name="modelgate-key-broadcast")

    async def _listen(self, on_change: Callable[[], Awaitable[None]]) -> None:
        while True:
            pubsub = self._subscriber.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self._channel)
                await on_change()  # changes announced while we were not subscribed
                while True:
                    message = await pubsub.get_message(timeout=1.0)
                    if message is not None:
                        self.received += 1
                        await on_change()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis down or restarting: polling covers, retry shortly
                log.warning("key-change subscription lost (%s); resubscribing", exc)
                await asyncio.sleep(RESUBSCRIBE_SECONDS)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)
        await self._publisher.aclose()
        await self._subscriber.aclose()
