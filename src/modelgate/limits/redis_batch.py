"""Calls of one Lua script that an instance makes together, sent to Redis as one write.

Every model request runs the rate-limit script once. Through redis-py's pooled client each call
costs about a tenth of a millisecond of gateway CPU (pool checkout, timeouts, parsing), more than
the rest of the request path spends on anything but the upstream. So the calls made in one turn
of the event loop travel together: one dedicated connection, their ``EVALSHA`` commands packed
into one write, their replies read back in order. While a batch is at Redis the next one
gathers; the busier the instance, the larger the batches.

A batch either gets every reply or fails as a whole (timeout, refused or broken connection): each
caller then sees the same error and decides what to do (``limits.redis_tickets`` falls back to its
local buckets), and so do the calls that queued behind it, so none waits longer than one timeout. After a failure the connection is dropped and the next batch makes a new one.
After a Redis restart the script is gone (``NOSCRIPT``): it is loaded again and the refused calls
are sent once more.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

from redis.asyncio.connection import AbstractConnection, ConnectionPool
from redis.exceptions import NoScriptError, RedisError, ResponseError

Call = tuple[list[str], list[str | int]]


class ScriptBatches:
    def __init__(self, pool: ConnectionPool, script: str, timeout: float) -> None:
        self._pool = pool
        self._script = script
        self._sha = hashlib.sha1(script.encode(), usedforsecurity=False).hexdigest()
        self._timeout = timeout
        self._connection: AbstractConnection | None = None
        self._queue: list[tuple[Call, asyncio.Future[Any]]] = []
        self._busy = False

    async def call(self, keys: list[str], args: list[str | int]) -> Any:
        """The script's reply to ``keys`` and ``args``, sent with the other calls of this turn."""
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.append(((keys, args), done))
        if not self._busy and len(self._queue) == 1:
            asyncio.get_running_loop().call_soon(self._flush)
        return await done

    def _flush(self) -> None:
        if self._busy:
            return
        batch = [(call, done) for call, done in self._queue if not done.cancelled()]
        self._queue = []
        if not batch:
            return
        self._busy = True
        sent = asyncio.ensure_future(self._run(batch))
        sent.add_done_callback(self._ran)

    def _ran(self, _: asyncio.Future[None]) -> None:
        self._busy = False
        if self._queue:
            self._flush()

    async def _run(self, batch: list[tuple[Call, asyncio.Future[Any]]]) -> None:
        try:
            async with asyncio.timeout(self._timeout):
                replies = await self._send([call for call, _ in batch])
                missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
                if missing:  # Redis restarted and lost the script: load it, send those again
                    await self._command("SCRIPT", "LOAD", self._script)
                    again = await self._send([batch[i][0] for i in missing])
                    for i, reply in zip(missing, again, strict=True):
                        replies[i] = reply
        except (RedisError, OSError, TimeoutError) as exc:
            await self._drop()
            # The calls that queued meanwhile would go to the same Redis: they fail now too, so no
            # request waits for a dead Redis longer than one timeout.
            waiting, self._queue = self._queue, []
            for _, done in [*batch, *waiting]:
                if not done.done():
                    done.set_exception(exc)
            return
        except BaseException as exc:  # every caller must hear back, whatever went wrong
            await self._drop()
            for _, done in batch:
                if not done.done():
                    done.set_exception(exc if isinstance(exc, Exception) else RedisError(repr(exc)))
            raise
        for (_, done), reply in zip(batch, replies, strict=True):
            if done.done():
                continue
            if isinstance(reply, Exception):
                done.set_exception(reply)
            else:
                done.set_result(reply)

    async def _connected(self) -> AbstractConnection:
        if self._connection is None:
            connection = self._pool.make_connection()  # type: ignore[no-untyped-call]
            await connection.connect()
            self._connection = connection
        return self._connection

    async def _send(self, calls: list[Call]) -> list[Any]:
        connection = await self._connected()
        commands = [("EVALSHA", self._sha, len(keys), *keys, *args) for keys, args in calls]
        await connection.send_packed_command(connection.pack_commands(commands), check_health=False)
        replies: list[Any] = []
        for _ in calls:
            try:
                replies.append(await connection.read_response())
            except ResponseError as exc:  # an error reply to this call; the next replies follow
                replies.append(exc)
        return replies

    async def _command(self, *args: str) -> Any:
        connection = await self._connected()
        await connection.send_command(*args)
        return await connection.read_response()

    async def _drop(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.disconnect(nowait=True)

    async def aclose(self) -> None:
        await self._drop()
