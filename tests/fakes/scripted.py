"""An in-process provider whose replies are scripted per attempt, for router and relay unit tests.

``ScriptedProvider`` implements ``upstream.base.Provider`` without a socket. Each ``send`` takes
the next step of its script (then ``default``): a ``Respond`` (status, headers, body chunks, and
optionally a failure raised after the chunks, as a reset or an idle timeout mid-body would be) or
a ``Raise`` (a transport failure raised by ``send`` itself: no reply came). The reply it returns,
a ``ScriptedReply``, implements ``upstream.base.UpstreamReply`` and records whether it was closed
before its body was read to the end (a real provider aborts the connection then).

Delays are awaited on an injected ``sleep``; ``RecordedSleep`` records them and returns at once,
so a test asserts which waits happened instead of timing them. Every attempt is recorded in
``sent``.

Faking at the provider interface is for unit tests of the router and the relay only: the
end-to-end suites keep real fake servers on loopback (``tests.fakes.upstream``).
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from modelgate import errors
from modelgate.upstream.base import Dialect

Sleep = Callable[[float], Awaitable[None]]


class RecordedSleep:
    """An injected ``sleep`` that records each delay and returns at once (after yielding to the
    loop, as a real sleep would)."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        await asyncio.sleep(0)


@dataclass(frozen=True, slots=True)
class Respond:
    """A reply: ``status`` and ``headers`` (lower-case names) at once, then ``chunks`` of body, then
    ``fail`` raised by the body if set."""

    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    chunks: tuple[bytes, ...] = ()
    fail: errors.GatewayError | None = None
    #: Seconds before the reply's headers come, on the injected sleep.
    delay: float = 0.0
    #: Seconds before each chunk, on the injected sleep.
    chunk_delay: float = 0.0

    @classmethod
    def json(cls, body: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Respond:
        return cls(status, {"content-type": "application/json", **(headers or {})}, (orjson.dumps(body),))

    @classmethod
    def message(cls, text: str = "Hello from the script.", model: str = "scripted") -> Respond:
        """A whole Messages-dialect answer."""
        return cls.json(
            {
                "id": f"msg_scripted{next(_ids):06d}",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [{"type": "text", "text": text}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 5, "output_tokens": 4},
            }
        )

    @classmethod
    def error(
        cls,
        status: int,
        message: str = "scripted upstream error",
        *,
        error_type: str = "api_error",
        headers: Mapping[str, str] | None = None,
    ) -> Respond:
        """An HTTP error with a Messages-dialect error body."""
        body = {"type": "error", "error": {"type": error_type, "message": message}}
        return cls.json(body, status, headers)

    @classmethod
    def events(cls, *events: bytes, fail: errors.GatewayError | None = None) -> Respond:
        """A 200 event stream: one chunk per event, then ``fail`` if set."""
        return cls(200, {"content-type": "text/event-stream"}, events, fail)


@dataclass(frozen=True, slots=True)
class Raise:
    """No reply: ``send`` raises ``error`` (``ConnectFailed``, ``FirstByteTimeout``, ...)."""

    error: errors.GatewayError
    delay: float = 0.0


Step = Respond | Raise
_ids = itertools.count(1)


@dataclass(frozen=True, slots=True)
class Sent:
    """One ``send`` call as the provider saw it."""

    dialect: Dialect
    body: bytes
    stream: bool
    client_headers: Mapping[str, str]
    path_suffix: str

    def json(self) -> Any:
        return orjson.loads(self.body)


class ScriptedReply:
    """``upstream.base.UpstreamReply`` in process."""

    def __init__(self, step: Respond, sleep: Sleep) -> None:
        self.status = step.status
        self.headers: Mapping[str, str] = dict(step.headers)
        self._step = step
        self._sleep = sleep
        self._read_to_end = False
        self.closed = False
        #: Closed before its body was read to the end (where a real provider aborts the connection).
        self.aborted = False

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.iter_chunks()])

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        step = self._step
        for chunk in step.chunks:
            if self.closed:
                raise errors.UpstreamFailed("read from a closed scripted reply")
            if step.chunk_delay:
                await self._sleep(step.chunk_delay)
            yield chunk
        if step.fail is not None:
            raise step.fail
        self._read_to_end = True

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.aborted = not self._read_to_end


class ScriptedProvider:
    """``upstream.base.Provider`` in process; see the module docstring."""

    def __init__(
        self,
        name: str,
        script: Iterable[Step] = (),
        *,
        default: Step | None = None,
        kind: str = "anthropic",
        dialects: Iterable[Dialect] = ("messages",),
        legacy_chat_limit: bool = False,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.name = name
        self.kind = kind
        self.dialects: frozenset[Dialect] = frozenset(dialects)
        self.legacy_chat_limit = legacy_chat_limit
        self.default: Step = default if default is not None else Respond.message()
        self._script: deque[Step] = deque(script)
        self._sleep = sleep
        self.sent: list[Sent] = []
        self.replies: list[ScriptedReply] = []
        self.closed = False

    @property
    def count(self) -> int:
        return len(self.sent)

    def push(self, *steps: Step) -> None:
        self._script.extend(steps)

    async def send(
        self,
        dialect: Dialect,
        body: bytes,
        *,
        stream: bool,
        client_headers: Mapping[str, str],
        path_suffix: str = "",
    ) -> ScriptedReply:
        self.sent.append(Sent(dialect, body, stream, dict(client_headers), path_suffix))
        step = self._script.popleft() if self._script else self.default
        if step.delay:
            await self._sleep(step.delay)
        if isinstance(step, Raise):
            raise step.error
        reply = ScriptedReply(step, self._sleep)
        self.replies.append(reply)
        return reply

    async def aclose(self) -> None:
        self.closed = True
