"""Network-boundary fakes for the conformance suite, each on one background event loop.

``FakeUpstream`` (tests/fakes) is an aiohttp server bound to the loop that starts it; the gateway
under test runs on its own thread and loop, and the tests drive it synchronously through the
SDKs. A ``tests.loop_thread.LoopThread`` hosts the fakes so a module can start them once.

``ReplayUpstream`` answers every request with the next recorded body verbatim (a golden upstream
SSE transcript or JSON), so gateway-level checks can start from a recorded upstream stream.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TypeVar

from aiohttp import web

from tests.fakes.upstream import FakeUpstream, RecordedRequest, Step
from tests.loop_thread import LoopThread

T = TypeVar("T")


class Scripted:
    """A per-test script for a shared ``FakeUpstream``: queued steps, then ``Reply()``-like default."""

    def __init__(self, default: Step) -> None:
        self.default = default
        self.steps: deque[Step] = deque()

    def __call__(self, request: RecordedRequest) -> Step:
        return self.steps.popleft() if self.steps else self.default

    def reset(self, *steps: Step) -> None:
        self.steps.clear()
        self.steps.extend(steps)


@dataclass
class Recorded:
    """One canned answer for ``ReplayUpstream``."""

    body: bytes
    content_type: str = "text/event-stream"
    status: int = 200


class ReplayUpstream:
    """Serves queued ``Recorded`` answers in order on any path; records request bodies."""

    def __init__(self) -> None:
        self.answers: deque[Recorded] = deque()
        self.bodies: list[bytes] = []
        self.base_url = ""
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, shutdown_timeout=0.1, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.base_url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.bodies.append(await request.read())
        answer = self.answers.popleft()
        response = web.StreamResponse(status=answer.status, headers={"content-type": answer.content_type})
        await response.prepare(request)
        await response.write(answer.body)
        await response.write_eof()
        return response


def start_fake(loop: LoopThread, script: Scripted) -> FakeUpstream:
    return loop.start(FakeUpstream(script=script))
