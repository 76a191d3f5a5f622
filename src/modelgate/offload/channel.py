"""The serving process's end of a body worker's socket: frames (``offload.wire``) written and read
by the event loop through a protocol that stays registered with it, so a job costs no system
calls beyond its send and its receive."""

from __future__ import annotations

import asyncio
import socket
from collections import deque
from typing import cast

from modelgate.offload.wire import HEADER_BYTES


class Channel(asyncio.Protocol):
    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._frames: deque[bytes] = deque()
        self._waiter: asyncio.Future[bytes] | None = None
        self._closed = False

    @classmethod
    async def over(cls, sock: socket.socket) -> Channel:
        """A channel over our end of a worker's socket pair."""
        _, channel = await asyncio.get_running_loop().connect_accepted_socket(cls, sock)
        return channel

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's are not subclasses of asyncio's: not checked).
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        while len(buffer) >= HEADER_BYTES:
            end = HEADER_BYTES + int.from_bytes(buffer[:HEADER_BYTES], "little")
            if len(buffer) < end:
                break
            self._frames.append(bytes(buffer[HEADER_BYTES:end]))
            del buffer[:end]
        waiter = self._waiter
        if self._frames and waiter is not None and not waiter.done():
            waiter.set_result(self._frames.popleft())

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(EOFError("the body worker closed its channel"))

    def send(self, payload: bytes) -> None:
        if self._closed or self._transport is None or self._transport.is_closing():
            raise EOFError("the body worker's channel is closed")
        self._transport.write(payload)

    async def receive(self) -> bytes:
        """The next frame; ``EOFError`` once the worker has gone."""
        if self._frames:
            return self._frames.popleft()
        if self._closed:
            raise EOFError("the body worker closed its channel")
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            return await self._waiter
        finally:
            self._waiter = None

    def close(self) -> None:
        self._closed = True
        if self._transport is not None:
            self._transport.close()
